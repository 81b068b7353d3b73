"""Round 22 (issue 31): the checks of chapters 00-06. A right answer in float16 or bfloat16, or rounded to a few
decimals, is told so in one sentence (its float type, or its rounding), never given a made-up slip; the course's
own implementations of attention (and of the sinusoidal angles, and of the cosine) in other chapters' folders are
no answer to a function check; a +inf mask is named as +inf."""
import math

import numpy as np
import pytest
import torch
from torch import nn

import helpers.heads.compute as heads_compute
import helpers.masking.compute as masking_compute
import helpers.qkv.compute as qkv_compute
import helpers.reference as ref
from helpers.geometry import checks as geometry_checks
from helpers.geometry.compute import neighbourhood_kept
from helpers.heads import checks as heads_checks
from helpers.masking import checks as masking_checks
from helpers.positions import checks as positions_checks
from helpers.positions.compute import offset_rotation
from helpers.qkv import checks as qkv_checks
from helpers.scaling import checks as scaling_checks
from helpers.scaling.compute import softmax_jacobian
from helpers.tour import checks as tour_checks

COURSES_OWN = "ran the course's own"


def said(check, *args):
    """The one sentence ``check`` gives (``feedback``), '' when it says the answer is right."""
    found = check.feedback(*args)
    assert len(found) <= 1, found
    return found[0] if found else ""


def one_sentence(text):
    assert "\n" not in text and ". " not in text, text
    return text


def float16(x):
    return np.asarray(x).astype(np.float16)


def bfloat16(x):
    return torch.tensor(np.asarray(x)).bfloat16()


def rounded(decimals):
    return lambda x: np.round(np.asarray(x, dtype=float), decimals)


NARROW = [(float16, "float16"), (bfloat16, "bfloat16"), (rounded(4), "rounded to 4 decimals")]


# --- 1. an answer right to its own precision is told so ------------------------------------------------------

def unscrambled_case():
    Y = np.random.RandomState(0).randn(6, 4)
    perm = [2, 0, 1, 5, 4, 3]
    return Y[np.argsort(perm)], Y, perm


def kept_case(k):
    rng = np.random.default_rng(0)
    high = rng.normal(size=(40, 10))
    low = high[:, :2] + 0.3 * rng.normal(size=(40, 2))
    return neighbourhood_kept(high, low, k), high, low, k


def renormalised_case():
    zeroed = np.tril(np.random.default_rng(1).dirichlet(np.ones(5), size=5))
    return zeroed / zeroed.sum(1, keepdims=True), zeroed


def jacobian_case():
    w = np.array([0.1, 0.2, 0.3, 0.4])
    return softmax_jacobian(w), w


def split_case():
    q = np.random.default_rng(2).normal(size=(2, 5, 6))
    return q.reshape(2, 5, 3, 2).transpose(0, 2, 1, 3), q, 3


@pytest.mark.parametrize("convert, what", NARROW)
@pytest.mark.parametrize("check, case", [
    (positions_checks.unscrambled, unscrambled_case),
    (geometry_checks.kept_fractions, lambda: kept_case(10)),
    (geometry_checks.kept_fractions, lambda: kept_case(3)),
    (masking_checks.renormalised, renormalised_case),
    (scaling_checks.jacobian, jacobian_case),
    (heads_checks.split, split_case)])
def test_a_right_array_in_a_narrow_float_type_or_rounded_is_told_so(check, case, convert, what):
    right, *args = case()
    assert said(check, right, *args) == ""
    sentence = one_sentence(said(check, convert(right), *args))
    assert sentence == "" or what.split()[0] in sentence, sentence   # right to the tolerance, or its precision named
    for slip in ("not Y's rows", "whole number of neighbours", "sums to", "should sum to 0", "differs from"):
        assert slip not in sentence, sentence


def test_the_repro_cases_name_the_dtype_or_the_rounding():
    right, Y, perm = unscrambled_case()
    assert "float16 array" in said(positions_checks.unscrambled, float16(right), Y, perm)
    assert "rounded to 4 decimals" in said(positions_checks.unscrambled, rounded(4)(right), Y, perm)
    fractions, *maps = kept_case(3)
    assert "rounded to 4 decimals" in said(geometry_checks.kept_fractions, rounded(4)(fractions), *maps)
    assert "bfloat16 tensor" in said(scaling_checks.jacobian, bfloat16(jacobian_case()[0]), jacobian_case()[1])
    assert "float16 array" in said(heads_checks.split, float16(split_case()[0]), *split_case()[1:])


