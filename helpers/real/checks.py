"""Checks for chapter 11 (a real model): the learner's layer_parameters(cfg) on seven kinds of layer,
head_scan (every head's previous-token and induction scores), kv_growth (the KV cache's growth per
token, measured), a task-matched mean ablation on SmolLM2.

Each check judges the answer against a reference computed from the model's sizes or scores
and names the likely slip, without printing the expected answer.
"""
import copy
import math
import time

import numpy as np
import torch

from ..errors import check_positive_int, fail, is_bool, shown
from ..exercises import (Function, Wrong, as_number, as_whole, call, close_problems, exercise, model_kept,
                         number_problems, numbers, rounded_by_dtype, slip)
from ..exercises import LONG_CHECK_TIME_LIMIT, as_returned, time_left
from .. import patching
from ..heads import compute as heads
from . import circuit
from .smollm2 import original_state
from . import compute as real


# The layers a learner's layer_parameters(cfg) is run on, simplest first, each adding one choice, so
# the first one it gets wrong names what it left out; SmolLM2's own layer comes last.
LAYER_CASES = (
    ("a GPT-2-style layer (biases, a GELU MLP, LayerNorms)", dict(d_model=64, n_heads=4, d_ff=256)),
    ("an attention-only layer (d_ff=0: no MLP, so no norm before one either)", dict(d_model=64, n_heads=4, d_ff=0)),
    ("a layer without norms (norm='none')", dict(d_model=64, n_heads=4, d_ff=256, norm="none")),
    ("a layer without biases (bias=False; its LayerNorms keep their shifts)",
     dict(d_model=64, n_heads=4, d_ff=256, bias=False)),
    ("a layer whose 8 query heads share 2 key/value heads (n_kv_heads=2), with biases",
     dict(d_model=64, n_heads=8, n_kv_heads=2, d_ff=256)),
    ("a SwiGLU layer with biases", dict(d_model=64, n_heads=4, d_ff=96, activation="swiglu")),
    ("an RMSNorm layer without biases", dict(d_model=64, n_heads=4, d_ff=256, norm_kind="rmsnorm", bias=False)),
)


def layer_cases(cfg):
    """[(description, Config)]: LAYER_CASES as Configs, then ``cfg`` (SmolLM2's) as "SmolLM2's layer"."""
    from ..model import Config

    if not isinstance(cfg, Config):
        fail(f"cfg should be the model's Config (model.cfg), but got {shown(cfg)}")
    cases = [(what, Config(vocab_size=10, n_layers=1, **sizes)) for what, sizes in LAYER_CASES]
    return cases + [("SmolLM2's layer (cfg)", cfg)]


def counted_in_block(cfg):
    """The parameters of one layer built from ``cfg`` (the course's Block), counted tensor by tensor."""
    from ..model import Block

    return sum(p.numel() for p in Block(cfg, seed=None).parameters())   # (counted, not run: no weights drawn)


# The course's code that counts a layer, or a part of one, or builds one to count (the check's own measure): the
# exercise asks for a count from the Config's sizes alone. (A Config made in the function counts its floats with
# attention_floats and mlp_floats, so it is refused too: the function is given the one it needs.)
LAYER_OWN = ("helpers.real.compute.parameter_formula", "helpers.mlp.compute.layer_parameters",
             "helpers.mlp.compute.block_counts", "helpers.real.compute.parameters_counted",
             "helpers.model.attention_floats", "helpers.model.mlp_floats", "helpers.heads.compute.attention_parameters",
             "helpers.model.Block", "helpers.model.Transformer", "helpers.model.Attention", "helpers.model.MLP",
             "helpers.model.norm_layer", "helpers.normalization.compute.Block", "helpers.normalization.compute.LayerNorm",
             "helpers.heads.compute.MultiHeadAttention", "helpers.mlp.compute.MLP")


