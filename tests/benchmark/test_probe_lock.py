"""The probe lock (methods/probe-lock.json) is current and honest, its file checked whole, its
arithmetic checked against brute force; the boundary of what the probe cannot see
(benchmark/behaviour/; docs/design/run-identity.md)."""
from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from benchmark.behaviour.boundary import blind_digest, boundary
from benchmark.behaviour.lock import (LockError, decode_array, deviation, editable_lock, encode_array, lock_json,
                                      read_lock, tolerance_of)
from benchmark.errors import ProtobenchError
from benchmark.method_lookup import known_method
from benchmark.run.identity import method_fingerprint, method_lock_path
from methods.registry import BUILTIN_METHODS

LOCK = method_lock_path("vmfproto")
REFRESH = "run `protobench check-code --all` and commit methods/probe-lock.json"


def test_every_method_s_current_code_is_in_the_lock() -> None:
    lock = read_lock(LOCK, known_method)
    assert lock is not None, f"{LOCK} is missing: {REFRESH}"
    missing = [m for m in BUILTIN_METHODS if lock.entry(m, method_fingerprint(m)) is None]
    assert not missing, f"the probe lock is out of date for {', '.join(missing)}: {REFRESH}"


@pytest.mark.slow
def test_the_lock_is_honest_every_probe_reproduces_its_recorded_behaviour() -> None:
    """Every method probed now (pinned arithmetic), and the harness probe: each method's outputs
    within tolerance of the golden outputs of the behaviour the lock records for its source, the
    same blind digest (its own files' with the harness's), and the harness's blind digest the
    union of what every probe ran."""
    from benchmark.behaviour.check import (HARNESS, closest, entry_blind, harness_blind, method_blind,
                                           run_probes)
    from benchmark.run.identity import harness_digest

    lock = read_lock(LOCK, known_method)
    harness = lock.harness.get(harness_digest())
    assert harness is not None, f"the lock has not seen the current harness: {REFRESH}"
    requests = [(m, lock.methods[m].dtype) for m in BUILTIN_METHODS]
    probes = run_probes([*requests, (HARNESS, None)])
    failed = [f"{m}: {p}" for (m, _), p in zip([*requests, (HARNESS, None)], probes) if isinstance(p, str)]
    assert not failed, "\n".join(failed)
    wrong = []
    if blind_digest(harness_blind(probes)) != harness:  # type: ignore[arg-type]
        wrong.append("what no probe runs of the harness is not what the lock records")
    for (method, _), probed in zip(requests, probes):
        entry = lock.entry(method, method_fingerprint(method))
        golden = lock.methods[method].behaviours[entry.behaviour]["golden"]
        assert set(golden) == set(probed.outputs), method  # every configuration is recorded
        ratio, configuration, output = closest(probed.outputs, golden)
        if ratio > 1.0:
            wrong.append(f"{method}: {output} of {configuration} is {ratio:.1e} × its tolerance off")
        if entry_blind(method_blind(method, probed), harness) != entry.blind:
            wrong.append(f"{method}: what the probe cannot see is not what the lock records")
    assert not wrong, "\n".join(wrong) + f"\n(a file outside the source digest changed behaviour?) {REFRESH}"


# ---- the lock file, checked whole -----------------------------------------------------------------
def _written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "probe-lock.json"
    path.write_text(text)
    return path


def test_a_lock_that_is_not_json_is_one_error_naming_its_line(tmp_path: Path) -> None:
    path = _written(tmp_path, '{\n "format": 1,\n "methods": {\n  "kmex": [}\n}\n')
    with pytest.raises(LockError, match=rf"{path}, line 4: it is not valid JSON"):
        read_lock(path, known_method)


def test_a_lock_naming_an_unknown_method_names_it_and_its_line(tmp_path: Path) -> None:
    lock = editable_lock(LOCK, known_method)
    lock.path = tmp_path / "probe-lock.json"
    lock.methods["vmfprot"] = lock.methods.pop("vmfproto")
    text = lock_json(lock)
    path = _written(tmp_path, text)
    line = text.splitlines().index('  "vmfprot": {') + 1
    with pytest.raises(LockError, match=rf"{path}, line {line}: method 'vmfprot' does not exist here"):
        read_lock(path, known_method)


