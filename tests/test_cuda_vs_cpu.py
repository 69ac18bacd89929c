"""CUDA against CPU on the same problem: batched least squares, the Gaussian-MoE EM, one LM step.

They run only where CUDA is present (``benchmarks/gpu_device_run.sh`` on a lent GPU) and skip with
the reason elsewhere.  Both sides compute in float64 (the fits) or float32 with TF32 off (the LM
step), so what differs is the order of floating-point sums inside the kernels: the tolerances
allow that rounding, amplified by the iterations of a fit, and nothing more.
"""

import numpy as np
import pytest
import torch

NO_CUDA = not torch.cuda.is_available()
pytestmark = pytest.mark.skipif(NO_CUDA, reason="CUDA is not available on this machine (the test compares CUDA with CPU)")


def test_batched_least_squares_fit_on_cuda_equals_the_cpu_fit():
    from moestat import MixingMeasure
    from moestat.data.synthetic import make_scenario
    from moestat.estimators import LeastSquaresMoE, near_truth_init

    sc = make_scenario("perturbed", "exact", d=3, k_true=3, k_active=2)
    rng = np.random.default_rng(0)
    XY = [sc.sample(2000, rng) for _ in range(4)]
    X, Y = np.stack([a for a, _ in XY]), np.stack([b for _, b in XY])
    init = MixingMeasure.stack([near_truth_init(sc.truth, sc.k_fit, 0.05, rng) for _ in range(4)])
    model = sc.model.with_k_active(sc.k_active_fit)
    cpu = LeastSquaresMoE(model, sc.k_fit, device="cpu").fit(X, Y, init=init)
    gpu = LeastSquaresMoE(model, sc.k_fit, device="cuda").fit(X, Y, init=init)
    assert cpu.converged_.all() and gpu.converged_.all(), (cpu.status_, gpu.status_)
    # the objective is a mean of n squared residuals at a minimum: first-order insensitive to the
    # small differences in the minimiser
    np.testing.assert_allclose(gpu.objective_, cpu.objective_, rtol=1e-9)
    for name in ("beta0", "beta1", "eta"):
        np.testing.assert_allclose(getattr(gpu.params_, name), getattr(cpu.params_, name), rtol=1e-5, atol=1e-7)


def test_gaussian_moe_em_on_cuda_equals_the_cpu_fit():
    from moestat.data.gaussian_scenarios import model1_scenario
    from moestat.estimators.mle import MLEGaussianMoE
    from moestat.estimators.starts import near_truth_init
    from moestat.model.mixing import MixingMeasure

    sc = model1_scenario("exact", 2)
    rng = np.random.default_rng(3)
    XY = [sc.sample(3000, rng) for _ in range(4)]
    X, Y = np.stack([a for a, _ in XY]), np.stack([b for _, b in XY])
    init = MixingMeasure.stack([near_truth_init(sc.truth, sc.k_fit, 0.1, rng, log_last=True) for _ in range(4)])
    cpu = MLEGaussianMoE(n_components=2, compile=False, max_iter=300, device="cpu").fit(X, Y, init=init)
    gpu = MLEGaussianMoE(n_components=2, compile=False, max_iter=300, device="cuda").fit(X, Y, init=init)
    assert cpu.converged_.all() and gpu.converged_.all(), (cpu.status_, gpu.status_)
    # issue 36's bound for the Gaussian-MoE design: the same log-likelihoods within 1e-8 relative
    np.testing.assert_allclose(gpu.loglik_, cpu.loglik_, rtol=1e-8)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_one_lm_step_on_cuda_matches_the_cpu_step(precision):
    from moestat.experiments.lm import lm_autocast
    from moestat.nn.train import make_optimizer
    from moestat.nn.transformer import LMConfig, MoETransformerLM

    cfg = LMConfig(vocab_size=64, context=32, d_model=32, n_layers=2, n_heads=2, n_experts=4, k=2, expert_hidden=64,
                   router="perturbed", dropout=0.0)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 64, (8, 33), generator=g)
    losses, weights = {}, {}
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 on both sides
    try:
        for dev in ("cpu", "cuda"):
            model = MoETransformerLM(cfg, random_state=1).to(dev)
            opt = make_optimizer(model.parameters(), "adam", 1e-3)
            xb = x.to(dev)
            # the CPU side is the float32 reference; bf16 autocast runs on the GPU side only
            with lm_autocast(dev, precision if dev == "cuda" else "fp32"):
                _, loss, _ = model.loss(xb[:, :-1], xb[:, 1:])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay float32
            losses[dev] = float(loss.detach())
            weights[dev] = torch.cat([p.detach().float().cpu().ravel() for p in model.parameters()])
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    if precision == "fp32":
        assert losses["cuda"] == pytest.approx(losses["cpu"], rel=1e-5)
        # one Adam step moves each weight by about lr; the two devices agree far below that
        torch.testing.assert_close(weights["cuda"], weights["cpu"], rtol=0, atol=1e-4)
    else:
        # bfloat16 keeps 8 significant bits: the loss (about log 64 = 4.2) to within a few per cent
        assert losses["cuda"] == pytest.approx(losses["cpu"], rel=0.03)
        assert torch.isfinite(weights["cuda"]).all()
