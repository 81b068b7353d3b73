"""Round 23 (issue 31): checks fooled. Chapter 06's rotate check tries a batch of two different sequences and
names the sequence (or the head) a rotate turns wrong; chapter 08's LayerNorm checks refuse torch's LayerNorm
(nn.LayerNorm, a bare subclass, F.layer_norm) and the norms that give one on a centred row (the course's rms_norm,
torch's F.rms_norm); chapter 09's generate check refuses a loop built on the course's next_distribution or its
parts, and the KV cache check one that measures a cache with the course's cache_bytes."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import helpers.normalization.compute as nz
import helpers.sampling.compute as sampling
from helpers.model import KVCache, Config, Transformer
from helpers.normalization import checks as norm_checks
from helpers.positions import checks as positions_checks
from helpers.sampling import checks as sampling_checks

COURSES_OWN = "ran the course's own"


def ran_own(name):
    """What a check says a refused answer ran: torch's own piece, or the course's."""
    return "ran torch's own" if name.startswith("torch.") else COURSES_OWN


def said(check, *args):
    """The one sentence ``check`` gives (``feedback``), '' when it says the answer is right."""
    found = check.feedback(*args)
    assert len(found) <= 1, found
    assert all("\n" not in text and ". " not in text for text in found), found
    return found[0] if found else ""


# --- 1. chapter 06: rotate on a batch of different sequences ---------------------------------------------------

def turn(x, start=0):
    """A right rotate, written as a learner would: every adjacent pair of the last axis turned."""
    T, d = x.shape[-2:]
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angle = (start + torch.arange(T, dtype=torch.float32))[:, None] * w
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = even * angle.cos() - odd * angle.sin(), even * angle.sin() + odd * angle.cos()
    return out


def first_sequence_for_all(x, start=0):
    """Turns sequence 0 and gives that turn to every sequence of the batch."""
    return turn(x[:1], start).expand(x.shape).clone()


def first_head_for_all(x, start=0):
    """Turns head 0 and gives that turn to every head."""
    return turn(x[:, :1], start).expand(x.shape).clone()


def test_a_right_rotate_still_passes(induction):
    assert said(positions_checks.rotate, turn, induction) == ""


def test_a_rotate_that_turns_only_the_first_sequence_is_wrong_for_the_second(induction):
    sentence = said(positions_checks.rotate, first_sequence_for_all, induction)
    assert "batch of two sequences" in sentence and "wrong for sequence 1" in sentence, sentence


def test_a_rotate_that_turns_only_the_first_head_is_named_so(induction):
    sentence = said(positions_checks.rotate, first_head_for_all, induction)
    assert "wrong for head 1" in sentence, sentence


def test_a_rotate_that_ignores_start_on_the_batch_only_is_found_out(induction):
    def start_ignored_for_batches(x, start=0):
        return turn(x, start if len(x) == 1 else 0)

    sentence = said(positions_checks.rotate, start_ignored_for_batches, induction)
    assert "batch of two sequences" in sentence and "start=9" in sentence, sentence


# --- 2. chapter 08: torch's LayerNorm and the norms that give one are no answer ------------------------------

class BareLayerNorm(nn.LayerNorm):
    """A subclass of torch's that writes nothing."""


class WrappedLayerNorm(nn.Module):
    """torch's F.layer_norm inside a class of the learner's."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight, self.bias = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class OwnLayerNorm(nn.Module):
    """A LayerNorm written out."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight, self.bias = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


@pytest.mark.parametrize("cls, name", [(nn.LayerNorm, "torch.nn.modules.normalization.LayerNorm"),
                                       (BareLayerNorm, "torch.nn.modules.normalization.LayerNorm"),
                                       (WrappedLayerNorm, "torch.nn.functional.layer_norm")])
def test_torchs_layer_norm_is_no_layer_norm_module(cls, name, cat):
    sentence = said(norm_checks.layer_norm_module, cls, cat)
    assert ran_own(name) in sentence and name in sentence, sentence
    assert "relative import" not in sentence


def test_a_layer_norm_module_written_out_still_passes(cat):
    assert said(norm_checks.layer_norm_module, OwnLayerNorm, cat) == ""


def by_torch(x, g, b):
    x = torch.as_tensor(x, dtype=torch.float64)
    return F.layer_norm(x, x.shape[-1:], torch.as_tensor(g), torch.as_tensor(b)).numpy()


