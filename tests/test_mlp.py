"""Chapter 07 (MLP): the compute, the exercise checks and the explorer."""
import copy
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import grading
from helpers import reference as ref
from helpers.errors import CourseInputError
from helpers.exercises import NOT_ANSWERED
from helpers.explorer import png
from helpers.mlp import checks
from helpers.mlp import compute as mlp
from helpers.mlp import explorer as explore
from helpers.model import Config, Transformer

PRE = np.array([1.050, 0.446, 0.578, -1.281, 0.431, -2.046, 0.553, 1.590])  # the Primer, §6 step 6, row 1


@pytest.fixture(scope="module")
def collected(cat, cat_world):
    return mlp.collect_activations(cat, cat_world)


def test_mlp_forward_shapes_and_linear_collapse():
    rng = np.random.default_rng(0)
    x, W_1, b_1, W_2, b_2 = (rng.normal(size=s) for s in ((4, 6), (6, 8), (8,), (8, 6), (6,)))
    out = mlp.mlp_forward(x, W_1, b_1, W_2, b_2)
    assert out["pre"].shape == (4, 8) and out["act"].shape == (4, 8) and out["out"].shape == (4, 6)
    assert np.allclose(out["act"], ref.gelu(out["pre"]))
    linear = mlp.mlp_forward(x, W_1, b_1, W_2, b_2, activation="none")["out"]
    assert np.allclose(linear, x @ (W_1 @ W_2) + b_1 @ W_2 + b_2)
    with pytest.raises(CourseInputError, match="W_1"):
        mlp.mlp_forward(x, W_2, b_1, W_1, b_2)
    with pytest.raises(CourseInputError, match="activation"):
        mlp.mlp_forward(x, W_1, b_1, W_2, b_2, activation="tanh")


def test_apply_block_mlp_matches_the_trace_and_is_per_token(cat, cat_world):
    trace = cat(cat_world.tokenizer.encode("<BOS> the cat sat"), trace=True)
    for layer in (0, 1):
        h_mid = trace[f"L{layer}.h_mid"]
        assert torch.equal(mlp.apply_block_mlp(cat, layer, h_mid), trace[f"L{layer}.mlp"])
        changed = h_mid.clone()
        changed[1] = torch.randn(6, generator=torch.Generator().manual_seed(0))
        diff = (mlp.apply_block_mlp(cat, layer, changed) - mlp.apply_block_mlp(cat, layer, h_mid)).abs().amax(dim=1)
        assert diff[1] > 0 and diff[[0, 2, 3]].max() == 0
    with pytest.raises(CourseInputError, match="layer"):
        mlp.apply_block_mlp(cat, 2, trace["L0.h_mid"])
    with pytest.raises(CourseInputError, match="shape"):
        mlp.apply_block_mlp(cat, 0, trace["L0.h_mid"][:, :4])


def test_apply_block_mlp_is_the_models_own_sub_block(cat, cat_world):
    changed = copy.deepcopy(cat)
    with torch.no_grad():
        changed.blocks[0].mlp.b_2 += 1.0
    h_mid = cat(cat_world.tokenizer.encode("<BOS> the cat"), trace=True)["L0.h_mid"]
    assert torch.allclose(mlp.apply_block_mlp(changed, 0, h_mid), mlp.apply_block_mlp(cat, 0, h_mid) + 1.0)
    post = Transformer(Config(vocab_size=20, d_model=6, n_heads=2, n_layers=1, d_ff=8, norm="post"))
    trace = post(torch.arange(5), trace=True)
    assert torch.equal(mlp.apply_block_mlp(post, 0, trace["L0.h_mid"]), trace["L0.mlp"])
    with pytest.raises(CourseInputError, match="no MLP"):
        mlp.apply_block_mlp(Transformer(Config(20, 6, 2, 1, d_ff=0)), 0, h_mid)


def test_mlp_weights_are_numpy_copies(cat):
    w = mlp.mlp_weights(cat, 0)
    assert w["W_1"].shape == (6, 8) and w["W_2"].shape == (8, 6)
    w["W_1"][:] = 0
    assert cat.blocks[0].mlp.W_1.abs().sum() > 0
    assert np.array_equal(mlp.mlp_weights(cat, 0)["W_2"], cat.blocks[0].mlp.W_2.detach().numpy())


def dense(counts):
    """The four parts block_counts reports, from a layer_parameters dict."""
    return {part: counts[part] for part in ("attention", "mlp", "norms", "total")}


