"""Chapter 02 (QKV by hand): the worked examples against the texts' digits, the explorer's
compute and picture, and every exercise check (right passes, wrong fails with words, None is
not answered)."""
import json
import math
import re

import numpy as np
import pytest
import torch

from helpers import reference as ref, weights, worlds
from helpers.errors import CourseInputError
from helpers.exercises import NOT_ANSWERED
from helpers.qkv import checks, compute as qkv, explorer

PNG = b"\x89PNG\r\n\x1a\n"


# --- the worked examples reproduce the texts' digits -------------------------------------------

def test_three_words_parameter_free_matches_the_book():
    x = qkv.three_words()["x"]
    weights = ref.softmax(x @ x.T)
    printed = qkv.BOOK_THREE_WORDS_PRINTED
    assert np.array_equal(x @ x.T, printed["scores"])
    assert qkv.printed_difference(weights, printed["weights"]) <= 5e-4
    assert qkv.printed_difference(weights @ x, printed["context"]) <= 5e-4


def test_three_words_qkv_scores_are_asymmetric_as_in_the_book():
    q, k, v = qkv.three_words_qkv()
    assert np.array_equal(q, [[1, 0], [0, 1], [0, 1]]) and np.array_equal(k, [[0, 1], [1, 0], [0, 1]])
    assert np.array_equal(v, [[1, 0], [0, 1], [0, 0]])
    scores = q @ k.T
    assert np.array_equal(scores, qkv.BOOK_THREE_WORDS_PRINTED["qk_scores"])
    assert scores[2, 0] == 1 and scores[0, 2] == 0


def test_primer_toy_steps_agree_with_every_printed_number():
    toy = qkv.primer_toy()
    steps = qkv.attention_steps(toy["X"], toy["W_Q"], toy["W_K"], toy["W_V"], causal=True)
    printed = qkv.PRIMER_TOY_PRINTED
    for name in ("Q", "K", "V", "scores", "scaled", "weights", "output"):
        assert qkv.printed_difference(steps[name], printed[name]) <= 5e-4 + 1e-12, name
    h_last = (toy["X"] + steps["output"] @ toy["W_O"])[-1]
    assert qkv.printed_difference(h_last, printed["h_last"]) <= 5e-4 + 1e-12
    assert np.isinf(steps["masked"][0, 1]) and steps["masked"][0, 1] < 0


def test_primer_readout_probabilities_and_the_lecture_it_row():
    toy = qkv.primer_toy()
    p = ref.softmax(np.array(qkv.PRIMER_TOY_LOGITS))
    for word, printed in qkv.PRIMER_TOY_PROBS.items():
        assert abs(p[toy["vocab"].index(word)] - printed) < 0.005
    assert abs(qkv.softmax_share(qkv.IT_SCORES, 1, d=64) - 0.404) < 5e-4
    assert qkv.softmax_share(qkv.IT_SCORES, 1) > 0.99


def test_attention_steps_equals_reference_attention():
    rng = np.random.default_rng(0)
    X, W_Q, W_K, W_V = rng.normal(size=(4, 6)), rng.normal(size=(6, 3)), rng.normal(size=(6, 3)), rng.normal(size=(6, 2))
    for causal in (False, True):
        steps = qkv.attention_steps(X, W_Q, W_K, W_V, causal=causal)
        out, w = ref.attention(X @ W_Q, X @ W_K, X @ W_V, causal=causal)
        assert np.allclose(steps["output"], out) and np.allclose(steps["weights"], w)
    unscaled = qkv.attention_steps(X, W_Q, W_K, W_V, scale=False)
    assert np.array_equal(unscaled["scaled"], unscaled["scores"])