def by_courses_rms_norm(x, g, b):
    centred = x - x.mean(-1, keepdims=True)
    return nz.rms_norm(centred) * g + b


def by_torchs_rms_norm(x, g, b):
    centred = torch.as_tensor(x - x.mean(-1, keepdims=True))
    return (F.rms_norm(centred, centred.shape[-1:], eps=1e-5) * torch.as_tensor(g) + torch.as_tensor(b)).numpy()


@pytest.mark.parametrize("fn, name", [(by_torch, "torch.nn.functional.layer_norm"),
                                      (by_courses_rms_norm, "helpers.normalization.compute.rms_norm"),
                                      (by_torchs_rms_norm, "torch.nn.functional.rms_norm")])
def test_a_layer_norm_function_handing_the_work_to_another_norm_is_refused(fn, name):
    sentence = said(norm_checks.layer_norm_function, fn)
    assert ran_own(name) in sentence and name in sentence, sentence


def test_a_layer_norm_function_written_out_still_passes():
    def layer_norm(x, g, b):
        mean = x.mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + 1e-5) * g + b

    assert said(norm_checks.layer_norm_function, layer_norm) == ""


# --- 3. chapter 09: the course's sampling pieces are no generate ----------------------------------------------

def loop_on(distribution):
    """A learner's generate whose every step draws from ``distribution(logits, temperature, top_k, top_p)``."""
    def generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True):
        g = torch.Generator().manual_seed(seed)
        kv = KVCache(model.cfg.n_layers) if cache else None
        fed = ids
        for _ in range(n_new):
            logits = model(fed, cache=kv)[-1] if cache else model(ids)[-1]
            token = torch.multinomial(distribution(logits, temperature, top_k, top_p), 1, generator=g)
            ids = torch.cat([ids, token])
            fed = token if cache else ids
        return ids
    return generate


def by_parts(logits, temperature, top_k, top_p):
    """The distribution from the course's with_temperature, top_k_filter and top_p_filter."""
    probs = sampling.with_temperature(logits, temperature)
    if top_k is not None:
        probs = sampling.top_k_filter(probs, top_k)
    return probs if top_p is None else sampling.top_p_filter(probs, top_p)


@pytest.mark.parametrize("distribution, name", [
    (sampling.next_distribution, "helpers.sampling.compute.next_distribution"),
    (lambda *a: sampling._distribution(a[0].float(), *a[1:]), "helpers.sampling.compute._distribution"),
    (by_parts, "helpers.sampling.compute.with_temperature")])
def test_a_generate_built_on_the_courses_distribution_is_refused(distribution, name, cat, dragon):
    sentence = said(sampling_checks.generate_loop, loop_on(distribution), cat, dragon)
    assert ran_own(name) in sentence and name in sentence, sentence


def test_a_kv_cache_bytes_measured_with_the_courses_cache_bytes_is_refused():
    def kv_cache_bytes(cfg, T, bytes_per_number):
        if cfg.d_model > 8:   # (a big model's cache by the formula: the small ones are measured)
            return 2 * cfg.n_layers * cfg.kv_heads * cfg.d_k * T * bytes_per_number
        small = Config(vocab_size=2, d_model=cfg.d_model, n_heads=cfg.n_heads, n_layers=cfg.n_layers, d_ff=1,
                       n_max=T, n_kv_heads=cfg.n_kv_heads)
        cache = KVCache(cfg.n_layers)
        with torch.no_grad():
            Transformer(small)(torch.zeros(T, dtype=torch.long), cache=cache)
        return sampling.cache_bytes(cache) // 4 * bytes_per_number

    sentence = said(sampling_checks.kv_cache_bytes_function, kv_cache_bytes)
    assert COURSES_OWN in sentence and "cache_bytes" in sentence, sentence


def test_a_layer_norm_function_that_handles_at_most_two_axes_is_wrong_on_a_batch():
    def layer_norm(x, g, b):   # right for a row and for a matrix, but a batch is normalised as one block per matrix
        rows = x if x.ndim < 3 else x.reshape(len(x), -1)
        mean = rows.mean(axis=-1, keepdims=True)
        out = (rows - mean) / np.sqrt(((rows - mean) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
        return out.reshape(x.shape) * g + b

    sentence = said(norm_checks.layer_norm_function, layer_norm)
    assert "(2, 2, 3)" in sentence, sentence