def test_parameter_counts_by_formula_match_counting(cat, dragon):
    assert mlp.block_counts(cat) == dense(mlp.layer_parameters(6, 8)) == dict(attention=168, mlp=110, norms=24, total=302)
    assert mlp.block_counts(dragon, 2) == dense(mlp.layer_parameters(6, 24))
    assert mlp.layer_parameters(768)["mlp"] == 8 * 768 ** 2 + 3072 + 768
    assert mlp.model_parameters("GPT-2 small")["total"] == 124_439_808
    gpt3 = mlp.model_parameters("GPT-3")
    assert 174e9 < gpt3["total"] < 175e9 and gpt3["mlp"] > 100e9
    with pytest.raises(CourseInputError, match="GPT-4"):
        mlp.model_parameters("GPT-4")


def test_modern_models_match_their_published_totals():
    # the totals Meta and Mistral publish for these configurations
    assert mlp.model_parameters("Llama-2-7B")["total"] == 6_738_415_616
    assert mlp.model_parameters("Llama-2-70B")["total"] == 68_976_648_192
    mixtral = mlp.model_parameters("Mixtral-8x7B")
    assert mixtral["total"] == 46_702_792_704 and mixtral["total_active"] == 12_879_925_248
    attention, ffn = mlp.layer_shares("Llama-2-70B")
    assert 0.17 < attention < 0.18 and 0.82 < ffn < 0.83
    assert mlp.layer_shares("Mixtral-8x7B", active=True)[1] < mlp.layer_shares("Mixtral-8x7B")[1]
    full = mlp.layer_parameters(8192, 28672, bias=False, n_heads=64, ffn="swiglu", norm="rms")
    grouped = mlp.layer_parameters(8192, 28672, bias=False, n_heads=64, n_kv_heads=8, ffn="swiglu", norm="rms")
    assert full["attention"] == 4 * 8192 ** 2 and grouped["attention"] == 2 * 8192 ** 2 + 2 * 8192 * 1024
    assert grouped["mlp"] == 3 * 8192 * 28672 and grouped["norms"] == 2 * 8192
    with pytest.raises(CourseInputError, match="n_kv_heads dividing n_heads"):
        mlp.layer_parameters(64, n_heads=8, n_kv_heads=3)
    with pytest.raises(CourseInputError, match="swiglu"):
        mlp.layer_parameters(64, ffn="relu")


def test_unit_selectivity(collected):
    assert collected["next"].shape == collected["tokens"].shape
    assert (collected["next"][collected["tokens"] == "sat"] == "on").all()
    animals = np.isin(collected["tokens"], ["cat", "dog"])
    s = mlp.unit_selectivity(collected, 0, 4, animals)
    column = collected["act"][0][:, 4]
    assert s["n_in"] == animals.sum() and s["mean_in"] == pytest.approx(column[animals].mean())
    assert s["share_out"] == pytest.approx((column[~animals] > 0.5).mean())
    with pytest.raises(CourseInputError, match="booleans"):
        mlp.unit_selectivity(collected, 0, 4, animals[:10])
    with pytest.raises(CourseInputError, match="not all"):
        mlp.unit_selectivity(collected, 0, 4, np.ones(len(animals), bool))


def test_collected_activations_cover_every_input_position(collected):
    assert len(collected["tokens"]) == 448
    assert collected["act"][0].shape == (448, 8)
    assert np.allclose(collected["act"][1], ref.gelu(collected["pre"][1]), atol=1e-5)


def test_unit_profile_and_value_readout(cat, collected):
    profile = mlp.unit_profile(collected, 0, 4, ["cat", "dog", "mat"])
    assert profile["means"].shape == (3,) and len(profile["top_contexts"]) == 3
    assert len({c for c, _ in profile["top_contexts"]}) == 3
    assert 0 <= profile["share"] <= 1
    assert len(mlp.value_readout(cat, 1, 4)) == 3
    with pytest.raises(CourseInputError, match="unit"):
        mlp.unit_profile(collected, 0, 8, ["cat"])
    with pytest.raises(CourseInputError, match="but '<PAD>' never does"):
        mlp.unit_means(collected, 0, ["<PAD>"])
    with pytest.raises(CourseInputError, match="non-empty list"):   # red team round 4: [] gave an empty (0,) array
        mlp.unit_means(collected, 0, [])


