"""``deterministic = true``: vMFProto bit-identical twice on CUDA (``gpu``), deterministic
algorithms switched on for the run only, the cuBLAS workspace set at process start (a
non-deterministic one refused before the run), and a method without deterministic CUDA kernels
refused on CUDA."""
from __future__ import annotations

import os

import pytest
import torch

from benchmark.config import build_run_spec
from benchmark.errors import ProtobenchError
from benchmark.run.training import deterministic_algorithms, train
from methods.registry import build_method
from methods.testing import SyntheticTokens
from small_runs import BASE, CPU, quiet, vmf


@pytest.mark.gpu
def test_deterministic_vmfproto_on_cuda_is_bit_identical() -> None:
    """``deterministic = true``: cross-entropy (torch lists NLLLoss among the ops that raise; its
    alert is in the 2-D kernel) and the rest of vMFProto run, and two runs agree bit for bit."""
    source = SyntheticTokens()
    states = []
    with deterministic_algorithms(True):
        for _ in range(2):
            method = vmf(source)
            train(method, source, seed=0, batch_size=8, device=torch.device("cuda"), checkpoint_path=None, log=quiet)
            states.append(method.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0] if isinstance(states[0][k], torch.Tensor))


def test_deterministic_algorithms_is_scoped_to_the_run() -> None:
    assert not torch.are_deterministic_algorithms_enabled()
    with deterministic_algorithms(True):
        assert torch.are_deterministic_algorithms_enabled()
    assert not torch.are_deterministic_algorithms_enabled()


def test_cublas_workspace_is_set_at_process_start_and_a_non_deterministic_one_is_refused(monkeypatch) -> None:
    """cuBLAS reads CUBLAS_WORKSPACE_CONFIG once, when it starts: ``import benchmark`` sets it
    (a user's value kept), and ``deterministic = true`` refuses a workspace cuBLAS is not
    deterministic with, before anything runs."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    probe = "import benchmark, os, torch; print(os.environ['CUBLAS_WORKSPACE_CONFIG'])"
    assert subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == ":4096:8"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0")
    with pytest.raises(ProtobenchError, match="CUBLAS_WORKSPACE_CONFIG set to :4096:8 or :16:8"):
        with deterministic_algorithms(True):
            raise AssertionError("the run started")
    assert not torch.are_deterministic_algorithms_enabled()


def test_deterministic_runs_of_a_method_without_deterministic_cuda_kernels_are_refused() -> None:
    from benchmark.run.prepare import check_deterministic

    source = SyntheticTokens()
    deformable = build_method("deformable_protopnet", source.context(2))
    spec = build_run_spec({**BASE, "method": "deformable_protopnet", "deterministic": True}, where="t")
    with pytest.raises(ProtobenchError, match="grid_sample backward .* has no deterministic kernel"):
        check_deterministic(spec, deformable, torch.device("cuda"))
    check_deterministic(spec, deformable, CPU)  # every CPU op is deterministic
    check_deterministic(spec.with_overrides(method="vmfproto"), vmf(source), torch.device("cuda"))
