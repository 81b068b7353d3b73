"""Round 15 (reader A, entries 1, 6, 11, 13, 15, 17, 20): the model-level measures of chapters 00-06
refuse a model whose weights hold NaN or inf and measure in eval mode (one shared ``model.measuring``);
training inside course functions leaves torch's global generator alone; each World owns its lists;
scaled_scores takes the inputs its docstring names; dropout_demo counts the memory it makes; the
masking explorer keeps the models it was given."""
import copy
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from helpers import worlds
from helpers.errors import MAX_BYTES
from helpers.masking import compute as masking, explorer as masking_explorer
from helpers.model import Config, Transformer, check_finite_weights, measuring
from helpers.positions import compute as positions, explorer as positions_explorer
from helpers.recipes import CAT_CONFIG
from helpers.scaling import compute as scaling
from helpers.tour import compute as tour, explorer as tour_explorer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def world():
    return worlds.cat_world()


@pytest.fixture
def broken(cat):
    """The cat model with one NaN weight, as a diverged training run leaves it (a copy: the fixture stays whole)."""
    model = copy.deepcopy(cat)
    with torch.no_grad():
        model.blocks[0].attn.W_Q[0, 0] = float("nan")
    return model


def measures(model, world):
    """Every model-level measure of chapters 00-06 that these files hold, called on ``model``."""
    batch = world.batch(world.train[:4])
    return {
        "tour.mean_loss": lambda: tour.mean_loss(model, world),
        "tour.logit_spread": lambda: tour.logit_spread(model, world),
        "tour.top_next": lambda: tour.top_next(model, world, "<BOS> the cat is"),
        "tour.copula_splits": lambda: tour.copula_splits(model, world),
        "tour.prompt_view": lambda: tour.prompt_view(model, world, "<BOS> the cat is"),
        "worlds.next_token_probs": lambda: worlds.next_token_probs(model, world, [["<BOS>", "the"]]),
        "worlds.slot_accuracy": lambda: worlds.slot_accuracy(model, world),
        "worlds.copula_report": lambda: worlds.copula_report(model, world),
        "worlds.rule_accuracy": lambda: worlds.rule_accuracy(model, world),
        "masking.teacher_forced_loss": lambda: masking.teacher_forced_loss(model, world),
        "masking.prefix_scores": lambda: masking.prefix_scores(model, world),
        "masking.model_leak": lambda: masking.model_leak(model, world, "<BOS> the cat sat", "ran"),
        "masking.attention_maps": lambda: masking.attention_maps(model, world, "<BOS> the cat"),
        "masking.heads_from_trace": lambda: masking.heads_from_trace(model, world, ["<BOS> the cat"]),
        "masking.three_regimes": lambda: masking.three_regimes(model, world, "<BOS> the cat sat on", 2),
        "masking.earlier_states": lambda: masking.earlier_states(model, world, "<BOS> the cat", "sat"),
        "masking.future_reading": lambda: masking.future_reading(model, world),
        "masking.sample_sentences": lambda: masking.sample_sentences(model, world, n=2),
        "positions.next_token_view": lambda: positions.next_token_view(model, world, positions.PROMPTS[0]),
        "positions.model_order_demo": lambda: positions.model_order_demo(
            model, world, "<BOS> the cat sat".split(), "<BOS> cat the sat".split()),
        "positions.score_terms": lambda: positions.score_terms(model, world.tokenizer.encode("<BOS> the cat")),
        "positions.shifted_loss": lambda: positions.shifted_loss(model, *batch, 3),
        "scaling.layer_case": lambda: scaling.layer_case(model, "<BOS> the cat".split()),
        "scaling.saturated_share": lambda: scaling.saturated_share(model, batch),
        "scaling.score_path_gradients": lambda: scaling.score_path_gradients(model, batch),
    }


# ------------------------------------------------------------------ A11: NaN or inf weights


