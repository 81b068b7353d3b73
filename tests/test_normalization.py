"""Chapter 08 (LayerNorm): helpers.normalization's compute, explorer and checks."""
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import grading

from helpers import reference as ref
from helpers.errors import CourseInputError
from helpers.exercises import NOT_ANSWERED
from helpers.normalization import checks, explorer
from helpers.heads import compute as heads
from helpers.mlp import compute as mlp
from helpers.normalization import compute as nz

H_LAST = np.array([0.054, 0.193, 0.865, 0.679, 0.475, 0.864])
GAMMA = np.array([2.253, 2.390, 2.512, 2.328, 2.723, 2.476])
BETA = np.array([-0.339, -0.496, -0.744, 0.154, -0.418, 0.055])


@pytest.fixture(scope="module")
def curves():
    return nz.load_curves()


# ------------------------------------------------------------ normalization

def test_layer_norm_steps_on_the_seed_vector():
    steps = nz.layer_norm_steps(H_LAST, GAMMA, BETA)
    assert round(steps["mean"], 3) == 0.522 and round(steps["std"], 3) == 0.313
    assert abs(steps["z"].mean()) < 1e-12 and abs(steps["z"].std() - 1) < 1e-3
    np.testing.assert_allclose(steps["out"], ref.layer_norm(H_LAST, GAMMA, BETA))
    ln = torch.nn.LayerNorm(6)
    with torch.no_grad():
        ln.weight.copy_(torch.tensor(GAMMA)), ln.bias.copy_(torch.tensor(BETA))
        np.testing.assert_allclose(ln(torch.tensor(H_LAST, dtype=torch.float32)).numpy(), steps["out"], atol=1e-5)


def test_layer_norm_by_hand_rounds_every_step():
    hand = nz.layer_norm_by_hand(H_LAST, GAMMA, BETA)
    assert hand["mean"] == 0.522 and hand["std"] == 0.313 and hand["var"] == 0.098
    assert hand["z"][0] == -1.495 and hand["out"][0] == -3.707
    exact = nz.layer_norm_steps(H_LAST, GAMMA, BETA, eps=0)["out"]
    assert 0.003 < np.abs(hand["out"] - exact).max() < 0.005
    with_eps = nz.layer_norm_steps(H_LAST, GAMMA, BETA)["out"]
    assert round(exact[0], 3) == -3.703 and round(with_eps[0], 3) == -3.702
    with pytest.raises(CourseInputError, match="gamma and beta"):
        nz.layer_norm_by_hand(H_LAST, GAMMA[:4], BETA)


def test_rounding_spread_and_gamma_for_range():
    spread = nz.rounding_spread(H_LAST, GAMMA, BETA)
    assert spread.shape == (6,) and (spread > 0.004).all() and (spread < 0.01).all()
    assert (nz.rounding_spread(H_LAST, GAMMA, BETA, half_width=0) == 0).all()
    z = nz.layer_norm_steps(H_LAST)["z"]
    for beta in (BETA, np.zeros(6)):
        g = nz.gamma_for_range(z, beta, 9)
        assert np.ptp(g * z + beta) == pytest.approx(9) and np.ptp(0.99 * g * z + beta) < 9
    assert round(nz.gamma_for_range(z, BETA, 9), 2) == 3.33 and round(nz.gamma_for_range(z, 0 * BETA, 9), 2) == 3.48
    with pytest.raises(CourseInputError, match="β alone"):
        nz.gamma_for_range(z, BETA, 0.5)


def test_rms_norm():
    out = nz.rms_norm(H_LAST)
    assert np.linalg.norm(out) == pytest.approx(np.sqrt(6), abs=1e-3) and out.mean() > 0.5
    np.testing.assert_allclose(nz.rms_norm(H_LAST - H_LAST.mean()), ref.layer_norm(H_LAST), atol=1e-9)
    rows = np.stack([H_LAST, 2 * H_LAST])
    np.testing.assert_allclose(nz.rms_norm(rows, GAMMA), np.stack([nz.rms_norm(H_LAST, GAMMA)] * 2), atol=1e-4)
    with pytest.raises(CourseInputError, match="gamma should have d=6"):
        nz.rms_norm(H_LAST, GAMMA[:3])


