"""Search spaces of an adapter's tunable hyperparameters (the adapter contract's ``search_space``).

An adapter declares ``search_space = {"lr_mu": LogUniform(1e-4, 5e-3), ...}``: each entry names a
hyperparameter of its constructor and the range a tuner may sample it from. The paper's default
must lie inside (``methods.contract`` checks it), so trial 0, the defaults, is a point of the
space. The four kinds are Optuna's distributions (FloatDistribution with and without ``log``,
IntDistribution, CategoricalDistribution); this module only describes them (no Optuna import:
``methods`` imports nothing outside itself and torch).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class LogUniform:
    """A positive float sampled uniformly in log space over [low, high] (learning rates, weights)."""

    low: float
    high: float

    def problem(self) -> str | None:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"log-uniform range [{self.low}, {self.high}] must be finite"
        if self.low <= 0:
            return f"log-uniform range [{self.low}, {self.high}] needs low > 0"
        return None if self.low < self.high else f"range [{self.low}, {self.high}] needs low < high"

    def contains(self, value: Any) -> bool:
        return _is_number(value) and self.low <= value <= self.high


@dataclass(frozen=True)
class Uniform:
    """A float sampled uniformly over [low, high] (temperatures, momenta, signed loss weights)."""

    low: float
    high: float

    def problem(self) -> str | None:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"uniform range [{self.low}, {self.high}] must be finite"
        return None if self.low < self.high else f"range [{self.low}, {self.high}] needs low < high"

    def contains(self, value: Any) -> bool:
        return _is_number(value) and self.low <= value <= self.high


@dataclass(frozen=True)
class IntRange:
    """An integer sampled uniformly from low..high, both included."""

    low: int
    high: int

    def problem(self) -> str | None:
        if not (isinstance(self.low, int) and isinstance(self.high, int)):
            return f"integer range [{self.low}, {self.high}] needs integer bounds"
        return None if self.low < self.high else f"range [{self.low}, {self.high}] needs low < high"

    def contains(self, value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high


@dataclass(frozen=True)
class Categorical:
    """One of a few named choices (strings, numbers, booleans)."""

    choices: tuple[Any, ...]

    def problem(self) -> str | None:
        odd = [c for c in self.choices if not isinstance(c, (str, int, float, bool))]
        if odd:
            return (f"categorical choices must be strings, numbers or booleans, not a {type(odd[0]).__name__} "
                    f"({odd[0]!r})")
        if len(self.choices) < 2:
            return f"categorical choices {list(self.choices)} need at least two values"
        if len(set(map(repr, self.choices))) < len(self.choices):
            return f"categorical choices {list(self.choices)} repeat a value"
        return None

    def contains(self, value: Any) -> bool:
        return any(type(value) is type(c) and value == c for c in self.choices)


Dimension = LogUniform | Uniform | IntRange | Categorical
KINDS: dict[str, type] = {"log_uniform": LogUniform, "uniform": Uniform, "int": IntRange, "categorical": Categorical}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def kind_of(dimension: Dimension) -> str:
    return next(name for name, cls in KINDS.items() if isinstance(dimension, cls))


def describe(dimension: Dimension) -> str:
    """``log_uniform[0.0001, 0.005]``, ``categorical('a', 'b')``: how messages and outputs show it."""
    if isinstance(dimension, Categorical):
        return f"categorical({', '.join(map(repr, dimension.choices))})"
    return f"{kind_of(dimension)}[{dimension.low}, {dimension.high}]"


def space_problems(space: dict[str, Dimension], defaults: dict[str, Any], owner: str) -> list[str]:
    """Every broken rule of ``space`` against the adapter's hyperparameter ``defaults``: a name that
    is not a hyperparameter, an invalid range, a default outside its range (naming both)."""
    problems = []
    for name, dimension in space.items():
        if name not in defaults:
            problems.append(f"{owner}: search_space names {name!r}, which is not a hyperparameter of the method "
                            f"(its hyperparameters: {', '.join(defaults)})")
            continue
        if "epoch" in name:
            problems.append(f"{owner}: search_space names {name!r}, an epoch count: the epochs are the tuning budget, "
                            "the same for every trial, never a dimension of the space")
            continue
        if not isinstance(dimension, (LogUniform, Uniform, IntRange, Categorical)):
            problems.append(f"{owner}: search_space[{name!r}] = {dimension!r} is not a LogUniform, Uniform, "
                            "IntRange or Categorical (methods/space.py)")
            continue
        problem = dimension.problem()
        if problem:
            problems.append(f"{owner}: search_space[{name!r}]: {problem}")
        elif not dimension.contains(defaults[name]):
            problems.append(f"{owner}: the default {name} = {defaults[name]!r} lies outside its search space "
                            f"{describe(dimension)}; widen the range to include the paper's default")
    return problems


def space_to_json(space: dict[str, Dimension]) -> dict[str, dict[str, Any]]:
    """A space as plain values (``{"lr_mu": {"kind": "log_uniform", "low": …, "high": …}}``)."""
    return {name: {"kind": kind_of(d), **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(d).items()}}
            for name, d in sorted(space.items())}


def space_from_json(values: dict[str, Any], where: str) -> Dimension:
    """A dimension from a grid's table (``{ kind = "log_uniform", low = 1e-4, high = 1e-2 }``);
    a malformed table raises ValueError naming ``where``."""
    kind = values.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{where}: kind = {kind!r} must be one of {', '.join(KINDS)}")
    fields = {k: v for k, v in values.items() if k != "kind"}
    expected = {"choices"} if kind == "categorical" else {"low", "high"}
    if set(fields) != expected:
        raise ValueError(f"{where}: a {kind} dimension takes exactly {', '.join(sorted(expected))}, got "
                         f"{', '.join(sorted(fields)) or 'nothing'}")
    if kind == "categorical":
        if not isinstance(fields["choices"], list):
            raise ValueError(f"{where}: choices must be a list")
        return Categorical(tuple(fields["choices"]))
    if kind == "int":
        return IntRange(fields["low"], fields["high"])
    if not (_is_number(fields["low"]) and _is_number(fields["high"])):
        raise ValueError(f"{where}: low and high must be numbers")
    return KINDS[kind](float(fields["low"]), float(fields["high"]))


def space_fingerprint(space: dict[str, Dimension]) -> str:
    """Short hash of a space: a tuned result names the space its study searched."""
    blob = json.dumps(space_to_json(space), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]
