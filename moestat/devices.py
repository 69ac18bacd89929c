"""One meaning of ``--device`` / ``device=`` everywhere: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported on first use, so that importing this module stays cheap
    import torch

__all__ = ["resolve_device", "compile_cache_dirs", "COMPILE_CACHE_ENV", "prepare_compile"]

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


#: Environment variables naming torch.compile's on-disk caches (Inductor's generated C++/Triton
#: code and FX graphs; Triton's kernels on a GPU), pointed under the user cache by
#: :func:`compile_cache_dirs` unless the user set them.
COMPILE_CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def compile_cache_dirs() -> dict[str, str]:
    """Point torch.compile's caches under the user cache folder, unless already set; return them.

    Inductor's default is ``$TMPDIR/torchinductor_<user>`` (about 150 MB after one fused EM
    compilation), outside both ``--out`` and the user's cache.  Each variable in
    :data:`COMPILE_CACHE_ENV` that the environment does not set becomes
    ``$XDG_CACHE_HOME/moestat/<torchinductor|triton>`` (``~/.cache/moestat/...`` when
    ``XDG_CACHE_HOME`` is unset); a value the user set is kept.  Called when :mod:`moestat` is
    imported (before torch: the first request for Inductor's cache folder writes its default into
    the environment) and again before every ``torch.compile`` of moestat (the fused and the generic
    EM).  The cache only saves compile time: a cold cache gives the same results.

    Returns
    -------
    dict of str to str
        The value of each variable of :data:`COMPILE_CACHE_ENV` after the call.
    """
    import os
    from pathlib import Path

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "moestat"
    for var, sub in zip(COMPILE_CACHE_ENV, ("torchinductor", "triton")):
        if not os.environ.get(var):
            os.environ[var] = str(base / sub)
    return {var: os.environ[var] for var in COMPILE_CACHE_ENV}


def prepare_compile() -> None:
    """Call before ``torch.compile``: :func:`compile_cache_dirs`, and Inductor's precompiled C++
    headers moved into ``TORCHINDUCTOR_CACHE_DIR`` too.

    torch 2.13 keeps those headers (147 MB after one fused EM compilation, the bulk of
    about 150 MB written per compiling process) in ``default_cache_dir()/precompiled_headers``, i.e. under ``$TMPDIR``
    whatever ``TORCHINDUCTOR_CACHE_DIR`` says, through the module globals ``_HEADER_DIR`` and
    ``_HEADER_LOCK_DIR`` of ``torch._inductor.codecache`` (read when a header is compiled).  They
    are pointed at ``$TORCHINDUCTOR_CACHE_DIR/precompiled_headers`` while they still hold torch's
    default; a torch without those names is left alone (the test on ``$TMPDIR`` then fails and
    says so).
    """
    import os

    dirs = compile_cache_dirs()
    try:
        from torch._inductor import codecache
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # no Inductor: torch.compile falls back, nothing is cached
        return
    default = os.path.join(default_cache_dir(), "precompiled_headers")
    if getattr(codecache, "_HEADER_DIR", None) == default:
        codecache._HEADER_DIR = os.path.join(dirs["TORCHINDUCTOR_CACHE_DIR"], "precompiled_headers")
        codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")
