"""Part-prototype method adapters: one module per method, a registry, the contract checks."""
from methods.base import MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch, TrainData
from methods.registry import build_method, get_method_class, list_methods, register_method

__all__ = [
    "MethodContext", "ParamGroup", "PrototypeMethod", "Stage", "TokenBatch", "TrainData",
    "build_method", "get_method_class", "list_methods", "register_method",
]
