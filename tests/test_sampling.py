"""Chapter 09 (sampling): temperature, top-k, top-p, draws, generation with and without the
KV cache, counted multiply-adds, the cache's size, the explorer and the checks."""
import functools
import itertools
import json
import math

import numpy as np
import pytest
import torch

from helpers import grading
from helpers.errors import CourseInputError
from helpers.exercises import NOT_ANSWERED
from helpers.explorer import png
from helpers.model import Config, KVCache, Transformer
from helpers.reference import attention, softmax
from helpers.sampling import checks, explorer
from helpers.sampling import compute as sampling

LOGITS = torch.tensor([2.0, 1.0, 0.5, -1.0, 3.0])


def test_temperature_zero_is_greedy_and_one_is_softmax():
    assert sampling.with_temperature(LOGITS, 0).tolist() == [0, 0, 0, 0, 1]
    assert torch.allclose(sampling.with_temperature(LOGITS, 1), torch.softmax(LOGITS, -1))


def test_adding_a_constant_changes_nothing_and_argmax_never_moves():
    for t in (0.3, 1.0, 5.0):
        p = sampling.with_temperature(LOGITS, t)
        assert torch.allclose(p, sampling.with_temperature(LOGITS + 7.0, t))
        assert p.argmax() == 4


def test_top_k_keeps_k_tokens_renormalised():
    p = sampling.top_k_filter(torch.softmax(LOGITS, -1), 2)
    assert (p > 0).sum() == 2 and torch.isclose(p.sum(), torch.tensor(1.0)) and p[4] > p[0] > 0


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    assert sampling.nucleus(probs, 0.5).tolist() == [0]
    assert sampling.nucleus(probs, 0.8).tolist() == [0, 1]
    assert sampling.nucleus(probs, 0.81).tolist() == [0, 1, 2]
    assert sampling.nucleus(probs, 1.0).tolist() == [0, 1, 2, 3]


def test_seeded_draws_follow_the_probabilities_and_repeat():
    probs = torch.tensor([0.6, 0.3, 0.1])
    g = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.tensor([sampling.draw(probs, g) for _ in range(10_000)]), minlength=3)
    assert torch.allclose(counts / 10_000, probs, atol=0.02)
    first = [sampling.draw(probs, torch.Generator().manual_seed(5)) for _ in range(3)]
    assert first == [sampling.draw(probs, torch.Generator().manual_seed(5)) for _ in range(3)]


def test_generate_with_and_without_cache_gives_the_same_tokens(cat, cat_world, dragon, dragon_world):
    for model, world, prompt in ((cat, cat_world, "<BOS> the"), (dragon, dragon_world, "<BOS> dragon drinks")):
        ids = world.tokenizer.encode(prompt)
        for settings in (dict(temperature=0), dict(temperature=1.0, seed=3), dict(top_p=0.9, seed=1)):
            a = sampling.generate(model, ids, 8, cache=True, **settings)
            b = sampling.generate(model, ids, 8, cache=False, **settings)
            assert a.tolist() == b.tolist()


def test_greedy_cat_generation_is_a_sentence_of_the_world(cat, cat_world):
    out = sampling.generate(cat, cat_world.tokenizer.encode("<BOS> the cat sat"), 6, temperature=0,
                            stop_id=cat_world.tokenizer.ids["<EOS>"])
    assert cat_world.tokenizer.decode(out) in cat_world.sentences


def test_generate_passes_switches_and_refuses_a_cache_without_the_mask(cat, cat_world):
    model = cat
    ids = cat_world.tokenizer.encode("<BOS> the")
    free = sampling.generate(model, ids, 4, temperature=0, cache=False, causal=False)
    assert free.tolist() != sampling.generate(model, ids, 4, temperature=0).tolist()
    with pytest.raises(CourseInputError, match="causal mask"):
        sampling.generate(model, ids, 4, causal=False)


# ------------------------------------------------------------------ sampling helpers

def test_draws_repeat_with_a_seed_and_follow_the_probabilities():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    a = sampling.draws(probs, 10_000, seed=4)
    assert a.shape == (10_000,) and torch.equal(a, sampling.draws(probs, 10_000, seed=4))
    assert not torch.equal(a, sampling.draws(probs, 10_000, seed=5))
    assert torch.allclose(torch.bincount(a, minlength=4) / 10_000, probs, atol=0.02)


@pytest.mark.parametrize("bad", [torch.tensor([0.5, 0.6]), torch.tensor([[0.5, 0.5]]), torch.tensor([1.2, -0.2])])
def test_draws_reject_what_is_not_a_distribution(bad):
    with pytest.raises(CourseInputError, match="one distribution|summing to 1"):
        sampling.draws(bad, 10, seed=0)


@pytest.mark.parametrize("which", ["cat", "dragon"])
def test_counted_multiply_adds_match_pytorchs_flop_counter(which, cat, dragon):
    model = cat if which == "cat" else dragon
    ids = torch.arange(12) % model.cfg.vocab_size
    assert sampling.forward_macs(model.cfg, 12) == sampling.counted_macs(model, ids)
    cache = sampling.prefilled(model, ids[:-1])
    assert sampling.forward_macs(model.cfg, 1, 11) == sampling.counted_macs(model, ids[-1:], cache)
    assert sum(sampling.macs_by_part(model.cfg, 5, 7).values()) == sampling.forward_macs(model.cfg, 5, 7)


def test_generation_macs_add_up_the_passes_generate_makes(dragon):
    cfg = dragon.cfg
    assert sampling.generation_macs(cfg, 3, 4, use_cache=False) == sum(
        sampling.forward_macs(cfg, T) for T in (3, 4, 5, 6))
    assert sampling.generation_macs(cfg, 3, 4, use_cache=True) == (
        sampling.forward_macs(cfg, 3) + sum(sampling.forward_macs(cfg, 1, seen) for seen in (3, 4, 5)))
    with pytest.raises(CourseInputError, match="n_new"):
        sampling.forward_macs(cfg, 0)


def test_kv_cache_size_formula_matches_a_real_cache_and_the_7b_example(dragon):
    cache = sampling.prefilled(dragon, torch.arange(20) % 10)
    assert sampling.cache_bytes(cache) == sampling.kv_cache_bytes(3, 20, 2, 3, 4) == 2880
    seven_b = sampling.kv_cache_bytes(32, 32_768, 32, 128, 2)
    assert seven_b == 17_179_869_184 == 16 * 2**30
    with pytest.raises(CourseInputError, match="bytes_per_element"):
        sampling.kv_cache_bytes(32, 32_768, 32, 128, 0)
    with pytest.raises(CourseInputError, match="KVCache"):
        sampling.cache_bytes([torch.zeros(3)])


def test_step_seconds_times_each_length_both_ways():
    model = Transformer(Config(vocab_size=7, d_model=4, n_heads=2, n_layers=1, d_ff=8)).eval()
    out = sampling.step_seconds(model, [2, 5], repeats=1)
    assert out["lengths"] == [2, 5]
    # a 4-wide model's step is shorter than a CPU clock's tick on some machines (in CI all four read 0, twice,
    # when each was one run): cpu_seconds repeats a run until MIN_TIMED seconds have passed
    assert all(len(out[k]) == 2 and all(isinstance(t, float) and t > 0 for t in out[k])
               for k in ("uncached", "cached", "one_token"))
    with pytest.raises(CourseInputError, match="each length"):
        sampling.step_seconds(model, [1])