def layer_slips(cfg, right):
    """[(the count a known slip gives on cfg's layer, its hint)]. Where two slips give the same count
    on this layer (a GPT-2 layer's attention biases, 4d, are as many as its two LayerNorms), the
    check names both (``named_slips``)."""
    d, f, d_kv, bias = cfg.d_model, cfg.d_ff, cfg.kv_heads * cfg.d_k, cfg.bias
    gated = cfg.activation == "swiglu"
    attn_biases = (2 * d + 2 * d_kv) * bias
    mlp_biases = ((2 if gated else 1) * f + d) * bias if f else 0
    per_norm = 0 if cfg.norm == "none" else d if cfg.norm_kind == "rmsnorm" else 2 * d
    n_norms = 0 if cfg.norm == "none" else 2 if f else 1
    slips = [
        (right - attn_biases - mlp_biases, "it leaves out the biases: with cfg.bias each projection has one, as long "
         "as its output (b_Q and b_O d, b_K and b_V kv_heads·d_k, b_1 d_ff, b_2 d, and SwiGLU's gate b_G d_ff)"),
        (right - attn_biases, "it leaves out the attention's biases (b_Q, b_K, b_V, b_O) when cfg.bias is on"),
        (right - mlp_biases, "it leaves out the MLP's biases (b_1, b_2, and SwiGLU's b_G) when cfg.bias is on"),
        (right - per_norm * n_norms, "it leaves out the norms (ln1 before attention, ln2 before the MLP)"),
    ]
    if n_norms == 2:
        slips.append((right - per_norm, "it counts one norm, but a layer with an MLP has two: ln1 before attention, "
                                        "ln2 before the MLP"))
    if d_kv < d:
        slips.append((right + 2 * d * (d - d_kv) + 2 * (d - d_kv) * bias, "it gives W_K and W_V as many columns "
                      "as W_Q, but the query heads share cfg.kv_heads key/value heads: d × (kv_heads · d_k) each"))
    if not cfg.n_kv_heads:
        slips.append((right - 2 * d * d - 2 * d * bias, "it reads cfg.n_kv_heads, which is 0 when the heads share "
                      "nothing: cfg.kv_heads is the number of key/value heads either way"))
    if gated:
        slips += [(right - d * f - f * bias, "SwiGLU has three matrices, W_1, W_G (the gate) and W_2, not two"),
                  (right - f * bias, "the gate W_G has a bias of its own, b_G, when cfg.bias is on")]
    elif f:
        slips.append((right + d * f + f * bias, "only SwiGLU has a third matrix (the gate): a GELU or ReLU MLP has "
                                                "W_1 and W_2"))
    if not f:
        extra = d * bias + per_norm if cfg.norm != "none" else d * bias
        slips += [(right + extra, "with d_ff=0 there is no MLP, so no b_2 and no norm before it: count attention "
                                  "and ln1 only"),
                  (right + d * bias, "with d_ff=0 there is no MLP, so no b_2 either"),
                  (right + per_norm, "with d_ff=0 there is no MLP, so no norm before it: one norm, not two")]
    if cfg.norm == "none":
        slips.append((right + 4 * d, "with norm='none' there are no norms: nothing to count there"))
    elif cfg.norm_kind == "rmsnorm":
        slips.append((right + d * n_norms, "an RMSNorm keeps a scale γ but no shift β: d numbers, not 2d"))
    else:
        slips.append((right - d * n_norms, "a LayerNorm keeps a shift β as well as a scale γ: 2d numbers" if bias else
                      "a LayerNorm keeps its shift β when cfg.bias is off: cfg.bias is about the projections' biases"))
    return slips


def named_slips(value, slips, atol=0.5):
    """The hints of every slip that gives ``value`` (within ``atol``), joined; None if none does."""
    hints = list(dict.fromkeys(hint for wrong, hint in slips if abs(value - wrong) <= atol))
    if len(hints) > 1:
        return "either " + "; or ".join(hints) + " (here these come to the same number)"
    return hints[0] if hints else None


def digits(n):
    """How many digits the int ``n`` has, as a sentence says it ("401 digits"); past the 4,300 digits str() writes
    by default, its size in bits instead (never str() of it: that raises)."""
    n = abs(n)
    return f"{len(str(n)):,} digits" if n.bit_length() <= 14_000 else f"{n.bit_length():,} bits (over 4,000 digits)"


def count_problem(value, right, name):
    """One sentence for a count that is not ``right``, the learner's value written out in full."""
    if not math.isfinite(value):
        return f"{name} should be a whole number, but it is {value}"
    shown_value = f"{int(value):,}" if float(value).is_integer() else f"{value:,.2f}"
    return f"{name} = {shown_value} is {'too large' if value > right else 'too small'}"


@exercise("the parameters of one layer of any course model",
          answer=Function("a function layer_parameters(cfg)", own=LAYER_OWN))