def test_embedding_survival(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the cat sat")
    names, cosine = nz.embedding_survival(cat, ids)
    assert names == nz.residual_names(2) and cosine.shape == (5, 4)
    np.testing.assert_allclose(cosine[0], 1, atol=1e-6)
    with torch.no_grad():
        trace = cat(ids, trace=True)
    h0, last = trace["h0"][2].numpy(), trace["L1.h"][2].numpy()
    assert cosine[-1, 2] == pytest.approx(h0 @ last / np.linalg.norm(h0) / np.linalg.norm(last), abs=1e-5)


def test_chaotic_runs_print_as_outcomes(curves):
    unigram, best = nz.reference_losses()
    assert nz.chaotic("none", 8) and not nz.chaotic("none", 4) and not nz.chaotic("post", 12)
    assert nz.final_text(nz.get_run(curves, "none", 12, 0.03)["loss"], "none", 12, unigram, best) == "NaN*"
    assert nz.final_text(nz.get_run(curves, "none", 8, 0.03)["loss"], "none", 8, unigram, best) == "other*"
    assert nz.final_text([3.0, 0.5678], "pre", 8, unigram, best) == "0.568"
    assert "212" not in nz.stack_view(curves, 8, 0.03)["text"] and "*" in nz.stack_view(curves, 8, 0.03)["text"]
    with pytest.raises(CourseInputError, match="norm should be one of"):
        nz.chaotic("middle", 4)


def test_layer_norm_steps_rejects_bad_input():
    with pytest.raises(CourseInputError, match="gamma and beta should have d=6"):
        nz.layer_norm_steps(H_LAST, GAMMA[:5], BETA)
    with pytest.raises(CourseInputError, match="at least 2 numbers"):
        nz.layer_norm_steps([1.0])
    with pytest.raises(CourseInputError, match="1-D"):
        nz.layer_norm_steps(np.ones((2, 3)))


def test_residual_norms_follow_the_trace(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the cat sat")
    names, norms = nz.residual_norms(cat, ids)
    assert names == ["h0", "L0.h_mid", "L0.h", "L1.h_mid", "L1.h"]
    assert norms.shape == (5, 4)
    with torch.no_grad():
        trace = cat(ids, trace=True)
    np.testing.assert_allclose(norms[2], trace["L0.h"].norm(dim=-1).numpy())


def test_reference_losses():
    unigram, best = nz.reference_losses()
    assert 0 < best < unigram < np.log(20)
    assert nz.best_loss([["a", "b"], ["a", "c"]]) == pytest.approx(np.log(2) / 1)
    with pytest.raises(CourseInputError, match="-100"):
        nz.unigram_loss(torch.full((2, 3), -100))
    with pytest.raises(CourseInputError, match="at least one sentence"):
        nz.best_loss([])


def test_stack_config_and_bad_placement():
    assert nz.stack_config("pre", 4).final_norm and not nz.stack_config("post", 4).final_norm
    assert nz.stack_config("none", 3).norm == "none" and nz.stack_config("none", 3).n_layers == 3
    with pytest.raises(CourseInputError, match="norm should be one of"):
        nz.stack_config("middle", 4)
    with pytest.raises(CourseInputError, match="n_layers"):
        nz.stack_config("pre", 0)


def test_layer_gradients_at_initialisation():
    results = {norm: nz.layer_gradients(norm, 4) for norm in nz.PLACEMENTS}
    assert all(r["grads"].shape == (4,) and r["h_norm"].shape == (5,) for r in results.values())
    np.testing.assert_allclose(results["post"]["h_norm"][1:], 4.0, atol=1e-3)  # sqrt(d_model)
    assert results["none"]["h_norm"][-1] > results["pre"]["h_norm"][-1] > results["pre"]["h_norm"][0]


def test_a_short_rerun_reproduces_the_shipped_curves(curves):
    """The start of shipped runs, re-trained now, gives the same losses and gradients."""
    batch = nz.cat_batch()
    for norm, n_layers, lr in (("pre", 2, 3e-2), ("post", 4, 1e-2), ("none", 2, 3e-3)):
        live = nz.run_stack(norm, n_layers, lr, curves["steps"], curves["seed"], batch, stop_after=15)
        shipped = nz.get_run(curves, norm, n_layers, lr)
        for name in ("loss", "grad_first"):
            np.testing.assert_allclose(live[name], shipped[name][:15], rtol=1e-4, atol=1e-6)


def test_shipped_grid_is_complete(curves):
    assert len(curves["runs"]) == len(curves["depths"]) * len(curves["lrs"]) * len(nz.PLACEMENTS)
    assert all(len(run["loss"]) == curves["steps"] for run in curves["runs"].values())
    with pytest.raises(CourseInputError, match="the run should be one of the curves' .*, but got pre/7/0.03"):
        nz.get_run(curves, "pre", 7, 3e-2)


def test_train_recording_checks_its_input():
    model = torch.nn.Module()
    with pytest.raises(CourseInputError, match="lr should be > 0"):
        nz.train_recording(model, nz.cat_batch(), 10, lr=0)
    with pytest.raises(CourseInputError, match="steps"):
        nz.train_recording(model, nz.cat_batch(), 0, lr=1e-3)


# ------------------------------------------------------------------- widget

def test_stack_view(curves):
    view = nz.stack_view(curves, 8, 0.03)
    assert set(view["loss"]) == set(nz.PLACEMENTS)
    assert view["steps"].shape == view["loss"]["pre"].shape == (curves["steps"],)
    assert "8 layers" in view["text"]
    with pytest.raises(CourseInputError, match="trained depths"):
        nz.stack_view(curves, 5, 0.03)
    with pytest.raises(CourseInputError, match="trained learning rates"):
        nz.stack_view(curves, 8, 0.5)


def test_explorer_redraws_every_setting(curves, capsys):
    shown = explorer.explorer(curves, n_layers=8, lr=0.03)
    assert set(shown.controls) == {"n_layers", "lr"}
    for depth in curves["depths"]:
        shown.controls["n_layers"].value = depth
        assert shown.picture().startswith(b"\x89PNG")
    assert "12 layers" in explorer.stack_figure(curves, 12, 0.03).texts[-1].get_text()


# ------------------------------------------------------------------- checks

def right_layer_norm(x, gamma, beta, eps=1e-5):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * gamma + beta


def test_layer_norm_check(capsys):
    check = checks.layer_norm_function
    assert check(right_layer_norm)
    check.grade(right_layer_norm)
    sample = lambda x, g, b: (x - x.mean(-1, keepdims=True)) / x.std(-1, ddof=1, keepdims=True) * g + b
    assert not check(sample)
    assert "sample standard deviation" in capsys.readouterr().out
    whole = lambda x, g, b: (x - x.mean()) / np.sqrt(x.var() + 1e-5) * g + b
    assert not check(whole)
    assert "row by row" in capsys.readouterr().out
    no_eps = lambda x, g, b: (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True) * g + b
    assert not check(no_eps)
    assert "left out ε" in capsys.readouterr().out
    eps_outside = lambda x, g, b: (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + 1e-5) * g + b
    assert not check(eps_outside)
    assert "inside the square root" in capsys.readouterr().out
    swapped = lambda x, g, b: right_layer_norm(x, b, g)
    assert not check(swapped)
    assert "swapped" in capsys.readouterr().out
    axis0 = lambda x, g, b: (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5) * g + b
    assert not check(axis0)
    assert "axis 0" in capsys.readouterr().out
    no_affine = lambda x, g, b: right_layer_norm(x, 1.0, 0.0)
    assert not check(no_affine)
    assert "ignores γ and β" in capsys.readouterr().out
    assert not check(3) and "function" in capsys.readouterr().out
    assert not check(lambda x, g, b: "oops") and "array of numbers" in capsys.readouterr().out
    assert not check(lambda x, g, b: x[0]) and "shape" in capsys.readouterr().out
    assert not check(lambda x, g, b: 1 / 0) and "ZeroDivisionError" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="sample standard deviation"):
        check.grade(sample)
    assert not check(None) and NOT_ANSWERED in capsys.readouterr().out


def test_residual_norms_check(capsys, cat, cat_world):
    with torch.no_grad():
        trace = cat(cat_world.tokenizer.encode("<BOS> the dog ran"), trace=True)
    points = ["h0", "L0.h_mid", "L0.h", "L1.h_mid", "L1.h"]
    right = np.stack([trace[p].norm(dim=-1).numpy() for p in points])
    check = checks.residual_norms
    assert check(right, trace, 2)
    assert not check(right ** 2, trace, 2)
    assert "squared" in capsys.readouterr().out
    over_positions = np.stack([trace[p].norm(dim=0).numpy() for p in points])
    assert not check(over_positions, trace, 2)
    assert "last axis" in capsys.readouterr().out
    assert not check(right[::-1], trace, 2)
    assert "differs" in capsys.readouterr().out
    with pytest.raises(AssertionError):
        check.grade(right * 2, trace, 2)
    assert not check(None, trace, 2) and NOT_ANSWERED in capsys.readouterr().out


def test_steps_to_threshold_check(curves, capsys):
    check = checks.steps_to_threshold
    right = {norm: checks.first_below(nz.get_run(curves, norm, 12, 0.03)["loss"], 1.0)
             for norm in nz.PLACEMENTS}
    assert check(right, curves, 12, 0.03, 1.0)
    check.grade(right, curves, 12, 0.03, 1.0)
    reached = [norm for norm, step in right.items() if step is not None]
    assert reached, "some placement should get below a loss of 1.0"
    off_by_one = {**right, reached[0]: right[reached[0]] + 1}
    assert not check(off_by_one, curves, 12, 0.03, 1.0)
    assert "count steps from 0" in capsys.readouterr().out
    assert not check({"pre": 1}, curves, 12, 0.03, 1.0)
    assert "exactly the keys" in capsys.readouterr().out
    assert not check([1, 2, 3], curves, 12, 0.03, 1.0)
    assert "dict" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="not answered"):
        check.grade(None, curves, 12, 0.03, 1.0)


