"""Synthetic toy problems of Krishnamurthy (2023), PhD thesis, Sec. 3.1, after Kirsch et al. (2018).

Two generators, both seedable and returning NumPy arrays (``float64`` inputs):

* :func:`make_toy_classification` -- the 2-D, 6-class Gaussian mixture (Sec. 3.1.1) with
  2,400 training and 600 test samples.  The thesis shows the data only as a figure and gives no
  means or covariances; :data:`CLASSIFICATION_MEANS` / :data:`CLASSIFICATION_STD` are **our**
  choice (see below).
* :func:`make_toy_regression` -- the rotation/scale regression toy (Sec. 3.1.2, Eq. 3.1): a latent
  ``s in {1, 2}`` with probability 1/2 each, ``x | s ~ N(mu_s, Sigma_s)`` and ``y = R x`` on
  component 1, ``y = S x`` on component 2, with the thesis's ``R`` and ``S``
  (:data:`ROTATION`, :data:`SCALING`).  ``mu_s`` and ``Sigma_s`` are again not given in the thesis;
  ours are :data:`REGRESSION_MEANS` and identity covariances.

Chosen constants (documented in ``docs/guide/decomposition.rst``):

* classification: six isotropic components with standard deviation 1 centred on a 3 x 2 grid
  with spacing 4.5 (x in {-4.5, 0, 4.5}, y in {-2.25, 2.25}), equal class weights (400 train /
  100 test per class, then shuffled).  Neighbouring centres are 4.5 standard deviations apart,
  which gives a Bayes accuracy of about 97.1 % (Monte Carlo, see the docs) -- close to the best
  accuracies of the thesis's Tables 3.1/3.2 (96.8-97.7 %).
* regression: ``mu_1 = (-3, 0)``, ``mu_2 = (3, 0)``, ``Sigma_1 = Sigma_2 = I``: the two regimes are
  linearly separable up to a 3-sigma tail, so a linear softmax gate can learn the partition.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moestat.seeding import SeedLike, numpy_generator

__all__ = [
    "CLASSIFICATION_MEANS",
    "CLASSIFICATION_STD",
    "REGRESSION_MEANS",
    "ROTATION",
    "SCALING",
    "ToyData",
    "make_toy_classification",
    "make_toy_regression",
]

#: Class centres of the 6-class toy (our choice; the thesis gives only a figure).
CLASSIFICATION_MEANS = np.array(
    [[-4.5, -2.25], [0.0, -2.25], [4.5, -2.25], [-4.5, 2.25], [0.0, 2.25], [4.5, 2.25]]
)
#: Common isotropic standard deviation of the 6 components (our choice).
CLASSIFICATION_STD = 1.0
#: The thesis's rotation matrix R (Sec. 3.1.2): cos/sin of about 24.76 degrees.
ROTATION = np.array([[0.9081, 0.4188], [-0.4188, 0.9081]])
#: The thesis's scaling matrix S (Sec. 3.1.2).
SCALING = np.array([[0.0603, 0.0], [0.0, 0.9340]])
#: Component means of the regression toy's input law (our choice).
REGRESSION_MEANS = np.array([[-3.0, 0.0], [3.0, 0.0]])


@dataclass(frozen=True)
class ToyData:
    """A train/test split of a toy problem.

    Attributes
    ----------
    x_train, x_test : ndarray, shape ``[n, 2]``
        Inputs.
    y_train, y_test : ndarray
        Class labels ``[n]`` (``int64``) for classification, targets ``[n, 2]`` for regression.
    s_train, s_test : ndarray, shape ``[n]``
        Latent mixture component of each sample (the class itself for classification).
    task : {"classification", "regression"}
    n_outputs : int
        Number of classes (classification) or output dimension (regression).
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    s_train: np.ndarray
    s_test: np.ndarray
    task: str
    n_outputs: int


def _check_n(name: str, n: int, minimum: int = 1) -> int:
    if isinstance(n, bool) or int(n) != n or n < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {n!r}")
    return int(n)


