"""Round 16 (chapter 05, heads): the measures of helpers/heads/compute.py ran a model outside
``model.measuring``: a model whose weights hold NaN gave NaN losses, or a sentence about "weights" that named
no model; a model with dropout in training mode gave another number on every call; a bfloat16 model's
head_scores were refused (its rows sum to 1 only within a few thousandths); a pass that overflowed, or a
hook that made NaN, printed NaN as a number. Also: loss_by_position on one token, or with trace=True or a
cache, stopped in torch or filled the cache; head_scores and read_through_losses ran the model before
refusing a length that does not fit; induction_figures and card_problems met a wrong argument with a raw
KeyError or TypeError; torch_differences met shared key/value heads with a raw RuntimeError; a tokenizer of
another vocabulary (the induction model's on the cat model) gave that world's picture; check_shipped met an
unknown name with an AttributeError; a model of one token met copy_losses with math's ValueError."""
import copy

import numpy as np
import pytest
import torch

from helpers import patching, worlds
from helpers.heads import compute as heads
from helpers.heads import explorer
from helpers.model import Config, KVCache, Transformer

IDS = worlds.repeated_tokens(3, 4, 16, seed=0)   # (3, 9): <BOS>, 4 symbols, the same 4 again
TOKENIZER = worlds.Tokenizer(worlds.induction_vocab(16))
PROMPT = "<BOS> a b a b"


def small(**settings):
    """A small course model of the induction model's vocabulary (16 tokens)."""
    cfg = dict(vocab_size=16, d_model=16, n_heads=4, n_layers=2, d_ff=32, n_max=25)
    return Transformer(Config(**{**cfg, **settings}), seed=0)


def measures(model):
    """Every measure of helpers/heads/compute.py that runs a model, called on ``model``."""
    means = patching.mean_head_outputs(small(), IDS[:, :-1])   # (a model of the same sizes)
    return {
        "layer_weights": lambda: heads.layer_weights(model, IDS),
        "head_scores": lambda: heads.head_scores(model, IDS, 4),
        "loss_by_position": lambda: heads.loss_by_position(model, IDS),
        "copy_losses": lambda: heads.copy_losses(model, IDS, 4),
        "restart_probability": lambda: heads.restart_probability(model, IDS, 4),
        "read_through_losses": lambda: heads.read_through_losses(model, IDS, 4, (0, 1), means),
        "induction_figures": lambda: heads.induction_figures(model, dict(n=3, length=4, seed=0)),
        "head_view": lambda: heads.head_view(model, 1, 0, PROMPT, TOKENIZER),
        "prompt_attention": lambda: heads.prompt_attention(model, TOKENIZER, PROMPT),
    }


NAMES = sorted(measures(None))