# ------------------------------------------------------------------ figures

def test_figures_draw_and_check_their_input(curves):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = nz.layer_norm_steps(H_LAST, GAMMA, BETA)
    assert len(nz.plot_steps(H_LAST, steps, printed=steps["out"]).axes) == 3
    assert len(nz.plot_init({norm: nz.layer_gradients(norm, 2) for norm in nz.PLACEMENTS}).axes) == 2
    grid = nz.plot_grid(curves, 2.5, 0.56)
    assert len(grid.axes) == 2 * len(curves["lrs"])          # a NaN strip above each panel
    strips = grid.axes[:len(curves["lrs"])]
    marked = [line for ax in strips for line in ax.get_lines()]
    assert len(marked) == 1 and list(marked[0].get_xdata()) == [12]   # none/12/0.03, the one NaN run
    hollow = [line for ax in grid.axes[len(curves["lrs"]):] for line in ax.get_lines()
              if line.get_markerfacecolor() == "white"]
    assert len(hollow) == len(curves["lrs"])                 # the chaotic no-LayerNorm runs
    _, ax = plt.subplots()
    with pytest.raises(CourseInputError, match="points × 3 tokens"):
        nz.plot_stream(ax, ["h0", "L0.h"], np.ones((2, 4)), ["a", "b", "c"], "bad")
    plt.close("all")


def test_run_outcome():
    assert nz.run_outcome([3.0, 0.57], unigram=2.52, best=0.56) == "trained"
    assert nz.run_outcome([3.0, 2.521], unigram=2.52, best=0.56) == "frequencies"
    assert nz.run_outcome([3.0, float("nan"), 5.0], unigram=2.52, best=0.56) == "diverged"
    assert nz.run_outcome([3.0, 1.2], unigram=2.52, best=0.56) == "other"


def test_prediction_spread():
    inputs, targets = nz.cat_batch()
    constant = lambda ids: torch.zeros(*ids.shape, 20)
    assert nz.prediction_spread(constant, (inputs, targets)) < 1e-6
    model, record = nz.train_stack("pre", 2, 3e-2, steps=300, stop_after=40)
    assert len(record["loss"]) == 40 and nz.prediction_spread(model) > 0.01


def test_learning_state_and_outcome_counts(curves):
    assert nz.learning_state([3.0, 1.2], unigram=2.52) == "learns from the context"
    assert nz.learning_state([3.0, 2.525], unigram=2.52) == "is stuck at the frequencies"
    assert nz.learning_state([3.0, 2.3], unigram=2.52) == "is in between"
    assert nz.learning_state([3.0, float("nan")], unigram=2.52) == "has diverged"
    unigram, best = nz.reference_losses()
    found = nz.outcomes(curves, unigram, best)
    assert len(found) == len(curves["runs"])
    counts = nz.outcome_counts(found, "pre")
    assert sum(counts.values()) == len(curves["depths"]) * len(curves["lrs"])


def test_significant_digits_print_without_exponents():
    assert [nz.significant(v) for v in (12832.3, 12820.4, 16.985, 3.99998, 0.000123)] == \
        ["12,800", "12,800", "17.0", "4.00", "0.000123"]
    assert nz.significant(float("nan")) == "nan" and nz.significant(0) == "0"


# ------------------------------------------------------------ the learner's LayerNorm and Block

def said(check, answer, *args):
    return " ".join(check.feedback(answer, *args))


def learner_layer_norm(forward, names=("weight", "bias")):
    """A learner's LayerNorm class with the given forward(self, x)."""
    class LayerNorm(nn.Module):
        def __init__(self, d, eps=1e-5):
            super().__init__()
            self.eps = eps
            setattr(self, names[0], nn.Parameter(torch.ones(d)))
            setattr(self, names[1], nn.Parameter(torch.zeros(d)))

        def forward(self, x):
            return forward(self, x)
    return LayerNorm


def centred(x, dim=-1):
    return x - x.mean(dim=dim, keepdim=True)


def ln_z(m, x):
    return centred(x) / torch.sqrt(x.var(dim=-1, unbiased=False, keepdim=True) + m.eps)


def ln_right(m, x):
    return ln_z(m, x) * m.weight + m.bias