def make_toy_classification(
    n_train: int = 2400,
    n_test: int = 600,
    *,
    random_state: SeedLike = 0,
    means: np.ndarray | None = None,
    std: float = CLASSIFICATION_STD,
) -> ToyData:
    """The 2-D, 6-class Gaussian-mixture toy of Krishnamurthy (2023), Sec. 3.1.1.

    Each class is one isotropic Gaussian component; classes are balanced (``n // n_classes``
    samples each, the remainder spread over the first classes) and the samples shuffled.

    Parameters
    ----------
    n_train, n_test : int
        Sizes of the two splits (thesis: 2,400 and 600).
    random_state : int, SeedSequence or Generator
        Source of every random draw.
    means : ndarray, shape ``[n_classes, 2]``, optional
        Class centres; default :data:`CLASSIFICATION_MEANS`.
    std : float
        Component standard deviation; default :data:`CLASSIFICATION_STD`.

    Returns
    -------
    ToyData
        ``task="classification"``, ``n_outputs`` = number of classes.

    Examples
    --------
    >>> d = make_toy_classification(random_state=0)
    >>> d.x_train.shape, d.x_test.shape, int(d.y_train.max()) + 1
    ((2400, 2), (600, 2), 6)
    """
    n_train = _check_n("n_train", n_train)
    n_test = _check_n("n_test", n_test)
    means = CLASSIFICATION_MEANS if means is None else np.asarray(means, dtype=float)
    if means.ndim != 2 or means.shape[1] != 2 or means.shape[0] < 2:
        raise ValueError(f"means must have shape [n_classes >= 2, 2], got {means.shape}")
    if not (np.isfinite(std) and std > 0):
        raise ValueError(f"std must be a positive number, got {std!r}")
    rng = numpy_generator(random_state)
    n_cls = means.shape[0]

    def draw(n: int):
        counts = np.full(n_cls, n // n_cls)
        counts[: n % n_cls] += 1
        y = np.repeat(np.arange(n_cls), counts)
        x = means[y] + std * rng.standard_normal((n, 2))
        perm = rng.permutation(n)
        return x[perm], y[perm].astype(np.int64)

    xtr, ytr = draw(n_train)
    xte, yte = draw(n_test)
    return ToyData(xtr, ytr, xte, yte, ytr.copy(), yte.copy(), "classification", n_cls)


def make_toy_regression(
    n_train: int = 2000,
    n_test: int = 500,
    *,
    random_state: SeedLike = 0,
    means: np.ndarray | None = None,
    noise_std: float = 0.0,
) -> ToyData:
    """The rotation/scale regression toy of Krishnamurthy (2023), Sec. 3.1.2 (after Kirsch et al. 2018), Eq. (3.1).

    ``s ~ Uniform{0, 1}``, ``x | s ~ N(means[s], I)``, ``y = R x`` if ``s = 0`` and ``y = S x`` if
    ``s = 1``, plus optional Gaussian noise (the thesis's targets are noise-free).

    Parameters
    ----------
    n_train, n_test : int
        Split sizes (not given in the thesis).
    random_state : int, SeedSequence or Generator
        Source of every random draw.
    means : ndarray, shape ``[2, 2]``, optional
        Input-law component means; default :data:`REGRESSION_MEANS`.
    noise_std : float
        Standard deviation of additive output noise (default 0).

    Returns
    -------
    ToyData
        ``task="regression"``, ``n_outputs=2``; ``y`` has shape ``[n, 2]`` and ``s`` holds the
        latent regime (0: rotation ``R``, 1: scaling ``S``).

    Examples
    --------
    >>> d = make_toy_regression(random_state=1)
    >>> import numpy as np
    >>> bool(np.allclose(d.y_train[d.s_train == 0], d.x_train[d.s_train == 0] @ ROTATION.T))
    True
    """
    n_train = _check_n("n_train", n_train)
    n_test = _check_n("n_test", n_test)
    means = REGRESSION_MEANS if means is None else np.asarray(means, dtype=float)
    if means.shape != (2, 2):
        raise ValueError(f"means must have shape [2, 2], got {means.shape}")
    if not (np.isfinite(noise_std) and noise_std >= 0):
        raise ValueError(f"noise_std must be a non-negative number, got {noise_std!r}")
    rng = numpy_generator(random_state)
    maps = np.stack([ROTATION, SCALING])

    def draw(n: int):
        s = rng.integers(0, 2, size=n)
        x = means[s] + rng.standard_normal((n, 2))
        y = np.einsum("nij,nj->ni", maps[s], x)
        if noise_std > 0:
            y = y + noise_std * rng.standard_normal((n, 2))
        return x, y, s.astype(np.int64)

    xtr, ytr, s_tr = draw(n_train)
    xte, yte, s_te = draw(n_test)
    return ToyData(xtr, ytr, xte, yte, s_tr, s_te, "regression", 2)
