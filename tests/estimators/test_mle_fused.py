"""The fused EM pass written over one ``[B, n]`` row per atom (issue 36) against its definitions.

The pass (:func:`moestat.estimators.mle_fused._em_pass`) returns the observed log-likelihood and
the sufficient statistics of the next M-step.  Here each is computed directly from its definition
over ``[B, k, n]`` tensors (softmax gate, Gaussian experts, posterior responsibilities, einsum
moments), independently of the pass's own rows and accumulators, for one, two and three atoms.
"""

import math

import numpy as np
import pytest
import torch

from moestat.estimators import mle_fused
from moestat.model.gaussian_moe import log_likelihood
from moestat.model.mixing import MixingMeasure


def _args(B: int, k: int, d: int, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    Xd = torch.rand(B, d, n, dtype=torch.float64, generator=g)
    y = torch.randn(B, n, dtype=torch.float64, generator=g)
    V = torch.randn(B, k, d + 1, dtype=torch.float64, generator=g)
    V[:, -1] = 0.0  # the reference atom
    E = torch.randn(B, k, d + 1, dtype=torch.float64, generator=g)
    s2 = torch.rand(B, k, dtype=torch.float64, generator=g) + 0.1
    return Xd, y, V, E, s2


def _by_definition(Xd, y, V, E, s2):
    """The pass's outputs from their definitions (docstring of ``_em_pass``) over [B, k, n]."""
    B, d, n = Xd.shape
    xt = torch.cat([Xd, torch.ones(B, 1, n, dtype=Xd.dtype)], 1)  # [B, p, n], x~ = (x, 1)
    pi = torch.softmax(torch.einsum("bkp,bpn->bkn", V, xt), dim=1)
    e = y[:, None] - torch.einsum("bkp,bpn->bkn", E, xt)
    logjoint = torch.log(pi) - 0.5 * torch.log(2 * math.pi * s2)[..., None] - 0.5 * e**2 / s2[..., None]
    ll = torch.logsumexp(logjoint, dim=1).sum(-1)
    r = torch.softmax(logjoint, dim=1)
    M = torch.einsum("bkn,bpn,bqn->bkpq", r, xt, xt)
    g = torch.einsum("bkn,bpn->bkp", r * e, xt)
    q = (r * e * e).sum(-1)
    gg = torch.einsum("bkn,bpn->bkp", (r - pi)[:, :-1], xt)
    P = pi[:, :-1]
    eye = torch.eye(P.shape[1], dtype=P.dtype)
    W = P[:, :, None] * (eye[None, :, :, None] - P[:, None])  # [B, k-1, k-1, n]
    H = torch.einsum("bijn,bpn,bqn->bijpq", W, xt, xt)
    return ll, M, g, q, gg, H


@pytest.mark.parametrize("k, d", [(1, 1), (2, 1), (3, 2)])
def test_pass_equals_its_definitions(k, d):
    args = _args(B=4, k=k, d=d, n=700, seed=10 * k + d)
    got = mle_fused._em_pass(*args)
    want = _by_definition(*args)
    names = ("ll", "M", "g", "q", "gg", "H")
    for name, a, b in zip(names, got, want):
        assert a.shape == b.shape, name
        # the same sums in another order: agreement to a few units of rounding over n = 700 terms
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-10, msg=name)


def test_pass_loglik_is_the_models_loglik():
    # the pass's log-likelihood is model 1's (moestat.model.gaussian_moe), whose eta is (a, b, sigma^2)
    Xd, y, V, E, s2 = _args(B=3, k=2, d=1, n=500, seed=3)
    ll = mle_fused._em_pass(Xd, y, V, E, s2)[0].numpy()
    G = MixingMeasure(V[..., -1].numpy(), V[..., :-1].numpy(), torch.cat([E, s2[..., None]], -1).numpy())
    ref = log_likelihood(Xd.transpose(1, 2).numpy(), y.numpy(), G)
    np.testing.assert_allclose(ll, ref, rtol=1e-12)


