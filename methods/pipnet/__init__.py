"""PIP-Net (Nauta et al., CVPR 2023) on frozen tokens: functional pieces and the adapter."""
from methods.pipnet.model import PIPNet

__all__ = ["PIPNet"]
