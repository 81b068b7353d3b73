"""Red team round 16, chapters 07 (MLP) and 08 (LayerNorm): NaN activations gave NaN means and a wrong
strongest unit; an attention-only model's explorer and collect_activations stopped raw; a bfloat16 model
stopped raw in NumPy (and failed a right module answer when float16); collect_activations had no time
budget and did not count its contexts' memory; best_loss built a key per prefix (the square of a
sentence's length) before any size check; prediction_spread took any function's output and a model of
another world with the default batch; plot_stream did not check its ax; the probe figure read its
result without a check."""
import copy
import time
import warnings
from collections import Counter, defaultdict

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from helpers.mlp import checks as mlp_checks  # noqa: E402
from helpers.mlp import compute as mlp  # noqa: E402
from helpers.mlp import explorer as mlp_explorer  # noqa: E402
from helpers.model import Config, Transformer  # noqa: E402
from helpers.normalization import checks as nz_checks  # noqa: E402
from helpers.normalization import compute as nz  # noqa: E402

PNG = b"\x89PNG"
PROMPT = "<BOS> the cat sat"


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    plt.close("all")


@pytest.fixture(scope="module")
def collected(cat, cat_world):
    return mlp.collect_activations(cat, cat_world, cat_world.sentences[:12])


@pytest.fixture(scope="module", params=["bfloat16", "float16"])
def half(request, cat, dragon):
    """(cat, dragon) in a half-precision dtype."""
    dtype = getattr(torch, request.param)
    return copy.deepcopy(cat).to(dtype), copy.deepcopy(dragon).to(dtype)


def attention_only(cat_world):
    return Transformer(Config(vocab_size=len(cat_world.tokenizer.vocab), d_model=6, n_heads=2, n_layers=2, d_ff=0))


def with_nan(model):
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.blocks[0].mlp.W_1[0, 0] = float("nan")
    return broken


# ----------------------------------------------------------------- 1: NaN activations

@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_round_16_activations_that_are_not_finite_are_refused(refused, collected, cat, cat_world, bad):
    broken = copy.deepcopy(collected)
    broken["act"][1][3, 2] = bad
    where = broken["tokens"] == "cat"
    for call in (lambda: mlp.unit_means(broken, 1, ["cat"]), lambda: mlp.unit_selectivity(broken, 1, 2, where),
                 lambda: mlp.unit_profile(broken, 1, 2, ["cat"]), lambda: mlp.corpus_words(broken, ["cat"]),
                 lambda: mlp.probe(cat, cat_world, broken, 0, 0)):
        refused(call, "collected['act'][1] should hold finite numbers", "1 of its")
    said = mlp_checks.strongest_unit.feedback(2, broken, 1, "cat")
    assert len(said) == 1 and said[0].startswith("the check cannot use") and "finite" in said[0], said
    assert np.isfinite(mlp.unit_means(collected, 1, ["cat"])).all()   # the collected dict itself still reads


# ----------------------------------------------------------------- 2: an attention-only model

def test_round_16_an_attention_only_model_is_refused_before_any_work(refused, cat_world):
    model = attention_only(cat_world)
    for call in (lambda: mlp_explorer.explorer(model, cat_world), lambda: mlp.collect_activations(model, cat_world),
                 lambda: mlp.value_readout(model, 0, 0), lambda: mlp.mlp_weights(model, 0),
                 lambda: mlp.apply_block_mlp(model, 0, np.zeros((2, 6)))):
        refused(call, "should have MLP blocks (d_ff > 0)", "d_ff=0")


@pytest.mark.parametrize("settings, words", [(dict(activation="swiglu"), "activation='swiglu'"),
                                             (dict(norm_kind="rmsnorm"), "norm_kind='rmsnorm'"),
                                             (dict(norm="post"), "norm='post'")])
