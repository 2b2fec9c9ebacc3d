"""The one exception type for mistakes a user can fix (bad config, missing file, unknown name)."""


class ProtobenchError(Exception):
    """A user-facing error: its message names the thing that is wrong and how to fix it.

    The CLI prints the message alone (no traceback) and exits with status 2.
    """