def same(a, b):
    """Two measures' results are equal (tensors, arrays, dicts and tuples of them, floats)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (torch.Tensor, np.ndarray)):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


# ------------------------------------------------------------------ finding 1: under model.measuring

@pytest.fixture
def broken():
    model = small()
    with torch.no_grad():
        model.blocks[0].attn.W_Q[0, 0] = float("nan")
    return model


@pytest.mark.parametrize("name", NAMES)
def test_every_measure_refuses_a_model_whose_weights_hold_nan(broken, refused, name):
    before = {key: value.clone() for key, value in broken.state_dict().items()}
    broken.train()
    refused(measures(broken)[name], "weights of the model", "blocks.0.attn.W_Q", "NaN or inf")
    assert all(module.training for module in broken.modules())   # its mode put back
    after = broken.state_dict()
    assert all(torch.equal(before[key].nan_to_num(), after[key].nan_to_num()) for key in before)


def test_the_explorer_refuses_a_nan_model_when_made(broken, refused):
    pytest.importorskip("ipywidgets")
    refused(lambda: explorer.explorer(broken, 0, 0, TOKENIZER, [PROMPT]), "weights of the model", "NaN or inf")


@pytest.mark.parametrize("name", NAMES)
def test_a_model_with_dropout_in_training_mode_gives_one_number_its_eval_modes(name):
    model = small(dropout=0.5).train()
    state = torch.get_rng_state()
    first, again = measures(model)[name](), measures(model)[name]()
    assert torch.equal(state, torch.get_rng_state())
    assert same(first, again)
    assert model.training and all(module.training for module in model.modules())
    model.eval()
    assert same(first, measures(model)[name]())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_a_model_of_another_dtype_is_measured(dtype):
    model = small()
    other = copy.deepcopy(model).to(dtype)
    previous, induction = heads.head_scores(other, IDS, 4)
    expected = heads.head_scores(model, IDS, 4)
    assert torch.allclose(previous.double(), expected[0].double(), atol=0.01)
    assert torch.allclose(induction.double(), expected[1].double(), atol=0.01)
    w = heads.layer_weights(other, IDS)
    assert w.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert torch.allclose(w.sum(-1).double(), torch.ones(()).double(), atol=1e-6)
    losses = heads.copy_losses(other, IDS, 4)
    assert losses["first"] == pytest.approx(heads.copy_losses(model, IDS, 4)["first"], abs=0.02)


@pytest.mark.parametrize("name", NAMES)
def test_nan_made_by_a_hook_is_refused_not_printed(refused, name):
    model = small()
    hook = model.blocks[1].register_forward_hook(lambda module, inputs, output: output * float("nan"))
    words = ("finite numbers", "NaN or inf", "a hook")
    if name == "read_through_losses":   # (its passes replace intermediates: the model's own sentence says it)
        words = ("should give finite logits", "NaN or inf")
    if name in ("layer_weights", "head_scores", "induction_figures", "head_view", "prompt_attention"):
        hook.remove()   # (the weights are made before the hook's block: NaN them in layer 0's output)
        model.blocks[0].register_forward_hook(lambda module, inputs, output: output * float("nan"))
    refused(measures(model)[name], *words)


def test_a_pass_that_overflows_is_refused(refused):
    model = small()
    with torch.no_grad():
        model.blocks[0].attn.W_Q.mul_(1e20)
        model.blocks[0].attn.W_K.mul_(1e20)
    refused(lambda: heads.copy_losses(model, IDS, 4), "the losses should be finite", "overflowed", "float32")
    refused(lambda: heads.layer_weights(model, IDS), "the attention weights should be finite")
    refused(lambda: heads.head_view(model, 0, 0, PROMPT, TOKENIZER), "the attention weights should be finite")


# ------------------------------------------------------------------ finding 2: the same classes

def test_loss_by_position_refuses_one_token_and_switches_that_give_no_logits(refused):
    model = small()
    refused(lambda: heads.loss_by_position(model, [3]), "at least 2 tokens", "(1, 1)")
    refused(lambda: heads.loss_by_position(model, [[0], [3]]), "at least 2 tokens", "(2, 1)")
    refused(lambda: heads.loss_by_position(model, IDS[:1], trace=True), "switches", "'trace'")
    cache = KVCache(2)
    refused(lambda: heads.loss_by_position(model, IDS[:1], cache=cache), "switches", "'cache'")
    assert len(cache) == 0   # not filled
    refused(lambda: heads.copy_losses(model, IDS, 4, casual=False), "switches", "'casual'")


def passes(model):
    """A list that grows by one on every forward pass of ``model``."""
    ran = []
    model.register_forward_pre_hook(lambda module, inputs: ran.append(1))
    return ran


def test_a_length_that_does_not_fit_is_refused_before_any_pass(refused):
    model = small()
    ran = passes(model)
    means = patching.mean_head_outputs(small(), IDS[:, :-1])
    refused(lambda: heads.head_scores(model, IDS, 3), "length 3", "7 tokens", "9")
    refused(lambda: heads.read_through_losses(model, IDS, 3, (0, 1), means), "length 3", "7 tokens", "9")
    refused(lambda: heads.read_through_losses(model, [[0]], 4, (0, 1), means), "9 tokens", "have 1")
    assert ran == []


@pytest.mark.parametrize("test, words", [
    (5, ("test should be a dict of n, length and seed", "5")),
    (dict(n=2), ("test should be a dict", "a dict of n")),
    (dict(n=2, length=4, seed=0, extra=1), ("test should be a dict", "extra")),
    (dict(n=2, length=float("nan"), seed=0), ("test['length']", "nan")),
    (dict(n=2, length=True, seed=0), ("test['length']", "True")),
    (dict(n=True, length=4, seed=0), ("n should be a whole number", "True")),
])
def test_induction_figures_refuses_test_sequences_it_cannot_draw(refused, test, words):
    refused(lambda: heads.induction_figures(small(), test), *words)


def test_induction_figures_and_card_problems_refuse_what_they_cannot_read(refused):
    refused(lambda: heads.induction_figures(None), "the model should be a helpers.model.Transformer", "None")
    refused(lambda: heads.card_problems({}, {}), "figures should be the dict induction_figures", "{}")
    refused(lambda: heads.card_problems(None, None), "figures should be the dict", "None")
    figures = heads.induction_figures(small(), dict(n=2, length=4, seed=0))
    refused(lambda: heads.card_problems(figures, {"targets": {}}), "card should be the induction model's card")
    one_layer = heads.induction_figures(small(n_layers=1), dict(n=2, length=4, seed=0))
    refused(lambda: heads.card_problems(one_layer, {}), "at least 2 layers")


def test_a_model_of_one_token_has_nothing_to_repeat(refused):
    model = small(vocab_size=1)
    refused(lambda: heads.copy_losses(model, [[0] * 5], 2), "at least 2 tokens", "vocab_size=1")


def test_torch_differences_refuses_shared_key_value_heads(refused):
    attn = small(n_kv_heads=1).blocks[0].attn
    refused(lambda: heads.torch_differences(attn, torch.randn(1, 5, 16)), "key and value for each head",
            "4 heads share 1 key/value heads")
    differences = heads.torch_differences(small().blocks[0].attn, torch.randn(1, 5, 16))
    assert max(differences.values()) < 1e-5


def test_a_tokenizer_of_another_vocabulary_is_refused(cat, cat_world, induction, refused):
    refused(lambda: heads.head_view(cat, 0, 0, "<BOS> a b", TOKENIZER), "knows ids 0..19", "its 20 tokens",
            "lists 16", "the model's own tokenizer")
    refused(lambda: heads.head_view(induction, 0, 0, "<BOS> the cat", cat_world), "knows ids 0..15", "lists 20")
    pytest.importorskip("ipywidgets")
    refused(lambda: explorer.explorer(cat, 0, 0, TOKENIZER, ["<BOS> a b"]), "lists 16")
    assert heads.head_view(cat, 0, 0, "<BOS> the cat", cat_world)["tokens"] == ["<BOS>", "the", "cat"]


def test_check_shipped_refuses_an_unknown_name(cat, refused):
    refused(lambda: heads.check_shipped(cat, "dog"), "name should be one of", "'dog'")
    refused(lambda: heads.check_shipped(cat, 5), "name should be one of", "5")
    assert heads.check_shipped(cat, "cat") is cat


@pytest.mark.parametrize("settings", [
    dict(d_ff=0), dict(bias=False), dict(n_kv_heads=1), dict(norm_kind="rmsnorm"), dict(activation="swiglu"),
    dict(norm="post"), dict(norm="none", final_norm=False), dict(positions="rotary"), dict(positions="learned"),
    dict(positions="none"), dict(bias=False, n_kv_heads=2, norm_kind="rmsnorm", activation="swiglu",
                                 positions="rotary", rotary_pairs="halves")],
    ids=lambda settings: ",".join(f"{key}={value}" for key, value in settings.items()))
def test_every_measure_runs_on_every_config_option(settings):
    model = small(**settings)
    for name, call in measures(model).items():
        call()
    previous, induction = heads.head_scores(model, IDS, 4)
    assert previous.shape == induction.shape == (2, 4)
