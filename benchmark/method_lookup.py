"""The harness's one door to the method registry: the registry's calls on user input (a grid's
method names and ``method_args``, a run's method), each turning what a method refuses with
Python's own exceptions (ValueError, TypeError: methods import nothing of the harness) into the
one :class:`~benchmark.errors.ProtobenchError`, its message kept. ``build_method`` here is the one
place the harness builds a method for a run."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from benchmark.errors import ProtobenchError
from methods import registry
from methods.declaration import MethodDeclaration
from methods.plugins import Provider

if TYPE_CHECKING:
    from methods.base import MethodContext, PrototypeMethod


@contextmanager
def refusals_as_user_errors() -> Iterator[None]:
    """A ValueError or TypeError a method or the registry raises inside becomes a ProtobenchError
    with the same message (the CLI prints it alone, exit status 2)."""
    try:
        yield
    except (ValueError, TypeError) as err:
        raise ProtobenchError(str(err)) from err


def declaration(name: str) -> MethodDeclaration:
    """What a method declares (methods/declaration.py): no model code for a registry key."""
    with refusals_as_user_errors():
        return registry.declaration(name)


def method_provider(name: str) -> Provider:
    """The suite, or the installed distribution, that provides a registry key."""
    with refusals_as_user_errors():
        return registry.method_provider(name)


def get_method_class(name: str) -> type[PrototypeMethod]:
    with refusals_as_user_errors():
        return registry.get_method_class(name)


def validate_method_args(name: str, overrides: dict[str, Any]) -> None:
    with refusals_as_user_errors():
        registry.validate_method_args(name, overrides)


def resolved_method_args(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    with refusals_as_user_errors():
        return registry.resolved_method_args(name, overrides)


def stand_in_method(name: str, method_args: dict[str, Any], prototypes_per_class: int, *,
                    has_cls_attention: bool = True, backbone: str = "") -> PrototypeMethod:
    with refusals_as_user_errors():
        return registry.stand_in_method(name, method_args, prototypes_per_class,
                                        has_cls_attention=has_cls_attention, backbone=backbone)


def build_method(name: str, ctx: MethodContext, **overrides: Any) -> PrototypeMethod:
    """The method of a run (:func:`methods.registry.build_method`); what it refuses is a
    ProtobenchError before any compute."""
    with refusals_as_user_errors():
        return registry.build_method(name, ctx, **overrides)


def known_method(name: str) -> bool:
    """Whether ``name`` names a method here: a registry key (the suite's or an installed package's,
    from the declarations alone) or an import path ``package.module:Class`` (not imported)."""
    return ":" in name or name in registry.list_methods()
