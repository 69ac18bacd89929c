"""Task-decomposition metrics of Krishnamurthy (2023), Ch. 4, and error attribution of Krishnamurthy & Watkins (2021).

All functions accept NumPy arrays or torch tensors and return Python floats / NumPy arrays.
Entropies are in bits (log base 2), as the thesis's tables imply (maxima ``log2 M``).

* :func:`gate_sparsity` -- ``H_s = (1/N) sum_i H(p_i)``, mean per-sample gate entropy (Eq. 4.1).
* :func:`expert_usage` -- ``H_u = H((1/N) sum_i p_i)``, entropy of the mean gate distribution (Eq. 4.2).
* :func:`count_matrix` / :func:`mutual_information` -- ``C[i, j]`` = number of samples of class ``j``
  routed to expert ``i``; ``I(E;Y) = H(E) + H(Y) - H(E,Y)`` of the plug-in joint ``C / N``
  (Eqs. 4.3-4.9).
* :func:`usage_counts` -- samples per expert (the thesis's "sample distribution").
* :func:`error_attribution` -- splits misclassified samples into *gate errors* (some expert would
  have been right) and *expert errors* (no expert is right), the data-driven attribution Krishnamurthy & Watkins (2021)
  motivates (our operational definition; the paper gives none).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "entropy",
    "gate_sparsity",
    "expert_usage",
    "count_matrix",
    "mutual_information",
    "usage_counts",
    "error_attribution",
    "softmax_temperature",
]


def _np(a) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a, dtype=np.float64)


def _probs(p) -> np.ndarray:
    p = _np(p)
    if p.ndim != 2 or p.shape[1] < 1:
        raise ValueError(f"gate probabilities must have shape [N, M], got {p.shape}")
    if p.shape[0] == 0:
        raise ValueError("gate probabilities must contain at least one sample")
    if np.any(p < -1e-9) or not np.allclose(p.sum(1), 1.0, atol=1e-5):
        raise ValueError("gate probabilities must be non-negative rows summing to 1")
    return np.clip(p, 0.0, None)


def entropy(p, axis: int = -1, base: float = 2.0) -> np.ndarray:
    """Shannon entropy along ``axis`` with ``0 log 0 = 0`` (bits by default)."""
    p = _np(p)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return -terms.sum(axis=axis) / np.log(base)


def softmax_temperature(z, temperature: float = 1.0) -> np.ndarray:
    """``exp(z_i/T) / sum_j exp(z_j/T)`` along the last axis (Krishnamurthy 2023, Eq. 5.1).

    Examples
    --------
    >>> softmax_temperature([0.7, 0.2, 0.1]).round(4).tolist()
    [0.464, 0.2814, 0.2546]
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature!r}")
    z = _np(z) / temperature
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def gate_sparsity(p) -> float:
    """``H_s``: mean per-sample gate entropy in bits (Eq. 4.1); 0 for one-hot gates, at most ``log2 M``.

    Parameters
    ----------
    p : array, shape ``[N, M]``
        Gate probabilities (or the combination weights actually used).

    Returns
    -------
    float
    """
    return float(entropy(_probs(p), axis=1).mean())


def expert_usage(p) -> float:
    """``H_u``: entropy (bits) of the mean gate distribution (Eq. 4.2); 0 under module collapse.

    Parameters
    ----------
    p : array, shape ``[N, M]``
        Gate probabilities.

    Returns
    -------
    float
    """
    return float(entropy(_probs(p).mean(0)))


def _labels(a, name: str) -> np.ndarray:
    a = _np(a)
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of integer labels, got shape {a.shape}")
    if a.size and (np.any(a < 0) or np.any(a != np.round(a))):
        raise ValueError(f"{name} must hold non-negative integers")
    return a.astype(np.int64)