def test_fuse_options_only_pass_settings_this_torch_knows(monkeypatch):
    from torch._inductor import config as inductor_config

    known = inductor_config.get_config_copy()
    assert set(mle_fused._fuse_options()) <= set(known)
    monkeypatch.setitem(mle_fused._FUSE_OPTIONS, "a_setting_no_torch_has", 1)
    opts = mle_fused._fuse_options()
    assert "a_setting_no_torch_has" not in opts
    assert {key for key in mle_fused._FUSE_OPTIONS if key in known} == set(opts)


@pytest.mark.slow
def test_the_ahead_of_time_pass_equals_the_torch_compile_pass_bit_for_bit():
    # issue 36: the pass compiled once by AOTInductor (loaded in milliseconds by every process)
    # replaces torch.compile's per-process tracing; same Inductor settings, same loop, same numbers.
    # The first run on a machine builds the package (about 25 CPU-s, once per cache folder).
    from moestat.estimators.em_driver import compile_batched

    threads = torch.get_num_threads()
    runner = mle_fused._aot_runner(2, 2)
    assert runner is not None, "AOTInductor could not build or load the pass (see the warning)"
    aot = mle_fused._compiled_pass(torch.device("cpu"))
    dynamo = compile_batched(mle_fused._em_pass, fullgraph=True, options=mle_fused._fuse_options())
    for B, n, seed in ((4, 700, 1), (1, 333, 2), (7, 2, 3)):
        args = _args(B=B, k=2, d=1, n=n, seed=seed)
        got, want = aot(*args), dynamo(*args)
        assert len(got) == len(want) == 6
        for a, b in zip(got, want):
            assert a.shape == b.shape and torch.equal(a, b)
        # and against the definitions, as the eager pass
        for a, b in zip(got, _by_definition(*args)):
            torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-10)
    assert torch.get_num_threads() == threads
    # the package is named by everything its code depends on: another thread count, another file
    assert mle_fused._aot_path(2, 2, 1) != mle_fused._aot_path(2, 2, 2) != mle_fused._aot_path(3, 2, 2)


def test_pass_loglik_is_the_passs_first_output():
    Xd, y, V, E, s2 = _args(B=3, k=2, d=1, n=400, seed=4)
    X = Xd.transpose(1, 2).contiguous()
    want = mle_fused._em_pass(Xd, y, V, E, s2)[0].numpy()
    np.testing.assert_array_equal(mle_fused.pass_loglik(X, y, V, E, s2, "eager"), want)
    with pytest.raises(ValueError, match="kernel"):
        mle_fused.pass_loglik(X, y, V, E, s2, "generic")


@pytest.mark.parametrize("d", [1, 2])
def test_the_pass_layout_gathers_the_same_entries_with_the_default_strides(d):
    # one gather into the [B, d, n] layout (issue 36) instead of indexing then copying: same values and strides
    X = torch.rand(3, 50, d, dtype=torch.float64, generator=torch.Generator().manual_seed(d))
    rep = torch.arange(3).repeat_interleave(4)
    got = mle_fused._pass_layout(X, rep)
    want = torch.empty((12, d, 50), dtype=X.dtype).copy_(X.transpose(1, 2)[rep])
    assert torch.equal(got, want) and got.stride() == want.stride() == (d * 50, 50, 1)
    whole = mle_fused._pass_layout(X)
    assert torch.equal(whole, X.transpose(1, 2)) and whole.stride() == (d * 50, 50, 1)
    # compaction keeps the rows it is given, as indexing would
    steps = mle_fused._FusedSteps(mle_fused._em_pass, got, torch.rand(12, 50, dtype=torch.float64),
                                  torch.rand(12, dtype=torch.float64), False, "eager")
    keep = torch.tensor([0, 5, 11])
    ya, fa = steps.ya[keep], steps.fa[keep]
    steps.compact(keep)
    assert torch.equal(steps.Xd, got[keep]) and torch.equal(steps.ya, ya) and torch.equal(steps.fa, fa)