@pytest.mark.parametrize("name", sorted(measures(None, worlds.cat_world())))
def test_every_measure_refuses_a_model_whose_weights_hold_nan(broken, world, refused, name):
    before = {key: value.clone() for key, value in broken.state_dict().items()}
    broken.train()   # and puts its mode back
    refused(measures(broken, world)[name], "weights of the model", "blocks.0.attn.W_Q", "NaN or inf")
    assert broken.training and all(module.training for module in broken.modules())
    after = broken.state_dict()
    assert all(torch.equal(before[key].nan_to_num(), after[key].nan_to_num()) for key in before)


def test_an_infinite_embedding_is_named_too(cat, world, refused):
    model = copy.deepcopy(cat)
    with torch.no_grad():
        model.E[3, 1] = float("inf")
    refused(lambda: tour.mean_loss(model, world), "weights of the model", "E holds NaN or inf", "1 of its 120")
    refused(lambda: worlds.slot_accuracy(model, world), "E holds NaN or inf")


def test_positions_row_moves_refuses_nan_positions(world, refused):
    model = Transformer(Config(vocab_size=20, d_model=6, n_heads=2, n_layers=1, d_ff=8, n_max=16,
                               positions="learned"), seed=0)
    with torch.no_grad():
        model.P[2, 0] = float("nan")
    refused(lambda: positions.row_moves(model, 0), "P holds NaN or inf")


def test_the_explorers_refuse_a_nan_model_when_made(broken, world, refused):
    pytest.importorskip("ipywidgets")
    refused(lambda: tour_explorer.explorer(broken, world), "weights of the model", "NaN or inf")
    refused(lambda: positions_explorer.explorer(broken, world), "weights of the model", "NaN or inf")
    refused(lambda: masking_explorer.explorer({"mine": broken}, world), "the model 'mine'", "NaN or inf")


def test_a_whole_model_is_measured_as_before(cat, world):
    """The shipped models have no dropout: eval mode changes no number (the notebooks' outputs)."""
    assert CAT_CONFIG.dropout == 0 and cat.cfg.dropout == 0
    with torch.no_grad():
        inputs, targets = world.batch(world.train)
        logits = cat(inputs)
    keep = targets != -100
    expected = float(torch.nn.functional.cross_entropy(logits[keep], targets[keep]))
    assert tour.mean_loss(cat, world) == expected
    probs = worlds.next_token_probs(cat, world, [["<BOS>", "the", "cat", "is"], ["<BOS>", "the", "mat", "is"]])
    rows = worlds.copula_report(cat, world)
    assert rows[0]["p_class"] == pytest.approx(float(probs[0, [14, 15]].sum()), abs=0)
    assert [r["prompt"] for r in tour.copula_splits(cat, world)][:2] == ["<BOS> the cat is", "<BOS> the cat was"]


