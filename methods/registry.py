"""Method registry and the one factory, ``build_method`` (timm's ``create_model`` pattern).

A method is named by its registry key (``"vmfproto"``) or, for adapters that live outside
the suite, by an import path ``"package.module:ClassName"``.
"""
from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from benchmark.errors import ProtobenchError
from methods.base import MethodContext, PrototypeMethod

M = TypeVar("M", bound=type[PrototypeMethod])

_REGISTRY: dict[str, type[PrototypeMethod]] = {}

# Modules whose import fills the registry with the suite's own methods.
_BUILTIN_MODULES: tuple[str, ...] = (
    "methods.vmfproto", "methods.protopnet", "methods.deformable", "methods.tesnet", "methods.evalprotopnet",
    "methods.mgproto", "methods.nppp",
)


def register_method(name: str) -> Callable[[M], M]:
    """Class decorator: ``@register_method("vmfproto")``."""

    def decorate(cls: M) -> M:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"method name {name!r} is registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def list_methods() -> list[str]:
    """Registry keys of the suite's methods, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def get_method_class(name: str) -> type[PrototypeMethod]:
    """Resolve a registry key or a ``package.module:Class`` import path."""
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as err:
            raise ProtobenchError(
                f"method {name!r} could not be imported ({err}); give an importable "
                "'package.module:ClassName' whose module is on PYTHONPATH"
            ) from err
        if not (isinstance(cls, type) and issubclass(cls, PrototypeMethod)):
            raise ProtobenchError(f"method {name!r} is not a subclass of methods.base.PrototypeMethod")
        return cls
    _load_builtins()
    if name not in _REGISTRY:
        raise ProtobenchError(
            f"unknown method {name!r}; choose one of {', '.join(sorted(_REGISTRY))} "
            "or give an import path 'package.module:ClassName'"
        )
    return _REGISTRY[name]


def method_display_name(cls: type[PrototypeMethod]) -> str:
    """The label reports show for a method: its ``display_name``, else its class name."""
    return cls.display_name or cls.__name__


def method_hyperparameters(cls: type[PrototypeMethod]) -> dict[str, Any]:
    """Keyword hyperparameters of an adapter with their defaults (everything after ``ctx``)."""
    params = inspect.signature(cls.__init__).parameters
    return {
        n: p.default
        for n, p in params.items()
        if n not in ("self", "ctx") and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }


def validate_method_args(name: str, overrides: dict[str, Any]) -> None:
    """Fail before any compute when a grid gives a hyperparameter the method does not take."""
    cls = get_method_class(name)
    known = method_hyperparameters(cls)
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        close = [m for key in unknown for m in difflib.get_close_matches(key, list(known), n=1)]
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ProtobenchError(
            f"method {name!r} has no hyperparameter {', '.join(map(repr, unknown))}{hint}; "
            f"valid ones are: {', '.join(sorted(known)) or '(none)'}"
        )


def build_method(name: str, ctx: MethodContext, **overrides: Any) -> PrototypeMethod:
    """The only way to instantiate a method: ``build_method("vmfproto", ctx, lambda_ppd=0.5)``."""
    validate_method_args(name, overrides)
    return get_method_class(name)(ctx, **overrides)
