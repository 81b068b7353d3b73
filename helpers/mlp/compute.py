"""Chapter 07's compute: the MLP block per token, GELU, d_ff, where the parameters live,
and the key-value memory view.

* ``mlp_forward``: the block in NumPy, x (T, d) -> pre (T, d_ff) -> act -> out (T, d).
* ``MLP``: the same block as an ``nn.Module`` with the course's parameter names (the piece a
  learner writes in this chapter; this is the course's own, for the chapters ahead).
* ``mlp_weights``, ``apply_block_mlp``: one layer's MLP of a trained model, applied to
  any h_mid (torch), exactly as the model applies it.
* ``layer_parameters``, ``block_counts``, ``model_parameters``, ``layer_shares``: parameter
  accounting by formula and by counting, for our models and published ones (``MODELS``:
  GELU or SwiGLU, grouped-query attention, mixture of experts).
* ``collect_activations``, ``unit_means``, ``unit_profile``, ``unit_selectivity``,
  ``value_readout``: which hidden units fire for which tokens across the cat-world corpus,
  how selectively, and what they write.
* ``corpus_words``, ``probe``: the explorer's compute, one unit's profile in words.
"""
from collections import Counter
from itertools import accumulate

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import reference as ref
from ..errors import as_array, items_of, check_bytes, check_choice, check_finite, check_index, check_number, check_positive_int, \
    check_switch, count, described, fail, is_bool, shape_of, shown, to_numpy, whole
from ..explorer import check_model_and_world
from ..heads.compute import as_numpy
from ..model import MAX_TOKENS, check_finite_weights, check_model, check_squares, check_stream, measuring, mlp_floats
from ..sampling.compute import forward_macs
from ..states import on_the_cpu
from ..training import check_work

MAX_COLLECTED = 100_000   # the most sentences collect_activations traces in one call (the notebook traces 64)
# collect_activations' work, counted from the sizes alone (``check_work``): a traced pass's fixed cost (about 2.5 ms
# of Python calls for the cat model), its multiply-adds (``forward_macs``) and the characters of its contexts (each
# joined in Python, then stored as text); at most MAX_COLLECT_WORK, about a minute (the notebook's 64 sentences: 3e8)
COLLECT_PASS_WORK = 5 * 10**6
CONTEXT_CHAR_WORK = 5
MAX_COLLECT_WORK = 6 * 10**10

ACTIVATIONS = {"gelu": ref.gelu, "relu": ref.relu, "none": lambda x: as_array(x, "x")}
ACTIVATION_BYTES = {"gelu": 112, "relu": 32, "none": 24}   # mlp_forward's peak bytes per hidden activation (measured)
MAX_ACTIVATIONS = 2_000_000   # the most hidden activations (rows x d_ff) mlp_forward computes in one call (a few s)

# Published configurations, as each model's release gives them. ffn: "gelu" (two matrices,
# W_1 d x d_ff and W_2 d_ff x d) or "swiglu" (three: gate, up and down, each d x d_ff);
# n_kv_heads < n_heads is grouped-query attention; experts/active: a mixture of experts
# (every expert a whole FFN, ``active`` of them used per token, a d x experts router).
MODELS = {
    "GPT-2 small": dict(d=768, n_layers=12, n_heads=12, n_kv_heads=12, d_ff=3072, vocab=50257, context=1024,
                        ffn="gelu", bias=True, norm="layer", tied=True, learned_positions=True),
    "GPT-3": dict(d=12288, n_layers=96, n_heads=96, n_kv_heads=96, d_ff=49152, vocab=50257, context=2048,
                  ffn="gelu", bias=True, norm="layer", tied=True, learned_positions=True),
    "Llama-2-7B": dict(d=4096, n_layers=32, n_heads=32, n_kv_heads=32, d_ff=11008, vocab=32000, context=4096,
                       ffn="swiglu", bias=False, norm="rms", tied=False, learned_positions=False),
    "Llama-2-70B": dict(d=8192, n_layers=80, n_heads=64, n_kv_heads=8, d_ff=28672, vocab=32000, context=4096,
                        ffn="swiglu", bias=False, norm="rms", tied=False, learned_positions=False),
    "Mixtral-8x7B": dict(d=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336, vocab=32000, context=32768,
                         ffn="swiglu", bias=False, norm="rms", tied=False, learned_positions=False,
                         experts=8, active=2),
}
GPT = ("GPT-2 small", "GPT-3")


