"""What a worker runs: moestat's version, commit and source digest, torch, numpy, Python, and its CPU's kernels.

The rows of a sweep are bit-identical across workers only when every worker runs the same code
(a worker whose moestat has another default tolerance changes its rows silently).  The source
digest -- SHA-256 of every ``.py`` file of the installed package -- catches edits that neither
the version nor the commit shows (an uncommitted change, a stale copy on a node).
"""

from __future__ import annotations

import hashlib
import os
import platform
from functools import lru_cache
from pathlib import Path

from moestat import __version__
from moestat.rates.store import _git_commit

__all__ = ["environment", "compare_environments", "COMPARED"]

#: The entries that must agree between the client and every worker.
COMPARED = ("moestat", "source_sha256", "torch", "numpy")


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux; ``platform.processor()`` elsewhere or where unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


@lru_cache(maxsize=1)
def _source_digest() -> str:
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        h.update(str(p.relative_to(root)).encode())
        h.update(b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=1)
def environment() -> dict:
    """This process's environment (cached: it does not change while the process runs)."""
    import numpy
    import torch

    # the CPU's kernels are recorded, not compared: a fit on a flat ridge (an over-specified least-squares
    # fit) stops at another round-off on another CPU, because MKL and ATen pick their kernels by the CPU
    # (docs: rates, "Seeds and determinism"); they say which kernels a process's rows came from
    return {"moestat": __version__, "git_commit": _git_commit(), "source_sha256": _source_digest(),
            "torch": torch.__version__, "numpy": numpy.__version__, "python": platform.python_version(),
            "host": platform.node(), "cpu_model": _cpu_model(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "mkl_cbwr": os.environ.get("MKL_CBWR")}


def compare_environments(client: dict, workers: dict[str, dict]) -> list[str]:
    """One line per worker whose :data:`COMPARED` entries differ from the client's (``[]``: all agree)."""
    out = []
    for address, env in sorted(workers.items()):
        diff = [f"{k} {env.get(k)} (client {client.get(k)})" for k in COMPARED if env.get(k) != client.get(k)]
        if diff:
            out.append(f"{address} runs " + ", ".join(diff))
    return out