def test_probe_and_its_figure(cat, cat_world, collected):
    result = mlp.probe(cat, cat_world, collected, layer=1, unit=4)
    assert result["words"][0] == "<BOS>" and "<PAD>" not in result["words"]
    assert len(result["promotes"]) == 3
    fig = explore.probe_figure(result)
    assert "layer 1, unit 4" in fig.get_suptitle()
    assert png(fig)[:4] == b"\x89PNG"
    with pytest.raises(CourseInputError, match="collect_activations"):
        mlp.probe(cat, cat_world, None)


def test_explorer_redraws_when_a_control_moves(cat, cat_world):
    shown = explore.explorer(cat, cat_world, layer=0, unit=4)
    assert set(shown.controls) == {"layer", "unit"}
    first = shown.picture()
    assert first[:4] == b"\x89PNG"
    shown.controls["unit"].value = 5
    assert shown.picture() != first


# ------------------------------------------------------------------ checks

def said(check, answer, *args):
    return " ".join(check.feedback(answer, *args))


def test_gelu_check():
    assert checks.gelu_values.feedback(ref.gelu(PRE), PRE) == []
    assert "tanh" in said(checks.gelu_values, checks.gelu_tanh(PRE), PRE)
    assert "ReLU" in said(checks.gelu_values, ref.relu(PRE), PRE)
    assert "shape" in said(checks.gelu_values, PRE[:3], PRE)
    assert "Φ(x) alone" in said(checks.gelu_values, checks.normal_cdf(PRE), PRE)
    assert "differs" in said(checks.gelu_values, ref.gelu(PRE) + 0.01, PRE)
    assert checks.gelu_values.feedback(torch.tensor(ref.gelu(PRE), requires_grad=True), PRE) == []
    assert NOT_ANSWERED in said(checks.gelu_values, None, PRE)
    with pytest.raises(AssertionError, match="tanh"):
        checks.gelu_values.grade(checks.gelu_tanh(PRE), PRE)


def test_mlp_row_check(cat):
    w = mlp.mlp_weights(cat, 0)
    x = np.linspace(-1, 1, 6)
    args = (x, w["W_1"], w["b_1"], w["W_2"], w["b_2"])
    right = ref.gelu(x @ w["W_1"] + w["b_1"]) @ w["W_2"] + w["b_2"]
    assert checks.mlp_row.feedback(right, *args) == []
    assert "ReLU" in said(checks.mlp_row, ref.relu(x @ w["W_1"] + w["b_1"]) @ w["W_2"] + w["b_2"], *args)
    assert "no activation" in said(checks.mlp_row, (x @ w["W_1"] + w["b_1"]) @ w["W_2"] + w["b_2"], *args)
    assert "b_2 is missing" in said(checks.mlp_row, right - w["b_2"], *args)
    assert "adding the residual is the block's job" in said(checks.mlp_row, x + right, *args)
    h_mid = np.linspace(-3, 2, 6)       # the row before the LayerNorm, used in place of x
    unnormed = ref.gelu(h_mid @ w["W_1"] + w["b_1"]) @ w["W_2"] + w["b_2"]
    assert "the row before the LayerNorm (h_mid)" in said(checks.mlp_row, unnormed, *args, h_mid)
    assert checks.mlp_row.feedback(right, *args, h_mid) == []
    assert NOT_ANSWERED in said(checks.mlp_row, None, *args)
    with pytest.raises(AssertionError, match="b_2"):
        checks.mlp_row.grade(right - w["b_2"], *args)


def test_gpt3_mlp_check():
    d = 12288
    assert checks.gpt3_mlp.feedback(8 * d * d * 96) == []
    assert checks.gpt3_mlp.feedback(mlp.model_parameters("GPT-3")["mlp"]) == []
    assert "96" in said(checks.gpt3_mlp, 8 * d * d)
    assert "one of the two" in said(checks.gpt3_mlp, 4 * d * d * 96)
    assert "the count rounded; give it exactly" in said(checks.gpt3_mlp, 1.16e11)
    assert "too small" in said(checks.gpt3_mlp, 10)
    assert "str" in said(checks.gpt3_mlp, "many")
    assert "one number" in said(checks.gpt3_mlp, [1.0, 2.0])
    assert NOT_ANSWERED in said(checks.gpt3_mlp, None)
    with pytest.raises(AssertionError, match="96"):
        checks.gpt3_mlp.grade(8 * d * d)