def test_compute_rejects_bad_input_in_one_sentence():
    with pytest.raises(CourseInputError, match="W_K has 4 rows but X has d_model=5"):
        qkv.attention_steps(np.ones((3, 5)), np.ones((5, 2)), np.ones((4, 2)), np.ones((5, 2)))
    with pytest.raises(CourseInputError, match="d_k=3 but W_Q makes queries of d_k=2"):
        qkv.attention_steps(np.ones((3, 5)), np.ones((5, 2)), np.ones((5, 3)), np.ones((5, 2)))
    with pytest.raises(CourseInputError, match="index should be a whole number from -2 to 1, but got 7"):
        qkv.softmax_share([1, 2], 7)
    with pytest.raises(CourseInputError, match="cannot compare shape"):
        qkv.printed_difference(np.ones(3), np.ones(4))
    with pytest.raises(CourseInputError, match="token should be one of"):
        qkv.three_words_query("dog")
    with pytest.raises(CourseInputError, match="the query should have d_k=2 numbers, as the keys do, but it has d_k=3"):
        qkv.query_step(np.ones(3), np.ones((3, 2)), np.ones((3, 2)))
    with pytest.raises(CourseInputError, match="visible should be"):
        qkv.query_step(np.ones(2), np.ones((3, 2)), np.ones((3, 2)), visible=0)


# --- the explorer's compute and picture ------------------------------------------------------------

def test_query_step_matches_reference_attention_row_by_row():
    rng = np.random.default_rng(1)
    Q, K, V = rng.normal(size=(4, 3)), rng.normal(size=(4, 3)), rng.normal(size=(4, 2))
    out, w = ref.attention(Q, K, V, causal=True)
    for i in range(4):
        step = qkv.query_step(Q[i], K, V, visible=i + 1)
        assert np.allclose(step["weights"], w[i]) and np.allclose(step["output"], out[i])
        assert np.allclose(step["scaled"], K @ Q[i] / math.sqrt(3))


def test_three_words_query_defaults_and_overrides():
    sat = qkv.three_words_query("sat")
    assert np.allclose(sat["weights"], [0.401, 0.198, 0.401], atol=5e-4)
    first = qkv.three_words_query("the", causal=True)
    assert np.array_equal(first["weights"], [1, 0, 0]) and np.array_equal(first["output"], [1, 0])
    moved = qkv.three_words_query("cat", query=[3.0, 0.0], scale=False)
    assert moved["weights"].argmax() == 1 and np.isclose(moved["weights"].sum(), 1)


def test_explorer_redraws_and_the_menu_sets_both_sliders():
    shown = explorer.explorer()
    controls = shown.controls
    assert set(controls) == {"token", "q0", "q1", "scale", "causal"}
    first = shown.picture()
    assert first[:8] == PNG
    controls["q0"].value = 2.5
    assert shown.picture() != first
    controls["token"].value = "the"
    assert (controls["q0"].value, controls["q1"].value) == (1.0, 0.0)
    controls["causal"].value = True
    assert shown.picture()[:8] == PNG


@pytest.mark.parametrize("query", [[0.0, 1.0], [1.0, 0.0], [2.0, 0.0], [0.0, 0.0], [1.0, 1.0], [-1.0, -1.5]])
def test_the_query_label_never_overlaps_a_key_label(query):
    fig, draw = explorer.query_view()
    draw(qkv.three_words_query("cat", query))
    ax_q = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    q_label = next(t for t in ax_q.texts if t.get_text() == "q")
    keys = [t for t in ax_q.texts if t.get_text().startswith("k ")]
    assert len(keys) == 2
    box = q_label.get_window_extent(renderer)
    assert not any(box.overlaps(k.get_window_extent(renderer)) for k in keys), query


# --- the exercise checks -------------------------------------------------------------------------

def right_attention(Q, K, V, causal=False):
    return ref.attention(Q, K, V, causal=causal)


def unscaled_attention(Q, K, V, causal=False):
    return ref.attention(Q, K, V, causal=causal, scale=False)


def masked_after_softmax(Q, K, V, causal=False):
    w = ref.softmax(Q @ K.T / math.sqrt(Q.shape[-1]))
    if causal:
        w = np.where(ref.causal_mask(len(Q)), 0.0, w)
    return w @ V, w


def masked_softmax(scores, causal):
    """softmax of each row of scores (T_q, T_k), with -inf above the diagonal when causal."""
    return ref.softmax(np.where(ref.causal_mask(len(scores)), -np.inf, scores) if causal else scores)


def reweighted(Q, K, V, causal, weights):
    """(weights @ V, weights): an attention function's return with weights made a wrong way."""
    return weights @ V, weights


def softmax_twice(Q, K, V, causal=False):
    _, w = ref.attention(Q, K, V, causal=causal)
    w = ref.softmax(w)
    return w @ V, w