@on_the_cpu
def mlp_forward(x, W_1, b_1, W_2, b_2, activation="gelu"):
    """The MLP block on rows x (T, d): pre = x W_1 + b_1 (T, d_ff), act = activation(pre),
    out = act W_2 + b_2 (T, d). Returns dict(pre, act, out). activation: gelu, relu or none.
    At most MAX_ACTIVATIONS (2,000,000) hidden activations, rows x d_ff, in one call; the memory the call
    needs is counted first (``ACTIVATION_BYTES`` an activation) against MAX_BYTES.
    """
    x, W_1, W_2 = as_array(x, "x", (1, 2)), as_array(W_1, "W_1", 2), as_array(W_2, "W_2", 2)
    b_1, b_2 = as_array(b_1, "b_1", 1), as_array(b_2, "b_2", 1)
    for name, value in (("x", x), ("W_1", W_1), ("b_1", b_1), ("W_2", W_2), ("b_2", b_2)):
        check_finite(value, name)
    check_choice(activation, "activation", tuple(ACTIVATIONS))
    d, d_ff = x.shape[-1], W_1.shape[1]
    if W_1.shape[0] != d or b_1.shape != (d_ff,) or W_2.shape != (d_ff, d) or b_2.shape != (d,):
        fail(f"W_1, b_1, W_2 and b_2 should have shapes (d, d_ff), (d_ff,), (d_ff, d) and (d,) for x of width "
             f"d={d}, but have {W_1.shape}, {b_1.shape}, {W_2.shape} and {b_2.shape}")
    rows = x.shape[0] if x.ndim == 2 else 1
    # x and out (T, d) as float64, and per hidden activation: pre, act and the activation's temporaries
    # (GELU's erf goes through an array of Python floats, about 100 bytes an entry at its peak)
    check_bytes(8 * rows * 2 * d + rows * d_ff * ACTIVATION_BYTES[activation],
                f"the MLP of {count(rows)} rows of width {count(d_ff)}", "give fewer rows or a smaller d_ff")
    if rows * d_ff > MAX_ACTIVATIONS:   # GELU's erf runs once per entry, in Python: about a second a million
        fail(f"x and W_1 should make at most {MAX_ACTIVATIONS:,} hidden activations (rows x d_ff, this course's "
             f"limit for one call), but {count(rows)} rows of width d_ff={count(d_ff)} make {count(rows * d_ff)}: "
             "give fewer rows or a smaller d_ff")
    with np.errstate(over="ignore", invalid="ignore"):
        pre = x @ W_1 + b_1
        if not np.isfinite(pre).all():
            fail("x @ W_1 + b_1 should be finite numbers, but it overflows (numbers near 1e154 or more): scale x or W_1 down")
        act = ACTIVATIONS[activation](pre)
        out = act @ W_2 + b_2
    if not np.isfinite(out).all():
        fail("act @ W_2 + b_2 should be finite numbers, but it overflows (numbers near 1e154 or more): scale W_2 down")
    return dict(pre=pre, act=act, out=out)


class MLP(nn.Module):
    """The per-token MLP as a module: out = GELU(x @ W_1 + b_1) @ W_2 + b_2.

    W_1 (d_model, d_ff), b_1 (d_ff,), W_2 (d_ff, d_model), b_2 (d_model,): the names and
    shapes of helpers.model.MLP, so ``MLP(6, 8).load_state_dict(cat.blocks[0].mlp.state_dict())``
    works. GELU is the exact one, z·Φ(z). bias=False leaves b_1 and b_2 out.
    forward: x (..., d_model) -> (..., d_model), every row on its own.
    """

    def __init__(self, d_model, d_ff, bias=True):
        super().__init__()
        d_model, d_ff = check_positive_int(d_model, "d_model"), check_positive_int(d_ff, "d_ff")
        bias = check_switch(bias, "bias")
        check_bytes(8 * d_model * d_ff, f"MLP({count(d_model)}, {count(d_ff)})", "ask for a smaller d_model or d_ff "
                    "(two d_model x d_ff float32 matrices)")
        self.W_1 = nn.Parameter(torch.empty(d_model, d_ff))     # expand: one column (key) per hidden unit
        self.W_2 = nn.Parameter(torch.empty(d_ff, d_model))     # contract: one row (value) per hidden unit
        nn.init.normal_(self.W_1, std=d_model ** -0.5)
        nn.init.normal_(self.W_2, std=d_ff ** -0.5)
        self.b_1 = nn.Parameter(torch.zeros(d_ff)) if bias else None
        self.b_2 = nn.Parameter(torch.zeros(d_model)) if bias else None

    def forward(self, x):
        check_stream(x, self.W_1.shape[0], self.W_1.dtype, "MLP's input x", dims=None)
        pre = x @ self.W_1                       # (..., d_ff)
        if self.b_1 is not None:
            pre = pre + self.b_1
        act = F.gelu(pre)                        # exact GELU, z·Φ(z) (F.gelu's default, not its tanh form)
        out = act @ self.W_2                     # (..., d_model)
        if self.b_2 is not None:
            out = out + self.b_2
        return out


