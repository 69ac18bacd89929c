"""Real-data loaders: IDX reader/writer, deterministic splits, missing-file errors, digits, and a
smoke run on the real Fashion-MNIST files when the Debian package is installed."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from moestat.data.images import find_idx_files, load_dataset, read_idx, write_idx

FMNIST = Path("/usr/share/datasets/fashion-mnist")
HAVE_FMNIST = (FMNIST / "train-images-idx3-ubyte.gz").is_file()


def _write_fake(folder: Path, n_train=60, n_test=20, side=4, gz=True, seed=0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    suf = ".gz" if gz else ""
    Xtr = rng.integers(0, 256, size=(n_train, side, side), dtype=np.uint8)
    ytr = np.tile(np.arange(10, dtype=np.uint8), n_train // 10)
    Xte = rng.integers(0, 256, size=(n_test, side, side), dtype=np.uint8)
    yte = np.tile(np.arange(10, dtype=np.uint8), n_test // 10)
    write_idx(folder / f"train-images-idx3-ubyte{suf}", Xtr)
    write_idx(folder / f"train-labels-idx1-ubyte{suf}", ytr)
    write_idx(folder / f"t10k-images-idx3-ubyte{suf}", Xte)
    write_idx(folder / f"t10k-labels-idx1-ubyte{suf}", yte)
    return Xtr, ytr, Xte, yte


@settings(max_examples=25, deadline=None)
@given(
    hnp.arrays(
        dtype=st.sampled_from([np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64]),
        shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5),
        elements={"allow_nan": False, "allow_infinity": False},
    ),
    st.booleans(),
)
def test_idx_roundtrip(tmp_path_factory, arr, gz):
    p = tmp_path_factory.mktemp("idx") / ("a.idx" + (".gz" if gz else ""))
    write_idx(p, arr)
    back = read_idx(p)
    assert back.dtype == arr.dtype.newbyteorder("=") and back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)


def test_idx_header_is_lecun_format(tmp_path):
    p = write_idx(tmp_path / "x-idx3-ubyte", np.zeros((2, 3, 4), dtype=np.uint8))
    raw = p.read_bytes()
    assert raw[:4] == bytes([0, 0, 0x08, 3])
    assert int.from_bytes(raw[4:8], "big") == 2 and int.from_bytes(raw[12:16], "big") == 4
    assert len(raw) == 16 + 24


def test_idx_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x05")
    with pytest.raises(ValueError, match="magic"):
        read_idx(bad)
    trunc = tmp_path / "trunc.gz"
    with gzip.open(trunc, "wb") as fh:
        fh.write(bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big") + b"\x00" * 3)
    with pytest.raises(ValueError, match="truncated"):
        read_idx(trunc)


@pytest.mark.parametrize("gz", [True, False])
def test_loader_on_small_idx_files(tmp_path, gz):
    Xtr, ytr, Xte, yte = _write_fake(tmp_path / "fm", gz=gz)
    ds = load_dataset("fashion-mnist", path=tmp_path / "fm", val_fraction=0.2, random_state=3)
    assert ds.X_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.X_train.shape == (48, 16) and ds.X_val.shape == (12, 16) and ds.X_test.shape == (20, 16)
    assert ds.image_shape == (4, 4) and ds.n_classes == 10 and ds.class_names[0] == "T-shirt/top"
    np.testing.assert_allclose(ds.X_test, Xte.reshape(20, -1) / 255.0, rtol=1e-6)
    assert 0.0 <= ds.X_train.min() and ds.X_train.max() <= 1.0
    # stratified validation: 12 of 60 with 6 per class -> 1 or 2 per class
    assert set(np.bincount(ds.y_val, minlength=10)) <= {1, 2}
    # train + val is a partition of the training file
    allx = np.concatenate([ds.X_train, ds.X_val])
    assert sorted(map(bytes, allx.round(6))) == sorted(map(bytes, (Xtr.reshape(60, -1) / 255.0).astype(np.float32).round(6)))
    again = load_dataset("fashion-mnist", path=tmp_path / "fm", val_fraction=0.2, random_state=3)
    np.testing.assert_array_equal(again.X_val, ds.X_val)
    other = load_dataset("fashion-mnist", path=tmp_path / "fm", val_fraction=0.2, random_state=4)
    assert not np.array_equal(other.X_val, ds.X_val)


def test_moestat_data_env_and_subfolder(tmp_path, monkeypatch):
    _write_fake(tmp_path / "mnist")
    monkeypatch.setenv("MOESTAT_DATA", str(tmp_path))
    files = find_idx_files("mnist")
    assert files["train_images"].parent == tmp_path / "mnist"
    ds = load_dataset("mnist", max_train=10)
    assert len(ds.y_train) == 10 and ds.class_names[3] == "3"


def test_missing_files_one_line_error_naming_the_package(tmp_path, monkeypatch):
    monkeypatch.delenv("MOESTAT_DATA", raising=False)
    with pytest.raises(FileNotFoundError) as ei:
        load_dataset("fashion-mnist", path=tmp_path / "nowhere")
    msg = str(ei.value)
    assert "apt-get install dataset-fashion-mnist" in msg and "\n" not in msg
    with pytest.raises(FileNotFoundError, match="MOESTAT_DATA"):
        load_dataset("mnist", path=tmp_path)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("cifar10")
    with pytest.raises(ValueError, match="val_fraction"):
        load_dataset("digits", val_fraction=0.9)
    with pytest.raises(ValueError, match="max_train"):
        load_dataset("digits", max_train=0)


def test_digits_split_is_deterministic_and_disjoint():
    a = load_dataset("digits", random_state=1)
    b = load_dataset("digits", random_state=1)
    np.testing.assert_array_equal(a.X_test, b.X_test)
    assert len(a.y_train) + len(a.y_val) + len(a.y_test) == 1797
    assert a.X_train.max() <= 1.0 and a.image_shape == (8, 8)
    rows = {bytes(r) for r in a.X_test} & {bytes(r) for r in a.X_train}
    # digits contains a few exact duplicate images; a disjoint split leaves at most those
    assert len(rows) < 5


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_FMNIST, reason="dataset-fashion-mnist is not installed")
def test_real_fashion_mnist_smoke():
    import torch

    from moestat.nn.classifier import MoEClassifier, evaluate_classifier, fit_classifier

    ds = load_dataset("fashion-mnist", max_train=3000)
    assert ds.X_test.shape == (10000, 784) and len(ds.y_val) == 5000
    assert np.bincount(ds.y_test).tolist() == [1000] * 10
    t = ds.tensors()
    m = MoEClassifier(784, 10, n_experts=4, k=2, router="noisy_topk", expert_hidden=32,
                      router_kwargs={"w_load": 0.1}, random_state=0)
    fit_classifier(m, t["X_train"], t["y_train"], epochs=2, batch_size=256, random_state=0, progress=False)
    ev = evaluate_classifier(m, t["X_test"][:2000], t["y_test"][:2000])
    assert ev["accuracy"] > 0.6  # chance is 0.1
    assert torch.isfinite(torch.tensor(ev["loss"]))


def test_the_one_digits_split_sizes_and_its_independence_of_val_fraction():
    a = load_dataset("digits")
    b = load_dataset("digits", val_fraction=0)
    assert (len(a.y_train), len(a.y_val), len(a.y_test)) == (1317, 120, 360)
    assert (len(b.y_train), len(b.y_val), len(b.y_test)) == (1437, 0, 360)
    assert np.array_equal(a.y_test, b.y_test) and np.array_equal(a.X_test, b.X_test)
    # stratified: every class has its share of the test split (36 of about 180 each)
    assert np.bincount(a.y_test).min() >= 35 and np.bincount(a.y_test).max() <= 37
