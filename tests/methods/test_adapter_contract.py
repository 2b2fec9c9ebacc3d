"""The adapter contract, run over every registered method and the example adapter; and proof
that it catches a broken adapter."""
import numpy as np
import pytest
import torch

from example_adapter import CosinePrototypes
from methods.contract import ContractError, check_method
from methods.registry import list_methods


@pytest.mark.parametrize("name", [*list_methods(), "example_adapter:CosinePrototypes"])
def test_method_satisfies_contract(name):
    check_method(name)


@pytest.mark.parametrize("name", list_methods())
def test_method_with_one_prototype_per_class(name):
    check_method(name, prototypes_per_class=1)


class WrongMapShape(CosinePrototypes):
    def activation_maps(self, batch, classes):
        return super().activation_maps(batch, classes).flatten(2)


class LosesStateOnRoundTrip(CosinePrototypes):
    def __init__(self, ctx, **kw):
        super().__init__(ctx, **kw)
        self.shift = torch.randn(())  # plain attribute: not in the state dict

    def logits(self, batch):
        return super().logits(batch) + self.shift


class UndeclaredLossTerm(CosinePrototypes):
    def loss_terms(self, batch, stage, epoch):
        return {**super().loss_terms(batch, stage, epoch), "extra": torch.zeros(())}


class NumpyExtraState(CosinePrototypes):
    def get_extra_state(self):
        return {"rng": np.random.get_state()}  # an ndarray: refused by the weights-only checkpoint loader

    def set_extra_state(self, state):
        np.random.set_state(state["rng"])


class SwitchOffIgnored(CosinePrototypes):
    def logits_without(self, batch, classes, off):
        return self.logits(batch)


class SwitchOffEveryClass(CosinePrototypes):
    def logits_without(self, batch, classes, off):
        removed = (self.prototype_contributions(batch, classes) * off).sum(dim=1, keepdim=True)
        return self.logits(batch) - removed


@pytest.mark.parametrize("cls, rule", [
    (SwitchOffIgnored, "must change that logit"),
    (SwitchOffEveryClass, "must leave the logits of the other classes unchanged"),
    (WrongMapShape, "activation_maps must be B×J×H×W"),
    (LosesStateOnRoundTrip, "load_state_dict(state_dict()) must restore identical logits"),
    (UndeclaredLossTerm, "missing from loss_weights"),
    (NumpyExtraState, "checkpoints load with weights_only=True"),
])
def test_contract_names_the_broken_rule(cls, rule):
    with pytest.raises(ContractError, match=None) as err:
        check_method(f"test_adapter_contract:{cls.__name__}")
    assert rule in str(err.value)


def test_the_command_prints_each_check_and_plain_whole_failures(capsys):
    from methods.contract import CHECKS, main, plain_text

    assert main(["example_adapter:CosinePrototypes", "test_adapter_contract:NumpyExtraState"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "example_adapter:CosinePrototypes:"
    assert [line.split(":")[0] for line in out[1:1 + len(CHECKS)]] == [
        f"  ok    {check.__name__.removeprefix('check_').replace('_', ' ')}" for check in CHECKS]
    assert out[1 + len(CHECKS)] == f"  all {len(CHECKS)} checks passed"
    failure = "\n".join(out[out.index("test_adapter_contract:NumpyExtraState:") + 1:])
    assert "FAIL  test_adapter_contract:NumpyExtraState: state_dict() must hold only tensors" in failure
    assert "\x1b" not in failure and "torch says:" in failure
    assert plain_text("\x1b[1m\x1b[31mbad\x1b[0m value\nsecond line") == "bad value\nsecond line"
