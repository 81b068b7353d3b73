"""Round 19 (issue 31): chapter 02's helpers and checks, the shared readout, plots and explorer, and
chapter 12's training memory."""
import io
import contextlib
import warnings

import numpy as np
import pytest
import torch

from helpers import plots
from helpers.gpt import train as course_train
from helpers.model import Config, Transformer
from helpers.qkv import checks as qkv_checks
from helpers.qkv import compute as qkv
from helpers.readout import format_matrix, format_step, print_trace

NOT_THE_LEARNERS = ("the check itself failed", "please report")


def said(exercise, answer):
    """The sentences a check says of ``answer``, asserted to be about the answer (not a bug of the check)."""
    sentences = exercise.feedback(answer)
    assert sentences and not any(words in s for s in sentences for words in NOT_THE_LEARNERS), sentences
    return " ".join(sentences)


# ------------------------------------------------------------ 1: printed_difference on two plain numbers

def test_printed_difference_takes_two_plain_numbers():
    assert qkv.printed_difference(0.25, 0.2) == pytest.approx(0.05)
    assert qkv.printed_difference(-np.inf, -np.inf) == 0.0
    assert qkv.printed_difference(np.float64(1.0), 1.0004) == pytest.approx(0.0004)


# ------------------------------------------------------------ 2: a returned part of the wrong shape

@pytest.mark.parametrize("weights_shape", [(0, 0), (0,), (1, 0), (3, 3, 0)])
def test_attention_function_check_names_weights_of_no_rows(weights_shape):
    def attention(Q, K, V, causal=False):
        return np.zeros((len(Q), V.shape[1])), np.zeros(weights_shape)

    assert "shape" in said(qkv_checks.attention_function, attention)


# ------------------------------------------------------------ 3: a hint that matches what the answer did