def layer_parameters(answer, cfg):
    """answer(cfg) -> the parameters of one layer of a model configured by cfg (a helpers.model.Config),
    for seven Configs that each add one choice (no MLP, no norms, no biases, shared key/value heads,
    SwiGLU, RMSNorm) and SmolLM2's ``cfg``, each compared with a layer built from it."""
    cases = layer_cases(cfg)
    fields = [(case, dict(vars(case))) for _, case in cases]
    for what, case in cases:
        right = counted_in_block(case)   # first, and the function gets a copy: it cannot change what it is judged by
        try:
            got = call(answer, copy.deepcopy(case), what=f"on {what}")
        finally:   # nor the notebook's cfg (SmolLM2's model.cfg, read by its blocks at every pass), by another way
            for kept, own in fields:
                vars(kept).clear()
                vars(kept).update(own)
        if got is None:
            raise Wrong("not answered yet: layer_parameters returns None; write its body where the cell says "
                        "# YOUR CODE HERE, so that it returns the count")
        if is_bool(got):
            raise Wrong(f"on {what}: the count should be a whole number, but layer_parameters returned the bool {got}")
        if isinstance(got, (int, np.integer)) and abs(int(got)) > 10**15:   # past float's whole numbers
            raise Wrong(f"on {what}: the count should be a number of parameters, but it has {digits(int(got))}")
        value = as_whole(got, f"the count layer_parameters returned on {what}")   # text, NaN, 302.9: one sentence
        if value == right:
            continue
        rounded = rounded_by_dtype(got, right)
        if rounded:
            raise Wrong(f"on {what}: {rounded}")
        yield f"on {what}: " + (named_slips(value, layer_slips(case, right)) or count_problem(value, right, "the count")
                                + "; count from the Config's own choices (cfg.bias, cfg.activation, cfg.d_ff, "
                                "cfg.norm, cfg.norm_kind, cfg.kv_heads)")
        return


# The course's code that scores heads, or stacks every layer's attention weights (the exercise's first step: the
# model's trace=True pass is the learner's building block), or gives the scores among other figures.
SCAN_OWN = ("helpers.real.compute.head_scores", "helpers.heads.compute.previous_token_score",
            "helpers.heads.compute.induction_score", "helpers.heads.compute.head_scores",
            "helpers.real.compute.all_weights", "helpers.real.compute.induction_view", "helpers.real.compute.prompt_view",
            "helpers.real.circuit.head_statistics", "helpers.real.circuit.induction_scores",
            "helpers.heads.compute.layer_weights", "helpers.heads.compute.ids_attention",
            "helpers.heads.compute.prompt_attention", "helpers.heads.compute.attention_profile",
            "helpers.heads.compute.repeat_score", "helpers.heads.compute.induction_figures",
            "helpers.ablation.compute.induction_attention")


def scan_slips(w, length, right_previous, right_induction):
    """[(previous or induction table a known slip gives, its hint)] on weights w (layers, heads, T, T)."""
    def diagonal(back, first, last=None):   # queries first+back .. last+back, each looking `back` places back
        return torch.diagonal(w, offset=-back, dim1=-2, dim2=-1)[..., first:last].mean(-1).numpy()

    previous = [
        (right_induction, "previous and induction are swapped: return (previous, induction)"),
        (diagonal(1, 1), "that leaves out query 1: every query from position 1 on has a token just before it (query "
                         "1's is the start token), so average over all T - 1 of them"),
        (diagonal(0, 1), "that is the weight each token puts on itself: look one position back"),
        (diagonal(0, 0), "that is the weight each token puts on itself: look one position back"),
    ]
    induction = [
        (right_previous, "previous and induction are swapped: return (previous, induction)"),
        (diagonal(length, 1), "that is the weight on the earlier occurrence of the same token (L back); an induction "
                              "head looks at the token that came after it, L - 1 back"),
        (diagonal(length - 2, 3), "that looks L - 2 back, one place short: the token after the earlier occurrence "
                                  "sits L - 1 back"),
        (diagonal(length - 1, 1), "that counts query L too, the last token of the first copy: average over the "
                                  "second copy's queries L+1 .. 2L only"),
        (diagonal(length - 1, 0), "that counts queries of the first copy too: average over the second copy's "
                                  "queries L+1 .. 2L only"),
        (diagonal(length - 1, 3), "that leaves out query L+1, the second copy's first token: it has something to "
                                  "copy from too (the token at position 2)"),
        (diagonal(length - 1, 2, -1), "that leaves out the last query, 2L: average over all of L+1 .. 2L"),
    ]
    return previous, induction


@exercise("a scan of every head's previous-token and induction scores",
          answer=Function("a function head_scan(model, ids, length)", own=SCAN_OWN))
