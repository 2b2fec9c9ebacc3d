"""Deformable ProtoPNet (``deformable_protopnet``): importing this package registers the adapter."""
from methods.deformable.model import DeformableProtoPNet

__all__ = ["DeformableProtoPNet"]
