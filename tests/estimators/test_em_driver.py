"""The one batched EM loop (:mod:`moestat.estimators.em_driver`) and the Newton toolkit
(:mod:`moestat.estimators.newton`) on problems whose answers are known in closed form."""

import ast
import pathlib

import numpy as np
import pytest
import torch

from moestat.estimators import newton
from moestat.estimators.em_driver import run_em


class _Contraction:
    """A fixed-point map ``theta <- c + rho (theta - c)`` per entry (EM near a maximum is locally
    such a linear map, with ``rho`` the fraction of missing information), with the objective
    ``-|theta - c|^2``.  The state is ``(theta [B, m],)``; the posterior is unused."""

    name = "the toy EM"

    def __init__(self, c, rho, fail_compile=False):
        self.c, self.rho, self.fail = c, rho, fail_compile

    def _ll(self, th):
        return -((th - self.c) ** 2).sum(-1)

    def estep(self, st):
        if self.fail:
            raise torch._dynamo.exc.BackendCompilerFailed(self.estep, RuntimeError("no C++ compiler"), None)
        return self._ll(st[0]), None

    def step(self, st, post):
        th = self.c + self.rho[:, None] * (st[0] - self.c)
        return (th,), self._ll(th), None

    def to_vector(self, st):
        return st[0]

    def from_vector(self, vec, like):
        return (vec,)

    def compact(self, keep):
        self.c, self.rho = self.c[keep], self.rho[keep]

    def eager(self):
        return _Contraction(self.c, self.rho)


def _problem(B=4, m=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(B, m, dtype=torch.float64, generator=g)
    th0 = c + torch.randn(B, m, dtype=torch.float64, generator=g)
    rho = torch.linspace(0.5, 0.95, B, dtype=torch.float64)
    return c, th0, rho


def test_plain_em_retires_each_entry_on_its_own_change():
    c, th0, rho = _problem()
    out = run_em(_Contraction(c, rho), (th0,), n=1, max_iter=10_000, tol=1e-12)
    assert out["status"] == ["tol"] * 4
    for b, path in enumerate(out["paths"]):
        path = np.asarray(path)
        assert np.all(np.diff(path) >= 0), "the trace decreased"
        # -|theta_t - c|^2 = rho^(2t) ll_0: the last step changes ll by at most tol, the one before by more
        np.testing.assert_allclose(path, path[0] * float(rho[b]) ** (2 * np.arange(path.size)), rtol=1e-9)
        assert abs(path[-1] - path[-2]) <= 1e-12 < abs(path[-2] - path[-3])
    # a slower contraction needs more iterations: the active set shrinks entry by entry
    lengths = [len(p) for p in out["paths"]]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]
    # the batch is the entries side by side: each equals its own run alone
    for b in range(4):
        alone = run_em(_Contraction(c[b : b + 1], rho[b : b + 1]), (th0[b : b + 1],), n=1, max_iter=10_000, tol=1e-12)
        assert alone["paths"][0] == out["paths"][b]
        torch.testing.assert_close(alone["state"][0][0], out["state"][0][b], rtol=0, atol=0)


def test_squarem_solves_a_linear_map_in_one_round():
    # for theta <- c + rho (theta - c), r = (rho - 1) e and v = (rho - 1)^2 e, so alpha = -1 / (1 - rho)
    # and the extrapolation theta0 - 2 alpha r + alpha^2 v is c itself (Varadhan & Roland 2008)
    c, th0, rho = _problem()
    out = run_em(_Contraction(c, rho), (th0,), n=1, max_iter=100, tol=1e-12, accelerate=True)
    torch.testing.assert_close(out["state"][0], c, rtol=0, atol=1e-12)
    for path in out["paths"]:
        assert len(path) <= 1 + 3 + 2 + 2  # start, round 1 (two steps + extrapolation), then converged steps
        assert np.all(np.diff(path) >= 0)
    assert out["status"] == ["tol"] * 4


