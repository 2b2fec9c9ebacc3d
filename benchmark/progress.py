"""Progress display: rich bars on a terminal, plain log lines otherwise (batch logs, SLURM)."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress


def output_console() -> Console:
    """The console for tables and reports: the terminal's width on a TTY; piped or logged
    output (CI, SLURM logs, tests) is never hard-wrapped, so every line stays greppable."""
    if sys.stdout.isatty():
        return Console()
    return Console(width=200, soft_wrap=True)


class Task(Protocol):
    def advance(self) -> None: ...
    def done(self) -> None: ...


class _RichTask:
    def __init__(self, bar: RichProgress, description: str, total: int) -> None:
        self.bar, self.id = bar, bar.add_task(description, total=total)

    def advance(self) -> None:
        self.bar.advance(self.id)

    def done(self) -> None:
        self.bar.remove_task(self.id)


class _SilentTask:
    def advance(self) -> None:
        pass

    def done(self) -> None:
        pass


class Progress:
    """``with Progress() as p: task = p.task("epoch 1", n); task.advance(); task.done()``.

    Not a TTY → no bars (epoch summaries are logged as lines by the caller)."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), transient=True) if self.enabled else None

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def task(self, description: str, total: int) -> Task:
        return _RichTask(self._bar, description, total) if self._bar is not None else NO_TASK

    def printer(self) -> Callable[[str], None]:
        """A line printer that does not break the bars."""
        return self._bar.console.print if self._bar is not None else (lambda line: print(line, flush=True))


#: a task and a display that show nothing: the defaults of every ``task`` and ``progress`` argument
NO_TASK: Task = _SilentTask()
NO_PROGRESS = Progress(enabled=False)