def test_strongest_unit_check(collected):
    means = mlp.unit_means(collected, 0, ["cat"])[0]
    best, worst = int(np.argmax(means)), int(np.argmin(means))
    other = next(u for u in range(8) if u not in (best, worst))
    assert checks.strongest_unit.feedback(best, collected, 0, "cat") == []
    assert "least" in said(checks.strongest_unit, worst, collected, 0, "cat")
    assert "another unit" in said(checks.strongest_unit, other, collected, 0, "cat")
    assert "units 0 to 7" in said(checks.strongest_unit, 9, collected, 0, "cat")
    assert "whole number" in said(checks.strongest_unit, 4.5, collected, 0, "cat")
    assert checks.strongest_unit.feedback(np.int64(best), collected, 0, "cat") == []
    assert NOT_ANSWERED in said(checks.strongest_unit, None, collected, 0, "cat")
    with pytest.raises(AssertionError, match="another unit"):
        checks.strongest_unit.grade(other, collected, 0, "cat")


def test_strongest_unit_check_names_the_positions_before_the_word(collected):
    """Averaging over the positions just before 'floor' picks its least unit: the check says which positions."""
    before = collected["next"] == "floor"
    wrong = int(np.argmax(collected["act"][0][before].mean(axis=0)))
    assert wrong == int(np.argmin(mlp.unit_means(collected, 0, ["floor"])[0]))
    assert said(checks.strongest_unit, wrong, collected, 0, "floor") == (
        "that unit has the smallest mean over the positions holding 'floor' (it is the largest just before them, "
        "where the next word is 'floor'): select the positions with collected['tokens'] == 'floor' and take the "
        "largest mean")


# ------------------------------------------------------------------ the MLP module (exercise 3)

def gelu_exact(z):
    return 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))


def learner_mlp(forward, transposed=False, biases="when asked", plain=False):
    """A learner's MLP class with the given forward(self, x); ``transposed`` declares W_1 (d_ff,
    d_model) and W_2 (d_model, d_ff); ``biases="always"`` creates b_1, b_2 even with bias=False;
    ``plain`` keeps them as plain tensors, not nn.Parameter."""
    made = (lambda t: t) if plain else nn.Parameter

    class MLP(nn.Module):
        def __init__(self, d_model, d_ff, bias=True):
            super().__init__()
            shapes = ((d_ff, d_model), (d_model, d_ff)) if transposed else ((d_model, d_ff), (d_ff, d_model))
            self.W_1, self.W_2 = (made(torch.empty(*shape)) for shape in shapes)
            keep = bias or biases == "always"
            self.b_1 = made(torch.zeros(d_ff)) if keep else None
            self.b_2 = made(torch.zeros(d_model)) if keep else None

        def bias(self, name):
            value = getattr(self, name)
            return 0 if value is None else value

        def forward(self, x):
            return forward(self, x)
    return MLP


def right_forward(m, x):
    return gelu_exact(x @ m.W_1 + m.bias("b_1")) @ m.W_2 + m.bias("b_2")


def test_the_course_mlp_module_is_the_models_mlp(cat, dragon, cat_world):
    trace = cat(cat_world.tokenizer.encode("<BOS> the cat sat on the mat"), trace=True)
    for layer in (0, 1):
        module = mlp.MLP(6, 8)
        module.load_state_dict(cat.blocks[layer].mlp.state_dict())
        with torch.no_grad():
            assert torch.allclose(module(trace[f"L{layer}.ln2"]), trace[f"L{layer}.mlp"], atol=1e-5, rtol=0)
            assert module(trace[f"L{layer}.ln2"][None]).shape == (1, 7, 6)
    assert sorted(mlp.MLP(6, 24).state_dict()) == sorted(dragon.blocks[0].mlp.state_dict())
    assert sorted(mlp.MLP(6, 8, bias=False).state_dict()) == ["W_1", "W_2"]
    with pytest.raises(CourseInputError, match="d_ff"):
        mlp.MLP(6, 0)