def test_counted_macs_sees_every_product_and_only_them():
    model = Transformer(Config(vocab_size=7, d_model=4, n_heads=2, n_layers=1, d_ff=8)).eval()
    ids = torch.tensor([0, 3, 5])
    assert sampling.counted_macs(model, ids) == sampling.forward_macs(model.cfg, 3) > 0
    no_mlp = Transformer(Config(vocab_size=7, d_model=4, n_heads=2, n_layers=1, d_ff=0)).eval()
    assert sampling.counted_macs(no_mlp, ids) == sampling.forward_macs(model.cfg, 3) - 2 * 3 * 4 * 8


def test_op_count_does_not_grow_with_the_tokens(dragon):
    ids = torch.arange(30) % 10
    one, many = sampling.op_count(dragon, ids[:1]), sampling.op_count(dragon, ids)
    assert one == many > 10 * dragon.cfg.n_layers
    bigger = Transformer(Config(vocab_size=10, d_model=6, n_heads=2, n_layers=6, d_ff=24)).eval()
    assert sampling.op_count(bigger, ids) > many     # more layers, more operations
    cached = sampling.op_count(dragon, ids[-1:], cache=sampling.prefilled(dragon, ids[:-1]))
    assert cached > many                             # the cache's concatenations come on top


def test_prefill_and_decode_seconds_times_all_three():
    model = Transformer(Config(vocab_size=7, d_model=4, n_heads=2, n_layers=1, d_ff=8, n_max=16)).eval()
    fed = []                                         # what each pass is given, not how long it takes
    model.register_forward_hook(lambda module, args, kwargs, output: fed.append(
        (tuple(args[0].shape), kwargs.get("cache") is not None)), with_kwargs=True)
    out = sampling.prefill_and_decode_seconds(model, 6, repeats=1)
    assert set(out) == {"one_token", "prefill", "decode"} and min(out.values()) >= 0
    one_run = [((1,), False), ((6,), True)] + [((1,), True)] * 6   # one token, prefill, six decodes
    runs = [(kind, len(list(group))) for kind, group in itertools.groupby(fed)]   # a warm-up round and a timed one,
    assert [kind for kind, _ in runs] == one_run[:3] * 2                            # the three timed in turn
    assert min(n for _, n in runs) >= 1 and runs[2][1] % 6 == 0 and runs[5][1] % 6 == 0
    assert min(out.values()) > 0                     # until MIN_TIMED seconds have passed
    with pytest.raises(CourseInputError, match="n_tokens"):
        sampling.prefill_and_decode_seconds(model, 1)


