"""One meaning of ``--device`` / ``device=`` everywhere: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported on first use, so that importing this module stays cheap
    import torch

__all__ = ["resolve_device"]

# ASCII digits only: str.isdigit() would also take "²", which int() then refuses with a traceback.
_CUDA = re.compile(r"cuda(?::(?P<index>[0-9]+))?")


def resolve_device(device: str | torch.device) -> torch.device:
    """The :class:`torch.device` that ``device`` names.

    Parameters
    ----------
    device : str or torch.device
        ``"cpu"``; ``"cuda"`` or ``"cuda:N"`` (refused when CUDA is not available, or when there
        is no device ``N``); ``"auto"`` (``cuda`` when available, else ``cpu``).  Surrounding
        white space is ignored.

    Returns
    -------
    torch.device

    Raises
    ------
    ValueError
        An unknown name, or CUDA requested on a machine without it (one line, naming the value).
    """
    import torch

    if isinstance(device, torch.device):
        device = str(device)
    if not isinstance(device, str):
        raise ValueError(f"device must be cpu, cuda, cuda:N or auto, got {device!r}")
    text = device.strip()
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if text == "cpu":
        return torch.device("cpu")
    match = _CUDA.fullmatch(text)
    if match:
        if not torch.cuda.is_available():
            raise ValueError(f"device {text!r} was requested but CUDA is not available on this machine; use cpu or auto")
        index = match.group("index")
        if index is not None and int(index) >= torch.cuda.device_count():
            raise ValueError(f"device {text!r}: only {torch.cuda.device_count()} CUDA device(s) on this machine")
        return torch.device(text)
    raise ValueError(f"unknown device {device!r}; expected cpu, cuda, cuda:N or auto")
