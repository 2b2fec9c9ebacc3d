"""The adapter contract: ``check_method(name)`` runs the same battery over any method and says
what it owes (scikit-learn's ``check_estimator`` pattern). Run it over the registry in the
tests, and on your own adapter with ``check_method("package.module:Class")``.
"""
from __future__ import annotations

import inspect
import io
import pickle
import re
from collections.abc import Callable
from typing import Any

import torch

from methods.base import TOKEN_FIELDS, PrototypeMethod, Stage, set_trainable
from methods.registry import build_method, declaration, get_method_class, method_display_name, method_hyperparameters
from methods.space import space_problems
from methods.testing import SyntheticTokens, SyntheticTrainData


class ContractError(AssertionError):
    """A method breaks the adapter contract; the message says which rule and how to fix it."""



#: a terminal's colour and style codes (ECMA-48 CSI sequences), kept out of messages
_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain_text(message: str) -> str:
    """A message as plain text: terminal colour codes removed, whole (every line kept)."""
    return _TERMINAL_CODES.sub("", message).strip()


def _require(condition: bool, rule: str) -> None:
    if not condition:
        raise ContractError(rule)


def _build(name: str, source: SyntheticTokens, J: int, seed: int, **overrides: Any) -> PrototypeMethod:
    torch.manual_seed(seed)
    return build_method(name, source.context(J, seed=seed), **overrides)


def check_constructor(name: str, source: SyntheticTokens, J: int) -> None:
    """Every hyperparameter has a default; the class subclasses PrototypeMethod and sets loss_weights."""
    cls = get_method_class(name)
    for param, default in method_hyperparameters(cls).items():
        _require(default is not inspect.Parameter.empty, f"{name}: hyperparameter {param!r} needs a default (the paper's)")
    method = _build(name, source, J, 0)
    _require(isinstance(method, PrototypeMethod), f"{name}: must subclass methods.base.PrototypeMethod")
    _require(bool(method.loss_weights), f"{name}: set self.loss_weights (term → coefficient) in __init__")


def check_declaration(name: str, source: SyntheticTokens, J: int) -> None:
    """The declaration readers use without torch equals the adapter class: the same hyperparameters
    in the constructor's order with equal defaults, each default valid under its declared kind and
    range, and the same display name, flags and search space (the drift check)."""
    decl = declaration(name)
    cls = get_method_class(name)
    signature = method_hyperparameters(cls)
    _require(list(decl.hyperparameters) == list(signature),
             f"{name}: the declaration lists hyperparameters {list(decl.hyperparameters)}, the constructor "
             f"{list(signature)}; make methods/specs/{name}.py (or the package's declaration) list the constructor's")
    for key, default in signature.items():
        declared = decl.hyperparameters[key].default
        _require(type(declared) is type(default) and declared == default,
                 f"{name}: {key} defaults to {default!r} in the constructor and to {declared!r} in the declaration")
    problems = decl.problems()
    _require(not problems, f"{name}: its declaration: " + "; ".join(problems))
    for attribute in ("clusters_each_class", "needs_early_tokens", "batches_trials", "search_space"):
        _require(getattr(decl, attribute) == getattr(cls, attribute),
                 f"{name}: {attribute} is {getattr(cls, attribute)!r} on the class and {getattr(decl, attribute)!r} "
                 "in the declaration")
    _require(decl.display_name == method_display_name(cls),
             f"{name}: the class is labelled {method_display_name(cls)!r}, the declaration {decl.display_name!r}")
    _require(":" in name or decl.adapter == f"{cls.__module__}:{cls.__qualname__}",
             f"{name}: the declaration's adapter {decl.adapter!r} is not where the class is defined "
             f"({cls.__module__}:{cls.__qualname__})")


def check_search_space(name: str, source: SyntheticTokens, J: int) -> None:
    """The search space names hyperparameters only, its ranges are valid and hold each default."""
    cls = get_method_class(name)
    problems = space_problems(getattr(cls, "search_space", {}), method_hyperparameters(cls), name)
    _require(not problems, "; ".join(problems))


