"""The token cache stage: ``tokens`` (keys, token sources, the trunk pass that builds an entry)
on top of ``store`` (on-disk entries: locking and atomic publication)."""
