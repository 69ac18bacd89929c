"""Conv-stem Soft MoE classifier (analogue of the Soft MoE implicit-bias paper's CIFAR-10 model) and its subset evaluation."""

import json

import pytest
import torch

from moestat.cli.common import run_main
from moestat.nn.softmoe import ConvSoftMoEClassifier, SoftMoE
from moestat.nn.subsets import algorithm1_select, subset_predictions
from moestat.cli.cmd_softmoe import main
from moestat.data.images import load_dataset
from moestat.experiments.softmoe_subsets import evaluate_subsets, load_image_tokens


def _imgs(b=6, seed=0, size=8):
    return torch.rand(b, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("grid,channels,size", [(3, (32, 64), 8), (4, (8,), 8), (2, (4, 6), 28)])
def test_shapes_tokens_and_budget(grid, channels, size):
    n = 8
    model = ConvSoftMoEClassifier(n, 10, channels=channels, grid=grid, random_state=0)
    x = _imgs(5, size=size)
    tok = model.tokens(x)
    d = channels[-1]
    assert tok.shape == (5, grid * grid, d)
    assert isinstance(model.layer, SoftMoE) and model.layer.d == d and model.n_experts == n
    assert model(x).shape == (5, 10)
    assert model(x[:, None]).shape == (5, 10)  # explicit channel axis
    # LayerNorm on: every token has mean 0 and unit variance before the affine map (identity at init)
    torch.testing.assert_close(tok.mean(-1), torch.zeros(5, grid * grid), atol=1e-5, rtol=0)
    # expert weights fixed by the budget: 2 * factor * d^2 whatever n (when factor d / n is an integer)
    assert ConvSoftMoEClassifier(4, 10, channels=(32, 64), random_state=0).layer.experts.n_weights() == \
        ConvSoftMoEClassifier(16, 10, channels=(32, 64), random_state=0).layer.experts.n_weights() == 2 * 4 * 64 ** 2


def test_no_token_norm_and_no_residual():
    model = ConvSoftMoEClassifier(4, 3, channels=(4, 6), token_norm=False, random_state=1)
    x = _imgs(3)
    tok = model.tokens(x)
    assert (tok >= 0).all()  # raw ReLU features, pooled: no normalisation
    with torch.no_grad():
        # no residual: zeroing every expert leaves the head bias only
        out = model(x, keep=torch.zeros(4, dtype=torch.bool))
    torch.testing.assert_close(out, model.head.bias.expand(3, 3))


def test_algorithm1_with_k_equal_n_is_the_full_model_and_contributions_add_up():
    model = ConvSoftMoEClassifier(8, 10, random_state=3)
    x = _imgs(7, seed=4)
    with torch.no_grad():
        full = model(x)
        idx = algorithm1_select(model.layer, model.tokens(x), 8)
        torch.testing.assert_close(model(x, experts_idx=idx), full, rtol=1e-5, atol=1e-5)
        contrib, bias = model.expert_contributions(x)
        torch.testing.assert_close(bias + contrib.sum(1), full, rtol=1e-5, atol=1e-5)
        # k < n: the compute-saving path equals the sum of the kept experts' contributions
        idx2 = algorithm1_select(model.layer, model.tokens(x), 2)
        torch.testing.assert_close(model(x, experts_idx=idx2), subset_predictions(contrib, bias, idx2),
                                   rtol=1e-5, atol=1e-5)
        keep = torch.zeros(7, 8, dtype=torch.bool).scatter(1, idx2, True)
        torch.testing.assert_close(model(x, keep=keep), model(x, experts_idx=idx2), rtol=1e-5, atol=1e-5)


def test_seeded_and_bad_input():
    a, b = ConvSoftMoEClassifier(4, 10, random_state=7), ConvSoftMoEClassifier(4, 10, random_state=7)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    c = ConvSoftMoEClassifier(4, 10, random_state=8)
    assert not torch.equal(a.stem[0].weight, c.stem[0].weight)
    with pytest.raises(ValueError, match="images"):
        a(torch.zeros(2, 3, 8, 8))
    with pytest.raises(ValueError, match="channels"):
        ConvSoftMoEClassifier(4, 10, channels=())
    with pytest.raises(ValueError, match="grid"):
        ConvSoftMoEClassifier(4, 10, grid=0)


def test_evaluate_subsets_on_conv_model():
    model = ConvSoftMoEClassifier(4, 10, channels=(4, 8), random_state=0)
    x, y = _imgs(40, seed=1), torch.arange(40) % 10
    rows = evaluate_subsets(model, x, y, [1, 4], n_random=3, random_state=0)
    r1, r4 = rows
    assert r4["alg1"] == pytest.approx(r4["full"]) and r4["pct_retained"] == pytest.approx(100.0)
    assert r1["oracle"] >= r1["alg1"] - 1e-12 and r1["evals_saved"] == pytest.approx(0.75)


def test_digit_inputs_share_the_one_split_and_validation_is_inside_train():
    Xi, yi, Xit, yit = load_image_tokens("digits", arch="conv", split_seed=5)
    Xt, yt, Xtt, ytt = load_image_tokens("digits", arch="patch", patch=4, split_seed=5)
    assert Xi.shape[1:] == (8, 8) and Xt.shape[1:] == (4, 16)
    assert torch.equal(yi, yt) and torch.equal(yit, ytt)
    assert torch.equal(Xt[:, 0], Xi[:, :4, :4].reshape(-1, 16))
    # the one digits split of moestat.data.images: a stratified 20% test split
    ds = load_dataset("digits", val_fraction=0, random_state=5)
    assert torch.equal(yit, torch.from_numpy(ds.y_test)) and len(yit) == 360 and len(yi) == 1437
    X0 = load_image_tokens("digits", arch="conv", split_seed=0)[0]
    Xf, yf, Xv, yv = load_image_tokens("digits", arch="conv", split="val", split_seed=0)
    assert len(yf) + len(yv) == len(X0) and abs(len(yv) - 0.25 * len(X0)) <= 1
    flat = {tuple(r.flatten().tolist()) for r in X0}
    assert all(tuple(r.flatten().tolist()) in flat for r in Xv)  # validation images come from train


@pytest.mark.slow
def test_cli_conv_tiny_run(tmp_path, capsys):
    out = tmp_path / "conv"
    rc = run_main(main, ["subsets", "--dataset", "digits", "--experts", "4", "--epochs", "1", "--model-seeds", "1",
                         "--random-seeds", "3", "--channels", "4,8", "--split", "val", "--out", str(out)],
                  prog="moestat softmoe")
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    res = json.loads((out / "subsets.json").read_text())
    cfg = res["config"]
    assert cfg["arch"] == "conv" and cfg["split"] == "val" and cfg["grid"] == 3 and cfg["token_norm"] is True
    assert res["rows"][0]["n_test"] == cfg["n_test"] and cfg["n_test"] + cfg["n_train"] == 1437  # digits minus its test split
    assert res["models"][0]["hidden"] == 8 and res["rows"][0]["token_dim"] == 8  # 4 * 8 / 4


@pytest.mark.parametrize("argv,msg", [
    (["subsets", "--dataset", "norm", "--arch", "conv"], "--arch applies"),
    (["subsets", "--dataset", "digits", "--patch", "2"], "--patch applies"),
    (["subsets", "--dataset", "digits", "--grid", "0"], "positive"),
    (["subsets", "--dataset", "digits", "--channels", "4,x"], "integers"),
    (["subsets", "--dataset", "digits", "--split", "train"], "invalid choice"),
    (["subsets", "--dataset", "digits", "--arch", "vit"], "invalid choice"),
])
def test_conv_cli_bad_input_exits_2_without_writing(tmp_path, capsys, argv, msg):
    out = tmp_path / "out"
    try:
        rc = run_main(main, argv + ["--out", str(out)], prog="moestat softmoe")
    except SystemExit as e:  # argparse errors exit directly with status 2
        rc = e.code
    cap = capsys.readouterr()
    assert rc == 2
    assert msg in cap.err and len(cap.err.strip().splitlines()) == 1
    assert not out.exists()