def test_max_iter_and_nonfinite_statuses():
    c, th0, rho = _problem()
    th0[1, 0] = float("nan")
    out = run_em(_Contraction(c, rho), (th0,), n=1, max_iter=3, tol=1e-12)
    assert out["status"][1] == "nonfinite"
    assert [s for b, s in enumerate(out["status"]) if b != 1] == ["max_iter"] * 3
    assert [len(p) for b, p in enumerate(out["paths"]) if b != 1] == [4] * 3


def test_compile_fallback_warns_once_and_runs_eagerly():
    c, th0, rho = _problem()
    with pytest.warns(RuntimeWarning, match="torch.compile is unavailable .* the toy EM runs eagerly"):
        out = run_em(_Contraction(c, rho, fail_compile=True), (th0,), n=1, max_iter=50, tol=1e-12, compile="auto")
    eager = run_em(_Contraction(c, rho), (th0,), n=1, max_iter=50, tol=1e-12)
    assert out["paths"] == eager["paths"] and isinstance(out["steps"], _Contraction) and not out["steps"].fail
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed):  # compile=True asked for it: no fallback
        run_em(_Contraction(c, rho, fail_compile=True), (th0,), n=1, max_iter=50, tol=1e-12, compile=True)


def _quadratic(B=3, m=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    Q = torch.randn(B, m, m, dtype=torch.float64, generator=g)
    A = Q @ Q.transpose(1, 2) + m * torch.eye(m, dtype=torch.float64)  # positive definite
    c = torch.randn(B, m, dtype=torch.float64, generator=g)
    return A, c


def test_newton_polish_reaches_the_maximum_of_a_concave_quadratic_and_certifies_it():
    A, c = _quadratic()
    f = lambda t, idx: -0.5 * torch.einsum("bi,bij,bj->b", t - c[idx], A[idx], t - c[idx])  # noqa: E731

    def terms(act, th):
        g, H = newton.grad_hess(lambda t: f(t, act), th)
        torch.testing.assert_close(H, -A[act])  # the Hessian of a quadratic, exactly its matrix
        return g, H

    lam = torch.full((3,), 1e-8, dtype=torch.float64)

    def ascend(act, th, g, C):
        new, lam[act] = newton.ascent(lambda t: f(t, act), th, lam[act], g, C)
        fn = f(new, act)
        return new, fn >= f(th, act), fn

    out = newton.polish(torch.zeros(3, 4, dtype=torch.float64), torch.arange(3), terms, ascend, tol_n=1e-12, max_iter=20)
    assert out["certified"].all()
    torch.testing.assert_close(out["theta"], c, rtol=0, atol=1e-6)
    # a damped Newton step on a quadratic lands within the damping's reach of the maximiser: a few steps
    assert (out["n_iter"] >= 1).all() and (out["n_iter"] <= 5).all()
    assert (out["decrement"] <= 1e-12).all()


def test_the_certificate_needs_a_negative_definite_hessian():
    A, c = _quadratic()
    g = torch.zeros(3, 4, dtype=torch.float64)
    ok, d = newton.certificate(g, -A, 1e-12)
    assert ok.all() and (d == 0).all()
    ok, d = newton.certificate(g, A, 1e-12)  # a minimum (or saddle) is never certified
    assert not ok.any() and torch.isinf(d).all()


def test_the_estimators_have_no_import_cycle():
    """Every import of a package module by another (module level or inside a function) inside
    ``moestat/estimators``: the graph has no cycle (the generic_refine <-> mle_generic circle of
    issue 32 is gone)."""
    root = pathlib.Path(__file__).resolve().parents[2] / "moestat" / "estimators"
    mods = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    graph = {}
    for m in mods:
        deps = set()
        for node in ast.walk(ast.parse((root / f"{m}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.startswith("moestat.estimators."):
                    deps.add(node.module.rsplit(".", 1)[1])
                elif node.module == "moestat.estimators":
                    deps |= {a.name for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name.rsplit(".", 1)[1] for a in node.names if a.name.startswith("moestat.estimators.")}
        graph[m] = deps & mods
    state: dict = {}

    def visit(m, stack):
        state[m] = "open"
        for d in graph[m]:
            assert state.get(d) != "open", f"import cycle: {' -> '.join(stack + [m, d])}"
            if d not in state:
                visit(d, stack + [m])
        state[m] = "done"

    for m in sorted(mods):
        if m not in state:
            visit(m, [])


def _lock_is_held(folder) -> bool:
    """Whether some open file description holds the compile lock in ``folder`` (a non-blocking try)."""
    import fcntl
    import os

    from moestat.estimators.em_driver import COMPILE_LOCK_NAME

    fd = os.open(os.path.join(folder, COMPILE_LOCK_NAME), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_compile_lock_lets_one_holder_at_a_time(tmp_path, monkeypatch):
    # issue 36: the workers of a sweep compiled the same EM pass side by side on a cold cache; the
    # lock makes the later ones wait for the first one's cache
    import threading

    pytest.importorskip("fcntl")
    from moestat.estimators.em_driver import compile_lock

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    held, release, entered = threading.Event(), threading.Event(), threading.Event()

    def first():
        with compile_lock():
            held.set()
            release.wait(30)

    def second():
        with compile_lock():
            entered.set()

    a = threading.Thread(target=first)
    a.start()
    assert held.wait(30)
    b = threading.Thread(target=second)
    b.start()
    assert not entered.wait(0.5)  # blocked while the first holds the lock
    release.set()
    a.join(30)
    assert entered.wait(30)  # and let in once it is released
    b.join(30)
    assert not _lock_is_held(tmp_path)


def _double(x):
    return 2 * x


def test_compile_batched_locks_the_first_compilation_in_a_cache_folder_only(tmp_path, monkeypatch):
    pytest.importorskip("fcntl")
    from moestat.estimators import em_driver

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(em_driver, "prepare_compile", lambda: None)
    seen = []

    def fake_compile(fn, **options):  # stands in for torch.compile: records whether the lock is held
        def c(x):
            seen.append(_lock_is_held(tmp_path))
            return fn(x)
        return c

    monkeypatch.setattr(torch, "compile", fake_compile)
    run = em_driver.compile_batched(_double)
    x = torch.ones(3, 2)
    assert torch.equal(run(x), 2 * x) and torch.equal(run(x), 2 * x)
    assert torch.equal(run(x[:1]), 2 * x[:1])  # a lone entry: run twice over, first copy kept
    assert seen == [True, False, False]  # the first call compiles under the lock, later ones do not
    # what another process does next: the first compilation wrote its marker, so no lock (the cache is warm)
    seen.clear()
    assert torch.equal(em_driver.compile_batched(_double)(x), 2 * x)
    assert seen == [False]


def test_sweep_compile_is_one_decision_from_the_design_alone():
    from moestat.estimators.em_driver import SWEEP_COMPILE_MIN_SAMPLES, sweep_compile

    # the scaled gmoe_exact design of the benchmark (6 sizes 100..10 000, 10 replicates x 5 starts): eager
    scaled = 10 * 5 * sum((100, 251, 631, 1585, 3981, 10000))
    assert sweep_compile(scaled) is False
    # the whole gmoe_exact design (40 replicates x 5 starts, 150 sizes from 100 to 100 000): compiled
    full = 40 * 5 * int(np.round(np.geomspace(100, 100_000, 150)).sum())
    assert sweep_compile(full) == "all"
    assert sweep_compile(SWEEP_COMPILE_MIN_SAMPLES) == "all" and sweep_compile(SWEEP_COMPILE_MIN_SAMPLES - 1) is False
    assert sweep_compile(full, "cuda") is False and sweep_compile(full, "cuda:0") is False  # as "auto" per fit