def head_hiding(hidden):
    """A learner's head whose mask hides the keys ``hidden(T)`` (T, T) True."""
    def attention_head(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
        q, k, v = x @ W_Q + b_Q, x @ W_K + b_K, x @ W_V + b_V
        s = (q @ k.T) / k.shape[-1] ** 0.5
        return torch.softmax(s.masked_fill(hidden(len(x)), float("-inf")), -1) @ v
    return attention_head


def test_attention_head_check_names_a_mask_that_hides_every_key():
    everything = head_hiding(lambda T: torch.ones(T, T, dtype=torch.bool))
    text = said(qkv_checks.attention_head, everything)
    assert "every key is hidden" in text and "every token but the last" not in text and "first token" not in text
    diagonal_too = head_hiding(lambda T: torch.triu(torch.ones(T, T, dtype=torch.bool)))
    assert "hides the diagonal too" in said(qkv_checks.attention_head, diagonal_too)


def attention_with_weights(weights_of):
    """A learner's attention whose weights are ``weights_of(T_q, T_k)`` (the output: those weights @ V)."""
    def attention(Q, K, V, causal=False):
        with np.errstate(invalid="ignore"):
            weights = weights_of(len(Q), len(K))
            return weights @ V, weights
    return attention


@pytest.mark.parametrize("weights_of", [lambda q, k: np.full((q, k), np.nan), lambda q, k: np.zeros((q, k))],
                         ids=["all NaN", "all zero"])
def test_attention_function_check_says_the_diagonal_only_when_the_diagonal_is_hidden(weights_of):
    assert "hides the diagonal" not in said(qkv_checks.attention_function, attention_with_weights(weights_of))


# ------------------------------------------------------------ 4: Explorer.set puts every control back

def heads_explorer():
    import matplotlib
    matplotlib.use("Agg")
    from helpers.heads import explorer as heads_explorers

    with contextlib.redirect_stdout(io.StringIO()):
        return heads_explorers.explorer()


def test_explorer_set_refused_after_a_model_change_leaves_every_control(refused):
    ex = heads_explorer()
    before = ex.values()
    induction_prompt = ex.controls["prompt"].options[-1]
    refused(lambda: ex.set(model="cat", prompt=induction_prompt), "prompt should be one of")
    assert ex.values() == before
    assert induction_prompt in ex.controls["prompt"].options


def test_explorer_set_checks_each_value_against_the_controls_the_values_before_it_left():
    from helpers.heads.explorer import PROMPTS

    ex = heads_explorer()
    ex.set(model="cat", prompt=PROMPTS["cat"][-1])
    assert ex.values()["model"] == "cat" and ex.values()["prompt"] == PROMPTS["cat"][-1]


# ------------------------------------------------------------ 5: NaN in a printed matrix, a map of no tokens

@pytest.mark.parametrize("bad", [[[np.nan, 1.0]], [[np.inf, 1.0]], torch.tensor([[[float("nan")]]])],
                         ids=["NaN", "+inf", "a traced NaN"])
def test_readout_refuses_nan_and_plus_inf(refused, bad):
    if isinstance(bad, torch.Tensor):
        refused(lambda: format_step("L0.scores", bad), "NaN", "x should hold finite numbers")
        refused(lambda: print_trace({"L0.scores": bad}), "NaN")
    else:
        refused(lambda: format_matrix(np.array(bad)), "NaN or +inf", "1 of its 2 entries")


def test_format_matrix_writes_masked_scores_and_huge_numbers_in_a_few_characters(refused):
    assert format_matrix([[-np.inf, 1.5]]) == "   [   -inf   1.500]"
    text = format_matrix(np.array([[1e308, -1e308], [1.0, 2.0]]))
    assert "1.000e+308" in text and "2.000e+00" in text and max(map(len, text.splitlines())) < 40
    refused(lambda: format_matrix(np.zeros((0, 3))), "at least one number", "(0, 3)")


@pytest.mark.parametrize("shape, tokens, keys", [((0, 0), [], None), ((2, 0), ["a", "b"], [])])
def test_attention_heatmap_refuses_no_tokens_without_a_warning(refused, shape, tokens, keys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        refused(lambda: plots.attention_heatmap(np.ones(shape), tokens, keys=keys), "at least one query and one key",
                str(shape))


# ------------------------------------------------------------ 6: what training holds of the model

def model_on_meta(**sizes):
    """A Transformer on the meta device: its sizes are real, its weights take no memory."""
    with torch.device("meta"):
        return Transformer(Config(**sizes), seed=None)


BIG = dict(vocab_size=65, d_model=768, n_heads=12, n_layers=12, d_ff=3072, n_max=64)   # 0.32 GiB of weights


def test_training_counts_the_model_copies_before_the_first(refused):
    model, ids = model_on_meta(**BIG), torch.randint(0, 65, (2000,))
    assert 0.3 < course_train.weight_bytes(model) / 2**30 < 0.35
    refused(lambda: course_train.train(model, ids, ids[:500], steps=1, batch=1, context=8, warmup=0, eval_every=1,
                                       eval_batches=1), "0.32 GiB of weights", "five times", "1.5 GiB", "1.6 GiB")
    from helpers.gpt import compute as gpt
    refused(lambda: gpt.train_loop(model, ids, ids[:500], steps=1, batch=1, context=8, lr=1e-3, warmup=0,
                                   min_lr=1e-4, clip=1.0, eval_every=1, eval_batches=1), "five times", "1.5 GiB")


def test_check_copies_counts_whole_copies_of_the_weights(refused):
    big = model_on_meta(**BIG)
    course_train.check_copies(big, 4, "small_start")   # 1.27 GiB: within the limit
    refused(lambda: course_train.check_copies(big, 5, "small_start"), "small_start", "0.32 GiB of weights 5 times",
            "1.5 GiB")


def test_the_chapters_training_settings_still_fit():
    model = Transformer(Config(vocab_size=65, d_model=128, n_heads=4, n_layers=4, d_ff=512, n_max=256), seed=0)
    course_train.check_batch(model, 16, 64, grad=True)
    course_train.check_batch(model, 12, 64, grad=True)
