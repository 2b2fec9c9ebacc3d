"""The harness's own probe: the training loop run for several members at once, as ``tune --batch K``
runs it (benchmark/run/lockstep.py), on the behaviour probe's micro problem.

Three members train in lockstep, once stepped per member and once vectorised, each told of every
epoch it ends (as a run's epoch log and a trial's pruner are): two copies of
:data:`~benchmark.behaviour.setup.HARNESS_METHOD`'s default configuration, which must each give
that method's probe alone (``check-code`` compares them), and a member whose training tokens hold
a NaN, whose loss turns non-finite, so that it leaves the lockstep while the others go on; then a
lockstep whose two members both hold the NaN, which ends when both have left. What it runs counts, with every method's probe, towards the harness code the probes have seen
(benchmark/behaviour/boundary.py): the loop's paths for several members, for a failing one and for all failing.
"""
from __future__ import annotations

import numpy as np
import torch

from benchmark.behaviour.probe import MicroTokens, _context, _outputs, probe_environment
from benchmark.behaviour.setup import DEFAULT_CONFIGURATION, HARNESS_METHOD, PROBE, ProbeSetup, configurations
from benchmark.cache.frozen import with_frozen_features
from benchmark.run.lockstep import Member, train_lockstep
from benchmark.run.training import NonFiniteLossError
from methods.registry import build_method

STEPS = {"per_member": False, "vectorised": True}


def _member(tokens: MicroTokens, setup: ProbeSetup) -> Member:
    torch.manual_seed(setup.seed)  # each member built as its run alone builds it
    method = build_method(HARNESS_METHOD, _context(setup), **configurations(HARNESS_METHOD)[DEFAULT_CONFIGURATION])
    tokens.early = method.needs_early_tokens
    source = with_frozen_features(tokens, method.frozen_features, batch_size=len(tokens), device=torch.device("cpu"))
    return Member(method, source, on_epoch_end=lambda record: None, log=lambda line: None)


def probe_harness(setup: ProbeSetup = PROBE) -> dict[str, dict[str, np.ndarray]]:
    """``{"per_member_0", "per_member_1", "vectorised_0", "vectorised_1"}`` → the outputs of each
    good member; a RuntimeError when a NaN member did not leave with a non-finite loss."""
    found: dict[str, dict[str, np.ndarray]] = {}
    with probe_environment("float64") as chosen:
        tokens = MicroTokens(setup, setup.train_per_class, setup.train_data_seed, chosen)
        broken = MicroTokens(setup, setup.train_per_class, setup.train_data_seed, chosen)
        broken.block_input = broken.block_input.clone()
        broken.block_input[0, 1, 0] = float("nan")
        broken.tokens = torch.nn.functional.layer_norm(broken.block_input, (setup.embed_dim,))[:, 1:]
        test = MicroTokens(setup, setup.test_per_class, setup.test_data_seed, chosen)
        for step, vectorised in STEPS.items():
            members = [_member(tokens, setup), _member(tokens, setup), _member(broken, setup)]
            train_lockstep(members, seed=setup.seed, batch_size=setup.batch_size, device=torch.device("cpu"),
                           vectorised=vectorised, log=lambda line: None)
            if not isinstance(members[2].outcome, NonFiniteLossError):
                raise RuntimeError(f"the lockstep's member with a NaN token left with {members[2].outcome!r}, "
                                   "not a non-finite loss")
            for index, member in enumerate(members[:2]):
                if member.outcome is not None:
                    raise RuntimeError(f"a good member of the {step} lockstep failed: {member.outcome!r}")
                source = with_frozen_features(test, member.method.frozen_features, batch_size=len(test),
                                              device=torch.device("cpu"))
                found[f"{step}_{index}"] = _outputs(member.method, source)
        doomed = [_member(broken, setup), _member(broken, setup)]
        train_lockstep(doomed, seed=setup.seed, batch_size=setup.batch_size, device=torch.device("cpu"),
                       vectorised=False, log=lambda line: None)
        if not all(isinstance(member.outcome, NonFiniteLossError) for member in doomed):
            raise RuntimeError("a lockstep whose members all hold a NaN token ended with "
                               f"{[member.outcome for member in doomed]!r}, not their non-finite losses")
    return found