@on_the_cpu
def mlp_weights(model, layer):
    """Layer ``layer``'s MLP of a course Transformer as float64 NumPy arrays: W_1 (d, d_ff),
    b_1, W_2 (d_ff, d), b_2, plus the LayerNorm before it, ln2_weight and ln2_bias (d,).
    The model's MLPs are GELU or ReLU ones with biases, after a LayerNorm (pre-norm), as the course's
    models are: the weights of another kind (a gate, an RMSNorm, a norm after the MLP) would not say
    what the model computes. Weights of any float dtype (bfloat16 too) are read exactly."""
    block = check_block(model, layer)
    cfg = model.cfg
    if not cfg.bias or cfg.norm != "pre" or cfg.norm_kind != "layernorm" or cfg.activation == "swiglu":
        fail(f"the model should have GELU or ReLU MLPs with biases after a LayerNorm (norm='pre'), as the course's "
             f"models have, but it has bias={cfg.bias}, norm={cfg.norm!r}, norm_kind={cfg.norm_kind!r} and "
             f"activation={cfg.activation!r}")
    tensors = {name: getattr(block.mlp, name) for name in ("W_1", "b_1", "W_2", "b_2")}
    tensors.update(ln2_weight=block.ln2.weight, ln2_bias=block.ln2.bias)
    return {name: t.detach().double().numpy() for name, t in tensors.items()}


def check_mlp_model(model):
    """A course Transformer with MLP blocks (d_ff > 0), else one sentence; return it."""
    if not check_model(model).cfg.d_ff:
        fail("the model should have MLP blocks (d_ff > 0), but it has no MLP (d_ff=0, attention only)")
    return model


def check_block(model, layer):
    """The block ``layer`` of ``model`` if it has an MLP; else one sentence."""
    layer = check_index(layer, "layer", check_mlp_model(model).cfg.n_layers)
    return model.blocks[layer]


@on_the_cpu
def apply_block_mlp(model, layer, h_mid):
    """Run layer ``layer``'s MLP part on h_mid (T, d) with the model's own sub-block
    (``block.mlp_part``: its LayerNorm, W_1 + b_1, the activation, W_2 + b_2).
    Returns what the MLP writes into the residual stream, a (T, d) torch tensor."""
    block = check_block(model, layer)
    h_mid = to_numpy(h_mid, "h_mid")   # its size counted before it is converted
    d, d_ff = model.cfg.d_model, model.cfg.d_ff
    if h_mid.ndim != 2 or h_mid.shape[1] != d:
        fail(f"h_mid should have shape (T, {d}), but it has shape {h_mid.shape}")
    check_finite(h_mid, "h_mid")
    weights = block.mlp.W_1   # h_mid is given to the block in the weights' dtype (float32 for the course's models)
    if block.ln2 is not None and h_mid.size:
        check_squares(h_mid, "h_mid", weights.dtype)   # the norm's variance, in that dtype, would be inf
    rows = h_mid.shape[0]   # tables the block keeps: h_mid, ln2, mlp, h (T, d) and pre, act (T, d_ff)
    check_bytes(weights.element_size() * rows * (4 * d + 2 * d_ff), f"the MLP of {count(rows)} rows", "give fewer rows")
    h_mid = torch.as_tensor(h_mid, dtype=weights.dtype)
    kept = {}
    with measuring(model), torch.no_grad():   # eval mode: the MLP's dropout off
        block.mlp_part(h_mid[None], keep=kept.__setitem__)
    out = kept["mlp"][0]
    if not torch.isfinite(out).all():   # no norm before it: h_mid large enough to overflow float32 on its way
        fail(f"h_mid should hold numbers the MLP can take in float32, but its largest, of size "
             f"{float(h_mid.abs().max()):.3g}, makes the MLP's output overflow to inf or NaN")
    return out


