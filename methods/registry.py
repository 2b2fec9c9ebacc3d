"""Method registry and the one factory, ``build_method`` (timm's ``create_model`` pattern).

A method is named by its registry key (``"vmfproto"``) or, for adapters that live outside
the suite, by an import path ``"package.module:ClassName"``. A name or hyperparameter the
registry refuses raises Python's own exceptions (ValueError, TypeError: scikit-learn's parameter
validation does the same), their messages naming the thing and the fix; the harness turns them
into its user-facing error (``benchmark.method_lookup``).
"""
from __future__ import annotations

import difflib
import importlib
import inspect
import json
import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

from methods.base import MethodContext, PrototypeMethod
from methods.common.values import check_type

M = TypeVar("M", bound=type[PrototypeMethod])

_REGISTRY: dict[str, type[PrototypeMethod]] = {}

# Modules whose import fills the registry with the suite's own methods.
_BUILTIN_MODULES: tuple[str, ...] = (
    "methods.vmfproto", "methods.protopnet", "methods.deformable", "methods.tesnet", "methods.evalprotopnet",
    "methods.mgproto", "methods.nppp", "methods.pipnet", "methods.kmex", "methods.comfe",
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
            raise ValueError(
                f"method {name!r} could not be imported ({err}); give an importable "
                "'package.module:ClassName' whose module is on PYTHONPATH"
            ) from err
        except SyntaxError as err:  # the adapter's module does not parse: where, not a traceback
            raise ValueError(f"method {name!r}: {err.filename}, line {err.lineno}: {err.msg}; fix that line of "
                             "the adapter's module") from None
        if not (isinstance(cls, type) and issubclass(cls, PrototypeMethod)):
            raise TypeError(f"method {name!r} is not a subclass of methods.base.PrototypeMethod")
        return cls
    _load_builtins()
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"unknown method {name!r}{hint}; choose one of {', '.join(sorted(_REGISTRY))} "
            "or give an import path 'package.module:ClassName'"
        )
    return _REGISTRY[name]


def method_display_name(cls: type[PrototypeMethod]) -> str:
    """The label reports show for a method: its ``display_name``, else its class name."""
    return cls.display_name or cls.__name__


def display_name_of(method: str, recorded: str | None = None) -> str:
    """The one label of a method in every output (status, tables, legends, figures, export): the
    adapter's ``display_name`` (:func:`method_display_name`); for an import path that no longer
    imports, the name its result recorded, else its class name."""
    try:
        return method_display_name(get_method_class(method))
    except (ValueError, TypeError):
        return recorded or method.rpartition(":")[2]


def method_hyperparameters(cls: type[PrototypeMethod]) -> dict[str, Any]:
    """Keyword hyperparameters of an adapter with their defaults (everything after ``ctx``)."""
    params = inspect.signature(cls.__init__).parameters
    return {
        n: p.default
        for n, p in params.items()
        if n not in ("self", "ctx") and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }


def resolved_method_args(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """Every hyperparameter the method runs with: its defaults with ``overrides`` applied, as
    JSON values (a tuple default reads as a list), so a default the code changes is another
    configuration (:meth:`benchmark.config.RunSpec.identity`)."""
    defaults = {k: v for k, v in method_hyperparameters(get_method_class(name)).items()
                if v is not inspect.Parameter.empty}
    return json.loads(json.dumps({**defaults, **overrides}, sort_keys=True, default=str))


def validate_method_args(name: str, overrides: dict[str, Any]) -> None:
    """Fail before any compute when a grid gives a hyperparameter the method does not take, or
    one of the wrong type or range (:func:`check_hyperparameter`)."""
    cls = get_method_class(name)
    known = method_hyperparameters(cls)
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        close = [m for key in unknown for m in difflib.get_close_matches(key, list(known), n=1)]
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ValueError(
            f"method {name!r} has no hyperparameter {', '.join(map(repr, unknown))}{hint}; "
            f"valid ones are: {', '.join(sorted(known)) or '(none)'}"
        )
    for key, value in overrides.items():
        check_hyperparameter(name, key, value, known[key])


def _expected_type(default: Any) -> type | tuple[type, ...] | None:
    """The type a hyperparameter's default implies (a float also takes an int, TOML's ``1``);
    None when the default says nothing (``None`` or no default)."""
    if default is None or default is inspect.Parameter.empty:
        return None
    if isinstance(default, float):
        return (int, float)
    if isinstance(default, (tuple, list)):
        return (tuple, list)
    return type(default)


def check_hyperparameter(method: str, key: str, value: Any, default: Any) -> None:
    """Checks every adapter gets from its hyperparameters' names and defaults, before the
    adapter's own checks: the default's type; numbers finite; a learning rate (a float
    hyperparameter with the word ``lr`` in its name; ``joint_lr_step`` is an int) > 0; an epoch
    count (the word ``epochs``) an int ≥ 0."""
    where = f"method {method!r} method_args"
    expected = _expected_type(default)
    if expected is not None:
        check_type(key, value, expected, where)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    words = key.split("_")
    if not math.isfinite(value):
        raise ValueError(f"{where}: {key} = {value!r} must be a finite number")
    if "lr" in words and isinstance(default, float) and value <= 0:
        raise ValueError(f"{where}: {key} = {value!r} is a learning rate and must be > 0")
    if "epochs" in words and (not isinstance(value, int) or value < 0):
        raise ValueError(f"{where}: {key} = {value!r} is a number of epochs and must be an integer ≥ 0")


@lru_cache(maxsize=None)
def _stand_in(name: str, method_args: str, prototypes_per_class: int, has_cls_attention: bool,
              backbone: str) -> PrototypeMethod:
    import torch

    from methods.testing import TinyAppendedBlock

    dim = 32
    ctx = MethodContext(num_classes=2, prototypes_per_class=prototypes_per_class, embed_dim=dim, grid=(4, 4),
                        num_prefix_tokens=1, depth=4, make_block=lambda: TinyAppendedBlock(dim), seed=0,
                        has_cls_attention=has_cls_attention, backbone=backbone)
    with torch.random.fork_rng(devices=[]):
        try:
            return build_method(name, ctx, **json.loads(method_args))
        except (ValueError, TypeError):
            raise
        except Exception as err:  # an adapter's own check that raised something else
            raise ValueError(f"method {name!r} rejects method_args {method_args}: "
                                  f"{type(err).__name__}: {err}") from err


def stand_in_method(name: str, method_args: dict[str, Any], prototypes_per_class: int, *,
                    has_cls_attention: bool = True, backbone: str = "") -> PrototypeMethod:
    """The method built with these hyperparameters on a tiny stand-in context (2 classes, 32-dim
    tokens on a 4×4 grid, 4 blocks; no data, no trunk; ``has_cls_attention`` and ``backbone`` as
    the run's trunk): everything its constructor rejects is one ValueError or TypeError before compute,
    and its ``stages()`` give the epochs. Cached per arguments; read it, do not train it."""
    return _stand_in(name, json.dumps(method_args, sort_keys=True, default=str), prototypes_per_class,
                     has_cls_attention, backbone)


def build_method(name: str, ctx: MethodContext, **overrides: Any) -> PrototypeMethod:
    """The only way to instantiate a method: ``build_method("vmfproto", ctx, lambda_ppd=0.5)``."""
    validate_method_args(name, overrides)
    return get_method_class(name)(ctx, **overrides)