def head_scan(answer, model, ids, length):
    """answer(model, ids, length) -> (previous, induction), each (layers, heads): chapter 05's two
    scores of every head on ids = <start> a_1..a_L a_1..a_L; run on ``ids`` and on random tokens
    written twice, of another length, that the check draws (so neither a table copied from elsewhere
    nor a length written into the function passes). The model is put back as it was afterwards."""
    from ..model import Transformer

    if not isinstance(model, Transformer):
        fail(f"model should be the course's Transformer (real.load()[0]), but got {shown(model)}")
    ids = model.check_ids(ids)
    _, found = circuit.check_repeats(ids[None])
    if check_positive_int(length, "length") != found:
        fail(f"length should be the repeated part's length, {found} for these ids, but got {shown(length)}")
    g = torch.Generator().manual_seed(11)
    low = min(1000, model.cfg.vocab_size // 2)    # SmolLM2's first 1,000 ids hold its special and byte tokens
    drawn = torch.randint(low, model.cfg.vocab_size, (length + 3,), generator=g)
    cases = (("on the Book's sentence twice", ids, length),
             ("on random tokens twice", torch.cat([ids[:1], drawn, drawn]), length + 3))
    shape = (model.cfg.n_layers, model.cfg.n_heads)
    with model_kept(model, pristine=original_state(model)):   # a learner's model.double() or zeroed weight is put back
        answers = [as_returned(call(answer, model, seq, L, what=what, seconds=60)) for what, seq, L in cases]
    for (what, seq, L), got in zip(cases, answers):
        if got is None:
            raise Wrong("not answered yet: head_scan returns None; write its body where the cell says "
                        "# YOUR CODE HERE, so that it returns (previous, induction)")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"head_scan should return two tables, (previous, induction), but returned {shown(got)}")
        previous, induction = (numbers(t, name, shape=shape) for t, name in zip(got, ("previous", "induction")))
        w = real.all_weights(model, seq).double()
        right_previous, right_induction = heads.previous_token_score(w).numpy(), heads.induction_score(w, L).numpy()
        previous_slips, induction_slips = scan_slips(w, L, right_previous, right_induction)
        for name, table, right, slips in (("previous", previous, right_previous, previous_slips),
                                          ("induction", induction, right_induction, induction_slips)):
            found = list(close_problems(table, right, name, atol=1e-3))
            if found:
                yield f"{what}: " + (slip(table, slips) or found[0])
                return


def cache_bytes(cache, parts=("k", "v")):
    """The bytes a KVCache's tensors hold: every layer's K and V, or only ``parts`` (none before the
    first pass)."""
    return sum(t.numel() * t.element_size() for part in parts for t in getattr(cache, part) if t is not None)


def check_prompt(model, ids):
    """model the course's Transformer and ids one prompt (T,) of its token ids (a list, as a tokenizer's
    encode gives, is taken) with room for one more token, each else one sentence; return (model, ids
    as a LongTensor)."""
    from ..model import Transformer
    from ..sampling.compute import window

    if not isinstance(model, Transformer):
        fail(f"model should be the course's Transformer (real.load()[0]), but got {shown(model)}")
    ids = model.check_ids(ids)
    if ids.dim() != 1:
        fail(f"ids should be one prompt (T,) with room for one more token, but got shape {tuple(ids.shape)}")
    if len(ids) + 1 > window(model):   # the course's 1,024 positions, not SmolLM2's n_max: refused before any pass
        fail(f"ids should leave room for one more token in the model's {window(model):,} positions, "
             f"but it has {len(ids):,} tokens")
    return model, ids


@torch.no_grad()
def measured_growth(model, ids):
    """dict(right, prompt, after, only_k) in bytes: what one more token adds to a KVCache filled with
    ids (T,) (the course's own measure), and the totals and K-only growth known slips return. The model
    and the ids are checked first (``check_prompt``)."""
    from ..model import KVCache

    model, ids = check_prompt(model, ids)
    cache = KVCache(model.cfg.n_layers)
    logits = model(ids[None], cache=cache)
    prompt, k_prompt = cache_bytes(cache), cache_bytes(cache, ("k",))
    model(logits[:, -1].argmax(-1, keepdim=True), cache=cache)
    after, k_after = cache_bytes(cache), cache_bytes(cache, ("k",))
    return dict(right=after - prompt, prompt=prompt, after=after, only_k=k_after - k_prompt)


ROUND_OFF = 1e-6   # how far from a whole number a float's arithmetic may leave a count of bytes (at most ~10**9)