RIGHT_AND_WRONG = [
    (checks.weight_cat_on_the, 0.090, 1 / 3, "not 1/3"),
    (checks.weight_cat_on_the, 0.090, 1.0, "e^0 = 1 is the top of the fraction"),
    (checks.weight_cat_on_the, 0.090, 0.5, "too large"),
    (checks.output_of_cat, [0.401, 0.198], [0.422, 0.155], "√d_k = √2"),
    (checks.output_of_cat, [0.401, 0.198], [0.0, 1.0, 1.0, 0.0], "average the values v"),
    (checks.output_of_cat, [0.401, 0.198], [0.5, 0.5], "differs from the expected values"),
    (checks.output_of_cat, [0.401, 0.198], [2.028, 1.0], "divide them by their sum"),
    (checks.toy_weight, 0.463, 0.418, "√d_k = √5"),
    (checks.toy_weight, 0.463, 0.330, "causal mask"),
    (checks.toy_weight, 0.463, 0.4835, "not by 5 itself"),
    (checks.attention_function, right_attention, unscaled_attention, "divide the scores by √d_k"),
    (checks.attention_function, right_attention, masked_after_softmax, "masked after the softmax"),
    (checks.attention_function, right_attention, lambda Q, K, V, causal=False: ref.attention(Q, K, V),
     "must not see later keys"),
    (checks.attention_function, right_attention, lambda Q, K, V, causal=False: Q, "two things"),
    (checks.attention_function, right_attention, softmax_twice, "the softmax is applied twice"),
    (checks.attention_function, right_attention, lambda Q, K, V, causal=False: ref.attention(Q, K, V, causal=True),
     "with causal=False no key is hidden"),
    (checks.attention_function, right_attention, lambda Q, K, V, causal=False: reweighted(
        Q, K, V, causal, masked_softmax(Q @ K.T / np.sqrt(V.shape[-1]), causal)), "values' width, V.shape[-1]"),
    (checks.attention_function, right_attention, lambda Q, K, V, causal=False: reweighted(
        Q, K, V, causal, masked_softmax(Q @ K.T / np.sqrt(Q.shape[0]), causal)), "Q.shape[0] is the number of queries"),
    (checks.attention_function, right_attention, lambda Q, K, V, causal=False: reweighted(
        Q, K, V, causal, masked_softmax(K @ Q.T / np.sqrt(Q.shape[-1]), causal)), "Q @ K.T, not K @ Q.T"),
]


@pytest.mark.parametrize("check, right, wrong, words", RIGHT_AND_WRONG,
                         ids=[f"{c.problems.__name__}-{w}" for c, _, _, w in RIGHT_AND_WRONG])
def test_checks_pass_right_and_explain_wrong(check, right, wrong, words, capsys):
    assert check(right)
    assert "✓" in capsys.readouterr().out
    check.grade(right)
    assert not check(wrong)
    assert words in capsys.readouterr().out
    with pytest.raises(AssertionError, match=re.escape(words)):
        check.grade(wrong)


@pytest.mark.parametrize("check", [checks.weight_cat_on_the, checks.output_of_cat, checks.toy_weight,
                                   checks.attention_function])
def test_checks_say_not_answered_for_none(check, capsys):
    assert not check(None)
    assert NOT_ANSWERED in capsys.readouterr().out
    with pytest.raises(AssertionError, match="not answered"):
        check.grade(None)


def test_attention_check_survives_a_crashing_function(capsys):
    def crashes(Q, K, V, causal=False):
        raise RuntimeError("oops")
    assert not checks.attention_function(crashes)
    assert "stopped on the Primer's toy with causal=True with RuntimeError: oops" in capsys.readouterr().out


def test_checks_accept_torch_tensors():
    import torch

    def in_torch(Q, K, V, causal=False):
        out, w = ref.attention(Q, K, V, causal=causal)
        return torch.tensor(out), torch.tensor(w, requires_grad=True)
    checks.attention_function.grade(in_torch)
    checks.output_of_cat.grade(torch.tensor([0.401, 0.198]))
    checks.weight_cat_on_the.grade(torch.tensor(0.090))


