"""NPPP: non-parametric part prototypes with OT clustering (methods.md, "NPPP")."""
from methods.nppp.model import NPPP

__all__ = ["NPPP"]
