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

from typing import TYPE_CHECKING, Union

import numpy as np

if TYPE_CHECKING:  # torch is imported on first use, so that importing this module stays cheap
    import torch

__all__ = ["MAX_SEED", "SeedLike", "numpy_generator", "torch_generator", "int_seed", "spawn_int_seeds"]

SeedLike = Union[int, np.integer, np.random.SeedSequence, np.random.Generator, None]


def _check_type(random_state: object, what: str) -> None:
    """Refuse what is not a seed (``bool`` included: ``True`` as a seed is almost always a slip)."""
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
        A non-negative int or a ``SeedSequence`` seeds a new generator (the same seed, the same
        stream); ``None`` draws fresh OS entropy and is accepted only with ``allow_none=True``
        (the scikit-learn convention of estimators); experiments always pass a seed.
    allow_none : bool
        Accept ``None``.

    Returns
    -------
    numpy.random.Generator
        ``random_state`` itself when it is a Generator (draws advance the caller's stream).

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
    """A 63-bit integer seed drawn from ``ss``.

    The first 64-bit word of ``ss``'s state, shifted right by one bit so that it is a valid
    non-negative ``int64`` (what ``torch.manual_seed`` and NumPy's legacy seeding accept).

    Parameters
    ----------
    ss : numpy.random.SeedSequence

    Returns
    -------
    int
        In ``[0, 2**63)``; the same ``ss`` always gives the same integer.
    """
    if not isinstance(ss, np.random.SeedSequence):
        raise TypeError(f"int_seed needs a numpy SeedSequence, got {type(ss).__name__}")
    return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))


def spawn_int_seeds(random_state: int, count: int) -> list[int]:
    """``count`` independent 63-bit seeds: :func:`int_seed` of each child of ``SeedSequence(random_state)``.

    Parameters
    ----------
    random_state : int
        Non-negative root seed.
    count : int
        Number of seeds (``>= 0``).

    Returns
    -------
    list of int, length ``count``
        Child ``i`` does not depend on ``count``: the first seeds of a longer list are the seeds
        of a shorter one.
    """
    _check_type(random_state, "a non-negative int")
    if isinstance(random_state, (np.random.SeedSequence, np.random.Generator)):
        raise TypeError(f"random_state must be a non-negative int, got {type(random_state).__name__}")
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ValueError(f"count must be a non-negative integer, got {count!r}")
    return [int_seed(s) for s in np.random.SeedSequence(int(random_state)).spawn(int(count))]


#: Largest seed a door accepts (``--seed``, ``--split-seed``, ``--truth-seed``, and the same keys in a
#: config file): the range of a signed 64-bit integer, which the stores read back (pandas' int64
#: column of ``results.csv``), and below which ``seed + run`` stays under the torch limit below for
#: any realistic number of runs.  Every door uses this one bound.
MAX_SEED = 2**63 - 1

#: ``torch.Generator.manual_seed`` takes a seed below 2**64 (numpy takes larger ones).
_TORCH_SEED_LIMIT = 2**64


def torch_generator(
    random_state: int | np.integer | np.random.SeedSequence | torch.Generator,
    device: str | torch.device = "cpu",
) -> torch.Generator:
    """A :class:`torch.Generator` on ``device`` from an int or a ``SeedSequence``.

    Parameters
    ----------
    random_state : int, SeedSequence or torch.Generator
        A ``torch.Generator`` is returned as it is (``device`` is then ignored); an int must lie
        in ``[0, 2**64)``; a ``SeedSequence`` is reduced with :func:`int_seed`, so the same
        sequence always gives the same torch stream.
    device : str or torch.device
        Device of the new generator.

    Raises
    ------
    TypeError
        Not a seed (``bool`` and numpy ``Generator`` included).
    ValueError
        ``None``, a negative integer or one of ``2**64`` or more.
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
    if seed >= _TORCH_SEED_LIMIT:
        raise ValueError(f"random_state must be below 2**64 for a torch generator, got {seed}")
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g