LN_MISTAKES = {   # a wrong forward -> the words its diagnosis must contain
    "over the tokens": (lambda m, x: centred(x, -2) / torch.sqrt(x.var(dim=-2, unbiased=False, keepdim=True) + m.eps)
                        * m.weight + m.bias, "over the tokens"),
    "whole tensor": (lambda m, x: (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + m.eps) * m.weight + m.bias,
                     "whole tensor"),
    "unbiased variance": (lambda m, x: centred(x) / torch.sqrt(x.var(dim=-1, keepdim=True) + m.eps)
                          * m.weight + m.bias, "unbiased variance"),
    "torch.std": (lambda m, x: centred(x) / (x.std(dim=-1, keepdim=True) + m.eps) * m.weight + m.bias,
                  "unbiased variance"),
    "no ε": (lambda m, x: centred(x) / x.std(dim=-1, unbiased=False, keepdim=True) * m.weight + m.bias,
             "ε is missing"),
    "ε outside the root": (lambda m, x: centred(x) / (x.std(dim=-1, unbiased=False, keepdim=True) + m.eps)
                           * m.weight + m.bias, "ε is outside the square root"),
    "divided by the variance": (lambda m, x: centred(x) / (x.var(dim=-1, unbiased=False, keepdim=True) + m.eps)
                                * m.weight + m.bias, "divided by the variance"),
    "weight and bias swapped": (lambda m, x: ln_z(m, x) * m.bias + m.weight, "swapped"),
    "no affine": (ln_z, "not applied"),
    "no bias": (lambda m, x: ln_z(m, x) * m.weight, "bias (β) is not added"),
    "no weight": (lambda m, x: ln_z(m, x) + m.bias, "weight (γ) is not applied"),
    "shift before scale": (lambda m, x: (ln_z(m, x) + m.bias) * m.weight, "bias is added before weight multiplies"),
    "RMSNorm": (lambda m, x: x / torch.sqrt((x ** 2).mean(dim=-1, keepdim=True) + m.eps) * m.weight + m.bias,
                "that is RMSNorm"),
    "no keepdim": (lambda m, x: (x - x.mean(dim=-1)) / torch.sqrt(x.var(dim=-1, unbiased=False) + m.eps)
                   * m.weight + m.bias, "keepdim=True"),
}


def test_the_course_layer_norm_and_block_are_the_models(cat, cat_world):
    trace = cat(cat_world.tokenizer.encode("<BOS> the cat sat on the mat"), trace=True)
    for layer in (0, 1):
        block = nz.Block(6, 2, 8)
        block.load_state_dict(cat.blocks[layer].state_dict())
        ln = nz.LayerNorm(6)
        ln.load_state_dict(cat.blocks[layer].ln2.state_dict())
        with torch.no_grad():
            h = trace["h0" if layer == 0 else "L0.h"][None]
            assert torch.allclose(block(h)[0], trace[f"L{layer}.h"], atol=1e-5, rtol=0)
            assert torch.allclose(ln(trace[f"L{layer}.h_mid"]), trace[f"L{layer}.ln2"], atol=1e-5, rtol=0)
    assert sorted(nz.LayerNorm(6).state_dict()) == sorted(torch.nn.LayerNorm(6).state_dict())
    with pytest.raises(CourseInputError, match="d"):
        nz.LayerNorm(0)


def test_layer_norm_module_check_passes_right_classes_and_waits_for_the_skeleton(cat):
    assert checks.layer_norm_module.feedback(learner_layer_norm(ln_right), cat) == []
    own_forward = {"forward": lambda self, x: nz.LayerNorm.forward(self, x)}   # the course's sums, in a forward of its own
    assert checks.layer_norm_module.feedback(type("LayerNorm", (nz.LayerNorm,), own_forward), cat) == []
    assert "its __init__ and forward are the course's own" in checks.layer_norm_module.feedback(   # a subclass with no code: refused
        type("LayerNorm", (nz.LayerNorm,), {}), cat)[0]   # (round 10)
    assert "the course's own" in checks.layer_norm_module.feedback(nz.LayerNorm, cat)[0]   # (itself: refused)
    by_torch = learner_layer_norm(lambda m, x: F.layer_norm(x, x.shape[-1:], m.weight, m.bias, m.eps))
    assert checks.layer_norm_module.feedback(by_torch, cat) == []

    class LayerNorm(nn.Module):   # the learner's copy as handed out: the solution regions are comments
        def __init__(self, d, eps=1e-5):
            super().__init__()

        def forward(self, x):
            """x (..., d) -> (..., d)."""
    assert said(checks.layer_norm_module, LayerNorm, cat).startswith("not answered yet")
    assert NOT_ANSWERED in said(checks.layer_norm_module, None, cat)
    assert "not a module built from it" in said(checks.layer_norm_module, nz.LayerNorm(6), cat)
    assert "gamma" in said(checks.layer_norm_module, learner_layer_norm(ln_right, ("gamma", "beta")), cat)


@pytest.mark.parametrize("mistake", sorted(LN_MISTAKES))
def test_layer_norm_module_check_names_each_mistake(mistake, cat):
    forward, words = LN_MISTAKES[mistake]
    assert words in said(checks.layer_norm_module, learner_layer_norm(forward), cat)


def learner_block(forward, names=("ln1", "attn", "ln2", "mlp")):
    """A learner's Block class (the course's pieces inside) with the given forward(self, h)."""
    class Block(nn.Module):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__()
            for name, piece in zip(names, (nz.LayerNorm(d_model), heads.MultiHeadAttention(d_model, n_heads),
                                           nz.LayerNorm(d_model), mlp.MLP(d_model, d_ff))):
                setattr(self, name, piece)

        def forward(self, h):
            return forward(self, h)
    return Block


def block_right(m, h):
    h_mid = h + m.attn(m.ln1(h))
    return h_mid + m.mlp(m.ln2(h_mid))


def post_norm(m, h):
    h_mid = m.ln1(h + m.attn(h))
    return m.ln2(h_mid + m.mlp(h_mid))


def parallel(m, h):
    return h + m.attn(m.ln1(h)) + m.mlp(m.ln2(h))


