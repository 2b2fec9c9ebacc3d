"""Shared test set-up: CPU only, one thread per test process, no network."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TIMM_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)