@on_the_cpu
def layer_parameters(d, d_ff=None, bias=True, n_heads=1, n_kv_heads=None, ffn="gelu", norm="layer",
                     experts=1, active=None):
    """Parameters of one pre-norm layer by formula: dict(attention, mlp, norms, total, and
    mlp_active, total_active: what one token uses when only ``active`` of ``experts`` run).

    attention: W_Q and W_O (d², assuming h · d_k = d), W_K and W_V (d² · n_kv_heads / n_heads
    each; n_kv_heads < n_heads is grouped-query attention), their biases; mlp: "gelu" W_1 and W_2
    (2 d d_ff; 8 d² when d_ff = 4d) and b_1, b_2; "swiglu" three d × d_ff matrices (and b_1, b_G,
    b_2), as the course's ``model.mlp_floats`` counts them; times ``experts``, plus a d × experts
    router when experts > 1; norms: two LayerNorms (4d) or two RMSNorms (2d, no β). d_ff = 0 is
    an attention-only layer (``Config(d_ff=0)``): no MLP, one norm, one expert.
    """
    d = check_positive_int(d, "d")
    bias = check_switch(bias, "bias")
    d_ff = 4 * d if d_ff is None else check_positive_int(d_ff, "d_ff", minimum=0)
    n_heads = check_positive_int(n_heads, "n_heads")
    n_kv_heads = n_heads if n_kv_heads is None else check_positive_int(n_kv_heads, "n_kv_heads")
    if d % n_heads or n_heads % n_kv_heads:
        fail(f"expected n_heads dividing d and n_kv_heads dividing n_heads, but got d={count(d)}, "
             f"n_heads={count(n_heads)}, n_kv_heads={count(n_kv_heads)}")
    check_choice(ffn, "ffn", ("gelu", "swiglu"))
    check_choice(norm, "norm", ("layer", "rms"))
    experts = check_positive_int(experts, "experts")
    active = experts if active is None else check_positive_int(active, "active")
    if active > experts:
        fail(f"active should be at most experts={count(experts)} (the experts a token uses are among them), "
             f"but got {count(active)}")
    if not d_ff and experts > 1:
        fail(f"experts should be 1 for an attention-only layer (d_ff=0: no MLP to split), but got {count(experts)}")
    kv = d * n_kv_heads // n_heads
    attention = 2 * d * d + 2 * d * kv + ((2 * d + 2 * kv) if bias else 0)
    one_ffn = mlp_floats(d, d_ff, bias, ffn) if d_ff else 0
    router = d * experts if experts > 1 else 0
    norms = (2 if norm == "layer" else 1) * d * (2 if d_ff else 1)
    mlp, mlp_active = experts * one_ffn + router, active * one_ffn + router
    return dict(attention=attention, mlp=mlp, norms=norms, total=attention + mlp + norms,
                mlp_active=mlp_active, total_active=attention + mlp_active + norms)


@on_the_cpu
def block_counts(model, layer=0):
    """Parameters of one block of ``model``, counted from its tensors: dict(attention, mlp,
    norms, total)."""
    layer = check_index(layer, "layer", check_model(model).cfg.n_layers)
    counts = dict(attention=0, mlp=0, norms=0)
    for name, p in model.blocks[layer].named_parameters():
        part = {"attn": "attention", "mlp": "mlp"}.get(name.split(".")[0], "norms")
        counts[part] += p.numel()
    counts["total"] = sum(counts.values())
    return counts


