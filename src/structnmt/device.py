"""Which device a command computes on (beneath training and decoding alike)."""

from __future__ import annotations

import torch

from .errors import UserError


def get_device(name: str) -> torch.device:
    """``auto`` (CUDA when visible, else CPU), ``cpu``, ``cuda`` or ``cuda:N``; a user error
    for an unknown name or a GPU that is not there."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"device {name!r} is unknown; use auto, cpu, cuda or cuda:N.") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r}: no CUDA GPU is visible to this process; use cpu or auto.")
    return device
