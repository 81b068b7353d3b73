"""Red team round 14 (reader A, entries 15, 16 and 20): a neighbours list with a word twice was told
"the right words, in the wrong order"; no_mask_runs counted only seeds x steps, not each seed's building,
measuring and sampling (8,000 seeds of one step ran for hours); a right causal attention returned in
float16 was told its rows "sum to between 1 and 1, not 1"."""
import numpy as np
import pytest
import torch

from helpers import worlds
from helpers.geometry import checks as geometry_checks
from helpers.masking import checks as masking_checks
from helpers.masking import compute as masking


# --- entry 15: a repeated word, and the one it leaves out ----------------------------------------


def nearest(glove, word="ocean", topn=5):
    return [w for w, _ in glove.most_similar(word, topn=topn)]


def test_a_word_twice_is_named_with_the_word_it_leaves_out(glove):
    expected = nearest(glove)
    answer = [expected[0]] + expected[:4]   # the top word twice, the fifth left out (a slicing slip)
    found = geometry_checks.neighbours.feedback(answer, glove, "ocean", topn=5)
    assert len(found) == 1, found
    assert f"'{expected[0]}' is in your list twice" in found[0], found
    assert f"'{expected[4]}' is missing" in found[0] and "wrong order" not in found[0], found


def test_a_word_many_times_and_a_word_not_among_the_nearest(glove):
    expected = nearest(glove)
    found = geometry_checks.neighbours.feedback([expected[1]] * 5, glove, "ocean", topn=5)
    assert len(found) == 1 and f"'{expected[1]}' is in your list 5 times" in found[0], found
    found = geometry_checks.neighbours.feedback([expected[2], "banana", expected[2], *expected[:2]], glove, "ocean",
                                                topn=5)
    assert len(found) == 1 and f"'{expected[2]}' is in your list twice" in found[0], found


def test_the_order_hint_and_a_right_list_are_as_before(glove):
    expected = nearest(glove)
    found = geometry_checks.neighbours.feedback(expected[::-1], glove, "ocean", topn=5)
    assert len(found) == 1 and "the right words, in the wrong order" in found[0], found
    assert geometry_checks.neighbours.feedback(expected, glove, "ocean", topn=5) == []


# --- entry 16: no_mask_runs counts every seed's whole work ---------------------------------------


@pytest.fixture
def never_trains(monkeypatch):
    never = lambda *a, **k: pytest.fail("worked before refusing")   # noqa: E731 (the old code ran for hours)
    monkeypatch.setattr(masking, "train_without_mask", never)
    monkeypatch.setattr(masking, "measure_without_mask", never)


def test_many_seeds_of_one_step_are_refused_up_front(refused, never_trains):
    world = worlds.cat_world()
    said = refused(lambda: masking.no_mask_runs(world, seeds=range(8000), steps=1, n_samples=1),
                   "at most 8,000", "about a minute", "8,000 seeds", "to build and measure", "ask for at most")
    most = int(said.split("ask for at most ")[1].split(" ")[0].replace(",", ""))
    assert 0 < most < 8000 and masking.no_mask_work(most, 1, 1) <= masking.MAX_RUN_STEPS \
        < masking.no_mask_work(most + 1, 1, 1)


def test_sampling_is_counted_too(refused, never_trains):
    world = worlds.cat_world()
    refused(lambda: masking.no_mask_runs(world, seeds=range(8), steps=1, n_samples=10_000),
            "at most 8,000", "10,000 sentences sampled", "8 seeds", "n_samples")
    refused(lambda: masking.no_mask_runs(world, seeds=range(20), steps=1_000), "at most 8,000", "20 seeds",
            "fewer steps")


def test_the_default_runs_and_the_shipped_ones_stay_within():
    masking.check_no_mask_work(len(masking.NO_MASK_SEEDS), masking.NO_MASK_STEPS, 50)   # no_mask_runs' defaults
    masking.check_no_mask_work(1, masking.MAX_STEPS, masking.MAX_SENTENCES)   # one seed, every limit at its most
    assert masking.no_mask_work(len(masking.NO_MASK_SEEDS), masking.NO_MASK_STEPS, 50) < masking.MAX_RUN_STEPS / 2


# --- entry 20: a causal attention returned in a narrower float type ------------------------------


def returned_as(convert):
    def causal_attention(q, k, v):
        out, weights = masking.causal_attention(q.double(), k.double(), v.double())
        return convert(out), convert(weights)
    return causal_attention


@pytest.mark.parametrize("dtype, convert", [
    ("float16", lambda x: x.half()),
    ("bfloat16", lambda x: x.bfloat16()),
    ("float16", lambda x: x.numpy().astype(np.float16)),
])
def test_a_right_attention_in_a_narrow_dtype_is_told_its_dtype(dtype, convert):
    found = masking_checks.causal_attention.feedback(returned_as(convert))
    assert len(found) == 1, found
    assert f"in {dtype}" in found[0] and "float32" in found[0] and "between 1 and 1" not in found[0], found
    assert "\n" not in found[0] and ". " not in found[0], found


def test_a_wider_dtype_still_passes():
    assert masking_checks.causal_attention.feedback(returned_as(lambda x: x)) == []   # float64
    assert masking_checks.causal_attention.feedback(returned_as(lambda x: x.float())) == []


def test_rows_that_sum_near_1_show_enough_digits():
    def a_little_too_much(q, k, v):
        out, weights = masking.causal_attention(q, k, v)
        return out, weights * (1 + 5e-4)
    found = masking_checks.causal_attention.feedback(a_little_too_much)
    assert len(found) == 1 and "sum to between 1.0005 and 1.0" in found[0], found   # (3 digits: "1 and 1")
    assert masking_checks._sum_shown(1.0) == "1" and masking_checks._sum_shown(0.5) == "0.5"
    assert masking_checks._sum_shown(np.float32(1) - np.float32(2 ** -23)) != "1"
    assert torch.get_default_dtype() == torch.float32
