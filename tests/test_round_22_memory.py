"""Round 22 (issue 31): compute functions of chapters 03 and 05 count the memory their work needs, not only their
input's size: weight_gradient makes one row of softmax's derivative (not the (n, n) table), softmax_jacobian makes
only its result, attention_profile one copy of the weights (not an offset table, five masks and a product per kind),
and every measure of attention weights, torch_differences, slipped_attention and head_scores refuse up front, in one
sentence, work past the course's limit. Peaks are measured with tracemalloc (NumPy) or in a child process (torch)."""
import subprocess
import sys

import numpy as np
import pytest
import torch

import helpers.heads.compute as heads
import helpers.scaling.compute as scaling
from test_round_13_budgets import peak_bytes
from helpers import weights
from helpers.model import Config, Transformer


def child_growth_mb(code):
    """How many MB the peak memory of a fresh Python process grew while it ran ``code`` (after its setup, the
    lines before the marker line '# measure')."""
    setup, work = code.split("# measure\n")
    program = (f"import resource\n{setup}\nbefore = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n{work}\n"
               "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)")
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return int(run.stdout.split()[-1])


def old_profile(w):
    """attention_profile as it was before round 22 (masks over the whole (T, T) table): the numbers to keep."""
    T = w.shape[-1]
    query, key = torch.arange(T)[:, None], torch.arange(T)[None, :]
    offset = query - key
    kinds = dict(itself=offset == 0, previous=offset == 1, two_back=offset == 2)
    kinds["bos"] = (key == 0) & (offset > 2)
    kinds["elsewhere"] = (key > 0) & (offset > 2)
    return {name: (w * mask)[..., 1:, :].sum(-1).mean(-1) for name, mask in kinds.items()}


# ------------------------------------------------------------------ chapter 03: softmax's derivative

def test_weight_gradient_needs_memory_linear_in_n():
    n = 10_000   # the (n, n) derivative alone would be 800 MB (1.5 GB at its peak before)
    peak = peak_bytes(lambda: scaling.weight_gradient(np.zeros(n), 0, 8.0))
    assert peak < 40 * n + 2**20


def test_weight_gradient_gives_the_numbers_of_the_derivatives_row():
    rng = np.random.default_rng(0)
    for n, divide_by in ((1, 1.0), (2, 1.0), (6, 8.0), (50, 0.3)):
        scores = rng.normal(size=n) * 5
        for index in range(n):
            row = scaling.softmax_jacobian(scaling.softmax(scores / divide_by))[index]
            sizes = scaling.weight_gradient(scores, index, divide_by)
            assert sizes["wrt_input"] == float(np.linalg.norm(row))   # bit for bit, as before
            assert sizes["wrt_scores"] == sizes["wrt_input"] / divide_by


def test_weight_gradient_takes_a_million_scores_and_refuses_more(refused):
    assert scaling.weight_gradient(np.zeros(1_000_000), 0)["wrt_input"] > 0   # before: refused past 10,033
    refused(lambda: scaling.weight_gradient(np.broadcast_to(0.0, 1_000_001), 0), "scores should hold at most 1,000,000",
            "this course's limit", "1,000,001")


def test_softmax_jacobian_makes_only_its_result():
    n = 2_000
    w = np.full(n, 1 / n)
    peak = peak_bytes(lambda: scaling.softmax_jacobian(w))
    assert peak < 10 * n * n   # its (n, n) float64 result (8 n²); before, 24 n² at the peak


def test_softmax_jacobian_keeps_its_numbers():
    w = scaling.softmax(np.array([1.0, 2.0, 3.0, -4.0]))
    assert np.array_equal(scaling.softmax_jacobian(w), np.diag(w) - np.outer(w, w))


# ------------------------------------------------------------------ chapter 05: where a head's weight goes

PROFILE = """import torch
import helpers.heads.compute as H
T = 4000
w = torch.full((T, T), 1 / T)
# measure
H.attention_profile(w)"""