BLOCK_MISTAKES = {
    "post-norm": (post_norm, "post-norm"),
    "no residuals": (lambda m, h: m.mlp(m.ln2(m.attn(m.ln1(h)))), "both residual additions are missing"),
    "attention without residual": (lambda m, h: (lambda mid: mid + m.mlp(m.ln2(mid)))(m.attn(m.ln1(h))),
                                   "the attention part has no residual"),
    "MLP without residual": (lambda m, h: m.mlp(m.ln2(h + m.attn(m.ln1(h)))), "the MLP part has no residual"),
    "parallel block": (parallel, "the MLP reads h instead of h_mid"),
    "ln1 reused": (lambda m, h: (lambda mid: mid + m.mlp(m.ln1(mid)))(h + m.attn(m.ln1(h))), "ln1 is used twice"),
    "ln1 and ln2 swapped": (lambda m, h: (lambda mid: mid + m.mlp(m.ln1(mid)))(h + m.attn(m.ln2(h))), "swapped"),
    "residual around the normed vector": (lambda m, h: (lambda x: (lambda mid: mid + m.mlp(m.ln2(mid)))(
        x + m.attn(x)))(m.ln1(h)), "the residual adds ln1(h)"),
    "no LayerNorm": (lambda m, h: (lambda mid: mid + m.mlp(mid))(h + m.attn(h)), "there is no LayerNorm"),
    "MLP part missing": (lambda m, h: h + m.attn(m.ln1(h)), "the MLP part is missing"),
    "MLP first": (lambda m, h: (lambda mid: mid + m.attn(m.ln1(mid)))(h + m.mlp(m.ln2(h))),
                  "the MLP comes before the attention"),
    "ln2 on the output": (lambda m, h: m.ln2(block_right(m, h)), "the output goes through ln2 once more"),
}


def test_block_module_check_passes_right_classes_and_waits_for_the_skeleton(cat):
    assert checks.block_module.feedback(learner_block(block_right), cat) == []
    own_forward = {"forward": lambda self, h: nz.Block.forward(self, h)}   # the course's sums, in a forward of its own
    assert checks.block_module.feedback(type("Block", (nz.Block,), own_forward), cat) == []
    assert "its __init__ and forward are the course's own" in checks.block_module.feedback(type("Block", (nz.Block,), {}), cat)[0]

    class Block(nn.Module):   # the learner's copy as handed out
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__()

        def forward(self, h):
            """h (B, T, d_model) -> (B, T, d_model)."""
    assert said(checks.block_module, Block, cat).startswith("not answered yet")
    assert "not a module built from it" in said(checks.block_module, nz.Block(6, 2, 8), cat)
    assert "named ln1, attn, ln2 and mlp" in said(checks.block_module,
                                                  learner_block(block_right, ("norm1", "attn", "norm2", "mlp")), cat)


@pytest.mark.parametrize("mistake", sorted(BLOCK_MISTAKES))
def test_block_module_check_names_each_mistake(mistake, cat):
    forward, words = BLOCK_MISTAKES[mistake]
    assert words in said(checks.block_module, learner_block(forward), cat)


def test_module_checks_grade_from_records(cat):
    """Under the course's grader the modules run in the student's kernel and are judged from their
    recorded outputs: the same verdicts."""
    for check, cls, words in ((checks.layer_norm_module, learner_layer_norm(ln_right), None),
                              (checks.layer_norm_module, learner_layer_norm(LN_MISTAKES["no ε"][0]), "ε is missing"),
                              (checks.block_module, learner_block(block_right), None),
                              (checks.block_module, learner_block(post_norm), "post-norm")):
        record = json.loads(json.dumps(grading.record_answer(check, cls, (cat,), {})))
        found = " ".join(check.feedback(grading.decode(record), cat))
        assert (found == "") if words is None else (words in found)
    with pytest.raises(AssertionError, match="parallel block"):
        checks.block_module.grade(learner_block(parallel), cat)


def test_the_module_checks_can_tell_ε_and_the_slips_from_rounding(cat):
    """Every case's expected output is within 1/20 of the bound of a float64 recomputation, and
    on the case with a variance near ε, leaving ε out or putting it outside the root moves the
    output by more than 5x the bound."""
    for what, args, state, x, expected in checks.layer_norm_cases(cat):
        variants = dict((hint.split(":")[0], v) for v, hint in checks.layer_norm_variants(state, x))
        exact = F.layer_norm(x.double(), x.shape[-1:], state["weight"].double(), state["bias"].double(), 1e-5)
        assert (exact - expected.double()).abs().max() < checks.MODULE_ATOL / 20, what
        if "ε" in what:
            for name in ("ε is missing", "ε is outside the square root"):
                assert np.abs(variants[name] - exact.numpy()).max() > 5 * checks.MODULE_ATOL
    for what, args, state, h, expected in checks.block_cases(cat):
        for wrong, hint in checks.block_variants(state, h):
            assert np.abs(wrong - expected.double().numpy()).max() > 5 * checks.MODULE_ATOL, (what, hint)


# ------------------------------------------------------------ the stack without residual connections

def test_the_plain_stack_is_the_pre_ln_stack_without_its_additions(cat_world):
    """Same parameter names and shapes as the pre-LN stack, so the same seed draws the same
    weights; each block returns mlp(ln2(attn(ln1(h)))), with no residual."""
    plain, pre = nz.plain_stack(2), nz.Transformer(nz.stack_config("pre", 2), init="unit")
    plain.reset_parameters(0)
    pre.reset_parameters(0)
    assert [name for name, _ in plain.named_parameters()] == [name for name, _ in pre.named_parameters()]
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), pre.parameters()))
    ids = cat_world.tokenizer.encode("<BOS> the cat sat")
    h = pre.embed(ids[None])
    block = plain.blocks[0]
    with torch.no_grad():
        assert torch.equal(block(h), block.mlp(block.ln2(block.attn(block.ln1(h)))))
        assert not torch.allclose(plain(ids), pre(ids))


