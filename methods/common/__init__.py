"""Pieces shared by several method adapters (entropic optimal transport, the lineage's checks and
losses, precision islands); import each from its module (``methods.common.ot``, …): this package
itself loads nothing, so ``methods.common.values`` reads without torch."""