def test_golden_data_that_does_not_fit_its_shape_is_refused_by_line(tmp_path: Path) -> None:
    data = json.loads(LOCK.read_text())
    behaviour = next(iter(data["methods"]["knn"]["behaviours"].values()))
    behaviour["golden"]["default"]["logits"]["shape"] = [12, 4]  # 36 values stored
    text = json.dumps(data, indent=1, sort_keys=True)
    path = _written(tmp_path, text)
    with pytest.raises(LockError, match=r"line \d+: golden output 'logits' of 'default': its data holds 36 values, "
                                        r"its shape \[12, 4\] needs 48") as caught:
        read_lock(path, known_method)
    line = int(str(caught.value).split("line ")[1].split(":")[0])
    assert '"logits"' in text.splitlines()[line - 1]


def test_golden_outputs_of_another_shape_than_the_probe_s_are_refused_by_line(tmp_path: Path) -> None:
    from benchmark.behaviour.check import _check_shapes

    path = _written(tmp_path, LOCK.read_text())
    lock = read_lock(path, known_method)
    outputs = {c: {o: a for o, a in golden.items()}
               for c, golden in next(iter(lock.methods["knn"].behaviours.values()))["golden"].items()}
    outputs["default"]["maps"] = np.zeros((12, 3, 3, 3), dtype=outputs["default"]["maps"].dtype)  # J = 3
    with pytest.raises(LockError, match=r"line \d+: golden output 'maps' of 'knn' \(default\) has shape "
                                        r"\[12, 2, 3, 3\], the probe gives \[12, 3, 3, 3\]"):
        _check_shapes(lock, "knn", outputs)


def test_a_broken_lock_stops_a_reader_with_the_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmark.run.identity import code_change

    broken = _written(tmp_path, "{")
    monkeypatch.setattr("benchmark.run.identity.method_lock_path", lambda method: broken)
    with pytest.raises(ProtobenchError, match="line 1: it is not valid JSON"):
        code_change("kmex", "0" * 64, method_fingerprint("kmex"))


# ---- arithmetic -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_arrays_round_trip_exactly(dtype: str) -> None:
    array = np.random.default_rng(0).normal(size=(3, 4, 5)).astype(dtype)
    array[0, 0, 0], array[1, 1, 1] = np.nan, -np.inf
    back = decode_array(json.loads(json.dumps(encode_array(array))))
    assert back.dtype == array.dtype and np.array_equal(back, array, equal_nan=True)


def test_deviation_equals_a_loop() -> None:
    rng = np.random.default_rng(1)
    golden = rng.normal(size=(7, 5)) * 30
    probe = golden + rng.normal(size=(7, 5)) * 1e-6
    loop = max(abs(p - g) for p, g in zip(probe.ravel(), golden.ravel())) / max(1.0, max(abs(golden.ravel())))
    assert deviation(probe, golden) == pytest.approx(loop, rel=1e-12)
    small = golden / 100  # below 1 in magnitude: absolute
    assert deviation(small + 1e-7, small) == pytest.approx(1e-7, rel=1e-6)
    with_nan = golden.copy()
    with_nan[2, 3] = np.nan
    assert deviation(with_nan, with_nan) == 0.0
    assert deviation(with_nan, golden) == math.inf  # a NaN where the golden output has a number
    assert deviation(golden.astype("float32"), golden) == math.inf  # another dtype
    assert tolerance_of(golden) == 1e-9 and tolerance_of(golden.astype("float32")) == 1e-5


# ---- the boundary ---------------------------------------------------------------------------------
MODULE = '''
import torch
from methods.common.precision import float32_island

SCALE = 2.0


@float32_island
def island(x):
    return x * SCALE


def step(x, device):
    # a comment
    y = x + 1
    if device.type == "cuda":
        y = y.pin_memory()
    if y is None:
        raise ValueError("no y")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = y * 2
    return z
'''