def test_attention_profile_holds_about_two_copies_of_the_weights_at_most():
    grew = child_growth_mb(PROFILE)   # weights of 61 MB: before, about 300 MB more (an int64 table, masks, products)
    assert grew < 160, grew


@pytest.mark.parametrize("shape", [(2, 2), (3, 3), (4, 4), (9, 9), (2, 3, 17, 17)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_profile_keeps_its_numbers(shape, dtype):
    g = torch.Generator().manual_seed(sum(shape))
    for causal in (True, False):
        scores = torch.randn(*shape, generator=g, dtype=dtype)
        if causal:
            scores = scores.masked_fill(torch.ones(shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
        w = torch.softmax(scores, -1)
        ours, before = heads.attention_profile(w), old_profile(w)
        assert ours.keys() == before.keys()
        assert all(torch.equal(ours[name], before[name]) for name in before)
        assert torch.allclose(ours["previous"], heads.previous_token_score(w), rtol=1e-6, atol=0)


def test_attention_profile_leaves_the_weights_as_they_were():
    w = torch.softmax(torch.randn(6, 6), -1)
    kept = w.clone()
    heads.attention_profile(w)
    assert torch.equal(w, kept)


@pytest.mark.parametrize("measure", [heads.attention_profile, heads.previous_token_score,
                                     lambda w: heads.induction_score(w, 5_999),
                                     lambda w: heads.repeat_score(w, torch.arange(11_999) % 7)])
def test_measures_of_weights_refuse_work_past_the_limit(refused, measure):
    T = 11_999   # accepted as input (8 bytes a number fit 1.5 GiB); its work (12 bytes a float32 number) does not
    w = torch.full((1, 1), 1 / T).expand(T, T)   # stores one number, stands for T²
    refused(lambda: measure(w), "a measure on weights of shape (11999, 11999)", "1.5 GiB", "fewer or shorter rows")


# ------------------------------------------------------------------ chapter 05: layers and models

def test_torch_differences_counts_both_implementations(refused):
    attn = weights.load_cat().blocks[0].attn
    B, T = 100, 1_024   # our layer alone (12 bytes a weight) fits; with torch's two modules beside it (24) it does not
    x = torch.zeros(1, 1, attn.W_Q.shape[0]).expand(B, T, -1)
    refused(lambda: heads.torch_differences(attn, x), "torch_differences on 100 sequences of 1,024 tokens", "1.5 GiB")


def test_slipped_attention_counts_its_rows(refused):
    B, T, d = 1_000_000, 1, 64   # no (T, T) table to speak of: q, k, v and the rest are 8 tables of x's size
    x = np.broadcast_to(np.float64(0.0), (B, T, d))
    state = {f"{kind}_{name}": np.zeros((d, d) if kind == "W" else (d,)) for kind in "Wb" for name in "QKVO"}
    refused(lambda: heads.slipped_attention(x, state, 4), "slipped_attention", "1.5 GiB", "fewer or shorter sequences")


def test_head_scores_counts_the_mean_and_its_measures(refused):
    cfg = Config(vocab_size=4, d_model=4, n_heads=4, n_layers=50, d_ff=4, n_max=1_023)
    model = Transformer(cfg)
    length = 511
    span = ([1, 2] * length)[:length]
    ids = torch.tensor([[0] + span * 2])   # one sequence and its repeat: the pass and the weights returned (0.8 GiB) fit
    table = cfg.n_layers * cfg.n_heads * (2 * length + 1) ** 2
    assert 4 * table + cfg.pass_bytes(1, 2 * length + 1) < scaling.MAX_BYTES
    refused(lambda: heads.head_scores(model, ids, length), "the attention weights of 50 layers", "1.5 GiB")


def test_check_weights_bytes_names_no_negative_batch(refused):
    cfg = Config(vocab_size=4, d_model=4, n_heads=4, n_layers=12, d_ff=4, n_max=4_097)
    message = refused(lambda: heads.check_weights_bytes(cfg, 1, 4_097, beside=16), "give shorter sequences")
    assert "-" not in message.split(":")[-1]
