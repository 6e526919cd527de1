"""The PyTorch backend: the families' PyTorch implementations, on every device (the fallback)."""

from __future__ import annotations

from typing import ClassVar

from .base import Backend, BackendObject, Target

__all__ = ["PyTorchBackend"]

_SCAN = "mamba_ssm._families.selective_scan.calls"
_CONV = "mamba_ssm._families.causal_conv1d.torch_impl"
_MAMBA3 = "mamba_ssm._families.mamba3.torch_impl"
_SSD = "mamba_ssm._families.ssd.calls"
_SSD_TORCH = "mamba_ssm._families.ssd.torch_combined"
_GATED = "mamba_ssm._families.norms.gated"


class PyTorchBackend(BackendObject):
    """The PyTorch implementations: they run everywhere, and every call."""

    name: ClassVar[str] = Backend.TORCH
    implementations: ClassVar[dict[str, Target]] = {
        "selective_scan": (_SCAN, "torch_selective_scan"),
        "selective_state_update": (
            "mamba_ssm._families.selective_scan.state_update_torch",
            "selective_state_update",
        ),
        "causal_conv1d": (_CONV, "causal_conv1d_ref"),
        "causal_conv1d_update": (_CONV, "causal_conv1d_update"),
        "causal_conv1d_varlen_states": (_CONV, "causal_conv1d_varlen_states"),
        "layer_norm": ("mamba_ssm._families.norms.torch_impl", "layer_norm_torch"),
        "rms_norm": ("mamba_ssm._families.norms.torch_impl", "layer_norm_torch"),
        "mamba3_siso": (_MAMBA3, "mamba3_chunk_scan_torch"),
        "mamba3_mimo": (_MAMBA3, "mamba3_chunk_scan_torch"),
        "mamba3_step": (_MAMBA3, "mamba3_step_torch"),
        "ssd_chunk_scan": (_SSD_TORCH, "torch_chunk_scan_combined"),
        "ssd_chunk_scan_fwd": (_SSD_TORCH, "torch_chunk_scan_fwd"),
        "ssd_chunk_scan_bwd": ("mamba_ssm._families.ssd.autograd", "torch_chunk_scan_bwd"),
        "ssd_chunk_cumsum": ("mamba_ssm._families.ssd.torch_impl", "chunk_cumsum"),
        "ssd_chunk_state": (_SSD, "torch_chunk_state"),
        "ssd_chunk_state_varlen": (_SSD, "torch_chunk_state_varlen"),
        "ssd_state_passing": (_SSD, "torch_state_passing"),
        "gated_rms_norm": (_GATED, "gated_norm_torch"),
        "gated_layer_norm": (_GATED, "gated_norm_torch"),
    }