def test_a_short_rerun_reproduces_the_shipped_curves_without_residuals():
    """The start of the shipped runs without residual connections, re-trained now, gives the same
    losses and gradients (the chapter re-trains the first 20 steps of the 4-layer run at lr 0.03)."""
    plain = nz.load_plain_curves()
    assert len(plain["runs"]) == len(plain["depths"]) * len(plain["lrs"]) and plain["residual"] is False
    assert all(len(run["loss"]) == plain["steps"] for run in plain["runs"].values())
    batch = nz.cat_batch()
    live = nz.run_plain(4, 3e-2, plain["steps"], plain["seed"], batch, stop_after=20)
    shipped = nz.get_run(plain, "pre", 4, 3e-2)
    np.testing.assert_allclose(live["loss"], shipped["loss"][:20], rtol=1e-4)
    # the first layer's gradient is tiny after a few steps here (1e-3 and below), so another CPU's
    # rounding moves it by far more than 1e-4 of itself; the first step's is the same weights'
    np.testing.assert_allclose(live["grad_first"][0], shipped["grad_first"][0], rtol=1e-4)


def test_without_residuals_the_deep_stacks_are_stuck_at_the_frequencies(curves):
    plain = nz.load_plain_curves()
    unigram, best = nz.reference_losses()
    found = nz.outcomes(plain, unigram, best)
    assert nz.outcome_counts(found, "pre") == {"trained": 2, "frequencies": 6, "diverged": 0, "other": 4}
    assert nz.outcome_counts(nz.outcomes(curves, unigram, best), "pre")["trained"] == 12
    for n in (8, 12):
        assert nz.get_run(plain, "pre", n, 3e-2)["grad_first"][50:].max() < 1e-7


def test_plot_residual():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = nz.plot_residual(nz.load_curves(), nz.load_plain_curves(), unigram=2.5, best=0.56)
    assert len(fig.axes) == 4 and all(len(ax.get_lines()) == 4 for ax in fig.axes)
    plt.close("all")


IN_PLACE = "your function changed {} in place"


def test_the_checks_name_an_input_changed_in_place(capsys, cat):
    """A LayerNorm (function or module) or a Block that writes into its input (x -= mean,
    h += ...) gives right numbers but would change the caller's stream: each check says so."""
    def numpy_in_place(x, g, b, eps=1e-5):
        x -= x.mean(axis=-1, keepdims=True)
        return x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps) * g + b
    assert not checks.layer_norm_function(numpy_in_place)
    assert IN_PLACE.format("x") in capsys.readouterr().out

    def module_in_place(m, x):
        x -= x.mean(dim=-1, keepdim=True)
        return x / torch.sqrt((x ** 2).mean(dim=-1, keepdim=True) + m.eps) * m.weight + m.bias
    assert IN_PLACE.format("x") in said(checks.layer_norm_module, learner_layer_norm(module_in_place), cat)

    def block_in_place(m, h):
        h += m.attn(m.ln1(h))
        h += m.mlp(m.ln2(h))
        return h
    assert IN_PLACE.format("h") in said(checks.block_module, learner_block(block_in_place), cat)


def test_layer_norm_checks_name_plain_tensors_and_a_lost_axis(capsys, cat):
    class LayerNorm(nn.Module):   # weight and bias as plain tensors: not in the state_dict
        def __init__(self, d, eps=1e-5):
            super().__init__()
            self.eps, self.weight, self.bias = eps, torch.ones(d), torch.zeros(d)

        def forward(self, x):
            return ln_right(self, x)
    assert "nn.Parameter" in said(checks.layer_norm_module, LayerNorm, cat)
    no_keepdims = lambda x, g, b: (x - x.mean(axis=-1)) / np.sqrt(x.var(axis=-1) + 1e-5) * g + b
    assert not checks.layer_norm_function(no_keepdims)
    assert "keepdims=True" in capsys.readouterr().out


# ------------------------------------------------------------------- issue 31: every argument checked first

X3 = np.array([1.0, 2.0, 4.0])


@pytest.mark.parametrize("call, words", [
    (lambda: nz.layer_norm_steps(X3, eps=-1), "eps should be >= 0, but got -1"),
    (lambda: nz.layer_norm_steps(X3, eps=float("nan")), "eps should be a finite number"),
    (lambda: nz.layer_norm_steps(np.ones(3), eps=0), "eps should be > 0 for a vector whose entries are all equal"),
    (lambda: nz.rms_norm(np.zeros(3), eps=0), "eps should be > 0"),
    (lambda: nz.LayerNorm(4, eps=0), "eps should be > 0"),
    (lambda: nz.layer_norm_by_hand(X3, np.ones(3), np.zeros(3), decimals="3"), "decimals"),
    (lambda: nz.rounding_spread(X3, np.ones(3), np.zeros(3), n=10**10), "n should be at most 8,388,608"),
    (lambda: nz.rounding_spread(X3, np.ones(3), np.zeros(3), seed=-1), "seed"),
    (lambda: nz.rounding_spread(X3, np.ones(2), np.zeros(3)), "gamma and beta should have d=3"),
    (lambda: nz.gamma_for_range(X3, np.zeros(3), "9"), "target should be a number"),
    (lambda: nz.stack_config("pre", 1000), "n_layers should be at most 64"),
    (lambda: nz.train_stack("pre", 2, 0.01, 10**9), "steps should be at most 10,000"),
    (lambda: nz.train_stack("pre", 10**6, 0.01, 2), "n_layers should be at most 64"),
    (lambda: nz.train_stack("pre", 2, 0.01, 2, seed="0"), "seed"),
    (lambda: nz.train_stack("pre", 2, 0.01, 2, stop_after=0), "stop_after"),
    (lambda: nz.train_stack("pre", 2, 0.01, 2, batch=(torch.zeros(2, 3), torch.zeros(2, 3))),
     r"inputs should be a \(B, T\) tensor of token ids, but got a Tensor of torch.float32 and shape \(2, 3\)"),
    (lambda: nz.train_stack("pre", 2, 0.01, 2, batch=(torch.zeros(2000, 1000, dtype=torch.long),) * 2),
     "should need at most 1.5 GiB"),
    (lambda: nz.run_plain(2, "0.03", 2), "lr should be a number"),
    (lambda: nz.layer_gradients("pre", 2, seed=2**70), "seed"),
    (lambda: nz.build_curves(depths=(2, 100)), "n_layers should be at most 64"),
    (lambda: nz.chaotic("none", "8"), "n_layers"),
])
def test_issue_31_refusals(call, words):
    with pytest.raises(CourseInputError, match=words) as error:
        call()
    assert "\n" not in str(error.value) and " but " in str(error.value)