def whole_bytes(got, name):
    """What kv_growth returned as a whole number of bytes (an int), else Wrong: a float within ROUND_OFF of one
    (bytes / 1e6 * 1e6 may give 61439.99999999999) is read as it, a fractional part such as 302.9 is refused."""
    value = as_number(got, name)
    if abs(value - round(value)) > ROUND_OFF:
        raise Wrong(f"{name} should be a whole number, but it is {value!r}")
    return round(value)


@exercise("the KV cache's growth per token, measured", answer=Function("a function kv_growth(model, ids)", own=(
    "helpers.real.checks.measured_growth", "helpers.sampling.compute.kv_cache_bytes",
    "helpers.real.compute.kv_bytes_per_token", "helpers.sampling.compute.cache_bytes", "helpers.real.checks.cache_bytes",
    "helpers.real.compute.memory_mb", "helpers.sampling.compute.prefilled", "helpers.sampling.compute.prompt_state")))
def kv_growth(answer, model, ids):
    """answer(model, ids) -> the bytes a KVCache filled with ``ids`` (T,) grows by when one more token
    is fed; run on SmolLM2 with ``ids`` and on a small model whose 4 query heads share 2 key/value
    heads. Each model is put back as it was afterwards."""
    from ..model import Config, Transformer

    model, ids = check_prompt(model, ids)
    small = Transformer(Config(vocab_size=20, d_model=32, n_heads=4, n_kv_heads=2, n_layers=3, d_ff=64,
                               positions="rotary", norm_kind="rmsnorm", activation="swiglu", bias=False), seed=0)
    for what, m, prompt in (("on SmolLM2", model, ids), ("on a 3-layer model with 2 key/value heads", small,
                                                          torch.arange(1, 8))):
        with model_kept(m, pristine=original_state(m)):   # a learner's model.double() is put back
            got = call(answer, m, prompt, what=what, seconds=60)
        if got is None:
            raise Wrong("not answered yet: kv_growth returns None; write its body where the cell says "
                        "# YOUR CODE HERE, so that it returns the bytes")
        value = whole_bytes(got, f"the bytes kv_growth returned {what}")   # 302.9 bytes: refused, not rounded
        v = measured_growth(m, prompt)
        if value == v["right"]:
            continue
        rounded = rounded_by_dtype(got, v["right"])
        if rounded:
            raise Wrong(f"{what}: {rounded}")
        slips = [
            (v["right"] // 4, "that counts numbers, not bytes: each float32 number takes element_size() = 4 bytes"),
            (v["right"] * 2, "that is 8 bytes a number: the cache holds float32, element_size() = 4 bytes"),
            (v["only_k"], "that counts only the keys or only the values: the cache keeps both (cache.k and cache.v)"),
            (v["right"] // m.cfg.n_layers, "that is one layer's growth: every layer keeps its own keys and values"),
            (v["after"], "that is as much as the whole cache holds after the extra token: feed only the one new "
                         "token (the cache already holds the prompt), and return after minus before"),
            (v["prompt"], "that is the cache after the prompt alone: feed one more token and return the growth"),
            (v["right"] * m.cfg.n_heads // m.cfg.kv_heads, "that counts a key and a value per query head: the "
                                                            "cache holds only the shared key/value heads"),
            (0, "the cache did not grow: pass the same KVCache with cache= when you feed the extra token"),
        ]
        yield f"{what}: " + (named_slips(value, slips) or count_problem(value, v["right"], "the growth"))
        return


@torch.no_grad()
def ablation_variants(model, seqs, heads_off):
    """(values, later) for judging a mean ablation of heads_off on seqs (N, 2L+1). values: the second-copy
    loss with heads_off mean-ablated (per-position means over seqs: "right") and what the slips that need no
    other run give (unshifted, with_first, everything, bits), from one capture and one ablated run; later():
    the losses of the slips that need runs of their own (``slip_runs``), as many of them as fit in what is
    left of the check's time (``in_time``), all from one batched pass (or a few: ``slip_losses``)."""
    import torch.nn.functional as F

    seqs, length = circuit.check_repeats(seqs)
    names = sorted({f"L{l}.head_out" for l, _ in heads_off}, key=lambda n: int(n[1:].split(".")[0]))
    outs = circuit.capture(model, seqs, names, stop_after=names[-1])
    clean = {int(n[1:].split(".")[0]): outs[n] for n in names}                         # (N, H, T, d_k)
    task = {layer: out.mean(0) for layer, out in clean.items()}                         # (H, T, d_k)
    T = seqs.shape[1]
    second = torch.arange(length + 1, 2 * length)

    def loss(lg, where, shift=1):
        return float(F.cross_entropy(lg[:, where].flatten(0, 1), seqs[:, where + shift].flatten()))

    started = time.monotonic()
    right = model(seqs, replace=circuit.mean_ablation(heads_off, task))
    seconds = time.monotonic() - started   # a full ablated run: a slip's run (to the final norm only) costs less
    values = dict(right=loss(right, second), with_first=loss(right, torch.arange(length, 2 * length)),
                  everything=loss(right, torch.arange(0, T - 1)), unshifted=loss(right, second, shift=0))
    values["bits"] = values["right"] / math.log(2)
    runs = slip_runs(heads_off, task, clean)
    return values, lambda: slip_losses(model, seqs, in_time(runs, seconds), second)


def slip_runs(heads_off, task, clean):
    """{slip: (heads, value)} for the slips whose loss needs a run of its own, in ABLATION_SLIPS' order: the
    (layer, head) pairs that slip's run replaces, and value(layer, head, out), what takes that head's place in
    out (N, H, T, d_k), the run's own head outputs at that layer. task {layer: (H, T, d_k)}: each head's mean
    over the sequences at each position; clean {layer: (N, H, T, d_k)}: the clean run's head outputs."""
    last_per_layer = list({l: (l, h) for l, h in heads_off}.values())   # one replace entry per head: the last wins
    runs = dict(
        overwritten=(last_per_layer, lambda l, h, out: task[l][h]),
        pooled=(heads_off, lambda l, h, out: task[l][h].mean(0)),                         # a mean over positions too
        per_sequence=(heads_off, lambda l, h, out: clean[l][:, h].mean(1, keepdim=True)),  # each sequence's own mean
        one_pass=(heads_off, lambda l, h, out: out[:, h].mean(0)),                         # the ablated run's own means
        zero=(heads_off, lambda l, h, out: 0.0),
        none=([], None))
    if len(last_per_layer) == len(heads_off):   # no layer has two heads: that slip ablates every head, as is right
        del runs["overwritten"]
    return runs


SLIP_MARGIN = 1.5   # the slips' runs start only if what is left of the check's time holds them this many times over


def in_time(runs, seconds):
    """The first of ``runs`` (in their order) whose runs, ``seconds`` each (as long as the check's own ablated
    run took), fit SLIP_MARGIN times over in what is left of the check's whole time (LONG_CHECK_TIME_LIMIT)."""
    left, _ = time_left(LONG_CHECK_TIME_LIMIT)
    fit = int(left // (SLIP_MARGIN * max(seconds, 1e-3)))
    return dict(list(runs.items())[:fit])


@torch.no_grad()
def slip_losses(model, seqs, runs, second):
    """{slip: its second-copy loss (positions ``second`` predicting the next token)} for each of ``runs``
    (``slip_runs``), from one pass over seqs (N, T) written once per run, or from a few when one pass would hold
    more than patching.MAX_PASS_BYTES; each pass stops at the final norm, its logits made at ``second`` only."""
    import torch.nn.functional as F

    n, T = seqs.shape
    per_pass = max(1, patching.MAX_PASS_BYTES // pass_bytes(model, n, T))
    names, losses = list(runs), {}
    for first in range(0, len(names), per_pass):
        group = names[first:first + per_pass]
        layers = {layer for name in group for layer, _ in runs[name][0]}
        replace = {f"L{layer}.head_out": batched_replace([runs[name] for name in group], layer, n) for layer in layers}
        final = circuit.capture(model, seqs.repeat(len(group), 1), ["final_ln"], replace, stop_after="final_ln")
        for name, block in zip(group, final["final_ln"].split(n)):
            logits = block[:, second] @ model.E.T                                    # (N, len(second), V)
            losses[name] = float(F.cross_entropy(logits.flatten(0, 1), seqs[:, second + 1].flatten()))
    return losses


def pass_bytes(model, n, T):
    """The bytes patching.check_memory counts for a capture of "final_ln" over n sequences of T tokens."""
    return model.cfg.pass_bytes(n, T) + 4 * n * T * model.cfg.d_model


def batched_replace(runs, layer, n):
    """``replace``'s function for "L<layer>.head_out" in a pass over the sequences written once per run (blocks
    of n rows, in the order of ``runs``, a list of (heads, value) as ``slip_runs`` gives): in each block, the
    heads its run replaces in this layer take their value."""
    def fn(head_out):                              # (len(runs) · n, H, T, d_k)
        head_out = head_out.clone()
        for block, (off, value) in zip(head_out.split(n), runs):   # (each block a view of head_out)
            for l, h in off:
                if l == layer:
                    block[:, h] = value(l, h, block)
        return head_out
    return fn


MAX_CHECK_TOKENS = 1_024   # tokens in the check's seqs (N × (2L+1)): the check cell's 16 sequences of 21 are 336
# (on SmolLM2, 48 sequences of 21 tokens: the ablated run took 8 s on a 2-core machine under a load of 12, so the
# capture and the ablated run the check needs after the learner's call of up to 60 s fit in its 120 s)


def checked_ablation(model, seqs, heads_off):
    """The check's own inputs, refused with one sentence before any pass: model the course's
    Transformer, seqs repeated sequences (N, 2L+1) of its token ids, at most MAX_CHECK_TOKENS in all, whose pass
    fits patching.MAX_PASS_BYTES, two of them at least (the mean of one is its own output),
    heads_off a non-empty list of its (layer, head) pairs; returns (seqs as a LongTensor, heads_off
    as a list of (int, int), in the order given)."""
    from ..ablation.compute import check_two_rows
    from ..model import Transformer

    if not isinstance(model, Transformer):
        fail(f"model should be the course's Transformer (real.load()[0]), but got {shown(model)}")
    seqs = model.check_ids(seqs)
    seqs, _ = circuit.check_repeats(seqs)
    # a mean over one sequence is its own output: a function that ablates nothing would be judged right
    check_two_rows([seqs.shape[1]] * len(seqs), "seqs", "a mean over two sequences at least")
    if seqs.numel() > MAX_CHECK_TOKENS:
        fail(f"seqs should hold at most {MAX_CHECK_TOKENS:,} tokens (N × (2L+1): the check runs the model on them "
             f"several times within its time), but its {seqs.shape[0]:,} sequences of {seqs.shape[1]:,} tokens hold "
             f"{seqs.numel():,}")
    patching.check_memory(model, *seqs.shape, ["final_ln"], what="the check's pass over seqs")
    if isinstance(heads_off, (str, bytes, dict, set)) or not isinstance(heads_off, (list, tuple)) or not heads_off:
        fail(f"heads_off should be a non-empty list of (layer, head) pairs, e.g. [(4, 0)], but got {shown(heads_off)}")
    model.check_heads(heads_off)
    return seqs, [(int(layer), int(head)) for layer, head in heads_off]


def one_number(got, name):
    """What a learner's function returned (``name`` says what), as a float, else Wrong: exercises.as_number, which
    names text, True/False, NaN, inf and an int no float can hold in one sentence (``call`` has already
    refused anything but plain values, so no code of the learner's runs here)."""
    return as_number(got, name)


# The slips of ablated_copy_loss, each with its hint: those the ablated run's logits give first, then
# those that need a run of their own (looked at in this order; their runs made together, as many as fit in
# the check's time: a slip whose run did not fit is not named).
ABLATION_SLIPS = [
    ("unshifted", "the targets are not shifted: the logits at position t predict the token at t + 1, "
                  "so compare logits[:, t] with seqs[:, t + 1]"),
    ("with_first", "that counts the second copy's first token too: nothing announces it, so predict "
                   "only tokens 2..L of the copy (positions L+1 .. 2L-1 predict them)"),
    ("everything", "that is the loss over every position: take only the second copy's, where copying "
                   "can help"),
    ("bits", "that is in bits: use the natural logarithm (F.cross_entropy), nats"),
    ("overwritten", "only the last head of each layer was ablated: one replace entry per head for the same "
                    "\"L<layer>.head_out\" keeps only the last one; replace every listed head of a layer "
                    "in one function"),
    ("pooled", "that mean is taken over the positions too: average each head's output over the "
               "sequences only (axis 0 of head_out[:, h]), one mean per position"),
    ("per_sequence", "that mean is each sequence's own mean over its positions: average each head's "
                     "output over the sequences (axis 0 of head_out[:, h]), one mean per position, "
                     "the same for every sequence"),
    ("one_pass", "those means were taken in the ablated run itself, so a later layer's heads were "
                 "averaged after the earlier ones were already switched off: take every mean from "
                 "one clean run first, then ablate in a second run"),
    ("zero", "that is zero ablation: put the head's mean output over the sequences in its place, not 0"),
    ("none", "that is the loss with nothing ablated: the heads' outputs were not replaced in the "
             "second run (replace \"L<layer>.head_out\" and return the changed tensor)"),
]


# The course's code that keeps the heads' outputs, averages them, ablates with the means or measures the copy's
# loss: the model's replace switch and F.cross_entropy are the exercise's building blocks.
COPY_LOSS_OWN = ("helpers.real.checks.ablation_variants", "helpers.real.checks.slip_losses",
                 "helpers.real.circuit.copy_loss", "helpers.real.circuit.mean_ablation",
                 "helpers.patching.mean_head_outputs", "helpers.patching.ablation_replace",
                 "helpers.real.circuit.copy_effects", "helpers.real.circuit.capture", "helpers.real.circuit.head_statistics",
                 "helpers.patching.capture", "helpers.patching.head_outputs", "helpers.heads.compute.loss_by_position",
                 "helpers.heads.compute.copy_losses", "helpers.ablation.compute.induction_reference",
                 "helpers.ablation.compute.induction_ablation", "helpers.ablation.compute.copy_log_prob")


DRAWN_REPEATS = (4, 5)   # the check's second case: 4 sequences of 5 random tokens written twice (at most as many
# and as long as the check cell's: 44 tokens, a small part of the check's time on SmolLM2)


def drawn_ablation(model, seqs, heads_off):
    """The check's second case for ablated_copy_loss, (where, seqs, heads_off), seeded: random tokens written twice
    after the start tokens of ``seqs`` (N, 2L+1) (DRAWN_REPEATS, no more sequences nor tokens than it has; ids from
    circuit.FIRST_ID on, as random_repeats draws them) and the heads of ``heads_off`` but the first, with one
    other head the check draws (the same heads if the model has no other)."""
    g = torch.Generator().manual_seed(12)
    n, length = min(DRAWN_REPEATS[0], len(seqs)), min(DRAWN_REPEATS[1], (seqs.shape[1] - 1) // 2)
    V = model.cfg.vocab_size
    first = torch.randint(min(circuit.FIRST_ID, V // 2), V, (n, length), generator=g)
    others = [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads) if (l, h) not in heads_off]
    pick = int(torch.randint(len(others), (1,), generator=g)) if others else 0
    heads = heads_off[1:] + others[pick:pick + 1] or heads_off
    return (f"on {n} sequences of {length} random tokens written twice, drawn by the check, with "
            f"{', '.join(f'L{l}H{h}' for l, h in heads)} off", torch.cat([seqs[:n, :1], first, first], 1), heads)


@exercise("a task-matched mean ablation on SmolLM2",
          answer=Function("a function ablated_copy_loss(model, seqs, heads_off)", own=COPY_LOSS_OWN))
def ablated_copy_loss(answer, model, seqs, heads_off):
    """answer(model, seqs, heads_off) -> the mean second-copy loss (nats) with each head of heads_off
    replaced, position by position, by its mean output over seqs (repeated sequences (N, 2L+1)); run on
    the check cell's case and, once that is right, on a small one the check draws (``drawn_ablation``), so a
    loss computed elsewhere, returned as it is, does not pass."""
    seqs, heads_off = checked_ablation(model, seqs, heads_off)
    given = (f"on {len(seqs)} repeated sequences with {', '.join(f'L{l}H{h}' for l, h in heads_off)} off", seqs,
             heads_off)
    for n, (where, ids, heads) in enumerate((given, drawn_ablation(model, seqs, heads_off))):
        with model_kept(model, pristine=original_state(model)):   # a weight it zeroes is put back
            # (the model is large, the machine may be busy: 60 s a call, within the check's whole time)
            got = call(answer, model, ids, heads, what=where, seconds=60)
        if got is None:
            raise Wrong("not answered yet: ablated_copy_loss returns None; write its body where the cell says "
                        "# YOUR CODE HERE, so that it returns the loss" if not n else
                        f"ablated_copy_loss returned None {where}: return the loss for any sequences and heads")
        value = one_number(got, f"the mean loss ablated_copy_loss returned {where}")
        values, later = ablation_variants(model, ids, heads)
        if abs(value - values["right"]) <= 2e-3:
            continue
        hint = ablation_slip(value, values) or ablation_slip(value, later())   # the slips' runs only when needed
        yield (f"{where}: " if n else "") + (
            hint or next(number_problems(value, values["right"], "the ablated second-copy loss", atol=2e-3)))
        return


def ablation_slip(value, values):
    """The hint of the first slip of ABLATION_SLIPS whose value in ``values`` (a dict {slip: loss}) is ``value``
    (within 2e-3), else None."""
    return slip(value, [(values[name], hint) for name, hint in ABLATION_SLIPS if name in values], atol=2e-3)
