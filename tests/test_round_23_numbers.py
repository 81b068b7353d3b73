"""Round 23, shared numbers and chapters 00-06's compute: a whole number past float64 (log_fit and every d of
chapter 03), seeds past the 32 bits torch's CPU generator keeps, layer_norm at extreme finite inputs (one sentence,
no NumPy warning), and checked whole numbers used instead of the raw NumPy integers given (which wrap)."""
import warnings

import numpy as np
import pytest
import torch

from helpers import reference as ref
from helpers import errors
from helpers.errors import check_seed
from helpers.heads import compute as heads
from helpers.masking import compute as masking
from helpers.positions import compute as positions
from helpers.scaling import compute as scaling


@pytest.fixture(autouse=True)
def warnings_fail():
    """A NumPy RuntimeWarning (overflow, invalid) printed to the learner fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# ------------------------------------------------------------------ 1. a d past what float64 holds

@pytest.mark.parametrize("d, shown", [(2**1100, "1,101 bits"), (10**308, "1,024 bits"),
                                      (2**53 + 1, "9007199254740993")], ids=["2**1100", "10**308", "2**53+1"])
def test_log_fit_refuses_a_d_float64_cannot_hold(refused, d, shown):
    refused(lambda: scaling.log_fit([2, 4, d], [1.0, 2.0, 3.0]), "each d should be a whole number at most 2**53", shown)


def test_log_fit_takes_the_largest_exact_d():
    fits = scaling.log_fit([2, 4, 2**53], [1.0, 2.0, 3.0])
    assert all(np.isfinite(value) for fit in fits.values() for value in fit)


def test_every_d_of_chapter_03_is_bounded(refused):
    huge = 2**1100
    refused(lambda: scaling.spread_figure(spread=[dict(d=huge, scores=np.ones(5))], dims=[huge]), "at most 2**53")
    refused(lambda: scaling.gradient_figure([dict(d=2**60, raw=1.0, scaled=1.0, scaled_wrt_raw=1.0)]), "at most 2**53")
    refused(lambda: scaling.dot_spread([2**54], n=2), "at most 2**53")


def test_split_heads_shows_a_huge_h_briefly(refused):
    message = refused(lambda: ref.split_heads(np.zeros((2, 4)), 2**1100), "h should divide", "1,101 bits")
    assert len(message) < 200


# ------------------------------------------------------------------ 2. seeds: only the bits every generator keeps

def test_torch_keeps_only_32_bits_of_a_seed():
    """Why the bound: seed s + 2**32 draws what seed s draws (if torch ever keeps more, the bound may grow)."""
    def draw(seed):
        return torch.rand(3, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(draw(5), draw(5 + 2**32))


def test_seed_past_32_bits_is_refused(refused):
    assert errors.MAX_SEED == 2**32 - 1 and check_seed(np.uint32(2**32 - 1)) == 2**32 - 1
    refused(lambda: check_seed(2**32), "from 0 to 2**32 - 1", "4294967296")
    refused(lambda: scaling.six_keys(64, 6, 5 + 2**32), "seed", "2**32 - 1")
    refused(lambda: scaling.dot_spread((4,), 1000, 5 + 2**32), "seed", "2**32 - 1")
    refused(lambda: positions.position_probe(2**32, steps=5), "seed", "2**32 - 1")


def test_sample_sentences_bounds_its_last_seed(refused, cat, cat_world):
    refused(lambda: masking.sample_sentences(cat, cat_world, 3, seed=2**32), "seed should be", "2**32 - 1")   # (round 26)
    refused(lambda: masking.sample_sentences(cat, cat_world, 3, seed=2**32 - 2), "seed + n - 1", "4294967296")
    assert len(masking.sample_sentences(cat, cat_world, 1, seed=2**32 - 1, max_len=3)) == 1


def test_the_seed_after_the_largest_is_0():
    largest = 2**32 - 1
    assert errors.next_seed(5) == 6 and errors.next_seed(largest) == 0
    demo = positions.order_demo(["a", "b", "c"], ["c", "a", "b"], seed=largest)   # its layers' seed: 0
    assert np.array_equal(demo["E"], np.random.default_rng(largest).normal(size=(3, 8)))


# ------------------------------------------------------------------ 3. layer_norm at extreme finite inputs

@pytest.mark.parametrize("x", [[1e308, 1e308], [1e308, -1e308], [1e146, 0.0]])
def test_layer_norm_refuses_too_large_entries_without_a_warning(refused, x):
    refused(lambda: ref.layer_norm(np.array(x)), "x should hold numbers of size at most 1e+145", "largest")


def test_layer_norm_refuses_gamma_and_beta_that_overflow(refused):
    refused(lambda: ref.layer_norm([1.0, 0.0], gamma=[1e308, 1e308], beta=[1e308, 1e308]), "gamma and beta")


def test_layer_norm_at_the_bounds_is_finite_and_right():
    assert np.allclose(ref.layer_norm(np.array([1e145, -1e145])), [1.0, -1.0])
    x = np.full((2, 100_000), 1e145) * np.where(np.arange(100_000) % 2, 1.0, -1.0)
    assert np.allclose(ref.layer_norm(x), x / 1e145)
    assert np.isfinite(ref.layer_norm([1.0, 0.0], gamma=[1e307, 1.0], beta=[1e308, 0.0])).all()
    assert ref.layer_norm(np.zeros((0, 3))).shape == (0, 3)


# ------------------------------------------------------------------ 4. the checked whole numbers, not the raw ones

@pytest.mark.parametrize("args", [(8, 12, np.int32(65536)), (np.int64(2**40), np.int64(2**30), 1024),
                                  (8, 12, np.int64(2**31)), (np.int32(8), np.int32(12), np.int32(2**20), np.int8(4))])
def test_attention_weights_bytes_is_exact_for_numpy_integers(args):
    batch, n_heads, T = (int(v) for v in args[:3])
    assert heads.attention_weights_bytes(*args) == batch * n_heads * T * T * 4


def test_weights_megabytes_judges_by_the_exact_size(capsys):
    from helpers.heads import checks
    checks.weights_megabytes(8 * 12 * 65536 * 65536 * 4 / 1e6, 8, 12, np.int32(65536))
    assert "✓" in capsys.readouterr().out
    checks.weights_megabytes(0.0, 8, 12, np.int32(65536))
    assert "✓" not in capsys.readouterr().out


def test_card_problems_divides_the_checked_losses():
    figures = dict(loss_first_copy=np.float64(1e300), loss_second_copy=np.float64(1.0), chance=np.float64(1e-300),
                   previous_token_score=[[0.9], [0.1]], induction_score=[[0.1], [0.9]])
    card = dict(targets=dict(at_least={}, at_most=dict(first_copy_vs_chance=1.0)), tolerances={}, figures={})
    assert card_problem_names(figures, card) == ["first_copy_vs_chance"]


def card_problem_names(figures, card):
    """The names of the targets ``figures`` miss on ``card``."""
    return [problem.split(" ")[0] for problem in heads.card_problems(figures, card)]


def test_check_runs_keeps_the_checked_values():
    run = dict(seed=np.int64(3), scaled=np.bool_(True), losses=[2.0, 1.0], d_k=np.int32(8),
               saturated_at_start=np.float32(0.5), grad_W_Q_at_start=np.float32(0.25))
    checked = scaling.check_runs([run], "runs", (*scaling.RUN_KEYS, "d_k"))[0]
    assert [type(checked[key]) for key in ("seed", "scaled", "d_k", "saturated_at_start")] == [int, bool, int, float]
