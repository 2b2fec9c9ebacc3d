"""MGProto: Gaussian-mixture prototypes with a memory bank, EM and mining (methods.md, "MGProto")."""
from methods.mgproto.model import MGProto

__all__ = ["MGProto"]