@on_the_cpu
def model_parameters(name):
    """A published model's parameters by formula, from its configuration in ``MODELS``:
    dict(d, n_layers, attention, mlp, norms, mlp_active (summed over all layers),
    embedding (V·d, twice when the unembedding is not tied), positions (learned only),
    final_norm, total, total_active)."""
    check_choice(name, "the model's name", tuple(MODELS))
    c = MODELS[name]
    per_layer = layer_parameters(c["d"], c["d_ff"], c["bias"], c["n_heads"], c["n_kv_heads"], c["ffn"],
                                 c["norm"], c.get("experts", 1), c.get("active"))
    d, n = c["d"], c["n_layers"]
    out = dict(d=d, n_layers=n, **{part: n * per_layer[part] for part in ("attention", "mlp", "norms", "mlp_active")},
               embedding=c["vocab"] * d * (1 if c["tied"] else 2),
               positions=c["context"] * d if c["learned_positions"] else 0,
               final_norm=(2 if c["norm"] == "layer" else 1) * d)
    fixed = out["attention"] + out["norms"] + out["embedding"] + out["positions"] + out["final_norm"]
    out.update(total=fixed + out["mlp"], total_active=fixed + out["mlp_active"])
    return out


@on_the_cpu
def layer_shares(name, active=False):
    """(attention, mlp) shares of a published model's layer parameters (norms in the rest);
    active=True counts only the experts one token uses."""
    active = check_switch(active, "active")
    p = model_parameters(name)
    mlp = p["mlp_active"] if active else p["mlp"]
    layers = p["attention"] + mlp + p["norms"]
    return p["attention"] / layers, mlp / layers


@on_the_cpu
def collect_activations(model, world, sentences=None):
    """Every position of every sentence's input (the sentence minus its last word), traced.

    Returns dict(tokens (N,) the word at each position, next (N,) the word that follows it,
    contexts (N,) the words up to and including it, act {layer: (N, d_ff)}, pre {layer: (N, d_ff)}),
    the activations as NumPy in the model's dtype (a bfloat16 model's read as float32, which holds them exactly).
    sentences: None (the world's) or a list of at most MAX_COLLECTED sentences, each a list of 2 to
    MAX_TOKENS + 1 words of the world. Before the first pass: the model (with MLPs, finite weights) and
    every sentence are checked, and the work (``collect_work``, at most MAX_COLLECT_WORK: about a minute)
    and the memory (at most MAX_BYTES) the call needs are counted from their sizes.
    """
    check_model_and_world(model, world)
    check_finite_weights(check_mlp_model(model))
    sentences = world.sentences if sentences is None else sentences
    if isinstance(sentences, (str, bytes)) or not isinstance(sentences, (list, tuple)) or not sentences:
        fail(f"sentences should be None or a non-empty list of sentences, each a list of words such as "
             f"['<BOS>', 'the', 'cat', '<EOS>'], but got {shown(sentences)}")
    if len(sentences) > MAX_COLLECTED:
        fail(f"sentences should hold at most {MAX_COLLECTED:,} sentences, but holds {len(sentences):,}")
    for i, s in enumerate(sentences):
        if not isinstance(s, (list, tuple)) or not 2 <= len(s) <= MAX_TOKENS + 1:
            fail(f"sentences should hold lists of 2 to {MAX_TOKENS + 1:,} words (the last one is only "
                 f"predicted), but sentence {i} is {shown(s)}")
    check_collect_cost(model, sentences)   # the passes first: encoding a refused list could take minutes
    for s in sentences:
        world.tokenizer.encode(s)
    check_collect_cost(model, sentences, texts=True)
    return traced_activations(model, world, sentences)


@on_the_cpu
def collect_work(model, sentences, texts=False):
    """(work, bytes) of ``collect_activations`` on checked sentences, from their sizes alone: a traced pass
    each (COLLECT_PASS_WORK and its multiply-adds) and the act and pre tables (kept, then joined);
    with ``texts`` (the words checked as text) also the contexts (CONTEXT_CHAR_WORK a character; kept as
    Python text, then as one NumPy text table as wide as the longest) and the tokens and next tables."""
    cfg = model.cfg
    lengths = Counter(len(s) - 1 for s in sentences)   # one forward_macs per length
    n = sum(T * k for T, k in lengths.items())
    work = sum(k * (COLLECT_PASS_WORK + forward_macs(cfg, T)) for T, k in lengths.items())
    need = 2 * 2 * max(4, model.blocks[0].mlp.W_1.element_size()) * n * cfg.d_ff * cfg.n_layers
    if texts:
        chars = widest = longest = 0
        for s in sentences:
            ends = list(accumulate(len(word) + 1 for word in s[:-1]))   # context t has ends[t] - 1 characters
            chars += sum(ends) - len(ends)
            widest, longest = max(widest, ends[-1] - 1), max(longest, *map(len, s))
        work += CONTEXT_CHAR_WORK * chars
        need += chars + 60 * n + 4 * n * (widest + 2 * longest)
    return work, need


