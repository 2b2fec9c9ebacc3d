"""Part-prototype method adapters: one module per method, a registry, the contract checks.

Importing ``methods`` loads no torch: the registry and the declarations (``methods/specs/``) read
without it; the adapter interface (``methods.base``) loads on first use of its names."""
from __future__ import annotations

import importlib
from typing import Any

from methods.registry import build_method, get_method_class, list_methods, register_method

_BASE_NAMES = ("MethodContext", "ParamGroup", "PrototypeMethod", "Stage", "TokenBatch", "TrainData")

__all__ = [*_BASE_NAMES, "build_method", "get_method_class", "list_methods", "register_method"]


def __getattr__(name: str) -> Any:  # PEP 562: the torch-backed interface on first use
    if name in _BASE_NAMES:
        return getattr(importlib.import_module("methods.base"), name)
    raise AttributeError(f"module 'methods' has no attribute {name!r}")
