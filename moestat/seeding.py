"""Seeds to generators, once for the whole package.

Every random draw in moestat comes from a seed passed in (never from global state).  A seed may be
an ``int``, a :class:`numpy.random.SeedSequence` (how sweeps hand one stream to each (scenario, n,
replicate, start)), or an already built generator, which is used as it is.

* :func:`numpy_generator` -- a :class:`numpy.random.Generator` (statistical side, data generators).
* :func:`torch_generator` -- a :class:`torch.Generator` (initialisation and shuffling of networks).
* :func:`int_seed` / :func:`spawn_int_seeds` -- 63-bit integers from a ``SeedSequence``, for
  libraries that take an ``int`` (torch's ``manual_seed``, scikit-learn's ``random_state``).
"""

from __future__ import annotations

from typing import Union

import numpy as np

__all__ = ["SeedLike", "numpy_generator", "torch_generator", "int_seed", "spawn_int_seeds"]

SeedLike = Union[int, np.integer, np.random.SeedSequence, np.random.Generator, None]


def _check_type(random_state, what: str) -> None:
    if isinstance(random_state, bool) or not isinstance(
        random_state, (int, np.integer, np.random.SeedSequence, np.random.Generator)
    ):
        raise TypeError(f"random_state must be {what}, got {type(random_state).__name__}")
    if isinstance(random_state, (int, np.integer)) and random_state < 0:
        raise ValueError(f"random_state must be a non-negative integer, got {random_state}")


def numpy_generator(random_state: SeedLike, *, allow_none: bool = False) -> np.random.Generator:
    """A :class:`numpy.random.Generator` from a seed (a Generator is returned as it is).

    Parameters
    ----------
    random_state : int, SeedSequence, Generator or None
        ``None`` draws fresh OS entropy and is accepted only with ``allow_none=True`` (the
        scikit-learn convention of estimators); experiments always pass a seed.

    Raises
    ------
    TypeError
        Not a seed (a ``bool`` is refused: it is almost always a mistake).
    ValueError
        ``None`` without ``allow_none``, or a negative integer.
    """
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None:
        if not allow_none:
            raise ValueError("random_state must be given (an int, SeedSequence or Generator): no global randomness")
        return np.random.default_rng()
    _check_type(random_state, "None, an int, a SeedSequence or a Generator")
    if isinstance(random_state, np.random.SeedSequence):
        return np.random.default_rng(random_state)
    return np.random.default_rng(int(random_state))


def int_seed(ss: np.random.SeedSequence) -> int:
    """A 63-bit integer seed drawn from ``ss`` (the first word of its state, shifted by one bit so
    that it is a valid non-negative ``int64``)."""
    return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))


def spawn_int_seeds(random_state: int, count: int) -> list[int]:
    """``count`` independent 63-bit seeds: one per child of ``SeedSequence(random_state)``."""
    return [int_seed(s) for s in np.random.SeedSequence(random_state).spawn(count)]


def torch_generator(random_state, device="cpu"):
    """A :class:`torch.Generator` on ``device`` from an int or a ``SeedSequence`` (a
    ``torch.Generator`` is returned as it is; ``None`` is refused).

    A ``SeedSequence`` is reduced with :func:`int_seed`, so the same sequence always gives the
    same torch stream.
    """
    import torch

    if isinstance(random_state, torch.Generator):
        return random_state
    if random_state is None:
        raise ValueError("random_state must be given (int or SeedSequence): no global randomness")
    _check_type(random_state, "an int, a SeedSequence or a torch.Generator")
    if isinstance(random_state, np.random.Generator):
        raise TypeError("random_state must be an int, a SeedSequence or a torch.Generator, got a numpy Generator")
    seed = int_seed(random_state) if isinstance(random_state, np.random.SeedSequence) else int(random_state)
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g