def check_collect_cost(model, sentences, texts=False):
    """Refuse, in one sentence, sentences whose ``collect_work`` passes MAX_COLLECT_WORK or MAX_BYTES, or
    whose longest input the model cannot trace (learned positions for fewer words, a trace too large)."""
    longest = max(len(s) for s in sentences) - 1
    model.check_room(longest)
    model.check_trace_memory(longest)
    work, need = collect_work(model, sentences, texts)
    what = f"collect_activations on {count(len(sentences))} sentences"
    check_work(work, MAX_COLLECT_WORK, what, "pass fewer or shorter sentences")
    check_bytes(need, what, "pass fewer or shorter sentences")


@on_the_cpu
def traced_activations(model, world, sentences):
    """``collect_activations``' dict for checked sentences: one traced pass each."""
    tokens, following, contexts = [], [], []
    act = {layer: [] for layer in range(model.cfg.n_layers)}
    pre = {layer: [] for layer in range(model.cfg.n_layers)}
    with measuring(model), torch.no_grad():   # eval mode: no dropout, one answer for one model
        for s in sentences:
            words = s[:-1]
            trace = model(world.tokenizer.encode(words), trace=True)
            tokens += words
            following += s[1:]
            contexts += [" ".join(words[:t + 1]) for t in range(len(words))]
            for layer in act:
                act[layer].append(as_numpy(trace[f"L{layer}.act"]))
                pre[layer].append(as_numpy(trace[f"L{layer}.pre"]))
    return dict(tokens=np.array(tokens), next=np.array(following), contexts=np.array(contexts),
                act={k: np.concatenate(v) for k, v in act.items()},
                pre={k: np.concatenate(v) for k, v in pre.items()})


@on_the_cpu
def unit_means(collected, layer, words):
    """(len(words), d_ff): the mean activation of each hidden unit of ``layer`` over the
    positions holding each word; each word must occur at an input position of ``collected``."""
    layer = check_layer(collected, layer)   # before collected is read: it may be no dict at all
    acts = collected["act"][layer]
    if isinstance(words, (str, bytes)) or not isinstance(words, (list, tuple)):
        fail(f"words should be a non-empty list of words (strings), but got {shown(words)}")
    words = items_of(words)   # (read by the built-ins: a subclass's __len__ may lie or raise; each text a plain str)
    if not words or not all(isinstance(word, str) for word in words):
        fail(f"words should be a non-empty list of words (strings), but got {shown(words)}")
    rows = []
    for word in words:
        here = collected["tokens"] == word
        if not here.any():
            fail(f"each word should occur at an input position of the collected corpus (collect_activations "
                 f"feeds every sentence but its last word), but {shown(word)} never does")
        rows.append(acts[here].mean(axis=0))
    return np.array(rows)


def check_collected(collected):
    """The dict of ``collect_activations``, else one sentence: tokens, next, contexts, each an (N,) array of
    text, and act a non-empty dict {layer: (N, d_ff) array of finite numbers}, one d_ff for every layer
    (a mean over NaN is NaN, and the largest of NaN and a number is either)."""
    if not isinstance(collected, dict) or not {"tokens", "next", "contexts", "act"} <= set(collected) \
            or not isinstance(collected["act"], dict):
        fail(f"collected should be the dict returned by mlp.collect_activations(model, world), but got {shown(collected)}")
    texts = [collected[key] for key in ("tokens", "next", "contexts")]
    N = texts[0].shape[0] if isinstance(texts[0], np.ndarray) and texts[0].ndim == 1 else -1
    acts = list(collected["act"].values())
    if not all(isinstance(t, np.ndarray) and t.dtype.kind == "U" and t.shape == (N,) for t in texts) or not acts \
            or not all(isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.ndim == 2 and a.shape[0] == N
                       and a.shape[1] == acts[0].shape[1] for a in acts):
        fail("collected should be the dict returned by mlp.collect_activations(model, world): tokens, next and "
             "contexts (N,) arrays of words, act {layer: (N, d_ff) array}, but got "
             + ", ".join(f"{key} {_kind(value)}" for key, value in collected.items()
                         if key in ("tokens", "next", "contexts", "act")))
    for layer, values in collected["act"].items():
        check_finite(values, f"collected['act'][{shown(layer)}]")
    return collected


