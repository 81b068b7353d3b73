"""Round 21 (issue 31): the checks. A learner's function that reads the check's own state (its expected values wait
in the frames of the check's thread: sys._current_frames, gc.get_referrers) is refused and the check says so; answers
near 1e308 get one sentence and no NumPy warning, never inf printed as a sum; a right answer in float16 (or rounded)
is right to the check's one tolerance, or told that its float type is too narrow, not named as another mistake."""
import math
import sys
import threading
import warnings

import numpy as np
import pytest
import torch

from helpers import exercises, states
from helpers.geometry import checks as geometry_checks
from helpers.masking import checks as masking_checks
from helpers.masking import compute as masking
from helpers.positions import checks as positions_checks
from helpers.qkv import checks as qkv_checks
from helpers.scaling import checks as scaling_checks
from helpers.weights import load_cat

BIG = 1e308
LOOKED = "looked into the check's own state"


def head(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
    """The right attention head (the recipe of chapter 02), in float64."""
    x, W_Q, W_K, W_V, b_Q, b_K, b_V = (t.double() for t in (x, W_Q, W_K, W_V, b_Q, b_K, b_V))
    q, k, v = x @ W_Q + b_Q, x @ W_K + b_K, x @ W_V + b_V
    scores = q @ k.T / math.sqrt(k.shape[1])
    future = torch.triu(torch.ones(len(x), len(x), dtype=torch.bool), 1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ v


def table(n, d, dtype=torch.float32):
    """The right sinusoidal table (n, d), as a learner writes it."""
    p = torch.arange(n, dtype=torch.float64)[:, None]
    w = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(p * w), torch.cos(p * w)
    return pe.to(dtype)


def expected_from_frames():
    """What repro_01 did: the check's expected output, read from a frame of another thread (None if refused)."""
    for frame in sys._current_frames().values():
        while frame is not None:
            case = frame.f_locals.get("case")
            if isinstance(case, dict) and "expected" in case:
                return case["expected"].clone()
            frame = frame.f_back
    return None


# --- 1. the check's own state is out of the learner's reach ---------------------------------------------------

def test_a_function_that_reads_the_expected_output_from_the_checks_frame_is_refused():
    def cheat(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
        try:
            return expected_from_frames()
        except RuntimeError:   # refused: the check says so all the same
            return torch.zeros(x.shape[0], W_Q.shape[1])
    found = qkv_checks.attention_head.feedback(cheat)
    assert len(found) == 1 and LOOKED in found[0] and "sys._current_frames" in found[0], found
    assert "\n" not in found[0] and ". " not in found[0]


def test_the_checks_objects_are_not_reached_through_gc_nor_from_a_thread_the_function_starts():
    def by_referrers(n, d):
        gc_module = __import__("gc")
        return [o for o in gc_module.get_referrers(torch.Tensor) if isinstance(o, torch.Tensor)][:1] or table(n, d)

    def look():
        try:
            sys._current_frames()
        except RuntimeError:
            pass

    def from_a_thread(n, d):
        thread = threading.Thread(target=look)
        thread.start()
        thread.join()
        return table(n, d)
    for cheat, event in ((by_referrers, "gc.get_referrers"), (from_a_thread, "sys._current_frames")):
        found = positions_checks.sinusoidal_positions.feedback(cheat, load_cat())
        assert len(found) == 1 and LOOKED in found[0] and event in found[0], found


def test_the_learners_own_frames_stay_in_reach_and_nothing_is_refused_outside_a_check():
    def right(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
        warnings.warn("a learner's own warning", stacklevel=2)   # (warnings reads its own thread's frames)
        assert sys._getframe().f_code.co_name == "right"
        return head(x, W_Q, W_K, W_V, b_Q, b_K, b_V).float()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert qkv_checks.attention_head.feedback(right) == []
    assert sys._current_frames() and exercises._WATCHING == ()


def test_a_right_answer_that_follows_a_refused_look_is_still_refused():
    def right_after_looking(n, d):
        try:
            sys._current_frames()
        except RuntimeError:
            pass
        return table(n, d)
    found = positions_checks.sinusoidal_positions.feedback(right_after_looking, load_cat())
    assert len(found) == 1 and LOOKED in found[0], found


# --- 2. answers near the float limit: one sentence, no NumPy warning, no inf shown as a sum ---------------------

@pytest.mark.parametrize("run", [
    lambda: positions_checks.offset_rotation.feedback(np.full((6, 6), BIG), 2, 6),
    lambda: positions_checks.unscrambled.feedback(np.full((4, 3), BIG), np.random.default_rng(0).normal(size=(4, 3)),
                                                  [2, 0, 3, 1]),
    lambda: qkv_checks.attention_function.feedback(lambda Q, K, V, causal=False: (
        np.full((Q.shape[0], V.shape[1]), BIG), np.full((Q.shape[0], K.shape[0]), BIG))),
    lambda: scaling_checks.layer_scores.feedback(lambda x, W_Q, W_K, b_Q, b_K, n_heads: torch.full(
        (n_heads, x.shape[0], x.shape[0]), BIG, dtype=torch.float64)),
], ids=["offset_rotation", "unscrambled", "attention_function", "layer_scores"])
def test_answers_near_the_float_limit_get_a_sentence_and_no_numpy_warning(run):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        found = run()
    assert len(found) == 1 and "check itself failed" not in found[0], found


def test_weights_whose_rows_sum_past_the_float_limit_are_not_said_to_sum_to_inf():
    def huge(q, k, v):
        out, weights = masking.causal_attention(q, k, v)
        return out.double(), torch.full_like(weights, BIG, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        found = masking_checks.causal_attention.feedback(huge)
    assert len(found) == 1 and "inf" not in found[0] and "float64's range" in found[0], found
    assert exercises.sum_shown(np.float64(np.inf)) == "more than float64's largest number"


# --- 3. precision: one tolerance within a check, and a narrow float type named --------------------------------

def right_cosine(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return a @ b / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b))


@pytest.mark.parametrize("narrow", [lambda x: np.round(x, 4), lambda x: np.asarray(x).astype(np.float16)],
                         ids=["4 decimals", "float16"])
def test_a_right_cosine_rounded_passes_the_stack_case_as_the_single_ones(narrow):
    assert geometry_checks.cosine_function.feedback(lambda a, b: narrow(right_cosine(a, b))) == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_right_head_in_a_narrow_float_type_is_told_so(dtype):
    found = qkv_checks.attention_head.feedback(lambda *args: head(*args).to(dtype))
    name = str(dtype).replace("torch.", "")
    assert len(found) == 1 and f"came as a {name} tensor" in found[0] and "float32" in found[0], found
    assert "compare each step" not in found[0]


def test_a_right_table_in_float16_is_told_so():
    found = positions_checks.sinusoidal_positions.feedback(lambda n, d: table(n, d, torch.float16), load_cat())
    assert len(found) == 1 and "came as a float16 tensor" in found[0] and "differs" not in found[0], found
    assert positions_checks.sinusoidal_positions.feedback(table, load_cat()) == []


def test_a_numpy_attention_in_float16_is_told_so():
    def right_in_float16(Q, K, V, causal=False):
        scores = Q @ K.T / math.sqrt(K.shape[1])
        if causal:
            scores = np.where(np.triu(np.ones(scores.shape, dtype=bool), 1), -np.inf, scores)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        return (weights @ V).astype(np.float16), weights.astype(np.float16)
    found = qkv_checks.attention_function.feedback(right_in_float16)
    assert len(found) == 1 and "came as a float16 array" in found[0] and "recipe" not in found[0], found


def test_a_wrong_answer_in_float16_keeps_its_own_sentence():
    found = qkv_checks.attention_head.feedback(lambda *args: (2 * head(*args)).half())
    assert len(found) == 1 and "float16" not in found[0], found


# --- 4. one time-out for the course ----------------------------------------------------------------------------

def test_the_checks_time_out_is_the_courses_own(monkeypatch):
    assert exercises.OutOfTime is states.OutOfTime and not hasattr(exercises, "_OutOfTime")
    monkeypatch.setattr(exercises, "CHECK_TIME_LIMIT", 1)
    found = geometry_checks.cosine_function.feedback(lambda a, b: [None for _ in iter(int, 1)])
    assert found and "was stopped" in found[0], found
