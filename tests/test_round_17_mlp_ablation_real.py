"""Red team round 17, reader B, chapters 07 (MLP), 10 (ablation) and 11 (the real model): every ablation
function that takes a model refuses what is no course model of its world in one sentence (entry 2), and a
reference made by another model (a result for the wrong model); unit_profile refuses a top above the
contexts there are (entry 5); temperature_view's logits must be the prompt's own (entry 9);
layer_parameters counts SwiGLU's gate bias and answers an attention-only layer (entry 10)."""
import itertools

import pytest
import torch

from helpers import patching, worlds
from helpers.ablation import checks as ablation_checks
from helpers.ablation import compute as ablation
from helpers.mlp import compute as mlp
from helpers.model import Config, Transformer
from helpers.real import compute as real


# ------------------------------------------------------------ entry 2: no course model, no answer

def model_calls(world, ids):
    """{name: call(model)} for every function of ablation that takes a model."""
    clean, corrupt, _ = ablation.class_pairs(world)
    return {
        "without_attention_blocks": lambda m: ablation.without_attention_blocks(m, torch.tensor([1, 2])),
        "zeroed_copy": lambda m: ablation.zeroed_copy(m),
        "configurations": lambda m: ablation.configurations(m),
        "prompt_row": lambda m: ablation.prompt_row(m, world, "<BOS> the cat is"),
        "damage_row": lambda m: ablation.damage_row(m, world),
        "attention_on_subject": lambda m: ablation.attention_on_subject(m, world),
        "class_probability_drop": lambda m: ablation.class_probability_drop(m, world),
        "cat_scores": lambda m: ablation.cat_scores(m, world),
        "cat_ablation": lambda m: ablation.cat_ablation(m, world, [(0, 0)], "mean"),
        "induction_reference": lambda m: ablation.induction_reference(m, ids),
        "induction_ablation": lambda m: ablation.induction_ablation(m, ids, [(0, 0)], "mean"),
        "copula_figures": lambda m: ablation.copula_figures(m, world),
        "per_pair": lambda m: ablation.per_pair(patching.patch_heads, m, clean, corrupt, ablation.logit_difference(world)),
        "rule_ablation": lambda m: ablation.rule_ablation(m, world, [(0, 0)], "mean"),
        "rule_probs": lambda m: ablation.rule_probs(m, world, [(0, 0)], "mean"),
        "value_bias_write": lambda m: ablation.value_bias_write(m),
        "value_zeroed_copy": lambda m: ablation.value_zeroed_copy(m),
        "induction_direct_effects": lambda m: ablation.induction_direct_effects(m, ids),
        "CatLab": lambda m: ablation.CatLab(m, world),
        "AnyLab": lambda m: ablation.AnyLab(m, world.tokenizer, ["<BOS> the cat is"]),
        "check lens_row": lambda m: ablation_checks.lens_inputs({}, "h0", m),
    }


@pytest.mark.parametrize("bad", [torch.nn.Linear(3, 3), None, "cat"], ids=["Linear", "None", "text"])
def test_every_ablation_function_refuses_what_is_no_course_model(refused, cat_world, bad):
    """class_probability_drop(nn.Linear(3, 3), world) stopped in a raw RuntimeError; AnyLab(None, ...) in an
    AttributeError."""
    ids = worlds.repeated_tokens(2, 3, 16, 0)
    for name, call in model_calls(cat_world, ids).items():
        refused(lambda: call(bad), "model", "Transformer")


def test_class_probability_drop_refuses_another_worlds_model(refused, dragon, cat_world):
    refused(lambda: ablation.class_probability_drop(dragon, cat_world), "model", "vocabulary")


def test_any_lab_checks_its_tokenizer_and_takes_a_world(refused, cat, cat_world):
    """AnyLab(model, None or 3.5, prompts) stopped in an AttributeError; AnyLab(model, world, ...) too,
    though the explorer it serves takes a World."""
    for bad in (None, 3.5):
        refused(lambda: ablation.AnyLab(cat, bad, ["<BOS> the cat is"]), "tokenizer")
    lab = ablation.AnyLab(cat, cat_world, ["<BOS> the cat is", "<BOS> the dog was"])
    assert lab.tokenizer is cat_world.tokenizer
    same = ablation.AnyLab(cat, cat_world.tokenizer, ["<BOS> the cat is", "<BOS> the dog was"])
    assert torch.equal(lab.view("<BOS> the cat is", [(0, 0)], "mean")["probs"],
                       same.view("<BOS> the cat is", [(0, 0)], "mean")["probs"])