def _kind(value):
    """What a value of collected is, in a few words (an array's dtype and shape, a dict's keys)."""
    if isinstance(value, np.ndarray):
        return f"dtype {value.dtype} shape {value.shape}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{shown(k)}: {_kind(v)}" for k, v in list(value.items())[:4]) + \
            (", ..." if len(value) > 4 else "") + "}"
    return shown(value)


def check_layer(collected, layer):
    """``layer`` as a key of ``collected['act']`` (a whole number, not a bool), else one sentence."""
    layers = sorted(check_collected(collected)["act"])
    expected = f"one of {layers}"
    layer = whole(layer, "layer", expected)   # (int's own value: a subclass's __eq__ or __hash__ may lie)
    if layer not in collected["act"]:
        fail(f"layer should be {expected}, but got {shown(layer)}")
    return layer


@on_the_cpu
def unit_profile(collected, layer, unit, words, top=3):
    """What hidden unit ``unit`` of ``layer`` responds to.

    Returns dict(means (len(words),) the unit's mean activation per current word,
    top_contexts: the ``top`` distinct contexts where it is largest, as (context, value),
    share: the fraction of all positions where the unit is above 0.5). top: 1 to the number of
    distinct contexts in ``collected`` (``distinct_contexts``).
    """
    layer = check_layer(collected, layer)   # before collected is read: it may be no dict at all
    acts = collected["act"][layer]
    unit = check_index(unit, "unit", acts.shape[1])
    top, distinct = check_positive_int(top, "top"), distinct_contexts(collected)
    if top > distinct:
        fail(f"top should be at most the {count(distinct)} distinct contexts of collected, but got {count(top)}")
    means = unit_means(collected, layer, words)[:, unit]
    column = acts[:, unit]
    seen, best = set(), []
    for i in np.argsort(-column, kind="stable"):
        context = str(collected["contexts"][i])
        if context not in seen:
            seen.add(context)
            best.append((context, float(column[i])))
        if len(best) == top:
            break
    return dict(means=means, top_contexts=best, share=float((column > 0.5).mean()))


@on_the_cpu
def distinct_contexts(collected):
    """How many different contexts ``collected`` (``collect_activations``) holds: the most ``unit_profile`` can rank."""
    return len(set(check_collected(collected)["contexts"].tolist()))


@on_the_cpu
def unit_selectivity(collected, layer, unit, where, level=0.5):
    """How selectively hidden unit ``unit`` of ``layer`` fires for a group of positions.

    where: (N,) booleans over the positions of ``collected``, True inside the group. Returns
    dict(n_in, mean_in, mean_out: the unit's mean activation inside and outside the group,
    share_in, share_out: the fraction of those positions where it is above ``level``).
    """
    layer = check_layer(collected, layer)   # before collected is read: it may be no dict at all
    acts = collected["act"][layer]
    unit = check_index(unit, "unit", acts.shape[1])
    level = check_number(level, "level")
    where = check_where(where, len(acts))
    if where.all() or not where.any():
        fail("where should mark some positions but not all of them")
    column = acts[:, unit]
    return dict(n_in=int(where.sum()), mean_in=float(column[where].mean()), mean_out=float(column[~where].mean()),
                share_in=float((column[where] > level).mean()), share_out=float((column[~where] > level).mean()))


def check_where(where, n):
    """``where`` as (n,) NumPy booleans, one per collected position: an array, a tensor or a list of True/False
    (read by ``to_numpy``, which detaches a tensor and refuses what NumPy cannot read), else one sentence."""
    listed = isinstance(where, (list, tuple)) and all(is_bool(v) for v in where)
    if not (is_bool(where) or listed) or shape_of(where, "where") not in (None, (n,)):
        fail(f"where should be {n} booleans, one per collected position, but got {described(where, 'where')}")
    where = to_numpy(where, "where", bools=True)
    if where.shape != (n,):
        fail(f"where should be {n} booleans, one per collected position, but got {count(where.size)} of shape "
             f"{where.shape}")
    return where == 1