def test_mlp_module_check_passes_right_classes_and_waits_for_the_skeleton(cat, dragon):
    assert checks.mlp_module.feedback(learner_mlp(right_forward), cat, dragon) == []
    own_forward = {"forward": lambda self, x: mlp.MLP.forward(self, x)}   # the course's sums, in a forward of its own
    assert checks.mlp_module.feedback(type("MLP", (mlp.MLP,), own_forward), cat, dragon) == []
    assert "its __init__ and forward are the course's own" in checks.mlp_module.feedback(type("MLP", (mlp.MLP,), {}), cat, dragon)[0]
    assert "the course's own" in checks.mlp_module.feedback(mlp.MLP, cat, dragon)[0]   # (itself: refused, round 9)
    torch_gelu = learner_mlp(lambda m, x: F.gelu(x @ m.W_1 + m.bias("b_1")) @ m.W_2 + m.bias("b_2"))
    assert checks.mlp_module.feedback(torch_gelu, cat, dragon) == []

    class MLP(nn.Module):   # the learner's copy as handed out: the solution regions are comments
        def __init__(self, d_model, d_ff, bias=True):
            super().__init__()

        def forward(self, x):
            """x (..., d_model) -> the MLP's output (..., d_model)."""
    assert said(checks.mlp_module, MLP, cat, dragon).startswith("not answered yet")
    assert said(checks.mlp_module, learner_mlp(lambda m, x: None), cat, dragon).startswith("not answered yet")
    assert NOT_ANSWERED in said(checks.mlp_module, None, cat, dragon)
    assert "not a module built from it" in said(checks.mlp_module, mlp.MLP(6, 8), cat, dragon)
    assert "does not inherit from nn.Module" in said(checks.mlp_module, int, cat, dragon)