def test_shared_kv_attention_lets_each_group_read_one_k_and_v():
    rng = np.random.default_rng(1)
    Q, K, V = rng.normal(size=(6, 5, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 3))
    out, weights = sampling.shared_kv_attention(Q, K, V)
    assert out.shape == (6, 5, 3) and weights.shape == (6, 5, 5)
    for i in range(6):
        want, want_w = attention(Q[i], K[i // 3], V[i // 3], causal=True)
        assert np.allclose(out[i], want) and np.allclose(weights[i], want_w)
    assert not np.allclose(weights[0], weights[1])   # same keys, different queries
    full, _ = sampling.shared_kv_attention(Q[:2], K, V)
    assert np.allclose(full, attention(Q[:2], K, V, causal=True)[0])   # h_kv = h: ordinary attention
    with pytest.raises(CourseInputError, match="multiple of h_kv"):
        sampling.shared_kv_attention(Q[:5], K, V)
    with pytest.raises(CourseInputError, match="V should have as many heads as K"):
        sampling.shared_kv_attention(Q, K, V[:1])


def test_a_cached_step_gives_the_logits_of_a_full_pass(dragon):
    ids = torch.tensor([0, 5, 6, 4, 1, 2, 3, 4])
    cache = sampling.prefilled(dragon, ids[:-1])
    with torch.no_grad():
        assert torch.allclose(dragon(ids)[-1], dragon(ids[-1:], cache=cache)[-1], atol=1e-5)
    assert isinstance(cache, KVCache) and len(cache) == len(ids)


# ------------------------------------------------------------------ the explorer

def test_slide_keeps_what_the_filters_keep(dragon, dragon_world):
    r = sampling.slide(dragon, dragon_world, temperature=1.0, top_p=0.9)
    assert r["kept"] == sampling.nucleus(torch.tensor(r["tempered"]), 0.9).tolist()
    assert np.isclose(r["final"].sum(), 1) and np.isclose(r["tempered"].sum(), 1)
    assert len(r["continuations"]) == 3 and all(len(c.split()) == 4 for c in r["continuations"])
    greedy = sampling.slide(dragon, dragon_world, temperature=0)
    assert greedy["kept"] == [greedy["order"][0]] and len(set(greedy["continuations"])) == 1
    assert len(sampling.slide(dragon, dragon_world, temperature=2.0, top_k=3)["kept"]) == 3


def test_slide_order_is_the_same_at_every_temperature(dragon, dragon_world):
    orders = {tuple(sampling.slide(dragon, dragon_world, temperature=t, n_continuations=0)["order"])
              for t in (0.1, 1.0, 3.0)}
    assert len(orders) == 1


def test_slide_rejects_bad_settings_in_words(dragon, dragon_world):
    with pytest.raises(CourseInputError, match="temperature"):
        sampling.slide(dragon, dragon_world, temperature=-1)
    with pytest.raises(CourseInputError, match="top_p"):
        sampling.slide(dragon, dragon_world, top_p=1.5)
    with pytest.raises(CourseInputError, match="vocabulary"):
        sampling.slide(dragon, dragon_world, prompt="<BOS> unicorn")


def test_sliders_at_their_ends_switch_the_filters_off(dragon, dragon_world):
    assert sampling.slider_settings(0.7, 10, 1.0, 10) == (0.7, None, None)
    assert sampling.slider_settings(0.7, 3, 0.9, 10) == (0.7, 3, 0.9)
    off = sampling.slide(dragon, dragon_world, temperature=0.7)
    on_at_the_ends = sampling.slide(dragon, dragon_world, temperature=0.7, top_k=10, top_p=1.0)
    assert np.allclose(off["final"], on_at_the_ends["final"])


def test_explorer_shows_sliders_and_a_figure(dragon, dragon_world, capsys):
    shown = explorer.explorer(dragon, dragon_world)          # outside a notebook, display() prints reprs
    out = capsys.readouterr().out
    assert "Explorer controls" in out and "Image" in out
    assert set(shown.controls) == {"temperature", "top_k", "top_p", "seed"}
    assert all(c.style.description_width for c in shown.controls.values())   # "temperature" is not cut short
    first = shown.picture()
    shown.controls["temperature"].value = 0.0
    assert shown.picture() != first


def test_slide_figure_draws_the_result(dragon, dragon_world):
    r = sampling.slide(dragon, dragon_world, temperature=0.7, top_k=4)
    fig = explorer.slide_figure(r, sampling.settings_text(0.7, 4, None))
    ax = fig.axes[0]
    assert "4 of 10 tokens kept" in " ".join(t.get_text() for t in fig.texts)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(legend) == 3 and "most probable" in legend[2]        # every colour of the bars is named
    assert len(png(fig)) > 1000
    assert sampling.settings_text(1.0, None, None) == "T = 1.00,  top-k off,  top-p off"


def test_slide_view_renders_fast_updates_as_png(dragon, dragon_world):
    first = sampling.slide(dragon, dragon_world, n_continuations=0)
    view = explorer.SlideView(first["vocab"], first["order"])
    images = [view.png(sampling.slide(dragon, dragon_world, temperature=t), f"T = {t}") for t in (1.0, 0.2)]
    assert all(png.startswith(b"\x89PNG") for png in images) and images[0] != images[1]
    assert "T = 0.2" in view.caption and "<BOS> dragon drinks" in view.caption
    with pytest.raises(CourseInputError, match="each of the 10 token ids once"):
        explorer.SlideView(first["vocab"], [0] * 10)


# ------------------------------------------------------------------ the checks

PROBE = np.array([2.0, 1.0, 0.0, -1.0, 0.5])


def test_tempered_check(capsys):
    assert checks.tempered(softmax(PROBE / 0.5), PROBE, 0.5)
    assert not checks.tempered(softmax(PROBE), PROBE, 0.5)
    assert "divide the logits by the temperature" in capsys.readouterr().out
    assert not checks.tempered(softmax(PROBE * 0.5), PROBE, 0.5)
    assert "multiplied" in capsys.readouterr().out
    assert not checks.tempered(np.exp(PROBE / 0.5), PROBE, 0.5)
    assert "sum to" in capsys.readouterr().out
    assert not checks.tempered(None, PROBE, 0.5)
    assert NOT_ANSWERED in capsys.readouterr().out
    with pytest.raises(AssertionError, match="multiplied"):
        checks.tempered.grade(softmax(PROBE * 0.5), PROBE, 0.5)


def right_top_p(probs, p):
    order = np.argsort(-probs)                     # not stable: ties may be broken either way
    size = int(np.searchsorted(np.cumsum(probs[order]), p - 1e-12)) + 1
    kept = np.zeros_like(probs)
    kept[order[:size]] = probs[order[:size]]
    return kept / kept.sum()


def test_top_p_check(capsys):
    assert checks.top_p_function(right_top_p)

    def not_renormalised(probs, p):
        out = right_top_p(probs, p)
        return out * probs[out > 0].sum()

    def stops_before(probs, p):
        order = np.argsort(-probs, kind="stable")
        kept = np.zeros_like(probs)
        running = 0.0
        for i in order:
            if running + probs[i] >= p:
                break
            kept[i], running = probs[i], running + probs[i]
        if not kept.any():
            kept[order[0]] = probs[order[0]]
        return kept / kept.sum()

    def assumes_sorted(probs, p):
        size = int(np.searchsorted(np.cumsum(probs), p - 1e-12)) + 1
        kept = np.zeros_like(probs)
        kept[:size] = probs[:size]
        return kept / kept.sum()

    def stops_above(probs, p):                      # a running total equal to p is not enough for it
        order = np.argsort(-probs, kind="stable")
        size = int(np.argmax(np.cumsum(probs[order]) > p)) + 1
        kept = np.zeros_like(probs)
        kept[order[:size]] = probs[order[:size]]
        return kept / kept.sum()

    def in_place(probs, p):
        kept = right_top_p(probs, p)
        probs[:] = kept
        return probs

    def left_sorted(probs, p):
        return np.sort(right_top_p(probs, p))[::-1].copy()

    def lowest_first(probs, p):
        order = np.argsort(probs, kind="stable")
        running = np.cumsum(probs[order])
        keep = order[running - probs[order] < p]
        kept = np.zeros_like(probs)
        kept[keep] = probs[keep]
        return kept / kept.sum()

    for wrong, words in ((in_place, "changed probs in place"),
                         (left_sorted, "returned them in sorted order"),
                         (lowest_first, "sorted lowest first"),
                         (not_renormalised, "did not renormalise"), (stops_before, "one token too few"),
                         (stops_above, "one token too many"),
                         (assumes_sorted, "sort by probability"), (lambda probs, p: probs, "is not the nucleus"),
                         ("top_p", "should be a function"), (lambda probs, p: probs[:2], "shape")):
        assert not checks.top_p_function(wrong)
        assert words in capsys.readouterr().out, words
    assert not checks.top_p_function(None)
    assert NOT_ANSWERED in capsys.readouterr().out
    with pytest.raises(AssertionError, match="one token too few"):
        checks.top_p_function.grade(stops_before)


def test_kv_bytes_check(capsys):
    sizes = (12, 1024, 12, 64, 4)
    right = 2 * 12 * 1024 * 12 * 64 * 4
    assert checks.kv_bytes(right, *sizes)
    checks.kv_bytes.grade(float(right), *sizes)
    for wrong, words in ((right // 2, "keeps both"), (right * 3 // 2, "Q too"), (right // 4, "bytes per element"),
                         (right // 12, "one layer"), (right + 10, "too large"), ("lots", "but it is a str")):
        assert not checks.kv_bytes(wrong, *sizes)
        assert words in capsys.readouterr().out, words
    assert not checks.kv_bytes(None, *sizes)
    assert NOT_ANSWERED in capsys.readouterr().out
    with pytest.raises(AssertionError, match="Q too"):
        checks.kv_bytes.grade(right * 3 // 2, *sizes)


def test_kv_bytes_check_names_both_slips_when_they_give_the_same_number(capsys):
    # with 2 bytes a number, half the size is K or V alone, or numbers instead of bytes
    assert not checks.kv_bytes(2 * 12 * 1024 * 12 * 64, 12, 1024, 12, 64, 2)
    out = capsys.readouterr().out
    assert "keeps both" in out and "bytes per element" in out


# ---- exercise 4: the learner's generate, right and with one mistake each ------------------------

def learner_top_p(probs, p, mistake=None):
    """Keep the nucleus, as a learner might write it: drop the tokens whose preceding mass reached p."""
    sorted_probs, order = torch.sort(probs, descending=mistake != "lowest first")
    if mistake == "unsorted":                       # the running total in vocabulary order
        sorted_probs, order = probs, torch.arange(len(probs))
    running = torch.cumsum(sorted_probs, 0)
    before = running - sorted_probs                 # the mass of the tokens before each one
    drop = before >= p
    if mistake == "crossing left out":
        drop = running >= p                         # also drops the token that reaches p
    elif mistake == "crossing left out, one kept":
        drop = running >= p
        drop[0] = False
    elif mistake == "one too many":
        drop = torch.cat([torch.zeros(1, dtype=torch.bool), drop[:-1]])
    kept = torch.zeros_like(probs)
    kept[order[~drop]] = probs[order[~drop]]
    return kept / kept.sum()


def learner_distribution(logits, temperature, top_k, top_p, mistake=None):
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(), len(logits)).float()
    if mistake == "probabilities divided":
        probs = torch.softmax(logits, -1) / temperature
    elif mistake == "softmax twice":
        probs = torch.softmax(torch.softmax(logits, -1) / temperature, -1)
    elif mistake == "multiplied":
        probs = torch.softmax(logits * temperature, -1)
    else:
        probs = torch.softmax(logits / temperature, -1)
    if top_p is not None and mistake == "top-p first":
        probs = learner_top_p(probs, top_p)
    if top_k is not None:
        k = top_k + {"k - 1": -1, "k + 1": 1}.get(mistake, 0)
        smallest = torch.topk(probs, k).values[-1]
        probs = torch.where(probs >= smallest, probs, torch.zeros_like(probs))
        if mistake != "not renormalised":
            probs = probs / probs.sum()
    if top_p is not None and mistake != "top-p first":
        probs = learner_top_p(probs, top_p, mistake)
    return probs


def learner_logits(model, ids, fed, kv, step, cache, mistake):
    """The pass of one step, right or with one of the cache mistakes."""
    T = len(ids) - step
    if cache and mistake == "cache flag ignored":
        return model(ids)[-1]
    if cache and mistake == "new cache each step" and step:
        return model(fed, cache=KVCache(model.cfg.n_layers))[-1]
    if cache and mistake == "whole sequence again" and step:
        return model(ids, cache=kv)[-1]
    if cache and mistake == "prompt again" and step:
        return model(ids[:T], cache=kv)[-1]
    if cache and mistake == "prompt token by token" and not step:
        for t in range(len(ids)):
            out = model(ids[t:t + 1], cache=kv)
        return out[-1]
    if cache:
        return model(fed, cache=kv)[-1]
    if mistake == "always the cache":
        return model(fed, cache=kv)[-1]
    if mistake == "prompt every step":
        return model(ids[:T])[-1]
    if mistake == "newest only" and step:
        return model(ids[-1:])[-1]
    return model(ids)[0 if mistake == "first position" else -1]


def learner_generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True, mistake=None):
    g = torch.Generator().manual_seed(seed)
    kv = KVCache(model.cfg.n_layers)
    fed = ids
    for step in range(n_new):
        if mistake == "reseeded":
            g = torch.Generator().manual_seed(seed)
        logits = learner_logits(model, ids, fed, kv, step, cache, mistake)
        if mistake == "first position" and cache:
            logits = model(ids)[0]
        if mistake == "argmax":
            token = logits.argmax().reshape(1)
        else:
            probs = learner_distribution(logits, temperature, top_k, top_p, mistake)
            token = (torch.multinomial(probs, 1) if mistake == "no generator"
                     else torch.multinomial(probs, 1, generator=g))
        ids = torch.cat([ids, token])
        fed = token
    return ids[len(ids) - n_new:] if mistake == "new tokens only" else ids


LOOP_MISTAKES = [
    ("probabilities divided", "those of temperature 1"),
    ("softmax twice", "took a softmax again"),
    ("multiplied", "multiplied the logits by the temperature"),
    ("k - 1", "keeps k - 1 tokens"),
    ("k + 1", "keeps k + 1 tokens"),
    ("crossing left out", "leaves out the token whose probability makes the running total reach p"),
    ("crossing left out, one kept", "leaves out the token whose probability makes the running total reach p"),
    ("one too many", "keeps one token too many"),
    ("unsorted", "sort by probability first"),
    ("lowest first", "sorts lowest first"),
    ("not renormalised", "before they were renormalised"),
    ("top-p first", "before they were renormalised (or before top-k"),
    ("reseeded", "inside the loop"),
    ("argmax", "most probable token at every step"),
    ("first position", "first position"),
    ("no generator", "seeded once with seed"),
    ("new tokens only", "only the 6 new tokens"),
    ("cache flag ignored", "with cache=True, pass 1 ran without a KVCache"),
    ("new cache each step", "the cache is never extended"),
    ("whole sequence again", "fed the whole sequence (4 tokens) again into a cache that already holds 3"),
    ("prompt again", "fed the prompt again into a cache"),
    ("prompt token by token", "run the whole prompt into the empty cache in one pass"),
    ("always the cache", "with cache=False, run every pass on the whole sequence without a KVCache"),
    ("prompt every step", "ran the prompt again"),
    ("newest only", "ran only the newest token, without a cache"),
]


def test_the_right_generate_passes(cat, dragon):
    assert checks.generate_loop.feedback(learner_generate, cat, dragon) == []


def test_an_untouched_generate_is_not_answered_yet(cat, dragon):
    def generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True):
        """The skeleton: the learner's copy has only # YOUR CODE HERE in its body."""

    said = checks.generate_loop.feedback(generate, cat, dragon)
    assert said[0].startswith("not answered yet"), said
    assert checks.generate_loop.feedback(None, cat, dragon)[0].startswith("not answered yet")


@pytest.mark.parametrize("mistake, words", LOOP_MISTAKES)
def test_each_generate_mistake_is_named(mistake, words, cat, dragon):
    said = " ".join(checks.generate_loop.feedback(functools.partial(learner_generate, mistake=mistake), cat, dragon))
    assert words in said, said


@pytest.mark.parametrize("mistake", [None, "k - 1", "whole sequence again", "crossing left out", "new tokens only"])
def test_generate_is_judged_from_its_record_as_from_itself(mistake, cat, dragon):
    answer = functools.partial(learner_generate, mistake=mistake)
    record = json.loads(json.dumps(grading.record_answer(checks.generate_loop, answer, (cat, dragon), {})))
    judged = checks.generate_loop.feedback(grading.decode(record), cat, dragon)
    assert judged == checks.generate_loop.feedback(answer, cat, dragon)


def test_the_course_generate_takes_the_old_name_of_cache(dragon, dragon_world):
    ids = dragon_world.tokenizer.encode("<BOS> dragon drinks")
    assert torch.equal(sampling.generate(dragon, ids, 5, seed=1, use_cache=False),
                       sampling.generate(dragon, ids, 5, seed=1, cache=True))


# ---- bad input: one sentence naming what was expected and what arrived --------------------------

@pytest.mark.parametrize("kwargs, words", [
    (dict(temperature=-0.5), ["temperature", ">= 0", "-0.5"]),
    (dict(temperature=float("nan")), ["temperature", "finite", "nan"]),
    (dict(temperature=1e-310), ["temperature=1e-310", "overflows", "temperature=0"]),
    (dict(temperature="hot"), ["temperature", "'hot'"]),
    (dict(top_p=0), ["top_p", "(0, 1]", "0"]),
    (dict(top_p=1.5), ["top_p", "(0, 1]", "1.5"]),
    (dict(top_p=float("nan")), ["top_p", "(0, 1]", "nan"]),
    (dict(top_k=0), ["top_k", "at least 1", "0"]),
    (dict(top_k=2.5), ["top_k", "whole number", "2.5"]),
])
def test_sampling_settings_out_of_range(refused, kwargs, words):
    refused(lambda: sampling.next_distribution(torch.tensor([1.0, 50.0, 3.0, 0.0, 2.0]), **kwargs), *words)


def test_a_tiny_temperature_is_greedy_not_nan():
    probs = sampling.next_distribution(torch.tensor([1.0, 50.0, 3.0]), temperature=1e-40)
    assert torch.equal(probs, torch.tensor([0.0, 1.0, 0.0]))


def test_seeds_are_whole_numbers(refused, dragon, dragon_world):
    ids = dragon_world.tokenizer.encode("<BOS> dragon")
    refused(lambda: sampling.generate(dragon, ids, 2, seed=1.5), "seed", "1.5")
    assert torch.equal(sampling.generate(dragon, ids, 2, seed=np.int64(1)), sampling.generate(dragon, ids, 2, seed=1))


def test_complex_logits_are_refused(refused):
    refused(lambda: sampling.with_temperature(np.array([1 + 1j, 2.0]), 1.0), "logits", "complex")


# ------------------------------------------------------------------ any model, any tokenizer

class Chars:
    """A 65-character tokenizer like the capstone's: one token per character."""
    def __init__(self):
        self.vocab = sorted(set("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"))
        self.ids = {ch: i for i, ch in enumerate(self.vocab)}

    def encode(self, text):
        return torch.tensor([self.ids[ch] for ch in text], dtype=torch.long)

    def decode(self, ids):
        return [self.vocab[int(i)] for i in ids]


def test_the_explorer_takes_any_model_tokenizer_and_prompts():
    chars = Chars()
    assert len(chars.vocab) == 65
    model = Transformer(Config(vocab_size=65, d_model=32, n_heads=4, n_layers=2, d_ff=64, n_max=128)).eval()
    shown = explorer.explorer(model, chars, ["ROMEO:", "JULIET:\nO Romeo"])
    assert set(shown.controls) == {"temperature", "top_k", "top_p", "seed", "prompt"}
    assert shown.controls["top_k"].max == explorer.TOP_K_MAX          # its last stop means "off"
    first = shown.picture()
    shown.controls["temperature"].value = 0.5                          # one update, drawn
    shown.controls["prompt"].value = "JULIET:\nO Romeo"                # another prompt relabels the bars
    assert shown.picture() != first and shown.message.value == ""
    r = sampling.slide(model, chars, "ROMEO:", temperature=0.8, top_k=5, length=12)
    assert len(r["kept"]) == 5 and all(len(c) == 12 for c in r["continuations"])   # characters side by side
    ids = chars.encode("ROMEO:")
    assert r["continuations"][1] == "".join(chars.decode(
        sampling.generate(model, ids, 12, 0.8, 5, None, seed=1)[len(ids):]))     # row i: generate's seed + i


@pytest.mark.parametrize("prompt, words", [("", "non-empty"), ("R" * 125, "n_max = 128"), ("ROMEO~", "~")])
def test_the_explorer_refuses_a_prompt_the_model_cannot_take(prompt, words):
    class Loose(Chars):
        def encode(self, text):     # unknown characters get an id past the model's vocabulary
            return torch.tensor([self.ids.get(ch, 99) for ch in text], dtype=torch.long)
    model = Transformer(Config(vocab_size=65, d_model=32, n_heads=4, n_layers=2, d_ff=64, n_max=128)).eval()
    with pytest.raises(CourseInputError, match="do not belong together" if prompt == "ROMEO~" else words):
        explorer.explorer(model, Loose(), prompt)


def test_continuations_are_the_tokens_generate_draws(dragon, dragon_world):
    ids = dragon_world.tokenizer.encode("<BOS> dragon drinks")
    for settings in (dict(temperature=1.0), dict(temperature=2.0, top_p=0.9), dict(temperature=0.7, top_k=3)):
        r = sampling.slide(dragon, dragon_world, seed=5, **settings)
        assert r["continuations"] == [" ".join(dragon_world.tokenizer.decode(
            sampling.generate(dragon, ids, 4, seed=5 + i, **settings)[len(ids):])) for i in range(3)]


def test_counted_macs_are_the_count_of_pytorchs_flop_counter(dragon):
    from torch.utils.flop_counter import FlopCounterMode
    ids = torch.arange(12) % 10
    for fed, cache in ((ids, None), (ids[-1:], sampling.prefilled(dragon, ids[:-1]))):
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            dragon(fed, cache=cache)
        cache = None if cache is None else sampling.prefilled(dragon, ids[:-1])
        assert sampling.counted_macs(dragon, fed, cache) == counter.get_total_flops() // 2


# ---- after the second outside reading: slips named in their own words ---------------------------

def test_a_softmax_over_the_positions_is_named(cat, dragon):
    def generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True):
        g = torch.Generator().manual_seed(seed)
        for _ in range(n_new):
            logits = torch.log_softmax(model(ids), dim=0)[-1]      # over the T positions, not the vocabulary
            probs = learner_distribution(logits, temperature, top_k, top_p)
            ids = torch.cat([ids, torch.multinomial(probs, 1, generator=g)])
        return ids
    said = " ".join(checks.generate_loop.feedback(generate, cat, dragon))
    assert "softmax over the positions" in said, said


def test_draws_from_the_global_random_state_are_named(cat, dragon):
    said = " ".join(checks.generate_loop.feedback(functools.partial(learner_generate, mistake="no generator"),
                                                  cat, dragon))
    assert "gave other tokens the second time" in said and "generator=g" in said, said


def test_a_division_by_temperature_zero_is_named(cat, dragon):
    def generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True):
        g = torch.Generator().manual_seed(seed)
        for _ in range(n_new):
            probs = torch.softmax(model(ids)[-1] / temperature, dim=-1)   # temperature 0: inf / NaN
            ids = torch.cat([ids, torch.multinomial(probs, 1, generator=g)])
        return ids
    said = " ".join(checks.generate_loop.feedback(generate, cat, dragon))
    assert "divides by zero" in said, said


def test_kv_bytes_in_float32_instead_of_float16_is_named(capsys):
    right = 2 * 12 * 1024 * 12 * 64 * 2
    assert not checks.kv_bytes(2 * right, 12, 1024, 12, 64, 2)
    assert "4 bytes a number (float32)" in capsys.readouterr().out


# ------------------------------------------------ impossible requests refused up front (issue 31, items 1 and 4)

def counted_passes(model):
    """A list that grows by one with every forward pass of model."""
    passes = []
    model.register_forward_pre_hook(lambda module, args: passes.append(1))
    return passes


LEARNED = Config(vocab_size=10, d_model=8, n_heads=2, n_layers=2, d_ff=8, n_max=8, positions="learned")


@pytest.mark.parametrize("call, words", [
    (dict(n_new=7), "fit in the model's 8 tokens"),          # 3 + 7 - 1 = 9 positions: met only at the 6th step before
    (dict(n_new=10**9), "fit in the model's 8 tokens"),
    (dict(n_new=3, cache="False"), "cache is a switch"),
    (dict(n_new=3, use_cache=0), "use_cache is a switch"),
    (dict(n_new=3, causal="False"), "causal is a switch"),
    (dict(n_new=3, temprature=0.5), "only the switches"),
    (dict(n_new=3, stop_id=10), "stop_id should be None or a token id in \\[0, 10\\)"),
    (dict(n_new=3, stop_id=True), "stop_id"),
    (dict(n_new=3, seed=2**64), "from 0 to 2\\*\\*64 - 1"),
    (dict(n_new=3, seed=-1), "seed should be at least 0, but got -1"),
    (dict(n_new=3, top_k=11), "top_k should be at most the vocabulary size 10"),
    (dict(n_new=3, top_p=True), "top_p should lie in \\(0, 1\\]"),
    (dict(n_new=3, top_p=float("nan")), "top_p should lie in \\(0, 1\\]"),
    (dict(n_new=3, temperature=float("nan")), "temperature should be a finite number >= 0"),
    (dict(n_new=3, temperature=-0.5), "temperature should be a finite number >= 0"),
    (dict(n_new=3, replace={"L7.h": lambda x: x}), "never makes"),
])
def test_generate_refuses_an_impossible_request_before_any_pass(call, words):
    model = Transformer(LEARNED, seed=0)
    passes = counted_passes(model)
    with pytest.raises(CourseInputError, match=words):
        sampling.generate(model, torch.tensor([1, 2, 3]), **call)
    assert passes == []


def test_generate_takes_exactly_what_fits_and_a_batch_is_refused():
    model = Transformer(LEARNED, seed=0)
    assert len(sampling.generate(model, torch.tensor([1, 2, 3]), 6, temperature=0)) == 9   # the last draw is not fed
    with pytest.raises(CourseInputError, match="expected one prompt, not a batch"):
        sampling.generate(model, torch.tensor([[1, 2, 3], [1, 2, 3]]), 2)
    with pytest.raises(CourseInputError, match="at most 1,024 samples"):
        sampling.samples(model, torch.tensor([1]), 2, 10**6)


def test_probabilities_and_logits_are_not_taken_for_each_other():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    probs = torch.softmax(logits, -1)
    for helper in (lambda x: sampling.top_k_filter(x, 2), lambda x: sampling.nucleus(x, 0.9),
                   lambda x: sampling.top_p_filter(x, 0.9), lambda x: sampling.draw(x, torch.Generator()),
                   lambda x: sampling.draws(x, 3, seed=0)):
        with pytest.raises(CourseInputError, match="probabilities|summing to 1"):
            helper(logits)
        helper(probs)
    for helper in (lambda x: sampling.with_temperature(x, 1.0), sampling.next_distribution):
        with pytest.raises(CourseInputError, match="scores before the softmax"):
            helper(probs)
        with pytest.raises(CourseInputError, match="NaN"):
            helper(torch.tensor([1.0, float("nan")]))
        helper(logits)
    with pytest.raises(CourseInputError, match="p should be a number in \\(0, 1\\], but got None"):
        sampling.nucleus(probs, None)
    same = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)   # a tensor's dtype is kept
    assert sampling.top_p_filter(same, 0.7).dtype == torch.float64


