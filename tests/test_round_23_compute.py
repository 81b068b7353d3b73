"""Round 23, red team A's entries 8, 9, 10, 13, 14 and 15 (chapters 01, 05, 06 and errors.to_numpy).

heads.intermediates and torch_differences read x's numbers (its finite test, ~1.7 times x) before counting the
layer's work; errors.to_numpy cast a finite long double past float64's range to inf (with NumPy's warning) and the
caller then said "NaN or inf"; copy_losses, restart_probability and head_scores took ids whose second half repeats
nothing; geometry.word_map with fewer than 15 words named UMAP's n_neighbors after PCA and t-SNE had run;
position_probe's work count left out each step's fixed cost, so it accepted calls of several minutes; term_shares
on all-equal scores advised "give scores of more than one token".
"""
import copy
import warnings

import numpy as np
import pytest
import torch

from helpers.errors import to_numpy
from helpers.geometry import compute as geometry
from helpers.heads import compute as heads
from helpers.positions import compute as positions
from helpers.weights import load_cat, load_induction
from helpers import worlds


# ---------------------------------------------------------------- entry 10: counted before x is read

def big_nan_x(B=40, T=1024, d=48):
    """x (B, T, d) holding NaN, stored as one row: its layer's scores pass 1.5 GiB, its own numbers are few."""
    return torch.full((1, 1, d), float("nan")).expand(B, T, d)


def test_intermediates_counts_the_layers_work_before_reading_x(refused):
    # the old code read x (its finite test) first, and so said "finite numbers" here
    refused(lambda: heads.intermediates(heads.book_attention(48, 4), big_nan_x()), "attention on 40 sequences",
            "1,024 tokens", "1.5 GiB")


def test_torch_differences_counts_its_work_before_reading_x(refused):
    refused(lambda: heads.torch_differences(heads.book_attention(48, 4), big_nan_x(B=20)),
            "torch_differences on 20 sequences", "1.5 GiB")
    # small calls still run, and NaN is still refused
    assert max(heads.torch_differences(heads.book_attention(48, 4), torch.randn(2, 5, 48)).values()) < 1e-4
    refused(lambda: heads.intermediates(heads.book_attention(48, 4), big_nan_x(B=1, T=3)), "finite numbers")


def test_slipped_attention_counts_its_work_before_reading_x(refused):
    state = {f"{kind}_{name}": np.zeros((48, 48) if kind == "W" else (48,)) for kind in "Wb" for name in "QKVO"}
    x = np.broadcast_to(np.nan, (40, 1024, 48))
    refused(lambda: heads.slipped_attention(x, state, 4), "slipped_attention", "1.5 GiB")


# ---------------------------------------------------------------- entry 14: a long double past float64

@pytest.mark.skipif(np.finfo(np.longdouble).max <= np.finfo(np.float64).max, reason="long double is float64 here")
def test_to_numpy_refuses_a_long_double_past_float64_without_a_warning(refused):
    big = np.array([np.longdouble("1e400"), 1], dtype=np.longdouble)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # NumPy's "overflow encountered in cast" would fail the test
        message = refused(lambda: to_numpy(big, "a"), "a should hold numbers a float64 can hold", "1.00e+400")
        assert "NaN" not in message
        refused(lambda: geometry.cosine(big, np.ones(2)), "1.00e+400")
        refused(lambda: to_numpy(np.longdouble("-3e500")), "3.00e+500")
        assert to_numpy(np.array([1.5, 1e300], dtype=np.longdouble)).tolist() == [1.5, 1e300]


# ---------------------------------------------------------------- entry 13: ids that repeat nothing

@pytest.mark.parametrize("name", ["copy_losses", "restart_probability", "head_scores"])
def test_repeat_measures_refuse_ids_whose_second_half_repeats_nothing(refused, name):
    measure = getattr(heads, name)
    model = load_induction()
    refused(lambda: measure(model, torch.tensor([[0, 1, 2, 3, 4, 5, 6]]), 3), "a sequence and its repeat",
            "sequence 0", "position 4")
    slipped = torch.tensor([[0, 3, 5, 7, 3, 5, 7], [0, 3, 5, 7, 3, 5, 8]])   # the second's last token slipped
    refused(lambda: measure(model, slipped, 3), "sequence 1", "position 6")
    measure(model, slipped[:1], 3)   # a true repeat runs


# ---------------------------------------------------------------- entry 8: UMAP's 15 neighbours, in word_map's terms

SIX = {"royals": ["king", "queen", "prince"], "animals": ["cat", "dog", "horse"]}


def test_word_map_refuses_too_few_words_for_umap_up_front(refused, monkeypatch):
    glove = geometry.load_glove()
    never = lambda *a, **k: pytest.fail("a map was made before refusing")   # noqa: E731
    monkeypatch.setattr(geometry, "project", never)
    message = refused(lambda: geometry.word_map(glove, SIX, k=2), "words in groups", "at least 15", "got 6",
                      "leave UMAP out of methods")
    assert "n_neighbors" not in message
    monkeypatch.undo()
    assert set(geometry.word_map(glove, SIX, methods=["PCA"], k=2)["coords"]) == {"PCA"}


def test_project_and_map_runs_refuse_too_few_points_for_umap_in_their_own_terms(refused):
    points = np.random.default_rng(0).normal(size=(6, 5))
    assert "n_neighbors" not in refused(lambda: geometry.project(points, "UMAP"), "number of points", "at least 15")
    result = geometry.word_map(geometry.load_glove(), SIX, methods=["PCA"], k=2)
    refused(lambda: geometry.map_runs(result, seeds=[0]), "the result's words", "at least 15", "got 6")


# ---------------------------------------------------------------- entry 15: each step's fixed cost counted

def test_position_probe_counts_each_steps_fixed_cost(refused, monkeypatch):
    from helpers import training

    monkeypatch.setattr(training, "train", lambda *a, **k: pytest.fail("trained before refusing"))
    # the red team's call: 2.0e9 of the old count (its limit), about 3 minutes at the course's speed
    refused(lambda: positions.position_probe(0, steps=10_000, n=1190), "1,000,000,000", "n=1,190", "steps=10,000")
    refused(lambda: positions.position_probe(0, steps=10_000, n=400), "about a minute")


# ---------------------------------------------------------------- entry 9: the right cause for all-equal scores

def test_term_shares_names_scores_that_depend_on_the_offset_alone(refused):
    cat = copy.deepcopy(load_cat())
    with torch.no_grad():
        cat.blocks[0].attn.W_Q.zero_()
        cat.blocks[0].attn.b_Q.zero_()
    ids = worlds.cat_world().tokenizer.encode("<BOS> the cat sat on the mat <EOS> <BOS> the")
    groups = {"all": [(a, b) for a in positions.PARTS for b in positions.PARTS]}
    message = refused(lambda: positions.term_shares(positions.score_terms(cat, ids), groups),
                      "function of the offset alone", "nothing to share")
    assert "more than one token" not in message
    refused(lambda: positions.term_shares(positions.score_terms(load_cat(), ids[:1]), groups), "more than one token")