def check_outputs(name: str, source: SyntheticTokens, J: int) -> None:
    """Logits B×C, activation maps B×J×H×W depending on the class asked for, contributions B×J; all finite."""
    method = _build(name, source, J, 0).eval()
    batch = source.batch(torch.arange(6))
    H, W = source.grid
    with torch.no_grad():
        logits = method.logits(batch)
        maps = method.activation_maps(batch, batch.labels)
    _require(logits.shape == (6, source.num_classes), f"{name}: logits must be B×C, got {tuple(logits.shape)}")
    _require(maps.shape == (6, J, H, W), f"{name}: activation_maps must be B×J×H×W = {(6, J, H, W)}, got {tuple(maps.shape)}")
    _require(bool(torch.isfinite(logits).all() and torch.isfinite(maps).all()), f"{name}: logits and maps must be finite")
    with torch.no_grad():
        contributions = method.prototype_contributions(batch, batch.labels)
    _require(contributions.shape == (6, J) and bool(torch.isfinite(contributions).all()),
             f"{name}: prototype_contributions must be finite B×J = {(6, J)}, got {tuple(contributions.shape)}")
    other = (batch.labels + 1) % source.num_classes
    with torch.no_grad():
        other_maps = method.activation_maps(batch, other)
    _require(not torch.equal(maps, other_maps), f"{name}: activation_maps must depend on the requested class (class-major prototypes)")


def check_prototype_switch_off(name: str, source: SyntheticTokens, J: int) -> None:
    """``logits_without`` (the deletion metric): with nothing off it equals ``logits``; switching
    off the top contributing prototype of each image's class changes that class's logit alone,
    and changes it unless that prototype contributes nothing."""
    method = _build(name, source, J, 0).eval()
    batch = source.batch(torch.arange(6))
    classes = batch.labels
    with torch.no_grad():
        logits = method.logits(batch)
        nothing = method.logits_without(batch, classes, torch.zeros(6, J, dtype=torch.bool))
        contributions = method.prototype_contributions(batch, classes)
        top = torch.zeros(6, J, dtype=torch.bool).scatter_(1, contributions.argmax(dim=1, keepdim=True), True)
        without = method.logits_without(batch, classes, top)
    _require(without.shape == logits.shape and torch.allclose(nothing, logits, rtol=1e-5, atol=1e-5),
             f"{name}: logits_without(batch, classes, no prototype off) must equal logits(batch)")
    others = torch.ones_like(logits, dtype=torch.bool).scatter_(1, classes[:, None], False)
    _require(torch.allclose(without[others], logits[others], rtol=1e-5, atol=1e-5),
             f"{name}: logits_without must leave the logits of the other classes unchanged")
    rows = torch.arange(6)
    moved = (without[rows, classes] - logits[rows, classes]).abs() > 0
    contributes = contributions[top] != 0
    _require(bool((moved | ~contributes).all()),
             f"{name}: switching off a prototype that contributes to its class's logit must change that logit")


def _training_stages(method: PrototypeMethod) -> list[Stage]:
    return [s for s in method.stages() if s.epochs > 0]


