"""moestat.devices.resolve_device: one meaning of --device / device= everywhere."""

import pytest
import torch

from moestat.devices import resolve_device

NO_CUDA = not torch.cuda.is_available()


def test_cpu_and_auto():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(" cpu ") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    expected = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    assert resolve_device("auto") == expected


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:7"])
def test_cuda_refused_in_one_line_without_cuda(name):
    if not NO_CUDA:
        pytest.skip("CUDA is available here: the refusal is for machines without it")
    with pytest.raises(ValueError) as ei:
        resolve_device(name)
    msg = str(ei.value)
    assert "CUDA is not available" in msg and repr(name) in msg and "\n" not in msg


def test_cuda_index_checked_when_cuda_present():
    if NO_CUDA:
        pytest.skip("needs CUDA")
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(ValueError, match="CUDA device"):
        resolve_device(f"cuda:{torch.cuda.device_count()}")


@pytest.mark.parametrize("bad", ["gpu", "mps", "cuda:", "cuda:x", "cuda:\u00b2", "CPU", "", 0, None])
def test_unknown_devices_refused_in_one_line(bad):
    with pytest.raises(ValueError) as ei:
        resolve_device(bad)
    msg = str(ei.value)
    assert "cpu, cuda, cuda:N or auto" in msg and "\n" not in msg


def test_compile_cache_goes_under_the_user_cache_unless_set(monkeypatch, tmp_path):
    from moestat.devices import COMPILE_CACHE_ENV, compile_cache_dirs

    for var in COMPILE_CACHE_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))  # the user's own choice wins
    got = compile_cache_dirs()
    assert got == {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache" / "moestat" / "torchinductor"),
                   "TRITON_CACHE_DIR": str(tmp_path / "mine")}


@pytest.mark.slow
def test_a_compiled_fit_writes_nothing_to_tmpdir(tmp_path):
    """torch.compile's Inductor cache defaulted to $TMPDIR/torchinductor_<user> (~150 MB, issue 35);
    a compiled EM fit now writes it under $XDG_CACHE_HOME/moestat and nothing into $TMPDIR."""
    import os
    import subprocess
    import sys

    tmp, cache = tmp_path / "tmp", tmp_path / "cache"
    tmp.mkdir()
    code = (
        "import numpy as np\n"
        "from moestat.data.gaussian_scenarios import model1_scenario\n"
        "from moestat.estimators.mle import MLEGaussianMoE\n"
        "sc = model1_scenario('exact'); X, Y = sc.sample(400, np.random.default_rng(0))\n"
        "est = MLEGaussianMoE(n_components=2, compile=True, max_iter=5).fit(X, Y)\n"
        "assert est.kernel_ == 'compiled', est.kernel_\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    env.update(TMPDIR=str(tmp), XDG_CACHE_HOME=str(cache), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stderr[-2000:]
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("torchinductor")]
    assert any((cache / "moestat" / "torchinductor").rglob("*"))
