"""MGProto: Gaussian-mixture prototypes with a memory bank, EM and mining (docs/protocol/mgproto.md)."""
from methods.mgproto.model import MGProto

__all__ = ["MGProto"]