def check_stages_and_losses(name: str, source: SyntheticTokens, J: int) -> None:
    """Every stage: epochs ≥ 0, lr > 0 on own parameters, named finite loss terms, a gradient where it trains."""
    method = _build(name, source, J, 0)
    stages = method.stages()
    _require(len(stages) > 0, f"{name}: stages() must return at least one Stage")
    own = {id(p) for p in method.parameters()}
    batch = source.batch(torch.arange(8))
    data = SyntheticTrainData(source)
    epoch = 0
    for stage in stages:
        _require(stage.epochs >= 0, f"{name}: stage {stage.name!r} has negative epochs")
        for group in stage.param_groups:
            _require(group.lr > 0, f"{name}: stage {stage.name!r} group {group.name!r} needs lr > 0")
            _require(all(id(p) in own for p in group.params),
                     f"{name}: stage {stage.name!r} group {group.name!r} lists parameters the module does not own")
        if stage.epochs == 0:
            continue
        method.on_stage_start(stage, epoch, data)
        method.train()
        set_trainable(method, stage)
        terms = method.loss_terms(batch, stage, epoch)
        _require(set(terms) <= set(method.loss_weights),
                 f"{name}: stage {stage.name!r} returned terms {sorted(set(terms) - set(method.loss_weights))} missing from loss_weights")
        for term, value in terms.items():
            _require(value.dim() == 0 and bool(torch.isfinite(value)), f"{name}: loss term {term!r} must be a finite scalar")
        if stage.trains:
            total = sum(method.loss_weights[t] * v for t, v in terms.items())
            _require(isinstance(total, torch.Tensor) and total.requires_grad,
                     f"{name}: stage {stage.name!r} trains but its loss has no gradient")
            total.backward()
            grads = [p.grad for g in stage.param_groups for p in g.params]
            _require(any(g is not None and bool(g.abs().sum() > 0) for g in grads),
                     f"{name}: stage {stage.name!r}: no parameter of its groups receives a gradient")
            method.zero_grad(set_to_none=True)
        with torch.no_grad():
            method.after_step(batch, stage, epoch)
            method.on_epoch_end(stage, epoch + stage.epochs - 1, data)
        epoch += stage.epochs