def _rows_with_ties_and_extremes(seed: int):
    """Two ``[B, n]`` rows: random, tied, one far above the other (exp underflows to 0), exact zeros."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(3, 500, dtype=torch.float64, generator=g) * 5
    b = torch.randn(3, 500, dtype=torch.float64, generator=g) * 5
    b[0, :50] = a[0, :50]  # ties
    a[1, :50] += 800.0  # exp(b - a) underflows
    b[1, 50:100] += 800.0
    a[2, :20], b[2, :20] = 0.0, -0.0
    return [a, b]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_two_atom_shifted_exponentials_are_the_k_row_form_bit_for_bit(seed):
    # issue 36: for two atoms one exponential per sample gives exp(l_i - max l) of both rows (the
    # maximum's is exp(0) = 1); the k-row form (max, differences, k exponentials) is the reference
    rows = _rows_with_ties_and_extremes(seed)
    top = torch.maximum(rows[0], rows[1])
    shifted = [r - top for r in rows]
    want = [torch.exp(t) for t in shifted]
    got_shifted, got = mle_fused._shifted_exp(rows)
    for a, b in zip(got_shifted + got, shifted + want):
        assert torch.equal(a, b)
    m, w = mle_fused._max_and_shifted_exp(rows)
    assert torch.equal(m, top) and all(torch.equal(a, b) for a, b in zip(w, want))
    # three rows take the general form
    three = rows + [rows[0] * 0.5]
    top3 = torch.maximum(torch.maximum(three[0], three[1]), three[2])
    m3, w3 = mle_fused._max_and_shifted_exp(three)
    assert torch.equal(m3, top3) and all(torch.equal(a, torch.exp(r - top3)) for a, r in zip(w3, three))


def test_a_nan_in_a_two_atom_entry_makes_its_pass_nan():
    # the two-atom rows select instead of taking a maximum (which propagates NaN): an entry with a
    # NaN parameter must still get a NaN log-likelihood (EM's "nonfinite" status), and the others not
    Xd, y, V, E, s2 = _args(B=3, k=2, d=1, n=50, seed=9)
    V[1, 0, 0] = float("nan")
    ll = mle_fused._em_pass(Xd, y, V, E, s2)[0]
    assert torch.isnan(ll[1]) and torch.isfinite(ll[[0, 2]]).all()
    E[2, 1, 1] = float("nan")
    ll = mle_fused._em_pass(Xd, y, V, E, s2)[0]
    assert torch.isnan(ll[2]) and torch.isfinite(ll[0])


def _built_package() -> str:
    """The path of this machine's package of the two-atom pass (built on first use, ~25 CPU-s once)."""
    assert mle_fused._aot_runner(2, 2) is not None, "AOTInductor could not build or load the pass (see the warning)"
    return mle_fused._aot_path(2, 2, torch.get_num_threads())


@pytest.mark.slow
def test_the_public_loader_runs_the_same_package_where_the_private_class_is_missing(monkeypatch):
    # issue 36: torch._C._aoti.AOTIModelPackageLoader is private; where a torch lacks it (or changed
    # its signature) the package is loaded by the public torch._inductor.aoti_load_package instead
    path = _built_package()
    args = [t.contiguous() for t in _args(B=5, k=2, d=1, n=300, seed=21)]
    want = mle_fused._load_package(path)(args)

    import torch._inductor as inductor

    calls = []
    public = inductor.aoti_load_package
    monkeypatch.setattr(inductor, "aoti_load_package", lambda where: (calls.append(where), public(where))[1])
    monkeypatch.setattr(mle_fused, "_private_loader", lambda: None)  # a torch without the class
    got = mle_fused._load_package(path)(args)
    assert calls == [path]  # the public loader loaded it
    assert len(got) == len(want) == 6 and all(torch.equal(a, b) for a, b in zip(got, want))

    def changed(*args):  # the class with another constructor
        raise TypeError("incompatible constructor arguments")

    monkeypatch.setattr(mle_fused, "_private_loader", lambda: changed)
    got = mle_fused._load_package(path)(args)
    assert calls == [path, path] and all(torch.equal(a, b) for a, b in zip(got, want))