# ---- issue 31: continuations and the slide, bounded and refused with a sentence

def _one_sentence(error):
    text = str(error.value)
    assert "\n" not in text and " but " in text, text


@pytest.mark.parametrize("kwargs", [dict(length=0), dict(length=-1), dict(length=True), dict(length=2.5),
                                    dict(length=10**6), dict(n_continuations=-1), dict(n_continuations=True),
                                    dict(n_continuations=2.5), dict(n_continuations=10**7),
                                    dict(state={})])
def test_slide_refuses_bad_continuations_before_any_work(kwargs, dragon, dragon_world):
    from helpers.sampling import compute
    world = dragon_world.tokenizer
    with pytest.raises(CourseInputError) as refused:
        compute.slide(dragon, world, prompt="<BOS> dragon drinks", **kwargs)
    _one_sentence(refused)


def test_continuations_check_the_state_the_length_and_memory(dragon, dragon_world):
    from helpers.sampling import compute
    world = dragon_world.tokenizer
    state = compute.prompt_state(dragon, world, "<BOS> dragon drinks", room=2)
    for n, length in ((2, 10**4), (-2, 2), (2, 0), (2, True), (10**5, 2)):
        with pytest.raises(CourseInputError) as refused:
            compute.continuations(dragon, state, n, length)
        _one_sentence(refused)
    for room in (-5, True, 2.5, 10**6):
        with pytest.raises(CourseInputError) as refused:
            compute.prompt_state(dragon, world, "<BOS> dragon drinks", room=room)
        _one_sentence(refused)
    with pytest.raises(CourseInputError, match="continuations should be shorter"):
        compute.prompt_state(dragon, world, "<BOS> dragon drinks", room=10**6)