def test_a_mask_that_hides_the_diagonal_gets_its_own_hint():
    def hides_itself(Q, K, V, causal=False):
        scores = Q @ K.T / np.sqrt(Q.shape[-1])
        if causal:
            scores = np.where(np.triu(np.ones(scores.shape, bool)), -np.inf, scores)
        with np.errstate(all="ignore"):
            e = np.exp(scores - scores.max(-1, keepdims=True))
            weights = e / e.sum(-1, keepdims=True)
        return weights @ V, weights
    found = checks.attention_function.feedback(hides_itself)
    assert len(found) == 1 and "hides the diagonal too" in found[0] and "last axis" not in found[0]


# --- exercise 5: one head of the cat model in torch, each known mistake named ---------------------

def make_head(divide=True, twice=False, dim=-1, biases=True, transposed=False, mask="before", average="v",
              d_model=False, softmaxes=1, d_k=None):
    """A learner's attention_head, right by default, with one mistake switched on. transposed="d_k from W_Q"
    multiplies by W.T but still takes d_k = W_Q.shape[1]; d_k="T" takes the number of tokens."""
    def attention_head(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
        T, d_k_ = x.shape[0], W_Q.shape[-1 if transposed in (False, "d_k from W_Q") else 0]
        if d_model or d_k == "T":
            d_k_ = x.shape[1] if d_model else T
        project = (lambda W, b: x @ W.T + b) if transposed else (lambda W, b: x @ W + b)
        if not biases:
            b_Q, b_K, b_V = 0, 0, 0
        if biases == "swapped":
            b_Q, b_K = b_K, b_Q
        q, k, v = project(W_Q, b_Q), project(W_K, b_K), project(W_V, b_V)
        if average == "x_W_K":
            v = project(W_K, b_V)
        scores = q @ k.T
        if divide:
            scores = scores / math.sqrt(d_k_) / (math.sqrt(d_k_) if twice else 1)
        later = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=0 if mask == "diagonal" else 1)
        if mask == "tril":
            later = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)
        if mask in ("before", "diagonal", "tril"):
            scores = scores.masked_fill(later, float("-inf"))
        if mask == "zero":
            scores = scores.masked_fill(later, 0.0)
        weights = torch.softmax(scores, dim=dim)
        for _ in range(softmaxes - 1):
            weights = torch.softmax(weights, dim=dim)
        if mask in ("after", "inf_after"):
            weights = weights.masked_fill(later, 0.0 if mask == "after" else float("-inf"))
        if average == "weights_T":
            return weights.T @ v
        return weights @ {"v": v, "k": k, "x": x, "x_cut": x[:, :v.shape[1]], "x_W_K": v}[average]
    return attention_head

HEAD_MISTAKES = [
    (make_head(divide=False), "not divided by √d_k"),
    (make_head(twice=True), "divided by d_k (or by √d_k twice)"),
    (make_head(dim=0), "softmax runs over the wrong axis"),
    (make_head(biases=False), "the biases are left out"),
    (make_head(transposed=True), "transposed matrices (x @ W.T"),
    (make_head(mask="none"), "no causal mask"),
    (make_head(mask="after"), "the mask comes after the softmax"),
    (make_head(mask="diagonal"), "the mask hides the diagonal too"),
    (make_head(average="k"), "the weights average the keys"),
    (make_head(average="x"), "average the values"),
    (make_head(d_model=True), "divided by √d_model = √6: d_k is the head's own dimension, W_Q.shape[1] = 3"),
    (make_head(mask="zero"), "a score of 0 still gets weight (e^0 = 1): fill the entries above the diagonal with -inf"),
    (make_head(mask="tril"), "the mask hides the earlier keys"),
    (make_head(softmaxes=2), "the softmax is applied twice"),
    (make_head(average="weights_T"), "the weights are transposed before averaging"),
    (lambda *args: (qkv.attention_head(*args), None), "only the output"),
    (make_head(d_k="T"), "divided by √T, T being the number of tokens"),
    (make_head(average="x_W_K"), "the values are made with W_K"),
    (make_head(average="x_cut"), "the weights average the token vectors x"),
    (make_head(biases="swapped"), "b_Q and b_K are swapped"),
    (make_head(mask="inf_after"), "you filled the weights with -inf after the softmax"),
    (make_head(transposed="d_k from W_Q"), "transposed matrices (x @ W.T"),
]