@on_the_cpu
def value_readout(model, layer, unit, top=3):
    """The words unit ``unit`` of ``layer`` promotes most when it fires: its value row
    W_2[unit] read through the tied unembedding (E), skipping the later layers and the
    final LayerNorm. Returns [(word index, score)] for the ``top`` highest scores."""
    block = check_block(model, layer)
    unit, top = check_index(unit, "unit", model.cfg.d_ff), check_positive_int(top, "top")
    if top > model.cfg.vocab_size:
        fail(f"top should be at most the model's {model.cfg.vocab_size} words, but got {count(top)}")
    check_finite_weights(model)
    scores = as_numpy((block.mlp.W_2[unit] @ model.E.T).detach())
    order = np.argsort(-scores, kind="stable")[:top]
    return [(int(i), float(scores[i])) for i in order]


@on_the_cpu
def corpus_words(collected, vocab):
    """The words that occur at some input position of ``collected``, in vocabulary order
    (vocab: a list of words, such as world.tokenizer.vocab)."""
    present = set(check_collected(collected)["tokens"].tolist())
    if isinstance(vocab, (str, bytes)) or not isinstance(vocab, (list, tuple)) \
            or not all(isinstance(word, str) for word in vocab):
        fail(f"vocab should be a list of words (strings) such as world.tokenizer.vocab, but got {shown(vocab)}")
    return [w for w in vocab if w in present]


def check_collected_of(model, world, collected):
    """``collected`` made by ``collect_activations(model, world)``, else one sentence: one act per layer of
    the model, each of its d_ff units, every token a word of the world; and the activations at the first
    position are the ones the model computes there (one short pass: another model of the same size
    computes others)."""
    check_collected(collected)
    cfg, act = model.cfg, collected["act"]
    if set(act) != set(range(cfg.n_layers)) or next(iter(act.values())).shape[1] != cfg.d_ff:
        fail(f"collected should be collect_activations(model, world) of this model, {cfg.n_layers} layers of "
             f"{cfg.d_ff} units, but holds layers {shown(list(act))} of {next(iter(act.values())).shape[1]} units")
    strange = sorted(set(collected["tokens"].tolist()) - set(world.tokenizer.vocab))
    if strange:
        fail(f"collected should be collect_activations(model, world) of the {world.name} world, but its tokens "
             f"hold words the world does not have, such as {shown(strange[0])}")
    if not len(collected["tokens"]):
        return collected
    words = str(collected["contexts"][0]).split(" ")
    if len(words) > MAX_TOKENS or any(word not in world.tokenizer.ids for word in words):
        fail(f"collected should be collect_activations(model, world), but its first context is {shown(words)}, "
             "not words of the world")
    with measuring(model), torch.no_grad():   # in eval mode, as collect_activations made it
        trace = model(world.tokenizer.encode(words), trace=True)
    if not all(np.allclose(as_numpy(trace[f"L{layer}.act"][-1]), act[layer][0], atol=1e-4, rtol=1e-3, equal_nan=True)
               for layer in range(cfg.n_layers)):
        fail("collected should be collect_activations(model, world) of this model, but its activations at the "
             "first position differ from the ones this model computes there (another model's?)")
    return collected


PROBE_TOP = 3   # the strongest contexts a probe shows (fewer when collected holds fewer)


@on_the_cpu
def probe(model, world, collected, layer=0, unit=0):
    """What unit ``unit`` of layer ``layer`` responds to, over ``collected``
    (``collect_activations(model, world)``).

    Returns dict(layer, unit, words, means (len(words),) the mean activation per current
    word, top_contexts [(context, value)] its PROBE_TOP strongest distinct contexts (all there are, when
    collected holds fewer), share of positions above 0.5, promotes: the
    3 words its value row W_2[unit] scores highest through the unembedding).
    """
    check_collected(collected)   # before the model and world: it may be no dict at all
    check_model_and_world(model, world)
    check_block(model, layer)
    check_finite_weights(model)
    check_collected_of(model, world, collected)
    words = corpus_words(collected, world.tokenizer.vocab)
    profile = unit_profile(collected, layer, unit, words, top=min(PROBE_TOP, distinct_contexts(collected)))
    promotes = [world.tokenizer.vocab[i] for i, _ in value_readout(model, layer, unit)]
    return dict(layer=layer, unit=unit, words=words, promotes=promotes, **profile)