def test_slider_settings_and_counts_refuse_what_is_no_setting(dragon):
    from helpers.sampling import compute
    for call in (lambda: compute.slider_settings(1.0, 0, 0.0, 30), lambda: compute.slider_settings(math.nan, 5, 0.5, 30),
                 lambda: compute.settings_text(math.nan, -1, 2.0), lambda: compute.macs_by_part(None, 3),
                 lambda: compute.macs_by_part(dragon.cfg, 10**30), lambda: compute.generation_macs(dragon.cfg, 5, 3, "False")):
        with pytest.raises(CourseInputError) as refused:
            call()
        _one_sentence(refused)


def test_the_continuations_memory_is_checked_before_it_is_spent(dragon, dragon_world, monkeypatch):
    from helpers.sampling import compute
    monkeypatch.setattr(compute, "MAX_CONTINUATION_BYTES", 2**20)
    with pytest.raises(CourseInputError, match="should fit in 1 MiB") as refused:
        compute.slide(dragon, dragon_world.tokenizer, prompt="<BOS> dragon drinks", n_continuations=1000, length=100)
    _one_sentence(refused)


# ---- issue 31 (red team): the loop check passes a right answer that calls the course's generate,
# leaves the models as it found them, and refuses its own bad arguments

def test_a_right_generate_that_calls_the_course_generate_passes(cat, dragon):
    def generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True):
        return sampling.generate(model, ids, n_new, temperature=temperature, top_k=top_k, top_p=top_p,
                                 seed=seed, cache=cache)
    assert checks.generate_loop.feedback(generate, cat, dragon) == []