def test_induction_reference_of_another_model_is_refused(refused, induction):
    """A reference dict made by another model of the same sizes gave that model's means silently, and one of
    other sizes stopped in a sentence about means[1]."""
    ids = worlds.repeated_tokens(4, 8, induction.cfg.vocab_size, 0)
    twin = Transformer(induction.cfg, seed=3)
    small = Transformer(Config(vocab_size=induction.cfg.vocab_size, d_model=16, n_heads=4, n_layers=2, d_ff=0,
                               n_max=25, positions="rotary"), seed=1)
    own = ablation.induction_reference(induction, ids)
    right = ablation.induction_ablation(induction, ids, [(1, 0)], "mean")
    assert ablation.induction_ablation(induction, ids, [(1, 0)], "mean", reference=own) == right
    for other in (twin, small):
        reference = ablation.induction_reference(other, ids)
        for call in (lambda: ablation.induction_ablation(induction, ids, [(1, 0)], "mean", reference=reference),
                     lambda: ablation.induction_ablation(induction, ids, [(1, 0)], "resample", reference=reference),
                     lambda: ablation.induction_direct_effects(induction, ids, [(1, 0)], reference)):
            refused(call, "reference", "induction_reference", "this model")
    tampered = dict(own, means={True: own["means"][True], False: own["means"][True]})
    refused(lambda: ablation.induction_ablation(induction, ids, [(1, 0)], "mean", False, reference=tampered),
            "reference", "means")


# ------------------------------------------------------------ entry 5: top above the contexts there are

@pytest.fixture(scope="module")
def collected():
    from helpers.weights import load_cat
    return mlp.collect_activations(load_cat(), worlds.cat_world())


def test_unit_profile_refuses_top_above_the_distinct_contexts(refused, collected, cat_world):
    """unit_profile(..., top=10**9) answered with the 120 contexts there are, silently."""
    words = mlp.corpus_words(collected, cat_world.tokenizer.vocab)
    distinct = mlp.distinct_contexts(collected)
    assert distinct == len(set(collected["contexts"].tolist())) == 120
    for top in (10**9, distinct + 1):
        refused(lambda: mlp.unit_profile(collected, 0, 1, words, top=top), "top", "at most", "120", "contexts")
    every = mlp.unit_profile(collected, 0, 1, words, top=distinct)
    assert len(every["top_contexts"]) == distinct == len({c for c, _ in every["top_contexts"]})


def test_probe_shows_the_contexts_there_are_when_fewer_than_three(cat, cat_world):
    few = mlp.collect_activations(cat, cat_world, [["<BOS>", "the", "cat"]])   # contexts "<BOS>", "<BOS> the"
    result = mlp.probe(cat, cat_world, few, 0, 1)
    assert [c for c, _ in result["top_contexts"]] and len(result["top_contexts"]) == 2


# ------------------------------------------------------------ entry 9: the prompt's own logits

@pytest.fixture(scope="module")
def smol():
    return real.load()


def test_temperature_view_refuses_logits_of_another_prompt(refused, smol):
    """temperature_view(model, tok, 'The capital of Italy is', logits=<France's>) answered Paris for Italy."""
    model, tok = smol
    paris = real.next_logits(model, tok, real.FACT)
    refused(lambda: real.temperature_view(model, tok, "The capital of Italy is", temperatures=(1.0,), logits=paris),
            "logits", "next_logits", "Italy", "differ")
    broken = paris.clone()
    broken[7] = float("nan")
    refused(lambda: real.temperature_view(model, tok, real.FACT, temperatures=(1.0,), logits=broken),
            "logits", "NaN")
    for prompt in (None, 3.5):
        refused(lambda: real.temperature_view(model, tok, prompt, temperatures=(1.0,), logits=paris), "prompt")
    given = real.temperature_view(model, tok, real.FACT, temperatures=(1.0,), logits=paris.double())
    assert given == real.temperature_view(model, tok, real.FACT, temperatures=(1.0,))
    assert given[1.0]["top"][0][0] == " Paris"


# ------------------------------------------------------------ entry 10: the formula and the model agree

def test_layer_parameters_agrees_with_every_course_layer():
    """SwiGLU with biases left out the gate's bias (49,472 against the model's 49,728); d_ff=0 was refused."""
    assert mlp.layer_parameters(64, 256, bias=True, n_heads=4, ffn="swiglu")["mlp"] == 49_728
    for d_ff, activation, bias, kv, norm in itertools.product((0, 24), ("gelu", "swiglu"), (True, False), (0, 2),
                                                              ("layernorm", "rmsnorm")):
        model = Transformer(Config(vocab_size=10, d_model=16, n_heads=4, n_layers=1, d_ff=d_ff, activation=activation,
                                   bias=bias, n_kv_heads=kv, norm_kind=norm), seed=0)
        formula = mlp.layer_parameters(16, d_ff, bias=bias, n_heads=4, n_kv_heads=kv or None, ffn=activation,
                                       norm="layer" if norm == "layernorm" else "rms")
        counted = mlp.block_counts(model)
        assert {k: formula[k] for k in counted} == counted, (d_ff, activation, bias, kv, norm)
    assert mlp.layer_parameters(16, 0)["mlp"] == mlp.layer_parameters(16, 0)["mlp_active"] == 0


def test_layer_parameters_refuses_experts_without_an_mlp(refused):
    refused(lambda: mlp.layer_parameters(16, 0, experts=4, active=2), "experts", "d_ff=0")
    refused(lambda: mlp.layer_parameters(16, -1), "d_ff")