def count_matrix(selected, y, n_experts: int | None = None, n_classes: int | None = None) -> np.ndarray:
    """Count matrix ``C [M, K]``: ``C[i, j]`` = samples of class ``j`` routed to expert ``i`` (Sec. 4.3).

    Parameters
    ----------
    selected : array of int, shape ``[N]``
        Expert selected for each sample (e.g. ``argmax`` of the gate).
    y : array of int, shape ``[N]``
        True class labels.
    n_experts, n_classes : int, optional
        Matrix size (default: one more than the largest label seen).

    Returns
    -------
    ndarray of int64, shape ``[M, K]``
    """
    e, c = _labels(selected, "selected"), _labels(y, "y")
    if e.shape != c.shape:
        raise ValueError(f"selected and y must have the same length, got {e.shape} and {c.shape}")
    m = int(n_experts) if n_experts is not None else int(e.max(initial=-1)) + 1
    k = int(n_classes) if n_classes is not None else int(c.max(initial=-1)) + 1
    if e.size and (e.max() >= m or c.max() >= k):
        raise ValueError("a label exceeds n_experts / n_classes")
    C = np.zeros((m, k), dtype=np.int64)
    np.add.at(C, (e, c), 1)
    return C


def mutual_information(counts) -> float:
    """Plug-in ``I(E;Y) = H(E) + H(Y) - H(E,Y)`` in bits from a count matrix (Eqs. 4.3-4.9).

    Parameters
    ----------
    counts : array, shape ``[M, K]``
        Output of :func:`count_matrix` (any non-negative counts).

    Returns
    -------
    float
        Between 0 and ``min(log2 M, log2 K)``.

    Examples
    --------
    >>> mutual_information([[50, 0], [0, 50]])
    1.0
    """
    C = _np(counts)
    if C.ndim != 2 or np.any(C < 0) or C.sum() <= 0:
        raise ValueError("counts must be a non-negative 2-D matrix with a positive total")
    joint = C / C.sum()
    mi = entropy(joint.sum(1)) + entropy(joint.sum(0)) - entropy(joint.ravel())
    return float(max(mi, 0.0))  # clip round-off below 0


def usage_counts(selected, n_experts: int) -> np.ndarray:
    """Number of samples routed to each expert, shape ``[M]`` (the thesis's sample distribution)."""
    e = _labels(selected, "selected")
    if e.size and e.max() >= n_experts:
        raise ValueError("a selected expert index exceeds n_experts")
    return np.bincount(e, minlength=int(n_experts)).astype(np.int64)


def error_attribution(expert_predictions, y, y_pred=None, selected=None) -> dict:
    """Attribute each misclassified sample to the gate or to the experts (Krishnamurthy & Watkins 2021, Sec. 1).

    A misclassified sample is a **gate error** when at least one expert, on its own, predicts the
    true class (a better routing would have fixed it), and an **expert error** when none does (no
    routing can fix it; the experts must improve).

    Parameters
    ----------
    expert_predictions : array of int, shape ``[N, M]``
        Each expert's predicted class for each sample.
    y : array of int, shape ``[N]``
        True classes.
    y_pred : array of int, shape ``[N]``, optional
        The model's prediction; default: the selected expert's prediction.
    selected : array of int, shape ``[N]``, optional
        Selected expert, needed when ``y_pred`` is not given.

    Returns
    -------
    dict
        ``n``, ``errors``, ``gate_errors``, ``expert_errors`` (counts) and the matching fractions
        of all samples ``error_rate``, ``gate_error_rate``, ``expert_error_rate``.
    """
    P = _labels(_np(expert_predictions).ravel(), "expert_predictions").reshape(_np(expert_predictions).shape)
    c = _labels(y, "y")
    if P.ndim != 2 or P.shape[0] != c.shape[0]:
        raise ValueError(f"expert_predictions must have shape [N, M] with N = len(y), got {P.shape}")
    if y_pred is None:
        if selected is None:
            raise ValueError("give y_pred or selected")
        s = _labels(selected, "selected")
        yp = P[np.arange(len(c)), s]
    else:
        yp = _labels(y_pred, "y_pred")
    wrong = yp != c
    some_right = (P == c[:, None]).any(1)
    n = len(c)
    g, e = int((wrong & some_right).sum()), int((wrong & ~some_right).sum())
    return {
        "n": n, "errors": int(wrong.sum()), "gate_errors": g, "expert_errors": e,
        "error_rate": float(wrong.mean()) if n else 0.0,
        "gate_error_rate": g / n if n else 0.0, "expert_error_rate": e / n if n else 0.0,
    }