def test_the_loop_check_puts_back_what_the_learner_changed_in_the_models(cat, dragon):
    before = [{k: v.clone() for k, v in m.state_dict().items()} for m in (cat, dragon)]

    def zeroes(model, ids, n_new, **settings):
        for p in model.parameters():
            p.data.zero_()
        model.train()
        return learner_generate(model, ids, n_new, **settings)

    def raises(model, ids, n_new, **settings):
        with torch.no_grad():
            next(model.parameters()).mul_(3)
        raise ValueError("half-way")
    assert "not the most probable" in " ".join(checks.generate_loop.feedback(zeroes, cat, dragon))
    assert "half-way" in " ".join(checks.generate_loop.feedback(raises, cat, dragon))
    for m, state in zip((cat, dragon), before):
        assert all(torch.equal(state[k], v) for k, v in m.state_dict().items()) and not m.training


@pytest.mark.parametrize("check, args", [
    (checks.tempered, ([[1, 2], [3]], 1.0)), (checks.tempered, ([1.0, float("nan")], 1.0)),
    (checks.kv_bytes, (10**30, 10, 2, 4, 4)), (checks.kv_bytes, (2, 10, 2, 4, True)),
    (checks.generate_loop, (None, "dragon")), (checks.generate_loop, ("cat", None))])
def test_a_check_refuses_its_own_bad_arguments(check, args):
    answer = {checks.tempered: [0.5, 0.5], checks.kv_bytes: 3, checks.generate_loop: learner_generate}[check]
    said = " ".join(check.feedback(answer, *args))
    assert said.startswith("the check cannot use what the check cell gives it"), said


def test_the_loop_check_refuses_a_swapped_model(cat, dragon):
    said = " ".join(checks.generate_loop.feedback(learner_generate, dragon, cat))
    assert said.startswith("the check cannot use") and "cat should be the shipped cat model" in said


@pytest.mark.parametrize("result, settings", [(None, ""), ([0.5, 0.5], ""), ({"vocab": []}, ""), ("x" * 50, "")])
def test_slide_figure_refuses_what_is_not_a_slide_result(result, settings):
    with pytest.raises(CourseInputError, match="result should be what sampling.slide returns"):
        explorer.slide_figure(result, settings)