def check_state_dict_round_trip(name: str, source: SyntheticTokens, J: int) -> None:
    """state_dict() loads with weights_only=True (the checkpoint loader) and restores identical outputs."""
    method = _build(name, source, J, 0)
    data = SyntheticTrainData(source)
    stage = _training_stages(method)[0]
    batch = source.batch(torch.arange(8))
    method.on_stage_start(stage, 0, data)
    with torch.no_grad():
        method.after_step(batch, stage, 0)
    restored = _build(name, source, J, 123)
    buffer = io.BytesIO()
    torch.save(method.state_dict(), buffer)
    try:  # the checkpoint loader's rules (benchmark.run.training.load_checkpoint)
        state = torch.load(io.BytesIO(buffer.getvalue()), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise ContractError(f"{name}: state_dict() must hold only tensors and plain Python data, so that "
                            f"checkpoints load with weights_only=True; torch says: {plain_text(str(err))}") from err
    restored.load_state_dict(state)
    method.eval(), restored.eval()
    with torch.no_grad():
        _require(torch.equal(method.logits(batch), restored.logits(batch)),
                 f"{name}: load_state_dict(state_dict()) must restore identical logits (keep all state in parameters/buffers)")
        _require(torch.equal(method.activation_maps(batch, batch.labels), restored.activation_maps(batch, batch.labels)),
                 f"{name}: load_state_dict(state_dict()) must restore identical activation maps")


def check_determinism(name: str, source: SyntheticTokens, J: int) -> None:
    """Two builds and training steps with the same seed give identical logits."""
    outputs = []
    for _ in range(2):
        method = _build(name, source, J, 0)
        data = SyntheticTrainData(source)
        stage = _training_stages(method)[0]
        method.on_stage_start(stage, 0, data)
        batch = source.batch(torch.arange(8))
        if stage.trains:
            terms = method.loss_terms(batch, stage, 0)
            sum(method.loss_weights[t] * v for t, v in terms.items()).backward()
        with torch.no_grad():
            method.after_step(batch, stage, 0)
            method.eval()
            outputs.append(method.logits(batch))
    _require(torch.equal(outputs[0], outputs[1]), f"{name}: two builds with the same seed must give identical outputs")


def check_reads(name: str, source: SyntheticTokens, J: int) -> None:
    """The method runs on batches holding only the arrays it declares in ``reads`` (the harness
    loads no others) and gets the same outputs and losses as from a full batch."""
    _require(bool(TOKEN_FIELDS >= set(_build(name, source, J, 0).reads)),
             f"{name}: reads must be a subset of {sorted(TOKEN_FIELDS)}")
    results = []
    for full in (True, False):
        method = _build(name, source, J, 0)
        batch = source.batch(torch.arange(8))
        batch = batch if full else batch.only(frozenset(method.reads))
        data = SyntheticTrainData(source, reads=None if full else frozenset(method.reads))
        try:
            stage = _training_stages(method)[-1]
            method.on_stage_start(stage, 0, data)
            terms = method.loss_terms(batch, stage, 0)
            with torch.no_grad():
                method.after_step(batch, stage, 0)
                method.eval()
                results.append([*terms.values(), method.logits(batch), method.activation_maps(batch, batch.labels),
                                method.prototype_contributions(batch, batch.labels)])
        except (AttributeError, TypeError) as err:
            raise ContractError(f"{name}: reads = {sorted(method.reads)} leaves out an array the method uses "
                                f"({type(err).__name__}: {err}); declare it in reads") from err
    _require(all(torch.equal(a, b) for a, b in zip(*results)),
             f"{name}: outputs from a batch of only its reads {sorted(method.reads)} differ from a full batch's")


CHECKS: tuple[Callable[[str, SyntheticTokens, int], None], ...] = (
    check_constructor,
    check_declaration,
    check_search_space,
    check_outputs,
    check_prototype_switch_off,
    check_stages_and_losses,
    check_state_dict_round_trip,
    check_determinism,
    check_reads,
)


def check_method(name: str, *, prototypes_per_class: int = 3,
                 echo: Callable[[str], None] | None = None) -> None:
    """Run every contract check on method ``name``; raises ContractError naming the broken rule.
    ``echo`` (e.g. ``print``) receives one plain-text line per check passed, saying what it checked."""
    source = SyntheticTokens(num_classes=4, images_per_class=6)
    for check in CHECKS:
        check(name, source, prototypes_per_class)
        if echo is not None:
            echo(f"ok    {_check_name(check)}: {_rule_text(check)}")


def _check_name(check: Callable[..., None]) -> str:
    return check.__name__.removeprefix("check_").replace("_", " ")


def _rule_text(check: Callable[..., None]) -> str:
    """The check's rule: its docstring's first paragraph on one line (never cut mid-sentence)."""
    return " ".join((inspect.getdoc(check) or "").split("\n\n")[0].split())


def main(argv: list[str] | None = None) -> int:
    """``python -m methods.contract METHOD…``: the contract battery with one plain line per check,
    ``FAIL`` and the broken rule on the first failure; exit status 1 when any method fails."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m methods.contract", description=main.__doc__)
    parser.add_argument("methods", nargs="+", metavar="METHOD",
                        help="a registry name (vmfproto) or an import path (mypkg.mymodule:MyMethod)")
    parser.add_argument("-J", "--prototypes-per-class", type=int, default=3, help="J of the checked instances")
    args = parser.parse_args(argv)
    failed = 0
    for name in args.methods:
        print(f"{name}:")
        try:
            get_method_class(name)
        except (ValueError, TypeError) as err:  # an unknown method, a failing import, not an adapter
            print(f"  FAIL  {plain_text(str(err))}")
            failed += 1
            continue
        try:
            check_method(name, prototypes_per_class=args.prototypes_per_class, echo=lambda line: print(f"  {line}"))
        except ContractError as err:  # a broken rule
            print(f"  FAIL  {plain_text(str(err))}")
            failed += 1
        except Exception as err:  # noqa: BLE001 - the adapter's own error, reported as a failure
            print(f"  FAIL  {name}: the adapter raised {type(err).__name__}: {plain_text(str(err))}")
            failed += 1
        else:
            print(f"  all {len(CHECKS)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
