"""Shared test set-up: CPU only, one thread per test process, no network."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TIMM_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

import pytest  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` run only where CUDA is available (``make gpu-check``); elsewhere
    they are skipped, so ``make test`` and CI never need a GPU."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False); run `make gpu-check` on one")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # the mark, not the keyword: tests/gpu/ names every test in it
            item.add_marker(skip)
