"""The method registry and the one factory, ``build_method`` (timm's ``create_model`` pattern).

A method is named by its registry key (``"vmfproto"``) or, for adapters that live outside the
suite, by an import path ``"package.module:ClassName"``. Every registry key has a
:class:`~methods.declaration.MethodDeclaration`, read without torch: the suite's own from
``methods/specs/<name>.py``, an installed package's from the entry-point group
``protobench.methods`` (methods/plugins.py). Names, display names, hyperparameters, defaults,
ranges, flags and search spaces come from the declaration; the adapter class (and torch) is
imported only to build the method, to train or evaluate. A name or hyperparameter the registry
refuses raises Python's own exceptions (ValueError, TypeError: scikit-learn's parameter
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
from typing import TYPE_CHECKING, Any, TypeVar

from methods.declaration import Hyperparameter, MethodDeclaration
from methods.plugins import BUILTIN, Provider, check_clash, discovered, installed
from methods.common.values import check_type

if TYPE_CHECKING:
    from methods.base import MethodContext, PrototypeMethod

M = TypeVar("M", bound=type)

#: the suite's own methods: each declared in ``methods/specs/<name>.py``
BUILTIN_METHODS: tuple[str, ...] = (
    "vmfproto", "protopnet", "deformable_protopnet", "tesnet", "evalprotopnet",
    "mgproto", "nppp", "pipnet", "kmex", "comfe", "linear_probe", "knn", "dinoqpm",
)
PLUGIN_GROUP = "protobench.methods"

_CLASSES: dict[str, type] = {}  # registry key → its adapter class, once imported


#: what a suite adapter reads from its declaration (methods/specs/<name>.py) instead of saying it again
DECLARED_ATTRIBUTES = ("display_name", "search_space", "batches_trials", "clusters_each_class", "needs_early_tokens")


def register_method(name: str) -> Callable[[M], M]:
    """Class decorator on an adapter: ``@register_method("vmfproto")`` names the class by its key;
    a suite method's class takes its display name, search space and flags
    (:data:`DECLARED_ATTRIBUTES`) from its declaration, the one place they are written."""

    def decorate(cls: M) -> M:
        if name in _CLASSES and _CLASSES[name] is not cls:
            raise ValueError(f"method name {name!r} is registered twice")
        cls.name = name
        if name in BUILTIN_METHODS:
            declared = _builtin_declaration(name)
            for attribute in DECLARED_ATTRIBUTES:
                value = getattr(declared, attribute)
                setattr(cls, attribute, dict(value) if attribute == "search_space" else value)
        _CLASSES[name] = cls
        return cls

    return decorate


@lru_cache(maxsize=None)
def _builtin_declaration(name: str) -> MethodDeclaration:
    return importlib.import_module(f"methods.specs.{name}").DECLARATION


def list_methods() -> list[str]:
    """Registry keys: the suite's methods and those installed packages declare that load (every
    package's declaration imported; one that clashes or does not load is skipped with a warning,
    methods/plugins.py), sorted."""
    return sorted({*BUILTIN_METHODS, *discovered(PLUGIN_GROUP, BUILTIN_METHODS, MethodDeclaration)})


def batching_methods() -> list[str]:
    """Display names of the suite's methods that declare ``batches_trials`` (``tune --batch K``),
    from their declarations: no model code, no installed package read."""
    return [d.display_name for d in map(_builtin_declaration, BUILTIN_METHODS) if d.batches_trials]


def _installed(name: str) -> tuple[MethodDeclaration, Provider]:
    """An installed package's method: its declaration and distribution, only its own package's
    module imported (ValueError: unknown, clashing, or a declaration that does not load)."""
    found = installed(PLUGIN_GROUP, name, BUILTIN_METHODS, MethodDeclaration)
    if found is None:
        raise _unknown(name)
    return found


def method_provider(name: str) -> Provider:
    """Who provides a registry key: the suite itself, or an installed distribution (name, version)."""
    return BUILTIN if name in BUILTIN_METHODS else _installed(name)[1]


def _unknown(name: str) -> ValueError:
    known = list_methods()
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ValueError(f"unknown method {name!r}{hint}; choose one of {', '.join(known)}, install a package that "
                      "declares it (entry point 'protobench.methods'), or give an import path "
                      "'package.module:ClassName'")


def declaration(name: str) -> MethodDeclaration:
    """What a method declares. A registry key reads its declaration without importing any model
    code; an import path ``package.module:Class`` imports the class (the user named it) and
    describes it from its constructor and attributes (:func:`declaration_of_class`)."""
    if ":" in name:
        return declaration_of_class(get_method_class(name), name)
    if name in BUILTIN_METHODS:
        return builtin_declaration(name)
    return _installed(name)[0]


def builtin_declaration(name: str) -> MethodDeclaration:
    """A built-in method's declaration, after refusing an installed package that claims its name."""
    check_clash(PLUGIN_GROUP, name, BUILTIN_METHODS)
    return _builtin_declaration(name)