@pytest.mark.parametrize("token", [None, 3, float("nan"), ["a"]])
def test_shown_token_refuses_what_is_not_a_text(token):
    with pytest.raises(CourseInputError, match="token should be a token's text"):
        explorer.shown_token(token)


def test_minus_inf_rules_a_token_out_and_is_no_overflow(refused):
    """Red team round 6: a logit of -inf (check_logits: "rules a token out") was refused as an overflow."""
    expected = torch.softmax(torch.tensor([1.0, 0.5], dtype=torch.float64), -1).float()
    logits = [1.0, -math.inf, 0.5]
    for probs in (sampling.next_distribution(logits), sampling.next_distribution(logits, top_k=2),
                  sampling.with_temperature(logits, 1.0)):
        assert probs[1] == 0 and torch.equal(probs[[0, 2]], expected)
    for logits in ([1.0, 2.0], [-1.0, -2.0]):   # a real overflow: +inf, or every token at -inf
        refused(lambda: sampling.next_distribution(logits, temperature=1e-320), "temperature should be large enough",
                "overflows", "temperature=0")


def test_draws_check_probabilities_as_the_rest_of_the_module_does(refused):
    """Red team round 6: draws said "summing to 1" of numbers summing to 1.0005, with a tolerance of its own."""
    assert sampling.draws(np.array([0.5, 0.5005]), 3, 0).shape == (3,)        # within check_probs's 1e-3
    message = refused(lambda: sampling.draws(np.array([0.5, 0.52]), 3, 0), "probs should be probabilities", "1.02")
    with pytest.raises(CourseInputError) as caught:
        sampling.draw(np.array([0.5, 0.52]), torch.Generator())
    assert str(caught.value) == message
    refused(lambda: sampling.top_k_filter(torch.zeros(3, device="meta"), 1), "probs should be a dense tensor", "meta")


def test_round_7_shared_kv_attention_names_what_it_expected(refused):
    from helpers.sampling import compute as sampling

    refused(lambda: sampling.shared_kv_attention(torch.full((2, 3, 4), float("nan")), torch.zeros(1, 3, 4),
                                                 torch.zeros(1, 3, 4)), "Q should hold finite numbers")
    refused(lambda: sampling.shared_kv_attention(torch.zeros(3, 3, 4), torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)),
            "should split into equal groups", "but K and V have 2")


def test_round_8_timings_check_the_window_and_repeats_before_any_work(refused, dragon):
    """Red team round 8: prefill_and_decode_seconds drew 3e8 random ids (2.5 GB) before the model refused
    them, and took repeats=10**9 (it never returned)."""
    refused(lambda: sampling.prefill_and_decode_seconds(dragon, 3 * 10**8), "n_tokens should be at most 128",
            "300,000,000")
    refused(lambda: sampling.prefill_and_decode_seconds(dragon, 2, repeats=10**9), "repeats should be at most 100")
    refused(lambda: sampling.step_seconds(dragon, [8, 129]), "each length should be at most 128", "129")
    refused(lambda: sampling.prefill_and_decode_seconds("dragon", 2), "should be a helpers.model.Transformer")


def test_round_8_shared_kv_attention_refuses_zero_heads_and_counts_its_bytes(refused):
    """Red team round 8: zero heads raised ZeroDivisionError; K and V were repeated to every head
    before attention counted its bytes."""
    refused(lambda: sampling.shared_kv_attention(np.zeros((0, 5, 4)), np.zeros((0, 5, 4)), np.zeros((0, 5, 4))),
            "should each have at least one head", "Q has 0")
    refused(lambda: sampling.shared_kv_attention(np.zeros((20000, 100, 1)), np.zeros((1, 100, 1)),
                                                 np.zeros((1, 100, 1))), "should need at most 1.5 GiB")


def test_round_8_logits_and_temperature_as_given(refused):
    """Red team round 8: temperature=10**30 raised OverflowError; logits of 1e300 (finite, as given)
    were called +inf, which float32 made of them; a broadcast view of 4e8 logits reached 4.8 GB."""
    assert torch.equal(sampling.next_distribution(torch.tensor([1.0, 2.0]), temperature=10**30),
                       sampling.next_distribution(torch.tensor([1.0, 2.0]), temperature=1e30))
    refused(lambda: sampling.next_distribution(torch.tensor([1e300, -1e300], dtype=torch.float64)),
            "logits should fit in float32", "3.4e38", "1e+300")
    refused(lambda: sampling.next_distribution(np.broadcast_to(np.float32(0), (4 * 10**8,))),
            "should need at most 1.5 GiB")


def test_round_8_slide_refuses_a_world_of_another_model(refused, dragon):
    """Red team round 8: slide(dragon, cat world) drew with the dragon model and labelled the
    bars with the cat world's 20 words."""
    from helpers import worlds

    refused(lambda: sampling.slide(dragon, worlds.cat_world(), "<BOS> the"), "belong together", "10", "20")
    refused(lambda: sampling.slide(dragon, worlds.cat_world().tokenizer, "<BOS> the"), "belong together", "10", "20")


def test_round_9_timings_count_their_work_before_they_start(refused, cat):
    """Red team round 9: prefill_and_decode_seconds(cat, 1024, repeats=100) and step_seconds(cat, [1024]*20,
    repeats=100) ran for minutes within the documented caps; the work is now counted (multiply-adds plus
    a fixed cost a pass) against a budget the chapter's calls stay well under."""
    refused(lambda: sampling.prefill_and_decode_seconds(cat, 1024, repeats=100), "prefill_and_decode_seconds",
            "at most 100,000,000,000 units of work", "103,626 passes", "a smaller n_tokens")
    refused(lambda: sampling.step_seconds(cat, [1024] * 20, repeats=100), "step_seconds",
            "at most 100,000,000,000 units of work", "fewer repeats")
    wide = Transformer(Config(vocab_size=1000, d_model=256, n_heads=4, n_layers=4, d_ff=1024, n_max=1024,
                              positions="learned"))
    runs = []
    original = sampling.check_timed_work
    try:   # the chapter's calls: counted, and well under the budget
        sampling.check_timed_work = lambda model, r, what, advice: runs.append(
            sum(t * (sampling.forward_macs(model.cfg, a, b) + sampling.PASS_WORK) for t, a, b in r))
        sampling.step_seconds(wide, [16, 64, 128, 256, 512], repeats=1)
    finally:
        sampling.check_timed_work = original
    assert runs and 3 * max(runs) < sampling.MAX_TIMED_WORK


def test_round_9_continuations_check_the_states_cache(refused, cat, cat_world):
    """Red team round 9: an empty KVCache in the state gave AttributeError 'NoneType' object has no attribute
    'expand'; the cache of another model of the same shape was used silently."""
    state = sampling.prompt_state(cat, cat_world, "<BOS> the cat sat")
    refused(lambda: sampling.continuations(cat, dict(state, cache=KVCache(cat.cfg.n_layers)), 2, 2), "is empty")
    other = sampling.prompt_state(Transformer(cat.cfg, seed=1), cat_world, "<BOS> the cat sat")["cache"]
    refused(lambda: sampling.continuations(cat, dict(state, cache=other), 2, 2), "belongs to another model")
    shorter = sampling.prompt_state(cat, cat_world, "<BOS> the cat")["cache"]
    refused(lambda: sampling.continuations(cat, dict(state, cache=shorter), 2, 2), "holds other tokens")
    assert sampling.continuations(cat, state, 2, 2).shape == (2, 2)


