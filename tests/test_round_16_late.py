"""Red team round 16, chapters 10 (ablation) and 11 (the real model): a model or world of another kind
refused in one sentence naming what was expected (entry 1), the class rule's reference refused outside
the cat world (entry 2), first_top_layer's ranks whole numbers (entry 3), memory_mb describing the model
it is given (entry 4)."""
import copy

import numpy as np
import pytest
import torch

from helpers import patching
from helpers.ablation import checks as ablation_checks
from helpers.ablation import compute as ablation
from helpers.real import circuit, smollm2
from helpers.real import compute as real


@pytest.fixture(scope="module")
def smol():
    return real.load()


# ------------------------------------------------------------ entries 1 and 2: the cat world's functions

CAT_ONLY = {
    "rule_reference all": lambda m, w: ablation.rule_reference(w, "all"),
    "rule_reference copula": lambda m, w: ablation.rule_reference(w, "copula"),
    "cat_batch": lambda m, w: ablation.cat_batch(w),
    "class_pairs": lambda m, w: ablation.class_pairs(w),
    "copula_prompts": lambda m, w: ablation.copula_prompts(w),
    "prompt_row": lambda m, w: ablation.prompt_row(m, w, "<BOS> the dragon"),
    "damage_row": lambda m, w: ablation.damage_row(m, w),
    "attention_on_subject": lambda m, w: ablation.attention_on_subject(m, w),
    "class_probability_drop": lambda m, w: ablation.class_probability_drop(m, w),
    "cat_scores": lambda m, w: ablation.cat_scores(m, w),
    "cat_ablation": lambda m, w: ablation.cat_ablation(m, w, [(0, 0)], "mean"),
    "copula_figures": lambda m, w: ablation.copula_figures(m, w),
    "rule_ablation": lambda m, w: ablation.rule_ablation(m, w, [(0, 0)], "mean", "all"),
    "CatLab": lambda m, w: ablation.CatLab(m, w),
}


@pytest.mark.parametrize("name", CAT_ONLY)
def test_the_cat_worlds_functions_refuse_the_dragon_world_with_its_own_model(name, dragon, dragon_world, refused):
    """The dragon model with its own world passed the vocabulary check: attention_on_subject returned NaN,
    class_probability_drop divided by zero, cat_scores stopped in an unpacking, rule_reference answered."""
    refused(lambda: CAT_ONLY[name](dragon, dragon_world), "should be the cat world", "'dragon'", "no copula sentences")


@pytest.mark.parametrize("name", ["rule_reference all", "cat_batch", "class_pairs", "copula_prompts"])
def test_the_cat_worlds_functions_refuse_a_world_that_is_none(name, refused):
    refused(lambda: CAT_ONLY[name](None, None), "should be the cat world", "None")


@pytest.mark.parametrize("name", ["prompt_row", "damage_row", "cat_scores", "copula_figures", "CatLab"])
def test_the_cat_worlds_functions_name_a_model_of_another_world_or_none(name, cat_world, dragon, refused):
    refused(lambda: CAT_ONLY[name](dragon, cat_world), "vocabulary of 20", "10")
    refused(lambda: CAT_ONLY[name](None, cat_world), "helpers.model.Transformer", "None")


def test_rule_reference_still_answers_on_the_cat_world_and_refuses_an_array(cat_world, refused):
    assert tuple(ablation.rule_reference(cat_world, "all").shape) == (64, 4)
    assert tuple(ablation.rule_reference(cat_world, "copula").shape) == (8, 4)
    refused(lambda: ablation.rule_reference(cat_world, np.array(["all", "copula"])), "reference should be one of",
            "ndarray")


def test_the_cat_worlds_figures_are_unchanged(cat, cat_world):
    ids, lengths = ablation.cat_batch(cat_world)
    assert ids.shape == (64, 9) and int(lengths.max()) == 9
    assert ablation.rule_ablation(cat, cat_world, [], "zero") == pytest.approx(
        dict(ablation.copula_figures(cat, cat_world), p_class_spread=0.0))