def test_the_check_costs_well_under_a_millisecond_on_the_cat_model(cat):
    check_finite_weights(cat)
    times = []
    for _ in range(30):
        start = time.perf_counter()
        with measuring(cat):
            pass
        times.append(time.perf_counter() - start)
    assert sorted(times)[len(times) // 2] < 0.005   # about 0.3 ms on a free core (lenient: a loaded machine)


# ------------------------------------------------------------------ A20: eval mode, one number a seed


def dropout_model():
    cfg = Config(vocab_size=20, d_model=6, n_heads=2, n_layers=2, d_ff=24, n_max=16, dropout=0.5)
    return cfg, Transformer(cfg, seed=0, init="unit")


def test_first_losses_measures_a_fresh_model_with_dropout_in_eval_mode(world):
    cfg, _ = dropout_model()
    state = torch.get_rng_state()
    first = tour.first_losses(cfg, world, seeds=[0], init="unit")
    assert torch.equal(state, torch.get_rng_state())
    assert first == tour.first_losses(cfg, world, seeds=[0], init="unit")
    without = Config(**{**cfg.to_dict(), "dropout": 0.0})
    assert first == tour.first_losses(without, world, seeds=[0], init="unit")


@pytest.mark.parametrize("name", ["tour.mean_loss", "tour.top_next", "worlds.slot_accuracy",
                                  "masking.teacher_forced_loss", "masking.prefix_scores", "masking.model_leak",
                                  "positions.next_token_view", "positions.shifted_loss",
                                  "scaling.score_path_gradients"])
def test_a_model_with_dropout_in_training_mode_gives_one_number(world, name):
    _, model = dropout_model()
    assert model.training
    call = measures(model, world)[name]
    state = torch.get_rng_state()
    first, again = repr(call()), repr(call())
    assert first == again
    assert torch.equal(state, torch.get_rng_state())
    assert model.training and all(module.training for module in model.modules())   # its mode put back


# ------------------------------------------------------------------ A15: torch's global generator


@pytest.mark.parametrize("call", [lambda: scaling.train_with_and_without_scaling(seeds=[0], steps=2),
                                  lambda: masking.book_one_head()], ids=["train_with_and_without_scaling",
                                                                         "book_one_head"])
def test_training_and_building_leave_torchs_global_generator_alone(call):
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    call()
    assert torch.equal(torch.rand(3), expected)


def test_the_runs_are_the_same_as_before():
    """fork_rng changes nothing a run computes: each run seeds itself."""
    a = scaling.train_with_and_without_scaling(seeds=[0], steps=2)
    torch.manual_seed(99)
    torch.rand(7)
    b = scaling.train_with_and_without_scaling(seeds=[0], steps=2)
    assert all(np.array_equal(x["losses"], y["losses"]) for x, y in zip(a, b))
    module, ex = masking.book_one_head()
    assert torch.equal(module.W_q.weight, ex["W_q"].T)


# ------------------------------------------------------------------ A17: each World owns its lists


def test_editing_one_worlds_held_out_changes_no_other_world():
    fresh = worlds.cat_world()
    n_held, n_train = len(fresh.held_out), len(fresh.train)
    mine = worlds.cat_world()
    mine.held_out.remove(mine.held_out[0])
    mine.held_out.append(["<BOS>", "the", "cat", "ran", "fast", "<EOS>"])
    mine.held_out[0].append("oops")
    mine.sentences[0].append("oops")
    again = worlds.cat_world()
    assert (len(again.held_out), len(again.train)) == (n_held, n_train) == (8, 56)
    assert again.held_out == fresh.held_out and again.sentences == fresh.sentences
    mine.held_out.clear()
    assert len(worlds.cat_world().held_out) == 8


def test_a_world_made_from_lists_copies_them():
    held = [["<BOS>", "the", "cat", "is", "big", "<EOS>"]]
    sentences = worlds.cat_sentences()
    world = worlds.World("cat", worlds.Tokenizer(worlds.CAT_VOCAB), sentences, held)
    held.clear()
    sentences[0].append("oops")
    assert world.held_out == [["<BOS>", "the", "cat", "is", "big", "<EOS>"]]
    assert "oops" not in world.sentences[0]
    with pytest.raises(AttributeError):
        worlds.CAT_HELD_OUT.append(["<BOS>"])   # the module's constant cannot be edited in place


# ------------------------------------------------------------------ A1: scaled_scores' inputs


@pytest.fixture
def case(cat):
    return scaling.layer_case(cat, "<BOS> the cat sat".split(), 0)


def reference_scores(case):
    x, W_Q, W_K = (case[k].double() for k in ("x", "W_Q", "W_K"))
    b_Q, b_K = case["b_Q"].double(), case["b_K"].double()
    H, (T, d) = case["n_heads"], x.shape
    q = (x @ W_Q + b_Q).view(T, H, -1).transpose(0, 1)
    k = (x @ W_K + b_K).view(T, H, -1).transpose(0, 1)
    return q @ k.transpose(-2, -1) / (d // H) ** 0.5


@pytest.mark.parametrize("kind", ["numpy x", "list x", "float64 x", "float64 W_Q", "numpy weights", "float16 x",
                                  "bfloat16 x"])
def test_scaled_scores_takes_arrays_lists_and_other_float_dtypes(case, kind):
    args = dict(x=case["x"], W_Q=case["W_Q"], W_K=case["W_K"], b_Q=case["b_Q"], b_K=case["b_K"])
    if kind == "numpy x":
        args["x"] = case["x"].numpy()
    elif kind == "list x":
        args["x"] = case["x"].tolist()
    elif kind == "float64 x":
        args["x"] = case["x"].double()
    elif kind == "float64 W_Q":
        args["W_Q"] = case["W_Q"].double()
    elif kind == "numpy weights":
        args = {name: (value.numpy() if name != "x" else value) for name, value in args.items()}
    elif kind == "float16 x":
        args["x"] = case["x"].half()
    elif kind == "bfloat16 x":
        args["x"] = case["x"].bfloat16()
    scores = scaling.scaled_scores(**args, n_heads=case["n_heads"])
    wide = kind in ("numpy x", "list x", "float64 x", "float64 W_Q", "numpy weights")
    assert scores.dtype == (torch.float64 if wide else torch.float32)
    tolerance = 1e-5 if wide else 3e-2
    assert torch.allclose(scores.double(), reference_scores(case), atol=tolerance, rtol=tolerance)


def test_scaled_scores_counts_its_memory_first(refused):
    x = torch.zeros(100_000, 2)
    W = torch.zeros(2, 2)
    b = torch.zeros(2)
    refused(lambda: scaling.scaled_scores(x, W, W, b, b, 2), "scaled_scores on 100,000 rows", "fewer rows")


# ------------------------------------------------------------------ A6: dropout_demo's memory


def test_dropout_demo_refuses_what_it_cannot_make_within_the_limit(refused):
    message = refused(lambda: masking.dropout_demo(p=0.5, n=MAX_BYTES // 12, value=0.125, seed=1),
                      "dropout_demo", "ask for n <=")
    named = int(message.rsplit("n <= ", 1)[1].replace(",", "").rstrip("."))
    assert named * masking.DROPOUT_BYTES <= MAX_BYTES and named < MAX_BYTES // 12
    out = masking.dropout_demo(p=0.5, n=8, value=0.125, seed=123)   # the Book's numbers, as before
    assert out["train"].tolist() == [0.25, 0.25, 0.0, 0.25, 0.25, 0.0, 0.0, 0.0] and out["zeroed"] == 4
    assert masking.dropout_demo(p=0.1, n=1000, value=0.125, seed=123)["zeroed"] == int(
        (masking.dropout_demo(p=0.1, n=1000, value=0.125, seed=123)["train"] == 0).sum())


def test_dropout_demo_makes_no_more_than_it_counts():
    n = 2**24
    script = textwrap.dedent(f"""
        import resource, torch
        torch.set_num_threads(1)
        from helpers.masking import compute as masking
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        masking.dropout_demo(p=0.5, n={n}, value=0.125, seed=1)
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before) / {n})
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.strip()) <= masking.DROPOUT_BYTES + 0.5


# ------------------------------------------------------------------ A13: the masking explorer's models


def test_the_masking_explorer_keeps_the_models_it_was_given(cat, world):
    pytest.importorskip("ipywidgets")
    other = Transformer(CAT_CONFIG, seed=5, init="unit")
    models = {"mine": cat}
    shown = masking_explorer.explorer(models, world, prompt="<BOS> the cat sat on the mat", causal=True)
    first = shown.picture()
    models["mine"] = other                  # a later cell rebinds the name
    models["new"] = other                   # or adds one
    shown.controls["causal"].value = False
    shown.controls["causal"].value = True
    assert shown.picture() == first
    assert list(shown.controls["model"].options) == ["mine"]
