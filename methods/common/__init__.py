"""Pieces shared by several method adapters (entropic optimal transport)."""
from methods.common.ot import hard_assignment, sinkhorn_log

__all__ = ["hard_assignment", "sinkhorn_log"]