def test_a_broken_package_falls_back_with_one_warning(monkeypatch, tmp_path):
    # both loaders failing (here: a package file that is not a package) leave the pass to
    # torch.compile with exactly one warning per process and shape, and the fit itself unchanged
    import warnings

    monkeypatch.setattr(mle_fused, "_AOT", {})
    bad = tmp_path / "broken.pt2"
    bad.write_bytes(b"not a zip archive")
    monkeypatch.setattr(mle_fused, "_aot_path", lambda k, p, threads: str(bad))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert mle_fused._aot_runner(2, 2) is None
        assert mle_fused._aot_runner(2, 2) is None  # remembered: no second attempt, no second warning
    ours = [w for w in caught if "ahead-of-time compiled EM pass is unavailable" in str(w.message)]
    assert len(ours) == 1 and issubclass(ours[0].category, RuntimeWarning)


def test_all_compiles_every_fused_fit_on_the_cpu_and_auto_only_large_ones():
    # issue 36: a large sweep asks "all" (em_driver.sweep_compile), so its small units run the
    # compiled pass too, instead of the eager one below COMPILE_MIN_SAMPLES
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    small, large = 10 * 5 * 100, mle_fused.COMPILE_MIN_SAMPLES
    assert mle_fused._pass_function("all", small, cpu)[1] == "compiled"
    assert mle_fused._pass_function("auto", small, cpu)[1] == "eager"
    assert mle_fused._pass_function("auto", large, cpu)[1] == "compiled"
    assert mle_fused._pass_function("all", large, cuda)[1] == "eager"  # as "auto": the CPU only
    assert mle_fused._pass_function(False, large, cpu)[1] == "eager"
    assert mle_fused._pass_function(True, small, cpu)[1] == "compiled"


def test_a_small_fit_compiled_by_all_matches_the_eager_fit():
    # the compiled and the eager pass sum in another order: the same EM to rounding
    from moestat.data.gaussian_scenarios import model1_scenario
    from moestat.estimators.mle import MLEGaussianMoE

    _built_package()
    sc = model1_scenario("exact")
    rng = np.random.default_rng(3)
    data = [sc.sample(300, rng) for _ in range(4)]
    X, Y = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
    fits = [MLEGaussianMoE(2, compile=c, n_init=3, random_state=1).fit(X, Y) for c in ("all", "auto")]
    assert fits[0].kernel_ == "compiled" and fits[1].kernel_ == "eager"
    np.testing.assert_allclose(fits[0].loglik_, fits[1].loglik_, rtol=1e-10)
    assert fits[0].status_ == fits[1].status_


@pytest.mark.slow
def test_the_build_options_are_known_settings_that_do_not_name_the_package(monkeypatch):
    # issue 36: precompiled headers off (a third of a cold build); they change the build's speed, not
    # its code, so the package keeps its name (a warm cache stays warm)
    from torch._inductor import config as inductor_config

    known = inductor_config.get_config_copy()
    opts = mle_fused._build_options()
    assert opts == {key: v for key, v in mle_fused._BUILD_OPTIONS.items() if key in known}
    assert "aot_inductor.precompile_headers" not in known or opts["aot_inductor.precompile_headers"] is False
    before = mle_fused._aot_path(2, 2, 1)
    monkeypatch.setitem(mle_fused._BUILD_OPTIONS, "aot_inductor.precompile_headers", True)
    assert mle_fused._aot_path(2, 2, 1) == before
