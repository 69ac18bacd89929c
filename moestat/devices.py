"""One meaning of ``--device`` / ``device=`` everywhere: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``."""

from __future__ import annotations

__all__ = ["resolve_device"]


def resolve_device(device):
    """The :class:`torch.device` that ``device`` names.

    Parameters
    ----------
    device : str or torch.device
        ``"cpu"``; ``"cuda"`` or ``"cuda:N"`` (refused when CUDA is not available); ``"auto"``
        (``cuda`` when available, else ``cpu``).

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
    if text == "cuda" or (text.startswith("cuda:") and text[5:].isdigit()):
        if not torch.cuda.is_available():
            raise ValueError(f"device {text!r} was requested but CUDA is not available on this machine; use cpu or auto")
        if ":" in text and int(text[5:]) >= torch.cuda.device_count():
            raise ValueError(f"device {text!r}: only {torch.cuda.device_count()} CUDA device(s) on this machine")
        return torch.device(text)
    raise ValueError(f"unknown device {device!r}; expected cpu, cuda, cuda:N or auto")
