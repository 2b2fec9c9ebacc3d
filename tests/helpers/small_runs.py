"""Small pieces shared by the precision, prefetch, determinism and training fast-path tests: a
vMFProto on synthetic tokens with one epoch per stage, a log that prints nothing, a minimal spec."""
from __future__ import annotations

import torch

from methods.registry import build_method
from methods.testing import SyntheticTokens

CPU = torch.device("cpu")
BASE = {"dataset": "synthbirds", "backbone": "dinov2_vits14_reg4", "method": "vmfproto", "prototypes_per_class": 2}


def quiet(line: str) -> None:
    pass


def vmf(source: SyntheticTokens, **kw) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_method("vmfproto", source.context(2), **{"discovery_epochs": 1, "end_to_end_epochs": 1, **kw})