def test_the_logit_difference_metric_names_a_model_of_another_world(cat, cat_world, induction, refused):
    """On the induction model (16 tokens) the cat world's metric stopped in an IndexError inside per_pair."""
    clean, corrupt, _ = ablation.class_pairs(cat_world)
    metric = ablation.logit_difference(cat_world)
    refused(lambda: ablation.per_pair(patching.patch_heads, induction, clean, corrupt, metric),
            "(rows, T, 20)", "'cat'", "(4, 4, 16)")
    refused(lambda: metric("logits"), "this metric reads logits", "'logits'")
    assert torch.allclose(metric({"logits": cat(clean)[None].flatten(0, 1)}), metric({"logits": cat(clean)}))


def test_per_pair_refuses_no_pairs_too_many_and_a_model_that_is_none(cat, cat_world, refused):
    clean, corrupt, _ = ablation.class_pairs(cat_world)
    metric = ablation.logit_difference(cat_world)
    refused(lambda: ablation.per_pair(patching.patch_heads, cat, clean[:0], corrupt[:0], metric), "1 to 64 pairs",
            "(0, 4)")
    many = clean.repeat(9, 1)   # 72 pairs: 72 calls of patch, refused before the first
    refused(lambda: ablation.per_pair(patching.patch_heads, cat, many, many, metric), "1 to 64 pairs", "(72, 4)")
    refused(lambda: ablation.per_pair(patching.patch_heads, None, clean, corrupt, metric), "Transformer", "None")
    odd = iter([torch.zeros(2), {"a": 1.0}])
    refused(lambda: ablation.per_pair(lambda *a: next(odd), cat, clean[:2], corrupt[:2]), "patch should return",
            "every pair")


def test_the_patch_grid_check_names_a_model_of_another_world(cat_world, dragon, induction):
    tok = cat_world.tokenizer
    dog, floor = tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was")
    metric = ablation.logit_difference(cat_world)
    answer = lambda m, a, b, mt: torch.zeros(m.cfg.n_layers, m.cfg.n_heads, len(a))   # noqa: E731
    for model, size in ((dragon, "10"), (induction, "16")):
        said = ablation_checks.patch_grid.feedback(answer, model, dog, floor, metric)
        assert said and "a vocabulary of 20 words: the cat model" in said[0] and f"it has {size}" in said[0], said
        assert "IndexError" not in said[0]


def test_the_ablation_explorers_lab_refuses_prompts_that_are_no_list(cat, cat_world, refused):
    refused(lambda: ablation.AnyLab(cat, cat_world.tokenizer, 5), "non-empty list of strings")
    refused(lambda: ablation.AnyLab(cat, cat_world.tokenizer, np.array(["a", "b"])), "non-empty list of strings")


# ------------------------------------------------------------ entry 1: chapter 11's functions

def test_the_real_views_refuse_a_model_of_another_vocabulary_or_none(smol, cat, cat_world, refused):
    """temperature_view(None, tok) and (tok, model) stopped in an AttributeError; the cat model with SmolLM2's
    tokenizer was refused only by the ids' range, and without saying which model was expected."""
    model, tok = smol
    for call in (lambda m, t: real.temperature_view(m, t), lambda m, t: real.next_logits(m, t, "Hi"),
                 lambda m, t: real.induction_view(m, t), lambda m, t: real.prompt_view(m, t, "Hi")):
        refused(lambda: call(cat, tok), "model should be the model of tok's vocabulary", "49,152", "20")
        refused(lambda: call(None, tok), "course's Transformer", "None")
        refused(lambda: call(tok, model), "course's Transformer", "Tokenizer")
        refused(lambda: call(model, cat_world.tokenizer), "tok should be the model's tokenizer")


