"""Round 22 (issue 31): checks bound their own work, not only their input's size. kept_fractions (chapter 01) judges
at most MAX_JUDGED_POINTS points and MAX_DIFFERENCES differences of pairs, and its slips share one sort per map;
unscrambled (chapter 06) takes a Y of at most MAX_SCRAMBLED_ROWS rows and compares rows with NumPy; next_prob and
sentence_loss (chapter 00) count the float64 tables they hold before converting the logits."""
import tracemalloc

import numpy as np
import torch

from helpers.geometry import checks as geometry_checks
from helpers.geometry.compute import neighbourhood_kept
from helpers.positions import checks as positions_checks
from helpers.tour import checks as tour_checks

CANNOT = "the check cannot use what the check cell gives it"


def said(check, *args):
    """The one sentence ``check`` gives (``feedback``), '' when it says the answer is right."""
    found = check.feedback(*args)
    assert len(found) <= 1, found
    assert not found or ("\n" not in found[0] and ". " not in found[0]), found
    return found[0] if found else ""


def peak_of(work):
    """The most memory ``work()`` held at once (tracemalloc: NumPy's arrays are traced), and what it returned."""
    tracemalloc.start()
    try:
        result = work()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


# --- 1. kept_fractions: bounded work, one table and one sort per map ----------------------------------------------

def test_kept_fractions_refuses_more_points_than_it_can_judge_in_time():
    n = 2_001   # past MAX_JUDGED_POINTS: the maps' own limit (5,000) let 3,000 points take 21 s
    sentence = said(geometry_checks.kept_fractions, np.zeros(n), np.arange(n)[:, None], np.zeros((n, 1)), 5)
    assert sentence.startswith(CANNOT) and "at most 2,000 points" in sentence and "2,001" in sentence, sentence


def test_kept_fractions_refuses_more_differences_than_it_can_judge_in_time():
    high, low = np.ones((1_000, 199)), np.zeros((1_000, 2))   # 1,000² × 201: the (n, n, d) differences' work
    sentence = said(geometry_checks.kept_fractions, np.zeros(1_000), high, low, 5)
    assert sentence.startswith(CANNOT) and "at most 200,000,000 differences" in sentence, sentence
    assert "1,000² × (199 + 2) = 201,000,000" in sentence, sentence


def test_the_slips_of_kept_fractions_share_one_table_of_distances_per_map(monkeypatch):
    rng = np.random.default_rng(0)
    high, low = rng.normal(size=(50, 5)), rng.normal(size=(50, 2))
    made = []
    table = geometry_checks.pair_table
    monkeypatch.setattr(geometry_checks, "pair_table", lambda x: made.append(len(x)) or table(x))
    assert "differs" in said(geometry_checks.kept_fractions, np.zeros(50), high, low, 3)   # every slip tried
    assert made == [50, 50]   # one table per map (the slips made six: two each)


def test_the_shared_slips_equal_their_definitions():
    rng = np.random.default_rng(1)
    high, low, k = rng.normal(size=(40, 6)), rng.normal(size=(40, 2)), 4

    def order(x, diagonal):
        dist = np.linalg.norm(x[:, None] - x[None], axis=-1)
        np.fill_diagonal(dist, diagonal)
        return np.argsort(dist, axis=1, kind="stable")

    def shared(a, b):
        return np.array([len(set(h) & set(l)) / k for h, l in zip(a, b)])

    itself = [order(x, 0)[:, :k] for x in (high, low)]
    farthest = [order(x, -np.inf)[:, ::-1][:, :k] for x in (high, low)]   # no equal distances among these points
    near = [order(x, np.inf)[:, :k] for x in (high, low)]
    assert np.array_equal(geometry_checks.counting_itself(high, low, k), shared(*itself))
    assert np.array_equal(geometry_checks.farthest_kept(high, low, k), shared(*farthest))
    assert "own neighbours" in said(geometry_checks.kept_fractions, shared(*itself), high, low, k)
    assert "farthest" in said(geometry_checks.kept_fractions, shared(*farthest), high, low, k)
    assert "place by place" in said(geometry_checks.kept_fractions, (near[0] == near[1]).mean(axis=1), high, low, k)
    assert said(geometry_checks.kept_fractions, neighbourhood_kept(high, low, k), high, low, k) == ""