def test_a_wrong_answer_still_gets_its_slip():
    right, Y, perm = unscrambled_case()
    assert "scrambled order" in said(positions_checks.unscrambled, Y, Y, perm)
    assert "not Y's rows" in said(positions_checks.unscrambled, np.round(right + 0.1, 4), Y, perm)
    zeroed = renormalised_case()[1]
    assert "zeroed weights unchanged" in said(masking_checks.renormalised, zeroed, zeroed)
    assert "every sign is flipped" in said(scaling_checks.jacobian, -jacobian_case()[0], jacobian_case()[1])


def logits_case():
    logits = np.array([2.0, 1.0, 0.1, 3.3])
    e = np.exp(logits - logits.max())
    return float(e[3] / e.sum()), logits, 3


def loss_case():
    logits = np.random.default_rng(0).normal(size=(5, 7))
    ids = [0, 3, 2, 6, 1]
    log_probs = tour_checks.log_softmax(logits, 1)
    return float(-log_probs[np.arange(4), ids[1:]].mean()), logits, ids


@pytest.mark.parametrize("check, case", [(tour_checks.next_prob, logits_case), (tour_checks.sentence_loss, loss_case)])
def test_a_right_number_in_bfloat16_or_rounded_to_3_decimals_is_told_so(check, case):
    right, *args = case()
    assert said(check, right, *args) == ""
    assert said(check, round(right, 4), *args) == ""   # within the check's tolerance of 1e-4
    assert "bfloat16 tensor" in one_sentence(said(check, bfloat16(right), *args))
    assert "rounded to 3 decimals" in one_sentence(said(check, round(right, 3), *args))


def test_number_checks_name_a_rounding_past_their_tolerance_and_keep_their_slips():
    toy = qkv_compute.primer_toy()
    weight = qkv_compute.attention_steps(toy["X"], toy["W_Q"], toy["W_K"], toy["W_V"], causal=True)["weights"][1, 0]
    assert "rounded to 2 decimals" in said(qkv_checks.toy_weight, round(float(weight), 2))
    assert "e^0 = 1" in said(qkv_checks.weight_cat_on_the, 1.0)   # a whole number is a slip's value, not a rounding
    scores = np.array([2.0, 1.0, 0.5, -1.0, 3.0])
    from helpers.scaling.compute import weight_gradient
    size = weight_gradient(scores, 2, 8.0)["wrt_scores"]
    assert "rounded to 2 decimals" in said(scaling_checks.gradient_wrt_raw, round(size, 2), scores)


def test_array_answers_of_chapter_02_and_06_name_their_precision():
    from helpers.weights import load_cat
    from helpers.worlds import cat_world
    with torch.no_grad():
        trace = load_cat()(cat_world().tokenizer.encode(qkv_checks.HEAD_PROMPT), trace=True)
    head = trace["L0.head_out"][1]
    assert said(qkv_checks.head_one_output, head) == ""
    assert "float16 tensor" in said(qkv_checks.head_one_output, head.half())
    assert "rounded to 3 decimals" in said(qkv_checks.head_one_output, np.round(head.numpy(), 3))
    R = offset_rotation(3, 8)
    assert said(positions_checks.offset_rotation, R, 3, 8) == ""
    assert "bfloat16 tensor" in said(positions_checks.offset_rotation, bfloat16(R), 3, 8)
    assert "3 steps back" in said(positions_checks.offset_rotation, R.T, 3, 8)


def test_a_function_whose_output_is_rounded_is_told_so():
    def attention(Q, K, V, causal=False):
        out, weights = ref.attention(Q, K, V, causal=causal)
        return np.round(out, 4), np.round(weights, 4)

    def own(Q, K, V, causal=False):   # the course's reference.attention is no answer: the same, written out
        scores = Q @ K.T / math.sqrt(Q.shape[-1])
        if causal:
            scores = np.where(np.triu(np.ones(scores.shape, dtype=bool), 1), -np.inf, scores)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        return np.round(weights @ V, 4), np.round(weights, 4)
    assert "rounded to 4 decimals" in one_sentence(said(qkv_checks.attention_function, own))