def test_the_circuits_functions_name_a_model_that_is_none_or_of_another_vocabulary(smol, cat, refused):
    model, tok = smol
    clean, corrupt, answers = circuit.fact_batch(tok, [("France", "Italy"), ("Germany", "Spain")], circuit.CAPITALS)
    refused(lambda: circuit.patch_grid(None, clean, corrupt, answers), "course's Transformer", "None")
    refused(lambda: circuit.pair_shares(None, clean, answers), "course's Transformer", "None")
    refused(lambda: circuit.streams(None, clean), "course's Transformer", "None")
    refused(lambda: circuit.patch_grid(cat, clean, corrupt, answers), "token ids", "[0, 20)")
    refused(lambda: circuit.pair_shares(cat, clean, answers), "token ids", "[0, 20)")
    refused(lambda: circuit.patch_grid(model, clean, corrupt, answers, direction=np.array(["denoise", "noise"])),
            "direction should be one of", "ndarray")
    refused(lambda: circuit.shipped(np.array(["facts", "induction"])), "part should be one of")


def test_the_circuits_logit_difference_refuses_nan_and_names_the_logits(refused):
    answers = torch.tensor([[1, 2], [3, 4]])
    refused(lambda: circuit.logit_difference(torch.full((2, 5), float("nan")), answers), "logits", "finite")
    refused(lambda: circuit.logit_difference([1.0, 2.0], answers), "logits should be a float tensor", "[1.0, 2.0]")
    assert circuit.logit_difference(torch.arange(10.0).view(2, 5), answers).tolist() == [-1.0, -1.0]


def test_block_steps_refuses_another_model_or_reader_before_reading_a_block(smol, cat, refused):
    reader = smollm2.read()
    refused(lambda: circuit.block_steps(reader, cat), "model of the reader's file", "vocab_size=49,152",
            "vocab_size=20")
    refused(lambda: circuit.block_steps(None, smol[0]), "smollm2.read()", "None")
    refused(lambda: circuit.block_steps(reader, None), "course's Transformer", "None")


# ------------------------------------------------------------ entry 3: first_top_layer

@pytest.mark.parametrize("rank, words", [(True, "True"), (False, "False"), (float("nan"), "nan"), (0.0, "0.0"),
                                         (None, "None"), (-1, "at least 0")])
def test_first_top_layer_refuses_ranks_that_are_no_whole_numbers(rank, words, refused):
    """True and NaN were read as ranks (True as 1, NaN as never top): an answer for a lens that is none."""
    refused(lambda: real.first_top_layer(dict(layers=[-1, 0, 1], rank=[3, 0, rank])), "each rank of the lens", words)


def test_first_top_layer_refuses_layers_that_are_no_whole_numbers_and_answers_as_before(refused):
    refused(lambda: real.first_top_layer(dict(layers=[True, 0, 1], rank=[0, 0, 0])), "each layer of the lens", "True")
    for rank, layer in (([0, 3, 1], None), ([3, 0, 0], 0), ([0, 0, 0], -1), ([1, 1, 1], None), ([2, 1, 0], 1)):
        assert real.first_top_layer(dict(layers=[-1, 0, 1], rank=rank)) == layer
    assert real.first_top_layer(dict(layers=[], rank=[])) is None
    long = dict(layers=list(range(100_000)), rank=[0, 1] * 50_000)   # a scan from each layer on was quadratic
    assert real.first_top_layer(long) is None


# ------------------------------------------------------------ entry 4: memory_mb

def test_memory_mb_describes_the_model_it_is_given(smol, cat, refused):
    """memory_mb(cat model) gave SmolLM2's file size as the cat model's."""
    refused(lambda: real.memory_mb(cat), "path should name this model's file", smollm2.FILENAME, "vocabulary of 20")
    refused(lambda: real.memory_mb(copy.deepcopy(cat)), "path should name this model's file")
    mb = real.memory_mb(smol[0])
    assert mb["file"] > 50 and mb["weights"] == pytest.approx(4 * real.parameters_counted(smol[0]) / 1e6)
    own = real.memory_mb(cat, path=smollm2.gguf_path())   # a file named by the caller is the caller's to choose
    assert own["weights"] == pytest.approx(4 * sum(p.numel() for p in cat.parameters()) / 1e6)
