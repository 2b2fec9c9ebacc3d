"""vMFProto (the paper): importing this package registers the ``"vmfproto"`` adapter."""
from methods.vmfproto.gating import GATING_VARIANTS, foreground_mask, foreground_scores
from methods.vmfproto.model import VMFProto
from methods.vmfproto.overlap import log_vmf_overlap, logdet_loss, vmf_kernel
from methods.vmfproto.vmf import log_vmf_normaliser, vmf_mean_resultant

__all__ = [
    "GATING_VARIANTS", "VMFProto", "foreground_mask", "foreground_scores", "log_vmf_normaliser",
    "log_vmf_overlap", "logdet_loss", "vmf_kernel", "vmf_mean_resultant",
]