def test_rounded_problem_reads_the_decimals_an_answer_is_written_to():
    from helpers.exercises import rounded_problem

    assert "rounded to 4 decimals" in rounded_problem(np.round([1 / 3, 2 / 3], 4), [1 / 3, 2 / 3], "x", 1e-6)
    float32_rounded = torch.round(torch.tensor([1 / 3, 2 / 3]), decimals=4).numpy()   # 0.33329999...
    assert "rounded to 4 decimals" in rounded_problem(float32_rounded, [1 / 3, 2 / 3], "x", 1e-6)
    assert rounded_problem([0.0, 1.0], [0.03, 0.98], "x", 1e-6) is None   # whole numbers: a slip's, not a rounding
    assert rounded_problem([0.3], [0.5], "x", 1e-6) is None               # off by more than the rounding
    assert rounded_problem(0.3333, 1 / 3, "x", 1e-4) is None              # a rounding within the tolerance


# --- 2. the course's own implementations in other chapters' folders are no answer ----------------------------

def head_by(attention):
    """A function attention_head(x, W_Q, W_K, W_V, b_Q, b_K, b_V) that hands q, k, v to ``attention``."""
    def attention_head(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
        q, k, v = x @ W_Q + b_Q, x @ W_K + b_K, x @ W_V + b_V
        return attention(q, k, v)
    return attention_head


def by_reference(q, k, v):
    out, _ = ref.attention(*(t.detach().double().numpy() for t in (q, k, v)), causal=True)
    return torch.tensor(out, dtype=q.dtype)


def by_masking(q, k, v):
    return masking_compute.causal_attention(q[None, None], k[None, None], v[None, None])[0][0, 0]


@pytest.mark.parametrize("attention", [by_reference, by_masking], ids=["reference.attention", "causal_attention"])
def test_an_attention_head_built_on_the_courses_causal_attention_is_refused(attention):
    sentence = one_sentence(said(qkv_checks.attention_head, head_by(attention)))
    assert COURSES_OWN in sentence, sentence


def head_on_identity(q, k, v, weights=False):
    """causal attention of q (T_q, d) on k, v (T_k, d) by qkv.compute.attention_head: x = eye(T_k), the
    queries padded to T_k rows; with ``weights`` the values are eye(T_k), so the output is the weights."""
    T_q, T_k, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    width = max(d_k, v.shape[-1], T_k)
    pad = lambda m: torch.cat([m, torch.zeros(m.shape[0], width - m.shape[1], dtype=m.dtype)], 1)   # noqa: E731
    eye, zero = torch.eye(T_k, dtype=q.dtype), torch.zeros(width, dtype=q.dtype)
    Q = torch.cat([torch.zeros(T_k - T_q, d_k, dtype=q.dtype), q]) * math.sqrt(width / d_k)
    out = qkv_compute.attention_head(eye, pad(Q), pad(k), pad(eye if weights else v), zero, zero, zero)
    return out[T_k - T_q:, :T_k if weights else v.shape[-1]]


def causal_by_head(q, k, v):
    outs = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    weights = torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            outs[b, h] = head_on_identity(q[b, h], k[b, h], v[b, h])
            weights[b, h] = head_on_identity(q[b, h], k[b, h], v[b, h], weights=True)
    return outs, weights


def test_causal_attention_built_on_the_courses_attention_head_is_refused():
    sentence = one_sentence(said(masking_checks.causal_attention, causal_by_head))
    assert COURSES_OWN in sentence and "attention_head" in sentence, sentence


def test_attention_in_numpy_built_on_the_courses_attention_head_is_refused():
    def attention(Q, K, V, causal=False):
        if not causal:   # (the check's causal=False cases, written out)
            weights = ref.softmax(Q @ K.T / math.sqrt(Q.shape[-1]))
            return weights @ V, weights
        q, k, v = (torch.tensor(a) for a in (Q, K, V))
        return head_on_identity(q, k, v).numpy(), head_on_identity(q, k, v, weights=True).numpy()
    sentence = one_sentence(said(qkv_checks.attention_function, attention))
    assert COURSES_OWN in sentence and "attention_head" in sentence, sentence


class SlippedAttention(nn.Module):   # forward: the check's own full multi-head attention, slipped_attention
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.W_Q, self.W_K, self.W_V, self.W_O = (nn.Parameter(torch.zeros(d_model, d_model)) for _ in range(4))
        if bias:
            self.b_Q, self.b_K, self.b_V, self.b_O = (nn.Parameter(torch.zeros(d_model)) for _ in range(4))
        else:
            self.b_Q = self.b_K = self.b_V = self.b_O = None

    def forward(self, x):
        state = dict(self.state_dict())
        for n in "QKVO":
            state.setdefault(f"b_{n}", torch.zeros(x.shape[-1]))
        return heads_compute.slipped_attention(x, state, self.n_heads)


def test_a_multi_head_attention_whose_forward_is_slipped_attention_is_refused():
    sentence = one_sentence(said(heads_checks.multi_head, SlippedAttention))
    assert COURSES_OWN in sentence and "slipped_attention" in sentence, sentence


def test_a_cosine_built_on_the_courses_cosine_table_is_refused():
    from gensim.models import KeyedVectors

    from helpers.geometry.compute import cosine_table

    def cosine(A, b):
        A, b = np.asarray(A, dtype=float), np.asarray(b, dtype=float)
        rows = A if A.ndim == 2 else A[None]
        kv = KeyedVectors(vector_size=len(b))
        kv.add_vectors(["b"] + [f"a{i}" for i in range(len(rows))], np.vstack([b, rows]))
        table = cosine_table(kv, ["b"] + [f"a{i}" for i in range(len(rows))])
        return table[0, 1:] if A.ndim == 2 else float(table[0, 1])
    sentence = one_sentence(said(geometry_checks.cosine_function, cosine))
    assert COURSES_OWN in sentence and "cosine_table" in sentence, sentence


def test_a_table_built_on_the_courses_offset_rotation_is_refused():
    from helpers.weights import load_cat

    def sinusoidal_positions(n, d):
        first = np.tile([0.0, 1.0], d // 2)   # row 0: sin 0, cos 0
        rows = [first] + [first @ offset_rotation(p, d) for p in range(1, n)]
        return torch.tensor(np.array(rows), dtype=torch.float32)
    sentence = one_sentence(said(positions_checks.sinusoidal_positions, sinusoidal_positions, load_cat()))
    assert COURSES_OWN in sentence and "offset_rotation" in sentence, sentence


def test_a_rotate_built_on_the_courses_sinusoidal_table_is_refused():
    from helpers.weights import load_induction

    def rotate(x, start=0):
        table = torch.tensor(ref.sinusoidal_positions(start + x.shape[-2], x.shape[-1])[start:], dtype=x.dtype)
        sin, cos = table[:, 0::2], table[:, 1::2]
        even, odd = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2], out[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos
        return out
    sentence = one_sentence(said(positions_checks.rotate, rotate, load_induction()))
    assert COURSES_OWN in sentence and "sinusoidal_positions" in sentence, sentence


@pytest.mark.parametrize("check", [qkv_checks.attention_function, qkv_checks.attention_head,
                                   masking_checks.causal_attention, heads_checks.multi_head])
def test_every_attention_check_names_every_course_attention(check):
    own = check.answer.own
    assert set(qkv_checks.COURSES_ATTENTION) <= set(own)
    assert check.piece_name() == {"attention_function": "attention", "attention_head": "attention_head",
                                  "causal_attention": "causal_attention",
                                  "multi_head": "MultiHeadAttention"}[check.problems.__name__]


# --- 3. a +inf mask is named as +inf --------------------------------------------------------------------------

def test_a_plus_inf_mask_is_named_as_plus_inf():
    sentence = one_sentence(said(masking_checks.mask, torch.full((5, 5), float("inf")).triu(1), 5))
    assert "+inf" in sentence and "holds -inf" not in sentence and "all the weight" in sentence, sentence
    assert "hide exactly" not in sentence   # it hides the right places, with the wrong sign
    misplaced = one_sentence(said(masking_checks.mask, torch.full((5, 5), float("inf")).triu(0), 5))
    assert "+inf" in misplaced and "hide exactly the keys j > i" in misplaced
    additive = one_sentence(said(masking_checks.mask, torch.full((5, 5), float("-inf")).triu(1), 5))
    assert "holds -inf" in additive and "+inf" not in additive