MISTAKES = {   # a wrong forward (or declaration) -> the words its diagnosis must contain
    "ReLU": (lambda m, x: F.relu(x @ m.W_1 + m.bias("b_1")) @ m.W_2 + m.bias("b_2"), {}, "that is ReLU"),
    "tanh GELU": (lambda m, x: F.gelu(x @ m.W_1 + m.bias("b_1"), approximate="tanh") @ m.W_2 + m.bias("b_2"), {},
                  "tanh approximation"),
    "GELU after W_2": (lambda m, x: gelu_exact((x @ m.W_1 + m.bias("b_1")) @ m.W_2 + m.bias("b_2")), {},
                       "GELU is applied after W_2"),
    "no activation": (lambda m, x: (x @ m.W_1 + m.bias("b_1")) @ m.W_2 + m.bias("b_2"), {}, "no activation"),
    "b_2 left out": (lambda m, x: gelu_exact(x @ m.W_1 + m.bias("b_1")) @ m.W_2, {}, "b_2 is left out"),
    "b_1 left out": (lambda m, x: gelu_exact(x @ m.W_1) @ m.W_2 + m.bias("b_2"), {}, "b_1 is left out"),
    "residual inside": (lambda m, x: x + right_forward(m, x), {}, "that is x + MLP(x)"),
    "weights declared transposed": (lambda m, x: gelu_exact(x @ m.W_1.T + m.bias("b_1")) @ m.W_2.T + m.bias("b_2"),
                                    dict(transposed=True), "W_1 is declared transposed"),
    "weights used transposed": (lambda m, x: gelu_exact(F.linear(x, m.W_1, m.b_1)) @ m.W_2 + m.bias("b_2"), {},
                                "used transposed?"),
    "biases with bias=False": (right_forward, dict(biases="always"), "with bias=False the MLP has no b_1 and b_2"),
    "plain tensors": (right_forward, dict(plain=True), "loading the trained weights failed: your MLP has no "
                                                       "parameters W_1, W_2, b_1, b_2 (a tensor kept as a plain "
                                                       "attribute is not a parameter"),
    "rows mixed": (lambda m, x: right_forward(m, x).flip(-2), {}, "in the wrong place"),
    "batch scrambled": (lambda m, x: right_forward(m, x if x.dim() < 3 else
                                                   x.reshape(x.shape[1], x.shape[0], -1).transpose(0, 1)), {},
                        "a batch of both cat prompts' last 5 tokens (x of shape (2, 5, 6)): every output row is "
                        "one the model's MLP gives, but in the wrong place"),
    "shape": (lambda m, x: right_forward(m, x).reshape(-1, x.shape[-1]), {}, "it should keep x's shape"),
    "one row made (1, d)": (lambda m, x: right_forward(m, x if x.dim() > 1 else x[None]), {},
                            "forward returned shape (1, 6); it should keep x's shape (6,)"),
    "SiLU": (lambda m, x: F.silu(x @ m.W_1 + m.bias("b_1")) @ m.W_2 + m.bias("b_2"), {}, "that is SiLU"),
    "b_1 after GELU": (lambda m, x: (gelu_exact(x @ m.W_1) + m.bias("b_1")) @ m.W_2 + m.bias("b_2"), {},
                       "b_1 is added after GELU"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_mlp_module_check_names_each_mistake(mistake, cat, dragon):
    forward, options, words = MISTAKES[mistake]
    assert words in said(checks.mlp_module, learner_mlp(forward, **options), cat, dragon)


def test_mlp_module_check_grades_from_records(cat, dragon):
    """Under the course's grader the module runs in the student's kernel and is judged from its
    recorded outputs: the same verdicts."""
    for cls, words in ((learner_mlp(right_forward), None), (MISTAKES["tanh GELU"], "tanh"),
                       (MISTAKES["weights declared transposed"], "declared transposed")):
        if isinstance(cls, tuple):
            cls = learner_mlp(cls[0], **cls[1])
        record = json.loads(json.dumps(grading.record_answer(checks.mlp_module, cls, (cat, dragon), {})))
        found = " ".join(checks.mlp_module.feedback(grading.decode(record), cat, dragon))
        assert (found == "") if words is None else (words in found)
    with pytest.raises(AssertionError, match="that is ReLU"):
        checks.mlp_module.grade(learner_mlp(MISTAKES["ReLU"][0]), cat, dragon)


def test_the_module_check_can_tell_the_tanh_gelu_from_rounding(cat, dragon):
    """The tanh GELU moves every case's output by several times the check's bound; float32
    rounding (the models' own fused products against a float64 recomputation) by far less."""
    for what, args, state, x, expected in checks.module_cases(cat, dragon):
        W_1, W_2 = state["W_1"].double(), state["W_2"].double()
        b_1, b_2 = (state[k].double() if k in state else 0 for k in ("b_1", "b_2"))
        pre = x.double() @ W_1 + b_1
        exact = F.gelu(pre) @ W_2 + b_2
        tanh = F.gelu(pre, approximate="tanh") @ W_2 + b_2
        assert (exact - expected.double()).abs().max() < checks.MODULE_ATOL / 20, what
        assert (tanh - exact).abs().max() > 5 * checks.MODULE_ATOL, what


# ------------------------------------------------------------------- issue 31: every argument checked first

@pytest.mark.parametrize("call, words", [
    (lambda cat, collected: mlp.mlp_weights(cat, "0"), "layer should be a whole number from 0 to 1, but got '0'"),
    (lambda cat, collected: mlp.mlp_weights(cat, True), "layer should be a whole number"),
    (lambda cat, collected: mlp.mlp_weights(None, 0), "Transformer"),
    (lambda cat, collected: mlp.block_counts(cat, 2.0), "layer should be a whole number"),
    (lambda cat, collected: mlp.layer_parameters(4, bias="False"), "bias is a switch"),
    (lambda cat, collected: mlp.layer_parameters(4, bias=None), "bias is a switch"),
    (lambda cat, collected: mlp.layer_parameters(4, ffn=["gelu"]), "ffn should be one of"),
    (lambda cat, collected: mlp.layer_shares("GPT-3", active="False"), "active is a switch"),
    (lambda cat, collected: mlp.model_parameters(["GPT-3"]), "should be one of"),
    (lambda cat, collected: mlp.MLP(4, 8, bias="False"), "bias is a switch"),
    (lambda cat, collected: mlp.MLP(10**6, 10**6), "should need at most 1.5 GiB"),
    (lambda cat, collected: mlp.mlp_forward(np.ones(2), np.ones((2, 2)), np.ones(2), np.ones((2, 2)), np.ones(2),
                                            activation=["gelu"]), "activation should be one of"),
    (lambda cat, collected: mlp.unit_means(collected, True, ["the"]), "layer should be one of"),
    (lambda cat, collected: mlp.unit_means(collected, 0, "the"), "words should be a non-empty list"),
    (lambda cat, collected: mlp.unit_profile(collected, 0, "1", ["the"]), "unit should be a whole number"),
    (lambda cat, collected: mlp.unit_profile(collected, 0, 1, ["the"], top=0), "top should be at least 1"),
    (lambda cat, collected: mlp.unit_selectivity(collected, 0, 1, [[1], [1, 2]]), "where should be"),
    (lambda cat, collected: mlp.unit_selectivity(collected, 0, 1, None, level="0.5"), "level should be a number"),
    (lambda cat, collected: mlp.value_readout(cat, 0, -1), "unit should be a whole number"),
    (lambda cat, collected: mlp.probe(cat, None, {"act": {}}, 0, 0), "collected should be the dict"),
])
def test_issue_31_refusals(call, words, cat, collected):
    with pytest.raises(CourseInputError, match=words) as error:
        call(cat, collected)
    assert "\n" not in str(error.value) and " but " in str(error.value)


def test_issue_31_switches_keep_their_results():
    assert mlp.layer_parameters(8, bias=np.bool_(False)) == mlp.layer_parameters(8, bias=False)
    assert mlp.layer_parameters(8, bias=False) != mlp.layer_parameters(8, bias=True)


@pytest.mark.parametrize("check, answer, args", [
    ("gelu_values", np.zeros(3), dict(x=[[1, 2], [3]])),
    ("gelu_values", np.zeros(3), dict(x=[1.0, float("nan"), 2.0])),
    ("mlp_row", np.zeros(2), dict(x=np.ones(2), W_1=np.ones((2, 3)), b_1=np.ones(3), W_2=np.ones((3, 2)), b_2=None)),
    ("mlp_row", np.zeros(2), dict(x=np.ones(2), W_1=np.ones((2, 3)), b_1=np.ones(4), W_2=np.ones((3, 2)), b_2=np.ones(2))),
    ("strongest_unit", 1, dict(collected=None, layer=0, word="floor")),
    ("strongest_unit", 1, dict(collected="collected", layer="0", word="floor")),
    ("mlp_module", nn.Module, dict(cat=None, dragon=None)),
])
def test_issue_31_checks_refuse_their_own_bad_arguments(check, answer, args):
    said = getattr(checks, check).feedback(answer, **args)
    assert len(said) == 1 and said[0].startswith("the check cannot use what the check cell gives it"), said


def test_issue_31_strongest_unit_refuses_a_bad_layer_and_word(collected):
    for args in (dict(layer="0", word="floor"), dict(layer=0, word=["floor"]), dict(layer=5, word="floor")):
        said = checks.strongest_unit.feedback(1, collected, **args)
        assert said[0].startswith("the check cannot use"), said


def test_collect_activations_checks_every_sentence_before_the_first_pass(cat, cat_world):
    small = mlp.collect_activations(cat, cat_world, [["<BOS>", "the", "cat"]])
    assert list(small["tokens"]) == ["<BOS>", "the"] and small["act"][0].shape == (2, cat.cfg.d_ff)
    for bad, words in (("<BOS> the cat", "non-empty list of sentences"), ([], "non-empty list of sentences"),
                       (["<BOS> the cat"], "sentence 0 is"), ([["<BOS>"]], "sentence 0 is"),
                       ([["<BOS>", "the"], ["<BOS>"] + ["the"] * 2000], "sentence 1 is"),
                       ([["<BOS>", "the"], ["<BOS>", "zebra"]], "vocabulary")):
        with pytest.raises(CourseInputError, match=words):
            mlp.collect_activations(cat, cat_world, bad)
    with pytest.raises(CourseInputError, match="at most 100,000 sentences"):
        mlp.collect_activations(cat, cat_world, [["<BOS>", "the"]] * 100_001)
    with pytest.raises(CourseInputError, match="World"):
        mlp.collect_activations(cat, None)


def test_mlp_module_and_value_readout_refuse_input_they_cannot_read(cat, refused):
    """Red team round 4: x of the wrong width stopped inside the matmul; top past the vocabulary
    was cut to it silently."""
    refused(lambda: mlp.MLP(6, 8)(torch.zeros(3, 5)), "d_model=6", "(3, 5)")
    refused(lambda: mlp.MLP(6, 8)(np.zeros((3, 6))), "torch tensor")
    refused(lambda: mlp.MLP(6, 8)(torch.zeros(3, 6, dtype=torch.float64)), "dtype")
    refused(lambda: mlp.value_readout(cat, 0, 0, top=21), "at most the model's 20 words", "21")
    assert len(mlp.value_readout(cat, 0, 0, top=20)) == 20


def test_a_word_the_corpus_never_feeds_is_refused_in_one_sentence(collected, refused):
    """Red team round 6: "the word 'zebra' never occurs ..." said what went wrong, not what was expected."""
    message = refused(lambda: mlp.unit_means(collected, 0, ["zebra"]), "should occur at an input position",
                      "but 'zebra' never does")
    assert " but " in message


def test_round_7_the_module_check_takes_a_model_given_in_float64(cat, dragon):
    """Red team round 7: chapter 00 makes load_cat().double(); a right MLP class was then told it
    stopped on a dtype mismatch (the check fed float64 rows to the learner's float32 weights)."""
    assert checks.mlp_module.feedback(learner_mlp(right_forward), copy.deepcopy(cat).double(), dragon) == []


def test_round_8_mlp_forward_counts_its_tables_before_making_them(refused):
    """Red team round 8: a broadcast x of 10**8 rows ran 38 s to a MemoryError at 4.5 GB, and small
    inputs with d_ff = 20,000 made a (20000, 20000) hidden layer (2.98 GiB) unchecked."""
    refused(lambda: mlp.mlp_forward(np.broadcast_to(1.0, (10**8, 2)), np.ones((2, 3)), np.zeros(3), np.ones((3, 2)),
                                    np.zeros(2)), "should need at most 1.5 GiB", "100,000,000 rows")
    refused(lambda: mlp.mlp_forward(np.ones((20000, 2)), np.ones((2, 20000)), np.zeros(20000), np.ones((20000, 2)),
                                    np.zeros(2)), "should need at most 1.5 GiB", "20,000")
    refused(lambda: mlp.mlp_forward(np.ones(2), np.ones((2, 3)), np.zeros(1), np.ones((3, 2)), np.zeros(2)),
            "should have shapes (d, d_ff), (d_ff,), (d_ff, d) and (d,)", "(1,)")


def test_round_8_apply_block_mlp_counts_an_expanded_tensor(refused, cat):
    """Red team round 8: h_mid = torch.zeros(1, 6).expand(10**8, 6) (24 bytes stored) reached the allocator."""
    refused(lambda: mlp.apply_block_mlp(cat, 0, torch.zeros(1, 6).expand(10**8, 6)), "should need at most 1.5 GiB")
    refused(lambda: mlp.apply_block_mlp(cat, 0, torch.full((2, 6), float("nan"))), "h_mid should hold finite numbers")


def test_round_8_layer_parameters_refuses_more_active_experts_than_experts(refused):
    """Red team round 8: experts=2, active=3 returned counts."""
    refused(lambda: mlp.layer_parameters(64, experts=2, active=3), "active should be at most experts=2", "3")
    assert mlp.layer_parameters(64, experts=2, active=2)["mlp_active"] == mlp.layer_parameters(64, experts=2)["mlp"]


def test_round_9_mlp_forward_counts_gelu_temporaries_and_its_work(refused):
    """Red team round 9: 10**7 rows of width 2 with d_ff = 3 passed the memory check (1.36 GB by its
    estimate) and then peaked at 3.4 GB over 30 s: GELU's erf goes through Python floats."""
    W_1, W_2 = np.ones((2, 3)), np.ones((3, 2))
    refused(lambda: mlp.mlp_forward(np.broadcast_to(1.0, (10**7, 2)), W_1, np.zeros(3), W_2, np.zeros(2)),
            "should need at most 1.5 GiB", "10,000,000 rows", "3.5 GiB")
    refused(lambda: mlp.mlp_forward(np.ones((10**6, 2)), W_1, np.zeros(3), W_2, np.zeros(2)),
            "at most 2,000,000 hidden activations", "3,000,000")
    assert mlp.mlp_forward(np.ones((4, 2)), W_1, np.zeros(3), W_2, np.zeros(2))["out"].shape == (4, 2)


def test_round_9_apply_block_mlp_refuses_rows_its_float32_norm_cannot_square(refused, cat):
    """Red team round 9: apply_block_mlp(cat, 0, np.full((1, 6), 1e30)) returned all NaN (the float32
    LayerNorm's variance overflows)."""
    refused(lambda: mlp.apply_block_mlp(cat, 0, np.full((1, 6), 1e30)), "h_mid should hold numbers whose squares",
            "float32", "1e+30")
    assert torch.isfinite(mlp.apply_block_mlp(cat, 0, np.full((1, 6), 1e17) * [1, -1, 1, -1, 1, -1])).all()


def test_round_9_unit_profile_checks_collected_before_reading_it(refused):
    """Red team round 9: unit_profile(None, 0, 0, ['cat']) gave 'NoneType' object is not subscriptable."""
    for call in (lambda: mlp.unit_profile(None, 0, 0, ["cat"]), lambda: mlp.unit_means(None, 0, ["cat"])):
        refused(call, "collected should be the dict returned by mlp.collect_activations")
