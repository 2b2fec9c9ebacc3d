"""The one exception type for mistakes a user can fix (bad config, missing file, unknown name),
and the one did-you-mean every such message about a misspelt name gives."""
from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path


class ProtobenchError(Exception):
    """A user-facing error: its message names the thing that is wrong and how to fix it.

    The CLI prints the message alone (no traceback) and exits with status 2.
    """


class FieldError(ProtobenchError):
    """A bad value of one field of a run's settings: ``where`` names the place it was written (a
    grid's ``[defaults]`` or ``[[sweep]]`` block, a command-line option), ``field`` the RunSpec
    field, ``detail`` what is wrong and the fix. The message is ``"{where}: {detail}"``."""

    def __init__(self, where: str, field: str, detail: str) -> None:
        super().__init__(f"{where}: {detail}")
        self.where, self.field, self.detail = where, field, detail

    def written_in(self, where: str) -> FieldError:
        """The same error blamed on another place (the block the value was really written in)."""
        return FieldError(where, self.field, self.detail)


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """`` (did you mean 'closest'?)`` for the valid name closest to a misspelt one (difflib's
    ratio ≥ 0.6, the standard library's cut-off), else ``""``: appended to every unknown-name
    message (grid keys, subcommands, --metrics, --y, --where, --only)."""
    close = difflib.get_close_matches(name, [str(v) for v in valid], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def nearest_sibling(path: str | Path) -> str:
    """`` (did you mean 'runs/demo'?)`` for a path that does not exist when its folder holds an
    entry whose name is close (:func:`did_you_mean`'s cut-off), else ``""``: appended to every
    "does not exist" message about a path the user typed (runs folder, grid file, source, data root)."""
    given = Path(path)
    folder = given.parent
    try:
        names = [entry.name for entry in folder.iterdir() if given.name.startswith(".") or not entry.name.startswith(".")]
    except OSError:  # the folder is absent or unreadable too: nothing to suggest
        return ""
    close = difflib.get_close_matches(given.name, names, n=1)
    return f" (did you mean {str(folder / close[0])!r}?)" if close else ""