def test_round_9_sampling_arguments_none_and_numbers_that_cannot_be_read(refused, cat):
    """Red team round 9: slider_settings with top_k or top_p None gave a raw '>=' TypeError; a float
    subclass whose __float__ raises reached check_sampling's float() unguarded; counted_macs, op_count
    and prefilled with no model gave AttributeErrors; nucleus at p = 1 took in a token of probability 0."""
    class BadFloat(float):
        def __float__(self):
            raise RuntimeError("no float")

    assert sampling.slider_settings(1.0, None, 0.9, 20) == (1.0, None, 0.9)
    assert sampling.slider_settings(1.0, 5, None, 20) == (1.0, 5, None)
    refused(lambda: sampling.with_temperature(torch.randn(5), BadFloat(1.0)), "temperature", "cannot be read")
    refused(lambda: sampling.top_p_filter(torch.tensor([0.5, 0.5]), BadFloat(0.5)), "top_p", "cannot be read")
    for call in (lambda: sampling.counted_macs(None, [1, 2]), lambda: sampling.op_count(None, [1, 2]),
                 lambda: sampling.prefilled(None, [1, 2])):
        refused(call, "should be a helpers.model.Transformer", "None")
    assert sampling.nucleus(torch.tensor([0.5, 0.4996, 0.0]), 1.0).tolist() == [0, 1]


def test_cpu_seconds_reads_a_coarse_clock_as_more_than_nothing(monkeypatch):
    """A CPU clock that ticks every 10 ms (as CI's did) read 0 for one short step: runs are repeated
    until MIN_TIMED seconds have passed, and the time is shared out."""
    import time
    fine = time.process_time
    monkeypatch.setattr(time, "process_time", lambda: math.floor(fine() / 0.01) * 0.01)
    calls = []
    seconds = sampling.cpu_seconds(lambda: calls.append(sum(range(2000))))
    assert seconds > 0 and len(calls) > 1 and seconds * len(calls) >= sampling.MIN_TIMED
    model = Transformer(Config(vocab_size=7, d_model=4, n_heads=2, n_layers=1, d_ff=8)).eval()
    with pytest.raises(CourseInputError, match="1,823 passes"):   # a pass each timing at least: 1,000 timings of
        sampling.step_seconds(model, list(range(2, 22)), repeats=30)   # MIN_TIMED at most, 20 s


def test_a_coarse_clock_makes_each_timing_longer_and_the_total_stays_bounded(monkeypatch):
    """CI's CPU clock once moved in 10 ms steps: a timing of MIN_TIMED = 20 ms then read a one-token pass up to
    half wrong, and chapter 09's ratio of a cached step to a one-token pass moved from 1.1 to 2.7. A timing now
    gathers 10 steps of the clock (at most MAX_TIMED_ONE), and a call whose timings would pass
    MAX_TIMED_SECONDS together is refused up front."""
    import time
    fine = time.process_time
    monkeypatch.setattr(time, "process_time", lambda: math.floor(fine() / 0.01) * 0.01)
    monkeypatch.setattr(sampling, "_TICK", None)
    assert sampling.clock_tick() == pytest.approx(0.01) and sampling.min_timed() == pytest.approx(0.1)
    calls = []
    seconds = sampling.cpu_seconds(lambda: calls.append(sum(range(2000))))
    assert seconds * len(calls) >= 0.1 - 1e-9
    model = Transformer(Config(vocab_size=7, d_model=4, n_heads=2, n_layers=1, d_ff=8)).eval()
    with pytest.raises(CourseInputError, match="at most 20 s of timings.*moves in steps of 10.0 ms"):
        sampling.step_seconds(model, list(range(2, 12)), repeats=10)   # 341 timings of 0.1 s
    monkeypatch.setattr(sampling, "_TICK", None)
    monkeypatch.setattr(time, "process_time", fine)   # (a busy process's clock may move in the kernel's ticks:
    assert sampling.MIN_TIMED <= sampling.min_timed() <= sampling.MAX_TIMED_ONE   # 4 ms in the rehearsal)


def right_tempered(logits, T):
    if T == 0:
        top = logits == logits.max()
        return top / top.sum()
    e = np.exp((logits - logits.max()) / T)
    return e / e.sum()


def test_tempered_function_check_names_overflow_greedy_and_ties(capsys):
    """Exercise 2 (a function since the outside review of stop 46: the array it asked for was one line)."""
    assert checks.tempered_function(right_tempered)
    checks.tempered_function.grade(right_tempered)
    slips = {
        "subtract the largest logit": lambda logits, T: right_tempered(logits, T) if T == 0 else
        np.exp(logits / T) / np.exp(logits / T).sum(),
        "nothing to divide by": lambda logits, T: np.exp((logits - logits.max()) / T) / np.exp((logits - logits.max()) / T).sum(),
        "share it equally": lambda logits, T: np.eye(len(logits))[np.argmax(logits)] if T == 0 else right_tempered(logits, T),
        "multiplied the logits": lambda logits, T: right_tempered(logits, 0) if T == 0 else right_tempered(logits * T * T, T),
        "sum to": lambda logits, T: 2 * right_tempered(logits, T),
    }
    with np.errstate(all="ignore"):
        for words, wrong in slips.items():
            assert not checks.tempered_function(wrong)
            assert words in capsys.readouterr().out, words
            with pytest.raises(AssertionError):
                checks.tempered_function.grade(wrong)
    assert not checks.tempered_function(None)


def right_cache_bytes(cfg, T, bytes_per_number):
    return 2 * cfg.n_layers * cfg.kv_heads * cfg.d_k * T * bytes_per_number


def test_kv_cache_bytes_function_check_agrees_with_a_real_cache_and_names_slips(capsys):
    """Exercise 4 (a function since the outside review of stop 46: the byte count it asked for was one line);
    its cases on small models are checked against a real prefilled cache."""
    assert checks.kv_cache_bytes_function(right_cache_bytes)
    checks.kv_cache_bytes_function.grade(right_cache_bytes)
    small = [(sizes, T, b) for sizes, T, b, _ in checks.CACHE_CASES if sizes[-1] <= 8]
    assert len(small) == 3 and any(sizes[2] for sizes, _, _ in small)   # one with shared K/V heads
    for sizes, T, b in small:
        cfg = checks.cache_config(sizes)
        assert checks.measured_cache_bytes(cfg, T, b) == right_cache_bytes(cfg, T, b)
    slips = {
        "every query head": lambda cfg, T, b: 2 * cfg.n_layers * cfg.n_heads * cfg.d_k * T * b,
        "K or V alone": lambda cfg, T, b: cfg.n_layers * cfg.kv_heads * cfg.d_k * T * b,
        "Q too": lambda cfg, T, b: 3 * cfg.n_layers * cfg.kv_heads * cfg.d_k * T * b,
        "numbers, not bytes": lambda cfg, T, b: 2 * cfg.n_layers * cfg.kv_heads * cfg.d_k * T,
        "4 bytes a number": lambda cfg, T, b: 2 * cfg.n_layers * cfg.kv_heads * cfg.d_k * T * 4,
        "whole number": lambda cfg, T, b: right_cache_bytes(cfg, T, b) + 0.5,
    }
    for words, wrong in slips.items():
        assert not checks.kv_cache_bytes_function(wrong)
        assert words in capsys.readouterr().out, words
