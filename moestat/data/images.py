"""Real-data loaders with no run-time downloads: Fashion-MNIST and MNIST from IDX(.gz) files,
and scikit-learn's bundled 8x8 digits.

Where the files are looked for (first hit wins):

1. the ``path`` argument,
2. the environment variable ``MOESTAT_DATA`` (either the folder holding the four IDX files or a
   parent folder with a ``fashion-mnist`` / ``mnist`` sub-folder),
3. the Debian location ``/usr/share/datasets/<name>`` (``apt-get install dataset-fashion-mnist``
   puts Fashion-MNIST there; Debian ships no MNIST package, so MNIST needs a path).

The one split (every command that reads these data sets uses :func:`load_dataset`: ``moestat
realdata`` and ``moestat softmoe subsets``):

* Fashion-MNIST / MNIST: the official split of the IDX files, 60,000 train / 10,000 test, kept as
  it is; ``val_fraction`` of the training images (default 1/12: 55,000 / 5,000) is held out as a
  validation set, stratified by class (scikit-learn's ``train_test_split``) with ``random_state``.
* digits (scikit-learn's 1,797 8x8 images, no official split): a stratified 20% test split is drawn
  first (360 test / 1,437 rest), then the validation set out of the rest, both with
  ``random_state`` (default 0).  With the default ``val_fraction`` 1/12: 1,317 / 120 / 360; with
  ``val_fraction=0``: 1,437 / 0 / 360.  The test split does not depend on ``val_fraction``.

The same ``random_state`` always gives the same split; the kept indices are in file order.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "check_idx_header",
    "DATASETS",
    "FASHION_MNIST_CLASSES",
    "RealDataset",
    "read_idx",
    "write_idx",
    "find_idx_files",
    "load_dataset",
]

DATASETS = ("fashion-mnist", "mnist", "digits")

FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

_DEFAULT_ROOT = Path("/usr/share/datasets")

# IDX type codes (LeCun's format description): 0x08 ubyte, 0x09 byte, 0x0B short, 0x0C int,
# 0x0D float, 0x0E double; multi-byte values are big-endian.
_IDX_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_IDX_NAMES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def _open(path: Path):
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (plain or gzip-compressed, detected from the content).

    Parameters
    ----------
    path : str or path-like
        The file, e.g. ``train-images-idx3-ubyte.gz``.

    Returns
    -------
    ndarray
        The array with the shape and dtype stored in the header (native byte order).

    Raises
    ------
    ValueError
        If the header is malformed or the payload is truncated.

    Examples
    --------
    >>> import tempfile, os, numpy as np
    >>> d = tempfile.mkdtemp()
    >>> p = write_idx(os.path.join(d, "a-idx2-ubyte.gz"), np.arange(6, dtype=np.uint8).reshape(2, 3))
    >>> read_idx(p).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    path = Path(path)
    with _open(path) as fh:
        data = fh.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    code, ndim = data[2], data[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"{path}: unknown IDX type code 0x{code:02x}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{path}: truncated IDX header")
    shape = tuple(int(v) for v in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    count = int(np.prod(shape)) if shape else 1
    if len(data) - header < count * dtype.itemsize:
        raise ValueError(f"{path}: truncated IDX payload (expected {count} values of shape {shape})")
    arr = np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(shape)
    return arr.astype(dtype.newbyteorder("="), copy=True)


def check_idx_header(path: str | os.PathLike) -> tuple[int, ...]:
    """The shape in an IDX file's header, checked as :func:`read_idx` checks it, without reading the
    payload (a door validates its input files before ``--out`` exists; the images are read later).

    Raises
    ------
    ValueError
        The messages of :func:`read_idx`: bad magic number, unknown type code, truncated header, or
        (for an uncompressed file) a payload shorter than the header's shape.
    """
    path = Path(path)
    with _open(path) as fh:
        head = fh.read(4)
        if len(head) < 4 or head[0] != 0 or head[1] != 0:
            raise ValueError(f"{path} is not an IDX file (bad magic number)")
        code, ndim = head[2], head[3]
        if code not in _IDX_DTYPES:
            raise ValueError(f"{path}: unknown IDX type code 0x{code:02x}")
        dims = fh.read(4 * ndim)
    if len(dims) < 4 * ndim:
        raise ValueError(f"{path}: truncated IDX header")
    shape = tuple(int(v) for v in np.frombuffer(dims, dtype=">u4", count=ndim))
    count = int(np.prod(shape)) if shape else 1
    with open(path, "rb") as fh:
        compressed = fh.read(2) == b"\x1f\x8b"
    if not compressed and path.stat().st_size - 4 - 4 * ndim < count * _IDX_DTYPES[code].itemsize:
        raise ValueError(f"{path}: truncated IDX payload (expected {count} values of shape {shape})")
    return shape


def write_idx(path: str | os.PathLike, array: np.ndarray) -> Path:
    """Write ``array`` as an IDX file (gzip-compressed when ``path`` ends in ``.gz``).

    Parameters
    ----------
    path : str or path-like
        Destination.
    array : ndarray
        Any of the IDX dtypes (uint8, int8, int16, int32, float32, float64).

    Returns
    -------
    Path
        ``path``.
    """
    array = np.asarray(array)
    codes = {np.dtype(v).newbyteorder("="): k for k, v in _IDX_DTYPES.items()}
    native = array.dtype.newbyteorder("=")
    if native not in codes:
        raise ValueError(f"array dtype {array.dtype} has no IDX type code")
    code = codes[native]
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    payload = array.astype(_IDX_DTYPES[code], copy=False).tobytes()
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as fh:
        fh.write(header + payload)
    return path


def _candidate_dirs(name: str, path: str | os.PathLike | None) -> list[Path]:
    if path is not None:
        return [Path(path)]
    dirs = []
    env = os.environ.get("MOESTAT_DATA")
    if env:
        dirs += [Path(env), Path(env) / name]
    dirs.append(_DEFAULT_ROOT / name)
    return dirs


def _find_in(folder: Path) -> dict[str, Path] | None:
    found = {}
    for key, stem in _IDX_NAMES.items():
        for cand in (folder / (stem + ".gz"), folder / stem, folder / stem.replace("-idx", ".idx")):
            if cand.is_file():
                found[key] = cand
                break
        else:
            return None
    return found


def _install_hint(name: str) -> str:
    if name == "fashion-mnist":
        return "install them with `apt-get install dataset-fashion-mnist`, or pass --data-path DIR (path= in Python) or set MOESTAT_DATA"
    return ("Debian ships no MNIST package: put the four IDX files in a folder and pass --data-path DIR (path= in Python) "
            "or set MOESTAT_DATA")


def find_idx_files(name: str, path: str | os.PathLike | None = None) -> dict[str, Path]:
    """Locate the four IDX files of ``name`` (``fashion-mnist`` or ``mnist``).

    Parameters
    ----------
    name : {"fashion-mnist", "mnist"}
        Data set.
    path : str or path-like, optional
        Folder with ``train-images-idx3-ubyte[.gz]`` and the three sibling files.

    Returns
    -------
    dict
        Keys ``train_images``, ``train_labels``, ``test_images``, ``test_labels``.

    Raises
    ------
    FileNotFoundError
        One line naming the folders searched and the package to install.
    """
    dirs = _candidate_dirs(name, path)
    for d in dirs:
        found = _find_in(d)
        if found is not None:
            return found
    where = ", ".join(str(d) for d in dirs)
    raise FileNotFoundError(f"{name} IDX files not found in {where}: {_install_hint(name)}")


@dataclass
class RealDataset:
    """A classification data set split three ways; all features float32 in [0, 1].

    Attributes
    ----------
    name : str
        Data set name.
    X_train, X_val, X_test : ndarray, shape ``[n, d]`` (float32)
        Flattened inputs scaled to [0, 1] (pixels / 255, digits / 16).
    y_train, y_val, y_test : ndarray, shape ``[n]`` (int64)
        Labels ``0 .. n_classes - 1``.
    class_names : tuple of str
        Human-readable class names.
    image_shape : tuple of int
        Shape of one image (``(28, 28)`` or ``(8, 8)``).
    source : str
        Where the data came from (files or ``sklearn.datasets.load_digits``).
    """

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    class_names: tuple[str, ...]
    image_shape: tuple[int, ...]
    source: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def n_features(self) -> int:
        """Input dimension ``d``."""
        return int(self.X_train.shape[1])

    @property
    def n_classes(self) -> int:
        """Number of classes."""
        return len(self.class_names)

    def tensors(self, device=None) -> dict:
        """The six arrays as torch tensors (float32 inputs, int64 labels) on ``device``."""
        import torch

        out = {}
        for key in ("X_train", "y_train", "X_val", "y_val", "X_test", "y_test"):
            out[key] = torch.as_tensor(getattr(self, key), device=device)
        return out

    def describe(self) -> str:
        """One line: name and split sizes."""
        return (
            f"{self.name}: train {len(self.y_train)}, val {len(self.y_val)}, test {len(self.y_test)}, "
            f"d={self.n_features}, classes={self.n_classes}"
        )


def _stratified_split(y: np.ndarray, fraction: float, random_state: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (keep, held_out) with ``fraction`` of every class held out, deterministically."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    if fraction == 0:
        return idx, idx[:0]
    n_cls = len(np.unique(y))
    n_held = int(np.ceil(fraction * len(y)))
    # stratify when every class can appear on both sides; tiny files fall back to a plain split
    strat = y if (n_held >= n_cls and len(y) - n_held >= n_cls and np.bincount(y).min(initial=2) >= 2) else None
    keep, held = train_test_split(idx, test_size=fraction, random_state=random_state, stratify=strat)
    return np.sort(keep), np.sort(held)


def _check_fraction(val_fraction: float) -> float:
    try:
        v = float(val_fraction)
    except (TypeError, ValueError):
        raise ValueError(f"val_fraction must be a number in [0, 0.5], got {val_fraction!r}") from None
    if not (0.0 <= v <= 0.5):
        raise ValueError(f"val_fraction must be in [0, 0.5], got {val_fraction!r}")
    return v


def load_dataset(
    name: str,
    path: str | os.PathLike | None = None,
    val_fraction: float = 1 / 12,
    random_state: int = 0,
    max_train: int | None = None,
) -> RealDataset:
    """Load a real classification data set without any download.

    Parameters
    ----------
    name : {"fashion-mnist", "mnist", "digits"}
        Data set.  ``digits`` is scikit-learn's bundled 8x8 digits (1,797 images).
    path : str or path-like, optional
        Folder with the IDX files (ignored for ``digits``).  Default: ``MOESTAT_DATA`` or
        ``/usr/share/datasets/<name>``.
    val_fraction : float
        Fraction of the training part held out, stratified, as validation (default 1/12, i.e.
        55,000 / 5,000 for the 60k IDX training files).
    random_state : int
        Seed of the validation (and, for digits, test) split.  The same seed gives the same split.
    max_train : int, optional
        Keep only the first ``max_train`` training images after the split (for smoke runs).

    Returns
    -------
    RealDataset
        Float32 inputs in [0, 1], int64 labels.

    Raises
    ------
    ValueError
        Unknown ``name`` or bad ``val_fraction``.
    FileNotFoundError
        The IDX files are missing (the message names the package to install).

    Examples
    --------
    >>> ds = load_dataset("digits", random_state=0)
    >>> ds.X_train.dtype.name, ds.n_features, ds.n_classes
    ('float32', 64, 10)
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {DATASETS}")
    vf = _check_fraction(val_fraction)
    if max_train is not None and (isinstance(max_train, bool) or int(max_train) < 1):
        raise ValueError(f"max_train must be a positive integer, got {max_train!r}")
    if name == "digits":
        from sklearn.datasets import load_digits

        bunch = load_digits()
        X = (bunch.data / 16.0).astype(np.float32)
        y = bunch.target.astype(np.int64)
        rest, test = _stratified_split(y, 0.2, random_state)
        tr_rel, va_rel = _stratified_split(y[rest], vf, random_state)
        tr, va = rest[tr_rel], rest[va_rel]
        ds = RealDataset(
            name, X[tr], y[tr], X[va], y[va], X[test], y[test],
            tuple(str(c) for c in bunch.target_names), (8, 8), "sklearn.datasets.load_digits",
        )
    else:
        files = find_idx_files(name, path)
        Xtr_all = read_idx(files["train_images"])
        ytr_all = read_idx(files["train_labels"]).astype(np.int64)
        Xte = read_idx(files["test_images"])
        yte = read_idx(files["test_labels"]).astype(np.int64)
        if Xtr_all.ndim != 3 or Xte.ndim != 3 or Xtr_all.shape[1:] != Xte.shape[1:]:
            raise ValueError(f"{name}: expected image files of shape [n, h, w], got {Xtr_all.shape} and {Xte.shape}")
        if len(ytr_all) != len(Xtr_all) or len(yte) != len(Xte):
            raise ValueError(f"{name}: image and label counts differ")
        image_shape = tuple(int(s) for s in Xtr_all.shape[1:])
        Xtr_all = Xtr_all.reshape(len(Xtr_all), -1).astype(np.float32) / 255.0
        Xte = Xte.reshape(len(Xte), -1).astype(np.float32) / 255.0
        tr, va = _stratified_split(ytr_all, vf, random_state)
        n_cls = int(max(ytr_all.max(), yte.max())) + 1
        names = FASHION_MNIST_CLASSES if (name == "fashion-mnist" and n_cls == 10) else tuple(str(i) for i in range(n_cls))
        ds = RealDataset(
            name, Xtr_all[tr], ytr_all[tr], Xtr_all[va], ytr_all[va], Xte, yte,
            names, image_shape, str(files["train_images"].parent),
        )
    if max_train is not None and int(max_train) < len(ds.y_train):
        ds.X_train = ds.X_train[: int(max_train)]
        ds.y_train = ds.y_train[: int(max_train)]
    return ds
