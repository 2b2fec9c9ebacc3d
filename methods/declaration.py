"""What a method declares, as data that imports no torch (timm's ``PretrainedCfg`` idea).

A :class:`MethodDeclaration` is everything a reader of results, a grid check or a planner needs
of a method without its model code: its registry name and display name, where its adapter class
lives (imported only to train or evaluate), every hyperparameter with its type, default and valid
range, its search space, its flags, its references and its named variants. The suite's own
declarations are ``methods/specs/<name>.py``; a package declares its methods the same way and
registers them under the entry-point group ``protobench.methods`` (methods/plugins.py).

``methods.contract`` checks that a declaration equals its adapter class: the constructor's keyword
arguments and defaults, the display name, the flags and the search space (the drift check).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from methods.space import Dimension

#: the kinds of value a hyperparameter takes (``optional``: ``None`` is allowed too; ``any``: an
#: import-path adapter's argument whose default says nothing, checked by the adapter alone)
KINDS = ("int", "float", "bool", "str", "int-list", "str-list", "any")


@dataclass(frozen=True)
class Hyperparameter:
    """One keyword argument of an adapter's constructor: its kind, default and valid range.

    ``low``/``high`` bound a number (``low_open``: strictly above ``low``); ``choices`` lists the
    values a string may take. A float takes an int too (TOML's ``1``)."""

    kind: str
    default: Any
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] = ()
    optional: bool = False

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not valid for this hyperparameter (what it must be), None when it is."""
        if self.kind == "any":
            return None
        if value is None:
            return None if self.optional else f"must be {self.describe()}, not None"
        if not _of_kind(self.kind, value):
            return f"must be {self.describe()}, got {type(value).__name__} {value!r}"
        if self.kind in ("int", "float"):
            if not math.isfinite(value):
                return f"must be a finite number, got {value!r}"
            if self.low is not None and (value <= self.low if self.low_open else value < self.low):
                return f"must be {self.describe()}, got {value!r}"
            if self.high is not None and (value >= self.high if self.high_open else value > self.high):
                return f"must be {self.describe()}, got {value!r}"
        items = value if self.kind.endswith("-list") else [value]
        if self.choices and any(item not in self.choices for item in items):
            return f"must be {self.describe()}, got {value!r}"
        return None

    def describe(self) -> str:
        """The valid values in words: ``an integer >= 1``, ``a finite number > 0``, ``one of 'l2', 'cosine'``."""
        if self.choices:
            listed = "one of " + ", ".join(map(repr, self.choices))
            text = ("a list of " if self.kind.endswith("-list") else "") + listed
        else:
            noun = {"int": "an integer", "float": "a finite number", "bool": "true or false", "str": "a string",
                    "int-list": "a list of integers", "str-list": "a list of strings",
                    "any": "any value"}[self.kind]
            bounds = []
            if self.low is not None:
                bounds.append(f"{'>' if self.low_open else '>='} {_number(self.low)}")
            if self.high is not None:
                bounds.append(f"{'<' if self.high_open else '<='} {_number(self.high)}")
            text = noun + (" " + " and ".join(bounds) if bounds else "")
        return text + (" (or none)" if self.optional else "")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _of_kind(kind: str, value: Any) -> bool:
    if isinstance(value, bool):
        return kind == "bool"
    if kind == "int":
        return isinstance(value, int)
    if kind == "float":
        return isinstance(value, (int, float))
    if kind == "str":
        return isinstance(value, str)
    if kind in ("int-list", "str-list"):
        item = str if kind == "str-list" else int
        return isinstance(value, (list, tuple)) and all(isinstance(v, item) and not isinstance(v, bool)
                                                        for v in value)
    return False


# ---- the few shapes every adapter's hyperparameters take (the rules of methods.common.lineage) ----
def count(default: int, minimum: int = 0) -> Hyperparameter:
    """An integer ≥ ``minimum`` (``check_count``)."""
    return Hyperparameter("int", default, low=minimum)


def optional_count(minimum: int = 1) -> Hyperparameter:
    """An integer ≥ ``minimum``, or ``None`` (the method's own rule then applies)."""
    return Hyperparameter("int", None, low=minimum, optional=True)


def positive(default: float) -> Hyperparameter:
    """A finite number > 0 (``check_positive``: learning rates, temperatures)."""
    return Hyperparameter("float", default, low=0.0, low_open=True)


def optional_positive() -> Hyperparameter:
    """A finite number > 0, or ``None``."""
    return Hyperparameter("float", None, low=0.0, low_open=True, optional=True)


def non_negative(default: float) -> Hyperparameter:
    """A finite number ≥ 0 (``check_non_negative``: weight decays, loss weights that are switched off at 0)."""
    return Hyperparameter("float", default, low=0.0)


def interval(default: float, low: float, high: float, *, low_open: bool = False,
             high_open: bool = False) -> Hyperparameter:
    """A number between ``low`` and ``high``, each end included unless open: momenta [0, 1),
    fractions, angles."""
    return Hyperparameter("float", default, low=low, high=high, low_open=low_open, high_open=high_open)


def real(default: float) -> Hyperparameter:
    """Any finite number (``check_finite``: signed loss weights)."""
    return Hyperparameter("float", default)


def flag(default: bool) -> Hyperparameter:
    return Hyperparameter("bool", default)


def choice(default: str, choices: tuple[str, ...]) -> Hyperparameter:
    return Hyperparameter("str", default, choices=choices)


def epochs(default: tuple[int, ...]) -> Hyperparameter:
    """Global epoch indices (push epochs, milestones); the adapter checks them against its schedule."""
    return Hyperparameter("int-list", default)


def names(default: tuple[str, ...], choices: tuple[str, ...]) -> Hyperparameter:
    """A list of names, each one of ``choices`` (loss terms)."""
    return Hyperparameter("str-list", default, choices=choices)


@dataclass(frozen=True)
class MethodDeclaration:
    """Everything known of a method without its model code.

    ``adapter`` is the import path ``package.module:Class`` of the adapter class, imported only to
    train or evaluate. ``variants`` names the settings its paper (or ours) reports, as the
    ``method_args`` each one sets; ``references`` cite the paper and the official code."""

    name: str
    display_name: str
    adapter: str
    hyperparameters: Mapping[str, Hyperparameter]
    search_space: Mapping[str, Dimension] = field(default_factory=dict)
    clusters_each_class: bool = False
    needs_early_tokens: bool = False
    batches_trials: bool = False  # PrototypeMethod.batches_trials: `tune --batch K` vectorises its step
    reference_row: bool = False  # a reference row (no prototypes): never marked or ranked among the methods it frames
    #: its activation maps are log densities (vMFProto's log C_D(κ) + κ μᵀz): the robustness stage takes the
    #: relative changes of PAC and the perturbation profile on exp(map) (metrics/misalignment.py)
    log_density_maps: bool = False
    references: tuple[str, ...] = ()
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: what the behaviour probe (benchmark/behaviour/probe.py) may shorten to fit its micro problem:
    #: epoch counts of phases that repeat the same step, each phase keeping its every event (push,
    #: EM, program, last layer); empty: the probe runs the declared schedule as it is
    probe_args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def adapter_module(self) -> str:
        return self.adapter.partition(":")[0]

    def defaults(self) -> dict[str, Any]:
        """Hyperparameter name → default."""
        return {name: hp.default for name, hp in self.hyperparameters.items()}

    def problems(self) -> list[str]:
        """What is inconsistent within the declaration itself: an adapter that is no import path, a
        default its own rule refuses, a variant's argument that is invalid (the search space has
        its own check, ``methods.space.space_problems``, run by the contract)."""
        found = []
        if ":" not in self.adapter:
            found.append(f"adapter {self.adapter!r} is not an import path 'package.module:Class'")
        for key, hp in self.hyperparameters.items():
            if hp.kind not in KINDS:
                found.append(f"{key}: kind {hp.kind!r} is not one of {', '.join(KINDS)}")
            elif (why := hp.problem(hp.default)) is not None:
                found.append(f"{key}: the default {hp.default!r} {why}")
        for variant, args in {**self.variants, "probe_args": self.probe_args}.items():
            for key, value in args.items():
                hp = self.hyperparameters.get(key)
                if hp is None or hp.problem(value) is not None:
                    found.append(f"variant {variant!r}: {key} = {value!r} is not a valid value")
        return found
