"""Identity by behaviour (docs/design/run-identity.md, "Identity by behaviour").

A result names the source digest of the code that trained it; whether another source digest gives
the same numbers is answered by a deterministic **probe** (:mod:`benchmark.behaviour.probe`: the
method's whole schedule on a micro set of synthetic tokens, one thread, float64 on the CPU) whose
outputs are compared with stored golden outputs within a stated tolerance. The answers live in a
**lock file** (:mod:`benchmark.behaviour.lock`, read without torch): source digest → behaviour and
the digest of what the probe cannot see (:mod:`benchmark.behaviour.boundary`), which keeps the
byte rule. ``protobench check-code METHOD`` (:mod:`benchmark.behaviour.check`) runs the probe and
records its answer.
"""
