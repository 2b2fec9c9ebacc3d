"""Search spaces in the adapter contract (methods/space.py, methods.contract.check_search_space)."""
from __future__ import annotations

import pytest
from example_adapter import CosinePrototypes

from methods.contract import ContractError, check_method, main
from methods.registry import get_method_class, list_methods, method_hyperparameters
from methods.space import (Categorical, IntRange, LogUniform, Uniform, space_fingerprint, space_from_json,
                           space_problems, space_to_json)


class DefaultOutside(CosinePrototypes):
    search_space = {"lr": LogUniform(0.2, 1.0)}  # the default lr = 0.1 lies below


class NotAHyperparameter(CosinePrototypes):
    search_space = {"learning_rate": LogUniform(0.01, 1.0)}


class InvalidRange(CosinePrototypes):
    search_space = {"temperature": Uniform(0.5, 0.05)}


class WellDeclared(CosinePrototypes):
    search_space = {"lr": LogUniform(0.01, 1.0), "temperature": Uniform(0.05, 0.5)}


class TunesEpochs(CosinePrototypes):
    search_space = {"epochs": IntRange(5, 20)}


# KMEx trains nothing (k-means on frozen embeddings; n_init/max_iter/tol only steer the solver):
# it is tuned over nothing, one trial at its defaults (docs/protocol/harness.md, "Tuning"); nor is
# the k-NN reference row, whose k and T are DINO's fixed evaluation settings (docs/protocol/knn.md).
TRAINING_FREE = {"kmex", "knn"}


@pytest.mark.parametrize("name", list_methods())
def test_every_registered_method_declares_a_valid_space_holding_its_defaults(name):
    cls = get_method_class(name)
    assert bool(cls.search_space) is (name not in TRAINING_FREE), f"{name}: {cls.search_space}"
    assert space_problems(cls.search_space, method_hyperparameters(cls), name) == []


def test_contract_rejects_a_default_outside_its_range_naming_both():
    with pytest.raises(ContractError) as err:
        check_method("test_search_spaces:DefaultOutside")
    assert "lr = 0.1" in str(err.value) and "log_uniform[0.2, 1.0]" in str(err.value)


@pytest.mark.parametrize("cls, rule", [
    (NotAHyperparameter, "'learning_rate', which is not a hyperparameter"),
    (InvalidRange, "range [0.5, 0.05] needs low < high"),
    (TunesEpochs, "'epochs', an epoch count: the epochs are the tuning budget"),
])
def test_contract_rejects_unknown_names_and_invalid_ranges(cls, rule):
    with pytest.raises(ContractError, match=None) as err:
        check_method(f"test_search_spaces:{cls.__name__}")
    assert rule in str(err.value)


def test_a_well_declared_own_adapter_passes_and_one_without_a_space_is_tuned_over_nothing(capsys):
    assert main(["test_search_spaces:WellDeclared", "example_adapter:CosinePrototypes"]) == 0
    assert "ok    search space" in capsys.readouterr().out
    assert CosinePrototypes.search_space == {}


@pytest.mark.parametrize("dimension, value, inside", [
    (LogUniform(1e-4, 1e-2), 1e-3, True), (LogUniform(1e-4, 1e-2), 2e-2, False), (Uniform(-1.0, 0.0), -0.08, True),
    (IntRange(1, 5), 5, True), (IntRange(1, 5), 5.0, False), (IntRange(1, 5), True, False),
    (Categorical(("a", "b")), "b", True), (Categorical((1, 2)), True, False),
])
def test_membership(dimension, value, inside):
    assert dimension.contains(value) is inside


@pytest.mark.parametrize("dimension, problem", [
    (LogUniform(0.0, 1.0), "needs low > 0"), (Uniform(1.0, 1.0), "needs low < high"),
    (Categorical(("a",)), "at least two"), (Categorical(("a", "a")), "repeat"), (IntRange(1, 2.5), "integer bounds"),
])
def test_invalid_dimensions_say_why(dimension, problem):
    assert problem in dimension.problem()


def test_grid_tables_round_trip_and_bad_ones_are_refused():
    space = {"lr": LogUniform(1e-4, 1e-2), "gating": Categorical(("a", "b")), "k": IntRange(1, 3)}
    back = {name: space_from_json(values, name) for name, values in space_to_json(space).items()}
    assert back == space and space_fingerprint(back) == space_fingerprint(space)
    assert space_fingerprint({"lr": LogUniform(1e-4, 1e-3)}) != space_fingerprint({"lr": LogUniform(1e-4, 1e-2)})
    with pytest.raises(ValueError, match="kind = 'loguniform' must be one of"):
        space_from_json({"kind": "loguniform", "low": 1, "high": 2}, "x")
    with pytest.raises(ValueError, match="takes exactly high, low, got low"):
        space_from_json({"kind": "uniform", "low": 1}, "x")
