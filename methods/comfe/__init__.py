"""ComFe: an interpretable head on frozen ViT patch tokens (Mannix et al., arXiv 2403.04125)."""
from methods.comfe.model import ComFe

__all__ = ["ComFe"]