def test_the_course_head_is_the_models_own_on_every_head_and_prompt():
    for case in qkv.cat_head_cases():
        out = qkv.attention_head(case["x"], *(case[name] for name in checks.SLICES))
        assert out.shape == case["expected"].shape
        assert torch.allclose(out, case["expected"], atol=1e-5)
    with pytest.raises(CourseInputError, match="W_K has 5 rows but x has d_model=6"):
        qkv.attention_head(torch.ones(3, 6), torch.ones(6, 3), torch.ones(5, 3), torch.ones(6, 3),
                           torch.ones(3), torch.ones(3), torch.ones(3))
    with pytest.raises(CourseInputError, match="head should be a whole number from 0 to 1"):
        qkv.head_slices(weights.load_cat().blocks[0].attn, 2)


def test_a_right_head_passes_and_the_skeleton_is_not_answered_yet():
    assert checks.attention_head.feedback(make_head()) == []
    checks.attention_head.grade(make_head())

    def skeleton(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
        """The learner's copy before an answer: a docstring and # YOUR CODE HERE."""
        # YOUR CODE HERE
    found = checks.attention_head.feedback(skeleton)
    assert len(found) == 1 and found[0].startswith("not answered yet")


def test_leaving_out_the_key_bias_changes_nothing_and_passes():
    """q·b_K is the same for every key of a row, and softmax ignores a constant added to a row."""
    def no_key_bias(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
        return make_head()(x, W_Q, W_K, W_V, b_Q, torch.zeros_like(b_K), b_V)
    assert checks.attention_head.feedback(no_key_bias) == []


@pytest.mark.parametrize("wrong, words", HEAD_MISTAKES, ids=[w for _, w in HEAD_MISTAKES])
def test_each_head_mistake_is_named(wrong, words):
    found = checks.attention_head.feedback(wrong)
    assert len(found) == 1 and words in found[0], found
    with pytest.raises(AssertionError, match=re.escape(words)):
        checks.attention_head.grade(wrong)


# --- exercise 6: head 1's slices ------------------------------------------------------------------

def head_one(columns=slice(3, 6), bias_columns=None, source="L0.ln1"):
    model, world = weights.load_cat(), worlds.cat_world()
    trace = model(world.tokenizer.encode(checks.HEAD_PROMPT), trace=True)
    attn = model.blocks[0].attn
    cut = lambda name, c: getattr(attn, name).detach()[..., c]
    return qkv.attention_head(trace[source].detach(), *(cut(n, columns) for n in ("W_Q", "W_K", "W_V")),
                              *(cut(n, bias_columns or columns) for n in ("b_Q", "b_K", "b_V")))


@pytest.mark.parametrize("kwargs, words", [
    (dict(columns=slice(0, 3)), "head 0's columns"),
    (dict(columns=slice(1, None, 2)), "not every second column"),
    (dict(bias_columns=slice(0, 3)), "the biases are head 0's"),
    (dict(source="h0"), "LayerNormed input"),
])
def test_head_one_slices_right_and_wrong(kwargs, words):
    assert checks.head_one_output.feedback(head_one()) == []
    found = checks.head_one_output.feedback(head_one(**kwargs))
    assert len(found) == 1 and words in found[0], found
    assert checks.head_one_output.feedback(None)[0].startswith("not answered yet")


@pytest.mark.parametrize("answer", [make_head(), make_head(transposed=True), make_head(divide=False),
                                    make_head(mask="diagonal")], ids=["right", "transposed", "unscaled", "diagonal"])
def test_the_graders_record_of_a_head_is_judged_as_the_head_itself(answer):
    """Under the course's grader the head runs in the student's kernel (recorded as data) and the
    judge replays those outputs in the same order, the retry with transposed matrices included."""
    from helpers import grading
    recorded = json.loads(json.dumps(grading.record_answer(checks.attention_head, answer, (), {})))
    assert checks.attention_head.feedback(grading.decode(recorded)) == checks.attention_head.feedback(answer)


# --- a piece that changes its inputs in place fails, and the caller's arrays stay as they were -------

def attention_scaling_Q_in_place(Q, K, V, causal=False):
    """The reader's piece: Q /= √d_k, then the right recipe without a division (an output that is right)."""
    Q /= np.sqrt(Q.shape[-1])
    return ref.attention(Q, K, V, causal=causal, scale=False)


def head_folding_the_scale_into_W_Q(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
    """The reader's piece: W_Q and b_Q divided by √d_k in place, no division later: right outputs."""
    W_Q /= math.sqrt(W_Q.shape[1])
    b_Q /= math.sqrt(W_Q.shape[1])
    return make_head(divide=False)(x, W_Q, W_K, W_V, b_Q, b_K, b_V)


def test_a_piece_that_changes_its_inputs_in_place_is_named():
    found = checks.attention_function.feedback(attention_scaling_Q_in_place)
    assert len(found) == 1 and "your function changed Q in place" in found[0], found
    case = qkv.cat_head_cases()[0]
    before = {name: case[name].clone() for name in checks.SLICES}
    found = checks.attention_head.feedback(head_folding_the_scale_into_W_Q)
    assert len(found) == 1 and "your function changed W_Q in place" in found[0], found
    assert all(torch.equal(case[name], before[name]) for name in checks.SLICES)    # the cases are untouched
    with pytest.raises(AssertionError, match="changed W_Q in place"):
        checks.attention_head.grade(head_folding_the_scale_into_W_Q)


def test_switches_are_true_or_false_not_text_or_numbers():
    """Issue 31: the text 'False' is truthy, 0 falsy: each would silently flip a switch."""
    for bad in ("False", 0, 1, 0.5, None):
        with pytest.raises(CourseInputError, match="causal is a switch and should be True or False"):
            qkv.three_words_query(causal=bad)
        with pytest.raises(CourseInputError, match="scale is a switch and should be True or False"):
            qkv.three_words_query(scale=bad)
        with pytest.raises(CourseInputError, match="scale is a switch"):
            qkv.query_step(np.ones(2), np.ones((3, 2)), np.ones((3, 2)), scale=bad)
        with pytest.raises(CourseInputError, match="causal is a switch"):
            qkv.attention_steps(np.ones((3, 2)), np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), causal=bad)
    assert qkv.three_words_query(causal=np.bool_(True))["visible"] == 3


def test_query_step_refuses_non_finite_vectors_and_bad_index_or_width():
    with pytest.raises(CourseInputError, match="query should hold finite numbers"):
        qkv.three_words_query(query=[float("nan"), 1.0])
    with pytest.raises(CourseInputError, match="keys should hold finite numbers"):
        qkv.query_step(np.ones(2), np.full((3, 2), np.inf), np.ones((3, 2)))
    with pytest.raises(CourseInputError, match="index should be a whole number"):
        qkv.softmax_share([1, 2], "1")
    with pytest.raises(CourseInputError, match="d should be a number"):
        qkv.softmax_share([1, 2], 0, d="4")
    with pytest.raises(CourseInputError, match="layer should be a whole number from 0 to 1"):
        qkv.cat_head_cases(layer=2)


def test_attention_head_takes_float64_x_with_float32_weights():
    """Red team round 3: a float64 x against the model's float32 weights was a dtype traceback; the
    head is computed in the wider dtype, the same numbers."""
    x, W, b = torch.randn(4, 6, generator=torch.Generator().manual_seed(0)), torch.eye(6)[:, :3], torch.zeros(3)
    assert torch.allclose(qkv.attention_head(x.double(), W, W, W, b, b, b), qkv.attention_head(x, W, W, W, b, b, b).double())


# ------------------------------------------------------------------ red team round 8

def test_round_8_softmax_share_counts_a_broadcast_array_before_making_it(refused):
    refused(lambda: qkv.softmax_share(np.broadcast_to(np.zeros(1), (10**9,)), 0), "scores", "1.5 GiB")


def test_round_8_attention_head_counts_an_expanded_tensor_before_using_it(refused):
    x, W, b = torch.zeros(1, 1).expand(10**9, 2), torch.zeros(2, 2), torch.zeros(2)
    refused(lambda: qkv.attention_head(x, W, W, W, b, b, b), "x (a tensor of 2,000,000,000 numbers)", "1.5 GiB")


# ------------------------------------------------------------------ red team round 9

def test_round_9_cat_head_cases_checks_that_model_and_world_belong_together(dragon, cat_world, refused):
    refused(lambda: qkv.cat_head_cases(model=dragon, world=cat_world), "a model and a world that belong together")
    refused(lambda: qkv.cat_head_cases(model="cat"), "helpers.model.Transformer")