def test_issue_31_eps_zero_keeps_the_hand_computation():
    no_eps = nz.layer_norm_steps(X3, eps=0)["z"]
    np.testing.assert_allclose(no_eps, (X3 - X3.mean()) / X3.std())


def test_issue_31_views_refuse_bad_lr_and_depth(curves):
    for call in (lambda: nz.stack_view(curves, 8, "0.03"), lambda: nz.get_run(curves, "pre", "8", 0.03),
                 lambda: nz.get_run(None, "pre", 8, 0.03), lambda: nz.get_run(curves, ["pre"], 8, 0.03)):
        with pytest.raises(CourseInputError):
            call()


def test_issue_31_explorer_refuses_a_depth_it_has_no_runs_for(curves):
    from helpers.normalization import explorer
    for bad in (7, "8", 8.0, True):
        with pytest.raises(CourseInputError, match="n_layers should be one of the trained depths 2, 4, 8, 12"):
            explorer.explorer(curves, n_layers=bad)


@pytest.mark.parametrize("check, answer, args", [
    ("residual_norms", np.zeros((5, 4)), dict(trace=None, n_layers=2)),
    ("residual_norms", np.zeros((5, 4)), dict(trace={}, n_layers=2)),
    ("residual_norms", np.zeros((5, 4)), dict(trace={}, n_layers=10**9)),
    ("residual_norms", np.zeros((5, 4)), dict(trace={}, n_layers="2")),
    ("steps_to_threshold", {"pre": 1, "post": 1, "none": 1}, dict(curves=None, n_layers=8, lr=0.003, threshold=1.0)),
    ("layer_norm_module", nn.Module, dict(cat=None)),
    ("block_module", nn.Module, dict(cat="cat")),
])
def test_issue_31_checks_refuse_their_own_bad_arguments(check, answer, args):
    said = getattr(checks, check).feedback(answer, **args)
    assert len(said) == 1 and said[0].startswith("the check cannot use what the check cell gives it"), said


def test_issue_31_steps_check_refuses_bad_lr_and_threshold(curves):
    for args in (dict(lr="0.003", threshold=1.0), dict(lr=0.003, threshold=None), dict(lr=0.005, threshold=1.0)):
        said = checks.steps_to_threshold.feedback({"pre": 1, "post": 1, "none": 1}, curves, 8, **args)
        assert len(said) == 1 and said[0].startswith("the check cannot use"), said


def test_issue_31_stream_measures_need_a_model():
    for call in (lambda: nz.residual_norms(None, [0, 1]), lambda: nz.embedding_survival("cat", [0, 1])):
        with pytest.raises(CourseInputError, match="should be a helpers.model.Transformer"):
            call()


def test_layer_norm_by_hand_refuses_a_constant_x_instead_of_dividing_by_zero():
    with pytest.raises(CourseInputError, match="x should vary"):
        nz.layer_norm_by_hand([2.0, 2.0, 2.0], [1, 1, 1], [0, 0, 0])
    with pytest.raises(CourseInputError, match="finite"):
        nz.layer_norm_by_hand([2.0, float("nan"), 1.0], [1, 1, 1], [0, 0, 0])


def test_the_outcome_helpers_check_their_arguments():
    curves = nz.load_curves()
    unigram, best = nz.reference_losses()
    for call, words in ((lambda: nz.run_outcome(None, unigram, best), "loss is None"),
                        (lambda: nz.run_outcome([], unigram, best), "at least one"),
                        (lambda: nz.run_outcome([True], unigram, best), "True/False"),
                        (lambda: nz.run_outcome([1.0], unigram, best, near="0.05"), "near should be a number"),
                        (lambda: nz.final_text([[1.0]], "pre", 2, unigram, best), "1-D"),
                        (lambda: nz.final_text([1.0], "pre", 2, float("nan"), best), "unigram should be a finite"),
                        (lambda: nz.learning_state("x", unigram), "loss should be an array"),
                        (lambda: nz.learning_state([1.0], -1), "unigram should be >= 0"),
                        (lambda: nz.significant("3"), "value should be a number"),
                        (lambda: nz.significant(3.0, 0), "digits should be at least 1"),
                        (lambda: nz.significant(10**400), "a float can hold"),
                        (lambda: nz.outcomes(None, unigram, best), "curves should be"),
                        (lambda: nz.outcomes(curves, unigram, None), "best should be a number"),
                        (lambda: nz.outcome_counts(None, "pre"), "found should be"),
                        (lambda: nz.outcome_counts({}, "False"), "norm should be one of")):
        with pytest.raises(CourseInputError, match=words):
            call()
    assert nz.significant(torch.tensor(12832.0)) == "12,800" and nz.significant(float("nan")) == "nan"
    assert nz.run_outcome([1.0, float("nan")], unigram, best) == "diverged"


def test_layer_norm_gamma_for_range_and_unigram_loss_refuse_what_they_cannot_use(refused):
    """Red team round 4: a LayerNorm fed the wrong width stopped in broadcasting; a constant z
    stopped in min() of nothing; float targets gave a loss of -0.0."""
    refused(lambda: nz.LayerNorm(4)(torch.zeros(2, 3)), "d_model=4", "(2, 3)")
    refused(lambda: nz.LayerNorm(4)([1.0, 2.0, 3.0, 4.0]), "torch tensor")
    assert nz.LayerNorm(4)(torch.zeros(2, 4, dtype=torch.float64)).dtype == torch.float64   # promoted, as before
    refused(lambda: nz.gamma_for_range(np.zeros(4), np.zeros(4), 1.0), "two different values")
    refused(lambda: nz.gamma_for_range([0.0, np.nan], np.zeros(2), 1.0), "finite")
    refused(lambda: nz.unigram_loss(torch.full((2, 3), 0.5)), "token ids", "float32")
    refused(lambda: nz.unigram_loss(torch.tensor([[1, -5]])), "token ids", "-100")
    assert nz.unigram_loss(torch.tensor([[1, 2, -100]])) == pytest.approx(np.log(2))