def test_round_16_mlp_weights_refuses_weights_that_do_not_say_what_the_model_computes(refused, settings, words):
    model = Transformer(Config(vocab_size=20, d_model=6, n_heads=2, n_layers=1, d_ff=8, **settings))
    refused(lambda: mlp.mlp_weights(model, 0), "GELU or ReLU MLPs with biases after a LayerNorm", words)


# ----------------------------------------------------------------- 3: bfloat16 and float16 models

def test_round_16_chapter_07_reads_a_half_precision_model(half, cat, cat_world):
    model = half[0]
    sentences = cat_world.sentences[:3]
    mine, theirs = mlp.collect_activations(model, cat_world, sentences), mlp.collect_activations(cat, cat_world, sentences)
    assert mine["act"][0].dtype in (np.float32, np.float16) and mine["act"][0].shape == theirs["act"][0].shape
    assert np.abs(mine["act"][1] - theirs["act"][1]).max() < 0.2
    weights = mlp.mlp_weights(model, 1)
    assert weights["W_1"].dtype == np.float64
    assert np.array_equal(weights["W_1"], model.blocks[1].mlp.W_1.detach().double().numpy())
    assert [i for i, _ in mlp.value_readout(model, 0, 0)] == [i for i, _ in mlp.value_readout(cat, 0, 0)]
    h_mid = cat(cat_world.tokenizer.encode(PROMPT), trace=True)["L0.h_mid"]
    out = mlp.apply_block_mlp(model, 0, h_mid)
    assert out.dtype == model.blocks[0].mlp.W_1.dtype
    assert torch.allclose(out.float(), mlp.apply_block_mlp(cat, 0, h_mid), atol=0.1)
    result = mlp.probe(model, cat_world, mine, 1, 2)
    assert result["means"].dtype in (np.float32, np.float16) and np.isfinite(result["means"]).all()


def test_round_16_chapter_08_reads_a_half_precision_model(half, cat, cat_world):
    ids = cat_world.tokenizer.encode(PROMPT)
    for measure in (nz.residual_norms, nz.embedding_survival):
        (names, mine), (_, theirs) = measure(half[0], ids), measure(cat, ids)
        assert names == nz.residual_names(2) and mine.dtype in (np.float32, np.float16)
        assert np.abs(mine - theirs).max() < 0.1
    assert 0 < nz.prediction_spread(half[0]) <= 1


def test_round_16_the_probe_explorer_draws_a_bfloat16_model(cat, cat_world):
    explorer = mlp_explorer.explorer(copy.deepcopy(cat).bfloat16(), cat_world)
    assert explorer.picture().startswith(PNG)


def right_class(course_class):
    """A learner's class that computes exactly what the course's own does (in a forward of its own)."""
    return type(course_class.__name__, (course_class,), {"forward": lambda self, x: course_class.forward(self, x)})


def test_round_16_module_checks_pass_a_right_answer_for_a_half_precision_model(half, cat, monkeypatch, tmp_path):
    """A float16 cat model made the right LayerNorm differ by 0.0015 and the right MLP by 0.004, a bfloat16 one
    by 0.011 and 0.038: the expected outputs came from the half-precision model's own pass."""
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path))
    low_cat, low_dragon = half
    assert nz_checks.layer_norm_module.feedback(right_class(nz.LayerNorm), low_cat) == []
    if low_cat.blocks[0].mlp.W_1.dtype == torch.bfloat16:   # (the slower two once)
        assert mlp_checks.mlp_module.feedback(right_class(mlp.MLP), low_cat, low_dragon) == []
        assert nz_checks.block_module.feedback(right_class(nz.Block), low_cat) == []
    assert low_cat.blocks[0].mlp.W_1.dtype != torch.float32   # the models given are left as they were
    assert mlp_checks.float32_model(cat) is cat


# ----------------------------------------------------------------- 4: collect_activations' time and memory

