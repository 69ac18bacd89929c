"""The Laplace gate (Han et al. 2024, FuseMoE): its weights against an independent NumPy formula, its
parameterisation, and its scenario file through ``rates --estimator mle`` and ``check``."""

import csv
from pathlib import Path

import numpy as np
import pytest
import torch

from moestat.cli import cmd_check, cmd_rates
from moestat.cli.common import run_main
from moestat.estimators.generic_starts import from_free, to_free
from moestat.estimators.mle_generic import GenericEM
from moestat.model.gate_registry import GATES
from moestat.model.laplace_gate import LAPLACE
from moestat.model.likelihood import LikelihoodModel, linear_expert, log_gate
from moestat.model.mixing import MixingMeasure
from moestat.model.protocol import ProtocolGate

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "examples" / "laplace_moe_d2.toml"


def _numpy_laplace(x, b0, b1, T=1.0, K=None):
    """softmax_i((-||x - b1_i|| + b0_i) / T) over the K atoms of largest -||x - b1_i||, written in NumPy."""
    dist = np.sqrt(((x[:, None, :] - b1[None, :, :]) ** 2).sum(-1))  # [n, k]
    logits = (-dist + b0[None, :]) / T
    if K is not None:
        keep = np.argsort(dist, axis=1)[:, :K]  # the K nearest centres
        mask = np.zeros_like(logits, dtype=bool)
        np.put_along_axis(mask, keep, True, axis=1)
        logits = np.where(mask, logits, -np.inf)
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("T,K", [(1.0, None), (0.4, None), (1.0, 2)])
def test_laplace_weights_match_numpy(T, K):
    rng = np.random.default_rng(0)
    x, b0, b1 = rng.normal(size=(40, 3)), rng.normal(size=4), rng.normal(size=(4, 3))
    gate = ProtocolGate(normalisation="laplace", temperature=T, k_active=K)
    assert gate.family is LAPLACE is GATES["laplace"]
    t = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    want = _numpy_laplace(x, b0, b1, T, K)
    np.testing.assert_allclose(gate.weights(t(x), t(b0), t(b1)).numpy(), want, rtol=1e-12, atol=1e-15)
    # the log-space form the likelihood and the EM use: the same weights
    np.testing.assert_allclose(torch.exp(log_gate(gate, t(x), t(b0), t(b1))).numpy(), want, rtol=1e-12, atol=1e-15)


def test_laplace_weights_batched_and_at_a_centre():
    """Leading batch axes broadcast; at x = beta1_i the score is 0 and its gradient finite (not NaN)."""
    rng = np.random.default_rng(1)
    x, b0, b1 = rng.normal(size=(2, 5, 2)), rng.normal(size=(2, 3)), rng.normal(size=(2, 3, 2))
    x[0, 0] = b1[0, 1]
    gate = ProtocolGate(normalisation="laplace")
    tb1 = torch.tensor(b1, requires_grad=True)
    w = gate.weights(torch.as_tensor(x), torch.as_tensor(b0), tb1)
    for r in range(2):
        np.testing.assert_allclose(w[r].detach().numpy(), _numpy_laplace(x[r], b0[r], b1[r]), rtol=1e-12, atol=1e-15)
    w[..., 0].sum().backward()
    assert torch.isfinite(tb1.grad).all()


def test_laplace_parameterisation():
    """Invariant to a common shift of beta0 only: the last beta0 is pinned, every centre free."""
    gate = ProtocolGate(normalisation="laplace")
    assert gate.reference is False
    free = gate.free_mask(3, 2)
    assert free.sum() == 3 * 3 - 1 and not free[-1, 2] and free[-1, :2].all()
    rng = np.random.default_rng(2)
    x, b0, b1 = (torch.as_tensor(a) for a in (rng.normal(size=(20, 2)), rng.normal(size=3), rng.normal(size=(3, 2))))
    w = gate.weights(x, b0, b1)
    torch.testing.assert_close(gate.weights(x, b0 + 0.7, b1), w, rtol=1e-13, atol=1e-15)
    assert not torch.allclose(gate.weights(x, b0, b1 + 0.7), w)  # a shift of the centres is not a symmetry
    # the EM's layout: a start is moved to the pinned convention and comes back with the same weights
    model = LikelihoodModel(gate, linear_expert(2))
    em = GenericEM(model, 3, 2)
    G = MixingMeasure(b0.numpy()[None], b1.numpy()[None], np.ones((1, 3, 4)))
    fv, eta, ls2 = to_free(em, G)
    back = from_free(em, fv.numpy(), eta.numpy(), ls2.numpy())
    assert back.beta0[0, -1] == 0.0
    assert gate.family.truth_error(back.beta0[0], back.beta1[0], False) is None
    assert "beta0 = 0" in gate.family.truth_error(b0.numpy(), b1.numpy(), False)
    torch.testing.assert_close(gate.weights(x, torch.as_tensor(back.beta0[0]), torch.as_tensor(back.beta1[0])), w,
                               rtol=1e-12, atol=1e-15)


@pytest.mark.slow
def test_laplace_scenario_file_runs(tmp_path, capsys):
    """The example file: a tiny ``rates --estimator mle`` sweep writes finite losses, ``check`` exits 0."""
    out = tmp_path / "run"
    argv = ["--scenario", str(FILE), "--estimator", "mle", "--n-min", "200", "--n-max", "400", "--n-points", "3",
            "--reps", "2", "--max-iter", "50", "--n-boot", "50", "--quiet", "--out", str(out)]
    assert run_main(cmd_rates.main, argv, prog="moestat rates") == 0
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert len(rows) == 6 and {r["scenario"] for r in rows} == {"laplace-moe-d2"}
    assert all(np.isfinite(float(r["voronoi"])) and np.isfinite(float(r["regression_l2"])) for r in rows)
    assert run_main(cmd_check.main, [str(FILE)], prog="moestat check") == 0
    assert "laplace" in capsys.readouterr().out