def test_nan_is_refused_not_normalised(refused):
    """Red team round 6: layer_norm_steps of NaN gave a dict of NaN as its steps."""
    refused(lambda: nz.layer_norm_steps(np.full(6, np.nan)), "x should hold finite numbers", "6 of its 6")
    refused(lambda: nz.layer_norm_steps(X3, beta=[0.0, np.inf, 0.0]), "beta should hold finite numbers")
    refused(lambda: nz.rounding_spread(X3, [1.0, np.nan, 1.0], np.zeros(3), n=2), "gamma should hold finite numbers")


def test_chaotic_is_a_rule_any_grid_can_use(curves):
    """Red team round 6 said chaotic('pre', 5) answers for a depth never trained; an outside review
    found that refusing it broke plot_grid, final_text and stack_view on a grid of other depths
    (build_curves(depths=...)). It is a rule, measured on the shipped grid's depths, and says so."""
    assert [nz.chaotic("none", n) for n in nz.GRID["depths"]] == [False, False, True, True]
    assert nz.chaotic("none", 16) and not nz.chaotic("pre", 5)
    grid = dict(curves, depths=[2, 4, 8, 16], runs={k.replace("/12/", "/16/"): v for k, v in curves["runs"].items()})
    nz.stack_view(grid, 16, grid["lrs"][0])

def test_round_8_layer_norm_refuses_numbers_whose_squares_overflow(refused):
    """Red team round 8: layer_norm_steps([1e200, -1e200, 0]) returned std inf and out [0, 0, 0]
    (LayerNorm of it is about [1.22, -1.22, 0])."""
    for call in (lambda: nz.layer_norm_steps(np.array([1e200, -1e200, 0.0])),
                 lambda: nz.layer_norm_by_hand(np.array([1e200, -1e200, 0.0]), np.ones(3), np.zeros(3)),
                 lambda: nz.rms_norm(np.array([[1e200, -1e200, 0.0]]))):
        refused(call, "x should hold numbers whose squares stay finite", "1e+200")
    assert np.allclose(nz.layer_norm_steps(np.array([1e150, -1e150, 0.0]))["out"], [1.2247, -1.2247, 0], atol=1e-4)
    refused(lambda: nz.rms_norm(np.array([1.0, np.nan])), "x should hold finite numbers")


def test_round_8_layer_norm_module_counts_its_bytes(refused):
    """Red team round 8: LayerNorm(10**12) reached the allocator (4 TB); an expanded input too."""
    refused(lambda: nz.LayerNorm(10**12), "LayerNorm(1,000,000,000,000) should need at most 1.5 GiB")
    refused(lambda: nz.LayerNorm(16)(torch.zeros(1, 16).expand(10**8, 16)), "should need at most 1.5 GiB")


def test_round_8_next_token_loss_checks_shapes_and_ids(refused):
    """Red team round 8: mismatched shapes raised torch's ValueError, a target of 7 among 5 tokens IndexError."""
    refused(lambda: nz.next_token_loss(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long)),
            "targets should be a tensor of token ids", "(2, 3)", "(2, 4)")
    refused(lambda: nz.next_token_loss(torch.zeros(2, 3, 5), torch.full((2, 3), 7)), "from 0 to 4", "7")
    refused(lambda: nz.next_token_loss(torch.zeros(2, 3, 5), torch.zeros(2, 3)), "dtype torch.long")
    refused(lambda: nz.next_token_loss([[1.0]], torch.zeros(2, 3, dtype=torch.long)), "logits should be")
    assert float(nz.next_token_loss(torch.zeros(2, 3, 5), torch.full((2, 3), -100).index_fill(1, torch.tensor([0]), 4))) \
        == pytest.approx(np.log(5))


def test_round_9_layer_norm_by_hand_rounds_large_numbers_without_overflow():
    """Red team round 9: [1e150, -1e150] with 15 decimals gave squares, var and std inf and z = [0, -0]:
    np.round scales by 10**decimals first. A number of 2**52 or more has no fraction and is kept."""
    got = nz.layer_norm_by_hand([1e150, -1e150], [1, 1], [0, 0], 15)
    assert np.isfinite(got["squares"]).all() and np.isfinite(got["var"]) and got["std"] == 1e150
    assert got["z"].tolist() == [1.0, -1.0]
    assert nz.layer_norm_by_hand([1.0, 2.0, 4.0], [1, 1, 1], [0, 0, 0], 3)["mean"] == 2.333


def test_round_9_the_chapter_numbers_are_finite_or_refused(refused):
    """Red team round 9: best_loss([[]]) and best_loss('the cat') divided by zero; rounding_spread with
    half_width=1e308 a raw OverflowError; gamma_for_range([0, 5e-324], [0, 0], 1.0) returned inf;
    learning_state([inf], 3.0) said "is in between"; next_token_loss with every target -100 (or NaN logits)
    returned NaN; significant(-0.0) gave '-0' and unigram_loss([[1]]) -0.0; final_text printed 'nan'."""
    refused(lambda: nz.best_loss([[]]), "at least one sentence of two words")
    refused(lambda: nz.best_loss("the cat"), "each a list of words")
    refused(lambda: nz.rounding_spread([1.0, 2.0], [1, 1], [0, 0], half_width=1e308), "half_width",
            "squares stay finite")
    refused(lambda: nz.gamma_for_range([0, 5e-324], [0, 0], 1.0), "finite γ", "4.94e-324")
    assert nz.learning_state([float("inf")], 3.0) == "has diverged"
    logits = torch.zeros(1, 2, 3)
    refused(lambda: nz.next_token_loss(logits, torch.full((1, 2), -100)), "every entry is -100")
    refused(lambda: nz.next_token_loss(torch.full((1, 2, 3), float("nan")), torch.zeros(1, 2, dtype=torch.long)),
            "logits should hold finite numbers")
    assert nz.significant(-0.0) == "0" and nz.significant(0.0) == "0"
    assert str(nz.unigram_loss([[1]])) == "0.0"
    assert nz.final_text([3.0, float("nan")], "pre", 2, 2.0, 1.0) == "NaN"