def test_round_16_collect_activations_counts_its_work_before_the_first_pass(refused, cat, cat_world):
    start = time.perf_counter()
    refused(lambda: mlp.collect_activations(cat, cat_world, [["<BOS>", "the", "cat"]] * 20_000),
            "collect_activations on 20,000 sentences", "units of work", "fewer or shorter sentences")
    long = ["<BOS>"] + ["the", "cat"] * 512
    refused(lambda: mlp.collect_activations(cat, cat_world, [long] * 500), "GiB", "fewer or shorter sentences")
    assert time.perf_counter() - start < 10   # refused from the sizes, not after the passes
    work, need = mlp.collect_work(cat, cat_world.sentences, texts=True)
    assert work < mlp.MAX_COLLECT_WORK / 100 and need < 2**20   # the notebook's call is far within both


def test_round_16_collect_activations_still_gives_what_it_gave(cat, cat_world, collected):
    sentences = cat_world.sentences[:12]
    assert list(collected["contexts"][:3]) == [" ".join(sentences[0][:t]) for t in (1, 2, 3)]
    with torch.no_grad():
        trace = cat(cat_world.tokenizer.encode(sentences[0][:-1]), trace=True)
    assert np.array_equal(collected["act"][1][:len(sentences[0]) - 1], trace["L1.act"].numpy())
    assert collected["act"][0].dtype == np.float32


# ----------------------------------------------------------------- 5: best_loss counts before it reads

def prefix_table_loss(sentences):
    """best_loss as it was computed before (a key per prefix), for comparison."""
    after = defaultdict(Counter)
    for s in sentences:
        for t in range(1, len(s)):
            after[tuple(s[:t])][s[t]] += 1
    return nz.entropy_of_counts(after.values())


def test_round_16_best_loss_counts_the_words_before_reading_them(refused):
    sentence = ["w"] * 1000
    start = time.perf_counter()
    refused(lambda: nz.best_loss([sentence] * 10**6), "at most 1,000,000 words", "1,000,000,000")
    refused(lambda: nz.best_loss([[]] * (10**6 + 1)), "at most 1,000,000 of them")
    refused(lambda: nz.best_loss([["a", "b"], ["a", 3]]), "each a list of words (strings)")
    assert time.perf_counter() - start < 5


def test_round_16_best_loss_gives_the_same_numbers(cat_world):
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(5)]
    for sentences in (cat_world.train, cat_world.sentences,
                      [[words[i] for i in rng.integers(0, 5, rng.integers(1, 30))] for _ in range(200)]):
        assert nz.best_loss(sentences) == prefix_table_loss(sentences)
    long = [["<BOS>"] + [str(i % 7) for i in range(20_000)]]   # 2 * 10^8 prefix words before: now quick
    start = time.perf_counter()
    assert nz.best_loss(long) == 0.0 and time.perf_counter() - start < 5


# ----------------------------------------------------------------- 6: prediction_spread's model and batch

def test_round_16_prediction_spread_refuses_a_model_of_another_world_or_output(refused, dragon, dragon_world, cat):
    refused(lambda: nz.prediction_spread(dragon), "the cat world's 20 words", "it has 10", "world.batch(world.train)")
    assert 0 <= nz.prediction_spread(dragon, dragon_world.batch(dragon_world.sentences)) <= 1
    refused(lambda: nz.prediction_spread(lambda ids: ids), "float logits of shape", "torch.int64")
    refused(lambda: nz.prediction_spread(lambda ids: None), "float logits of shape", "None")
    refused(lambda: nz.prediction_spread(lambda ids: torch.full((*ids.shape, 20), float("nan"))),
            "the model's logits should hold finite numbers")
    refused(lambda: nz.prediction_spread(with_nan(cat)), "weights of the model should be finite", "blocks.0.mlp.W_1")


def test_round_16_prediction_spread_measures_in_eval_mode_and_leaves_the_mode(cat):
    model = copy.deepcopy(cat).train()
    assert nz.prediction_spread(model) == nz.prediction_spread(cat)
    assert model.training