def _boundary(tmp_path: Path, source: str, executed: set[int], declared: dict | None = None):
    path = tmp_path / "module.py"
    path.write_text(textwrap.dedent(source))
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(__import__("benchmark.behaviour.boundary").behaviour.boundary.BEYOND_THE_PROBE, "mod",
                      declared or {})
        return boundary({"mod": path}, {"mod": executed})


def _executed(source: str) -> set[int]:
    """The lines a probe on a CPU runs of MODULE: everything but the CUDA branch and the raise."""
    lines = textwrap.dedent(source).splitlines()
    return {n for n, line in enumerate(lines, 1) if "pin_memory" not in line and "raise" not in line}


def test_the_boundary_holds_unexecuted_code_precision_constructs_and_declared_names(tmp_path: Path) -> None:
    found = _boundary(tmp_path, MODULE, _executed(MODULE), declared={"SCALE": "binds at scale"})
    kinds = {(s.kind, s.line) for s in found}
    lines = textwrap.dedent(MODULE).splitlines()
    line = {key: next(n for n, text in enumerate(lines, 1) if key in text)
            for key in ("SCALE = ", "@float32_island", "pin_memory", "torch.autocast", "raise")}
    assert ("declared", line["SCALE = "]) in kinds
    assert ("unexecuted", line["pin_memory"]) in kinds  # the CUDA branch
    assert ("precision", line["torch.autocast"]) in kinds  # runs, does nothing in float64
    assert ("precision", line["@float32_island"] + 1) in kinds  # the decorated def, by its header
    assert not any(n == line["raise"] for _, n in kinds)  # a raise never changes a number
    assert len(found) == 4


def test_the_blind_digest_ignores_comments_and_moves_and_sees_every_edit(tmp_path: Path) -> None:
    def digest(source: str) -> str:
        return blind_digest(_boundary(tmp_path, source, _executed(source)))

    before = digest(MODULE)
    assert digest(MODULE.replace("# a comment", "# another comment")) == before
    assert digest(MODULE.replace("    y = x + 1\n", "    y = x + 1\n\n\n")) == before  # layout
    assert digest(MODULE.replace('raise ValueError("no y")', 'raise ValueError("y is missing")')) == before
    assert digest(MODULE.replace("y.pin_memory()", "y.pin_memory().clone()")) != before  # the CUDA branch
    assert digest(MODULE.replace("dtype=torch.bfloat16", "dtype=torch.float16")) != before  # the precision
    assert digest(MODULE.replace("y = x + 1", "y = x + 2")) == before  # the probe sees this one


@pytest.mark.slow
def test_the_tolerance_lies_between_another_summation_order_and_a_changed_number() -> None:
    """PIP-Net (float64): other CPUs' kernels give the pinned probe's bits; a reassociated sum moves
    it far below the tolerance, a learning rate moved by 1e-6 far above it (`check-code --measure`)."""
    from benchmark.behaviour.tolerance import measure

    measured = measure("pipnet", seeds=1)
    assert measured.dtype == "float64" and measured.pinned_isa == 0.0
    assert max(measured.reassociation) < min(measured.tolerances) / 1000
    assert measured.change > 10 * max(measured.tolerances)


SHARED = MODULE + '''

def other_methods_helper(x):
    if x is None:
        return 0
    return x.cuda()


def cuda_only_helper(y):
    return y.pin_memory()
'''


def test_code_no_reachable_function_names_is_beyond_no_method(tmp_path: Path) -> None:
    """A function of a shared module that nothing the probed method runs can name (another method's
    code) is left out; one named only from a branch the probe never ran counts, unexecuted."""
    with_cuda_call = SHARED.replace("y = y.pin_memory()", "y = cuda_only_helper(y)")
    found = _boundary(tmp_path, with_cuda_call, _executed(MODULE))  # the helpers never ran
    where = {s.line: s.kind for s in found}
    lines = textwrap.dedent(with_cuda_call).splitlines()
    assert not any("x.cuda()" in lines[n - 1] or "return 0" in lines[n - 1] for n in where)
    assert any("return y.pin_memory()" in lines[n - 1] and kind == "unexecuted" for n, kind in where.items())