# --- 2. unscrambled: a bounded Y, rows compared with NumPy --------------------------------------------------------

def test_unscrambled_refuses_a_y_past_its_bounds_before_converting_it():
    rows = 10_001   # past MAX_SCRAMBLED_ROWS: 1,000,000 rows took 27 s (Python sorts of every row)
    for Y in (np.zeros((rows, 1)), [[0.0]] * rows, torch.zeros(1).expand(rows, 1), np.zeros((1_000, 1_001))):
        sentence = said(positions_checks.unscrambled, np.zeros((3, 1)), Y, np.arange(3))
        assert sentence.startswith(CANNOT) and "at most 10,000 rows and 1,000,000 numbers" in sentence, sentence
        assert f"but it has shape {tuple(np.shape(Y))}" in sentence, sentence


def test_unscrambled_tells_rows_in_another_order_from_other_rows():
    Y = np.array([[1.0, 2.0], [1.0, 3.0], [0.0, 3.0], [0.0, 2.0]])   # equal first numbers: the second decides
    perm = np.array([2, 0, 3, 1])
    right = Y[np.argsort(perm)]
    assert said(positions_checks.unscrambled, right, Y, perm) == ""
    assert "another order" in said(positions_checks.unscrambled, right[[1, 0, 3, 2]], Y, perm)
    mixed = np.array([[1.0, 3.0], [1.0, 2.0], [0.0, 2.0], [0.0, 2.0]])   # the same first and second columns
    assert "not Y's rows" in said(positions_checks.unscrambled, mixed, Y, perm)
    assert "another order" in said(positions_checks.unscrambled, right[[1, 0, 3, 2]] + 1e-8, Y, perm)   # (to 6 decimals)


# --- 3. next_prob and sentence_loss: their tables counted before the logits are converted ------------------------

def test_sentence_loss_refuses_logits_whose_tables_pass_the_limit_before_converting_them():
    logits = np.broadcast_to(np.float32(0), (1_300, 50_000))   # 260 MB as float32: it raised the peak by 1.5 GB
    peak, found = peak_of(lambda: tour_checks.sentence_loss.feedback(1.0, logits, np.zeros(1_300, dtype=int)))
    assert len(found) == 1 and found[0].startswith(CANNOT), found
    assert "65,000,000 numbers" in found[0] and "at most 1.5 GiB" in found[0] and "fewer logits" in found[0], found
    assert peak < 16 * 2**20, peak   # nothing converted


def test_next_prob_refuses_logits_whose_tables_pass_the_limit_before_converting_them():
    logits = np.broadcast_to(np.float32(0), (70_000_000,))   # 560 MB as float64: accepted, three tables held
    peak, found = peak_of(lambda: tour_checks.next_prob.feedback(0.5, logits, 0))
    assert len(found) == 1 and found[0].startswith(CANNOT) and "70,000,000 numbers" in found[0], found
    assert peak < 16 * 2**20, peak


def test_sentence_loss_holds_no_more_than_the_tables_it_counts():
    rng = np.random.default_rng(2)
    logits, ids = rng.normal(size=(200, 5_000)), rng.integers(0, 5_000, size=200)
    peak, found = peak_of(lambda: tour_checks.sentence_loss.feedback(1.0, logits, ids))   # wrong: every slip tried
    assert found and "loss" in found[0], found
    assert peak <= 4 * logits.nbytes * 1.05, peak   # the four tables it counts (SENTENCE_LOSS_TABLES)