def declaration_of_class(cls: type, name: str) -> MethodDeclaration:
    """An import-path adapter described from its class: its constructor's keyword arguments with
    their defaults (a range only where a default implies one: none), its attributes."""
    hyperparameters = {key: Hyperparameter(_kind_of(default), default)
                       for key, default in method_hyperparameters(cls).items()}
    return MethodDeclaration(name=name, display_name=method_display_name(cls), adapter=name,
                             hyperparameters=hyperparameters, search_space=dict(getattr(cls, "search_space", {})),
                             clusters_each_class=bool(getattr(cls, "clusters_each_class", False)),
                             batches_trials=bool(getattr(cls, "batches_trials", False)),
                             needs_early_tokens=bool(getattr(cls, "needs_early_tokens", False)))


def _kind_of(default: Any) -> str:
    if default is None or default is inspect.Parameter.empty:
        return "any"
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, (list, tuple)):
        return "str-list" if default and all(isinstance(v, str) for v in default) else "int-list"
    return {int: "int", float: "float", str: "str"}.get(type(default), "any")


def get_method_class(name: str) -> type[PrototypeMethod]:
    """The adapter class of a registry key (its declaration's ``adapter``) or of an import path
    ``package.module:Class``: this imports the model code, and torch."""
    if ":" in name:
        return _import_class(name, name)
    if name not in _CLASSES:
        _CLASSES.setdefault(name, _import_class(declaration(name).adapter, name))
    return _CLASSES[name]


def _import_class(path: str, name: str) -> type[PrototypeMethod]:
    """The adapter class at ``path`` (``package.module:Class``) of method ``name``."""
    from methods.base import PrototypeMethod

    module_name, _, attr = path.partition(":")
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


def method_display_name(cls: type) -> str:
    """The label reports show for an adapter class: its ``display_name``, else its class name."""
    return getattr(cls, "display_name", None) or cls.__name__


def display_name_of(method: str, recorded: str | None = None) -> str:
    """The one label of a method in every output (status, tables, legends, figures, export): its
    declared display name, read without model code; for an import path, the class's (imported:
    the user named it), else the name its result recorded, else its class name. An installed
    package's method with a recorded name keeps it: a reader imports no package's code."""
    if recorded and ":" not in method and method not in BUILTIN_METHODS:
        return recorded
    try:
        return declaration(method).display_name
    except (ValueError, TypeError):
        return recorded or method.rpartition(":")[2]


def method_hyperparameters(cls: type) -> dict[str, Any]:
    """Keyword hyperparameters of an adapter class with their defaults (everything after ``ctx``)."""
    params = inspect.signature(cls.__init__).parameters
    return {
        n: p.default
        for n, p in params.items()
        if n not in ("self", "ctx") and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }


def declared_defaults(name: str) -> dict[str, Any]:
    """Hyperparameter → default of a method, from its declaration (no model code for a registry key)."""
    return {key: default for key, default in declaration(name).defaults().items()
            if default is not inspect.Parameter.empty}


def resolved_method_args(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """Every hyperparameter the method runs with: its declared defaults with ``overrides`` applied,
    as JSON values (a tuple default reads as a list), so a default the code changes is another
    configuration (:meth:`benchmark.config.RunSpec.identity`)."""
    return json.loads(json.dumps({**declared_defaults(name), **overrides}, sort_keys=True, default=str))


def validate_method_args(name: str, overrides: dict[str, Any]) -> None:
    """Fail before any compute, and without model code for a registry key, when a grid gives a
    hyperparameter the method does not take, or one of the wrong type or outside its declared
    range (:func:`check_hyperparameter`, then :meth:`Hyperparameter.problem`)."""
    declared = declaration(name).hyperparameters
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        close = [m for key in unknown for m in difflib.get_close_matches(key, list(declared), n=1)]
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ValueError(
            f"method {name!r} has no hyperparameter {', '.join(map(repr, unknown))}{hint}; "
            f"valid ones are: {', '.join(sorted(declared)) or '(none)'}"
        )
    for key, value in overrides.items():
        check_hyperparameter(name, key, value, declared[key].default)
        problem = declared[key].problem(value)
        if problem is not None:
            raise ValueError(f"method {name!r} method_args: {key} = {value!r} {problem}")


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

    from methods.base import MethodContext
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