def test_round_16_other_measures_refuse_a_model_whose_weights_are_not_finite(refused, cat, cat_world, collected):
    broken = with_nan(cat)
    ids = cat_world.tokenizer.encode(PROMPT)
    for call in (lambda: mlp.collect_activations(broken, cat_world), lambda: mlp.value_readout(broken, 0, 1),
                 lambda: mlp.probe(broken, cat_world, collected, 0, 1)):
        refused(call, "weights of the model should be finite")
    refused(lambda: nz.embedding_survival(broken, ids), "residual stream should hold finite", "cosines")


# ----------------------------------------------------------------- 7: the figures check what they draw on

def test_round_16_plot_stream_checks_its_axes_labels_and_title(refused):
    fig, ax = plt.subplots()
    names, tokens = ["h0", "L0.h"], ["a", "b", "c"]
    for bad in (None, "ax", fig, [ax]):
        refused(lambda: nz.plot_stream(bad, names, np.ones((2, 3)), tokens, "t"), "ax should be a matplotlib Axes")
    many = [f"t{i}" for i in range(nz.MAX_STREAM_LINES + 1)]
    refused(lambda: nz.plot_stream(ax, names, np.ones((2, len(many))), many, "t"), "tokens should be a non-empty list of at most 32 texts")
    refused(lambda: nz.plot_stream(ax, names, np.ones((2, 3)), tokens, 5), "title should be a string")
    assert not ax.lines   # nothing drawn by a refused call
    assert nz.plot_stream(ax, names, np.ones((2, 3)), tokens, "fine") is ax and len(ax.lines) == 3


def test_round_16_the_other_figures_refuse_more_than_they_can_draw(refused):
    x = np.arange(65, dtype=float)
    refused(lambda: nz.plot_steps(x, nz.layer_norm_steps(x)), "x should hold 1 to 64 numbers")
    result = dict(loss=1.0, grads=np.ones(3), h_norm=np.ones(10**4))
    refused(lambda: nz.plot_init({"pre": result}), "results['pre']['h_norm'] should hold 1 to 65 numbers")
    refused(lambda: nz.plot_init({"pre": dict(result, h_norm=[1.0, float("nan")])}), "should hold finite numbers")


def test_round_16_the_probe_figure_checks_its_result(refused, cat, cat_world, collected):
    result = mlp.probe(cat, cat_world, collected, 1, 2)
    assert mlp_explorer.probe_figure(result).get_suptitle().startswith("layer 1, unit 2")
    for bad in (None, {}, dict(result, means=result["means"][:-1]), dict(result, top_contexts=[]),
                dict(result, share=2.0), dict(result, means=np.full(len(result["words"]), np.nan))):
        refused(lambda: mlp_explorer.probe_figure(bad), "result")
    refused(lambda: mlp_explorer.probe_title({"layer": 0}), "result should be the dict of mlp.probe")
    refused(lambda: mlp_explorer.probe_panel("cat"), "words should be a list of 1 to 100 words")
    refused(lambda: mlp_explorer.probe_panel(["a"], limits=(1.0, 0.0)), "limits should be (low, high)")
    fig, draw, _ = mlp_explorer.probe_panel(["a", "b"])
    refused(lambda: draw(result), f"this figure's 2 words, but it has {len(result['words'])}")


def test_round_16_collect_activations_refuses_a_sentence_the_model_cannot_place_before_any_pass(
        refused, dragon, dragon_world, monkeypatch):
    passes = []
    monkeypatch.setattr(mlp, "traced_activations", lambda *args: passes.append(args))
    long = ["<BOS>"] + ["dragon", "drinks"] * 100   # the dragon model learned 128 positions
    refused(lambda: mlp.collect_activations(dragon, dragon_world, [["<BOS>", "dragon", "drinks"], long]),
            "at most n_max=128 tokens", "200")
    assert not passes
