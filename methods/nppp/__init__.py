"""NPPP: non-parametric part prototypes with OT clustering (docs/protocol/nppp.md)."""
from methods.nppp.model import NPPP

__all__ = ["NPPP"]
