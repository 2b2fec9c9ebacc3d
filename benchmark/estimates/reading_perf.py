"""``protobench perf --reading N``: the reading commands timed side by side on a synthetic result
set of N runs (``benchmark.estimates.reading_set``).

Each command runs as its own process, as a user runs it, and is measured by the kernel: CPU
seconds (user + system, ``os.wait4``'s resource usage of that process and its children), wall
seconds and peak resident memory (``ru_maxrss``). Repeats are interleaved (every command once,
then every command again), so a change of machine load hits every command alike; the table shows
the median over repeats with the range. CPU time is the number to compare on a shared machine:
wall time grows with other work, CPU time much less. The load average before and after is stated.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmark.errors import ProtobenchError

#: the CLI the commands run through: this interpreter's protobench
PROTOBENCH = (sys.executable, "-m", "benchmark.cli")


@dataclass(frozen=True)
class ReadingCommand:
    """One reading command: its label in the table and its arguments (runs folder, output folder)."""

    label: str
    output: str  # the file or folder it writes, below the output folder

    def argv(self, runs: Path, out: Path) -> list[str]:
        target = str(out / self.output)
        words = self.label.split()
        return [words[0], str(runs), *words[1:], "--out", target]


READING_COMMANDS: tuple[ReadingCommand, ...] = (
    ReadingCommand("report --ci --significance", "report.md"),
    ReadingCommand("compare --by method --baseline vmfproto", "compare.md"),
    ReadingCommand("agreement", "agreement.md"),
    ReadingCommand("leaderboard", "leaderboard"),
    ReadingCommand("site", "site"),
)


@dataclass(frozen=True)
class Timing:
    """One run of one command."""

    command: str
    user_s: float
    sys_s: float
    wall_s: float
    peak_mib: float

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s


def time_command(argv: Sequence[str], label: str, *, cli: Sequence[str] = PROTOBENCH,
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> Timing:
    """Run ``cli + argv`` to its end and measure it (module docstring); a failure is one error
    with the command's last lines of stderr."""
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        process = subprocess.Popen([*cli, *argv], stdout=subprocess.DEVNULL, stderr=errors, env=env, cwd=cwd)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        if process.returncode != 0:
            errors.seek(0)
            tail = errors.read().decode(errors="replace").strip().splitlines()[-5:]
            raise ProtobenchError(f"`protobench {' '.join(argv)}` failed (exit {process.returncode}): "
                                  + " / ".join(tail))
    return Timing(label, usage.ru_utime, usage.ru_stime, wall, usage.ru_maxrss / 1024)  # Linux: KiB


@dataclass(frozen=True)
class ReadingPerf:
    """Every command's timings over the repeats, with the machine's load average around them."""

    runs: int
    images: int
    timings: list[Timing]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]

    def to_json(self) -> dict[str, object]:
        return {"runs": self.runs, "images": self.images, "load_before": list(self.load_before),
                "load_after": list(self.load_after), "timings": [asdict(t) for t in self.timings]}


def measure_reading(runs_dir: Path, out: Path, *, runs: int, images: int, repeats: int = 1,
                    commands: Sequence[ReadingCommand] = READING_COMMANDS, cli: Sequence[str] = PROTOBENCH,
                    env: dict[str, str] | None = None, cwd: Path | None = None) -> ReadingPerf:
    """Every command ``repeats`` times, interleaved, its outputs under ``out``."""
    if repeats < 1:
        raise ProtobenchError(f"--repeats {repeats} must be ≥ 1")
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    timings = [time_command(command.argv(runs_dir, out), command.label, cli=cli, env=env, cwd=cwd)
               for _ in range(repeats) for command in commands]
    return ReadingPerf(runs, images, timings, load_before, os.getloadavg())


def reading_lines(perf: ReadingPerf) -> list[str]:
    """The table: per command, the median over repeats of CPU (user + sys), wall and peak memory,
    with the range of the CPU seconds where there are several repeats."""
    def span(values: list[float]) -> str:
        return f" [{min(values):.1f}–{max(values):.1f}]" if len(values) > 1 else ""

    repeats = sum(t.command == perf.timings[0].command for t in perf.timings)
    lines = [f"reading commands on {perf.runs} synthetic runs × {perf.images} test images "
             f"(median of {repeats} interleaved repeat(s), [min–max]); load average {_load(perf.load_before)} "
             f"before, {_load(perf.load_after)} after",
             "| command | CPU s (user + sys) | user s | sys s | wall s | peak MiB |",
             "|---|---|---|---|---|---|"]
    for label in dict.fromkeys(t.command for t in perf.timings):
        own = [t for t in perf.timings if t.command == label]
        cpu = [t.cpu_s for t in own]
        lines.append(f"| {label} | {statistics.median(cpu):.1f}{span(cpu)} | "
                     f"{statistics.median(t.user_s for t in own):.1f} | {statistics.median(t.sys_s for t in own):.1f} | "
                     f"{statistics.median(t.wall_s for t in own):.1f}{span([t.wall_s for t in own])} | "
                     f"{statistics.median(t.peak_mib for t in own):.0f} |")
    return lines


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{value:.2f}" for value in load)
