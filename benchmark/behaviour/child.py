"""``python -m benchmark.behaviour.child --out DIR METHOD[=DTYPE] ...``: the child process
benchmark/behaviour/check.py starts with :data:`benchmark.behaviour.setup.PINNED_ARITHMETIC`. It
probes each method it is given (:func:`benchmark.behaviour.probe.run_probe`; the harness's,
:func:`benchmark.behaviour.harness_probe.probe_harness`, for :data:`HARNESS`) under coverage.py of
its probed files, and writes each one's outputs, dtype, executed lines, seconds and arithmetic, or
its exception, to the folder."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.behaviour.harness_probe import probe_harness
from benchmark.behaviour.probe import run_probe
from benchmark.behaviour.setup import HARNESS


def arithmetic() -> dict[str, str]:
    """What this process computes with: torch's version, ATen's CPU capability, MKL's reproducibility mode."""
    return {"torch": torch.__version__, "aten_capability": torch.backends.cpu.get_cpu_capability(),
            "mkl_cbwr": os.environ.get("MKL_CBWR", "")}


def _probe_traced(method: str, dtype: str | None, out: Path, index: int) -> None:
    """One method's probe (or, for :data:`HARNESS`, the harness's: benchmark/behaviour/harness_probe.py)
    under coverage of its probed files; outputs to ``out/<index>.npz``, the rest (dtype, executed
    lines, seconds, arithmetic, or the exception) to ``out/<index>.json``."""
    import coverage

    from benchmark.run.identity import harness_files, probed_files

    record: dict[str, Any] = {"method": method, "arithmetic": arithmetic()}
    try:
        files = harness_files() if method == HARNESS else probed_files(method)
        tracer = coverage.Coverage(data_file=None, config_file=False, include=[str(p) for p in files.values()])
        tic = time.perf_counter()
        tracer.start()
        try:
            if method == HARNESS:
                used, outputs = "float64", probe_harness()
            else:
                used, outputs = run_probe(method, dtype)
        finally:
            tracer.stop()
        data = tracer.get_data()
        record.update(dtype=used, seconds=time.perf_counter() - tic,
                      executed={module: sorted(data.lines(str(path)) or ()) for module, path in files.items()})
        np.savez(out / f"{index}.npz", **{f"{c}/{o}": a for c, values in outputs.items() for o, a in values.items()})
    except Exception as err:  # noqa: BLE001 - reported per method by the parent, never identical
        record["error"] = f"{type(err).__name__}: {err}"
        record["traceback"] = traceback.format_exc()
    (out / f"{index}.json").write_text(json.dumps(record))


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmark.behaviour.child --out DIR METHOD[=DTYPE] ...`` (started by
    benchmark/behaviour/check.py with :data:`PINNED_ARITHMETIC`)."""
    parser = argparse.ArgumentParser(prog="python -m benchmark.behaviour.child", allow_abbrev=False)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("methods", nargs="+", metavar="METHOD[=DTYPE]")
    args = parser.parse_args(argv)
    for index, request in enumerate(args.methods):
        method, _, dtype = request.partition("=")
        _probe_traced(method, dtype or None, args.out, index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
