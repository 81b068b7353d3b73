"""Chapter 11's functions on the real model (SmolLM2-135M-Instruct in the course's Transformer).

Also the short real-model views of chapters 05-10 (``induction_view``, ``rotary_view``,
``swiglu_view``, ``norm_view``, ``temperature_view``, ``patching_view``). Every function takes
the model (and tokenizer) from ``load()``; nothing here imports widgets.
"""
import math
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F

from .. import reference as ref
from ..errors import check_bytes, check_finite, check_tensor, count, check_index, check_number, check_positive_int, check_seed, check_switch, \
    check_text as check_string, fail, items_of, length, shown, whole
from ..heads import compute as heads
from ..model import MAX_TOKENS, MAX_TRACE_BYTES, Config, KVCache, attention_floats, mlp_floats
from . import smollm2
from .circuit import capture
from .smollm2 import MAX_REAL_WORK, REAL_PASS_WORK, check_net, check_real_passes, check_tok, real_work  # noqa: F401  (the chapter's names)
from ..states import on_the_cpu

BOOK_SENTENCE = "The Time Traveller smiled at us."   # the Book's induction experiment, written twice
FACT = "The capital of France is"
START = "<|endoftext|>"   # the token that opens a document in SmolLM2's training data


def load():
    """(model, tokenizer), loaded once per process (see helpers.real.smollm2)."""
    return smollm2.load()


MAX_TEXT_CHARS = smollm2.MAX_TEXT_CHARS   # the longest text tokenized (the tokenizer's own limit)


def check_text(text, name="the prompt"):
    """A non-blank string of at most MAX_TEXT_CHARS characters, with no lone surrogate."""
    return check_string(text, name, max_chars=MAX_TEXT_CHARS)


def check_layer(model, layer):
    return check_index(layer, "layer", model.cfg.n_layers)


def check_k(model, k):
    """How many top tokens: a whole number from 1 to the vocabulary size."""
    k = check_positive_int(k, "k")
    if k > model.cfg.vocab_size:
        fail(f"k should be at most the vocabulary size {model.cfg.vocab_size:,}, but got {count(k)}")
    return k


def check_cfg(cfg):
    if not all(hasattr(cfg, name) for name in ("n_layers", "kv_heads", "d_k", "d_model", "d_ff", "vocab_size")):
        fail(f"expected the model's Config (model.cfg), but got {type(cfg).__name__} {shown(cfg)}")
    return cfg


def check_pair(model, tok):
    """model and tok, the two that ``load()`` returns, each else one sentence (the model first: the two
    swapped, the sentence names the model), and of one vocabulary (another course model, such as the cat
    model, is refused: it would read SmolLM2's ids as words of its own); return them."""
    check_net(model), check_tok(tok)
    if model.cfg.vocab_size != len(tok.vocab):
        fail(f"model should be the model of tok's vocabulary (real.load()'s, {len(tok.vocab):,} tokens), but it has "
             f"a vocabulary of {model.cfg.vocab_size:,}")
    return model, tok


def tokens(tok, text):
    """[(id, piece)] for text: each token's id and the text it stands for."""
    ids = check_tok(tok).encode(check_text(text, "the text"))
    return list(zip(ids, tok.pieces(ids)))


@torch.no_grad()
def trace(model, ids):
    """The model's trace (every named intermediate) for ids (T,)."""
    return model(check_net(model).check_ids(ids), trace=True)


def shape_table(model, ids):
    """[(name, shape)] of layer 0's intermediates and the read-out, for ids (T,)."""
    record = trace(model, ids)
    return [(name, tuple(t.shape)) for name, t in record.items()
            if not name.startswith("L") or name.startswith("L0.")]


def parameter_formula(cfg):
    """Parameters by part, from the Config's sizes and choices alone: a dict of embedding,
    positions, attention, mlp, norms (each per layer), per_layer, final_norm and total.

    Per layer: W_Q and W_O are d x d, W_K and W_V d x (n_kv_heads * d_k), with biases if cfg.bias;
    the MLP two d x d_ff matrices (SwiGLU: three), none if d_ff = 0; each norm d scales (a LayerNorm
    also d shifts). Plus the embedding V x d (also the unembedding: tied), learned positions
    n_max x d, and the final norm. For SmolLM2 (GQA, SwiGLU, RMSNorm, no biases, rotary positions):
    3·d·d_ff for the MLP, 2·d for the norms.
    """
    if not isinstance(cfg, Config):
        fail(f"expected the model's Config (model.cfg, a helpers.model.Config), but got {type(cfg).__name__} {shown(cfg)}")
    d = cfg.d_model
    norm = d * (2 if cfg.norm_kind == "layernorm" else 1)
    parts = dict(embedding=cfg.vocab_size * d, positions=cfg.n_max * d if cfg.positions == "learned" else 0,
                 attention=attention_floats(d, cfg.kv_heads * cfg.d_k, cfg.bias),
                 mlp=mlp_floats(d, cfg.d_ff, cfg.bias, cfg.activation) if cfg.d_ff else 0,
                 norms=0 if cfg.norm == "none" else norm * (2 if cfg.d_ff else 1))
    parts["per_layer"] = parts["attention"] + parts["mlp"] + parts["norms"]
    parts["final_norm"] = norm if cfg.final_norm else 0
    parts["total"] = parts["embedding"] + parts["positions"] + cfg.n_layers * parts["per_layer"] + parts["final_norm"]
    return parts


def parameters_counted(model):
    """The number of numbers the model holds, counted tensor by tensor."""
    return sum(p.numel() for p in check_net(model).parameters())


def computable(x, name):
    """Refuse, in one sentence, a tensor or NumPy array of real numbers that torch cannot compute in: a float8
    tensor (``check_tensor``), a long double array (torch has no such type); return x."""
    if isinstance(x, torch.Tensor):
        return check_tensor(x, name)
    if x.dtype.kind == "f" and x.dtype.itemsize > 8:
        fail(f"{name} should hold numbers torch can read, but got an array of dtype {x.dtype} (torch has no such "
             f"type: make it float64 first with .astype(float))")
    return x


def distinct_per_block(W, block=32):
    """The most distinct values in any block of ``block`` consecutive weights along W's input
    axis (the file's quantisation blocks). W: (d_in, d_out), d_in a multiple of block."""
    block = check_positive_int(block, "block")
    if not isinstance(W, (torch.Tensor, np.ndarray)) or W.dtype == bool or W.dtype == torch.bool:
        fail(f"W should be a weight matrix (a tensor), but got {type(W).__name__} {shown(W)}")
    if isinstance(W, np.ndarray) and W.dtype.kind not in "fiu":
        fail(f"W should be a weight matrix of real numbers, but got an array of dtype {W.dtype}")
    computable(W, "W")
    if W.ndim != 2 or W.shape[0] % block or 0 in W.shape:
        fail(f"expected a matrix (d_in, d_out) with d_in a multiple of {count(block)} and no axis empty, but got shape "
             f"{tuple(W.shape)}")
    # the blocks copied out of W's transpose, then sorted (values and int64 indices): 24 bytes a weight at most
    check_bytes(24 * math.prod(W.shape), f"W (a matrix of {count(math.prod(W.shape))} weights), sorted block by block",
                "give a smaller matrix")
    W = check_finite(torch.as_tensor(W), "W")           # NaN differs from itself: each would count as one more value
    blocks = W.T.reshape(-1, block)                     # one row per block
    ordered = blocks.sort(dim=1).values
    return int(((ordered[:, 1:] != ordered[:, :-1]).sum(1) + 1).max())


def kv_bytes_per_token(cfg, bytes_per_number=4):
    """Bytes the KV cache adds per token: 2 (K and V) x layers x key/value heads x d_k x bytes."""
    check_number(bytes_per_number, "bytes_per_number", low=0, low_open=True, high=8)   # an int stays an int
    return 2 * check_cfg(cfg).n_layers * cfg.kv_heads * cfg.d_k * bytes_per_number


def memory_mb(model, path=None):
    """dict(file, weights, kv_per_1k_tokens) in MB (10^6 bytes): the model's file on disk (``path``; by
    default SmolLM2's 4-bit file, for ``load()``'s model only), the float32 weights in memory, the float32
    KV cache for 1,000 tokens."""
    import os

    if path is not None:
        check_gguf_file(path)
    check_net(model)
    if path is None and smollm2.original_state(model) is None:   # not the loaded SmolLM2: its file is not this one's
        fail(f"path should name this model's file on disk (the default, {smollm2.FILENAME}, is real.load()'s model's "
             f"file), but got None for another model (a vocabulary of {model.cfg.vocab_size:,})")
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return dict(file=os.path.getsize(path or smollm2.gguf_path()) / 1e6, weights=weights / 1e6,
                kv_per_1k_tokens=1000 * kv_bytes_per_token(model.cfg) / 1e6)


GGUF_HEADER = struct.Struct("<4sIQQ")   # a GGUF file's first 24 bytes: b"GGUF", its version, tensor and metadata counts


def check_gguf_file(path):
    """Refuse, in one sentence, a ``path`` that names no GGUF file on disk: not a regular file (a folder, a
    pipe, a device), unreadable (/proc/self/mem), or one whose first 24 bytes are not a GGUF header (the
    magic b"GGUF", version 2 or 3, at least one tensor): an empty or junk file is no model's file. Only
    those 24 bytes are read."""
    import os

    if not (isinstance(path, (str, os.PathLike)) and os.path.isfile(path)):
        fail(f"path should name the model's GGUF file on disk, but got {shown(path)}, which is no file")
    try:
        with open(path, "rb") as file:
            head = file.read(GGUF_HEADER.size)
    except OSError as error:
        fail(f"path should name the model's GGUF file on disk, but {shown(str(path))} cannot be read "
             f"({error.strerror or type(error).__name__})")
    if len(head) < GGUF_HEADER.size:
        fail(f"path should name the model's GGUF file on disk (at least {GGUF_HEADER.size} bytes of header), but "
             f"{shown(str(path))} holds {len(head)} bytes")
    magic, version, tensors, _ = GGUF_HEADER.unpack(head)
    if magic != b"GGUF" or version not in (2, 3) or tensors < 1:
        fail(f"path should name the model's GGUF file on disk (starting with b'GGUF', version 2 or 3, with "
             f"tensors), but {shown(str(path))} starts with {head[:8]!r}")


def peak_memory_mb():
    """This process's peak resident memory so far, in MB (Linux: VmHWM)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


# ---------------------------------------------------------------- heads: previous-token, induction

def repeated(tok, text=BOOK_SENTENCE):
    """(ids (2L+1,), L): the start token, then text's L tokens twice (the Book's experiment)."""
    ids = check_tok(tok).encode(check_text(text, "the text"))
    if len(ids) < 2:
        fail(f"the text should be at least two tokens long to be repeated, but {text!r} is {len(ids)}")
    return torch.tensor(tok.encode(START) + ids + ids), len(ids)


def all_weights(model, ids):
    """Attention weights of every layer and head from one pass: ids (T,) -> (layers, heads, T, T)."""
    record = trace(model, ids)
    return torch.stack([record[f"L{layer}.weights"] for layer in range(model.cfg.n_layers)])


def head_scores(model, ids, length):
    """(previous, induction), each (layers, heads): chapter 05's scores on ids = ``repeated(...)``."""
    w = all_weights(model, ids)
    return heads.previous_token_score(w), heads.induction_score(w, length)


@on_the_cpu
def best_heads(scores, k=1):
    """The k (layer, head) pairs of highest score, best first. scores: (layers, heads)."""
    numbers = torch.is_tensor(scores) and not scores.is_complex() and scores.dtype != torch.bool \
        or isinstance(scores, np.ndarray) and scores.dtype.kind in "fiu"
    if not numbers or scores.ndim != 2:
        fail(f"scores should be a (layers, heads) table of numbers, but got {type(scores).__name__}"
             + (f" of shape {tuple(scores.shape)}" if hasattr(scores, "shape") else f" {shown(scores)}"))
    scores = torch.as_tensor(computable(scores, "scores"))
    if scores.numel() == 0:   # before k, which the caller may never have given
        fail(f"scores should hold at least one head, but has shape {tuple(scores.shape)}")
    if bool(torch.isnan(scores).any()):   # -inf is a score: it keeps a head out of the top (chapter 11 uses it)
        fail(f"scores should hold no NaN (a NaN has no rank), but {int(torch.isnan(scores).sum())} are NaN")
    k = check_positive_int(k, "k")
    if k > scores.numel():
        fail(f"k should be at most the number of heads ({scores.numel()}), but got {count(k)}")
    order = torch.argsort(scores.flatten(), descending=True, stable=True)[:k]
    n_heads = scores.shape[1]
    return [(int(i) // n_heads, int(i) % n_heads) for i in order]


@on_the_cpu
def induction_view(model, tok, text=BOOK_SENTENCE):
    """Chapter 05's real-model view: the best previous-token head and the best induction head
    on text written twice. dict(pieces, length, previous, induction (scores, (layers, heads)),
    best_previous, best_induction ((layer, head)), their maps (T, T))."""
    check_pair(model, tok)
    ids, length = repeated(tok, text)
    w = all_weights(model, ids)
    previous, induction = heads.previous_token_score(w), heads.induction_score(w, length)
    bp, bi = best_heads(previous)[0], best_heads(induction)[0]
    return dict(pieces=tok.pieces(ids), length=length, previous=previous, induction=induction,
                best_previous=bp, best_induction=bi, previous_map=w[bp], induction_map=w[bi])


# ---------------------------------------------------------------- the logit lens

def logit_lens(model, ids, token_id):
    """What the read-out would say after each layer, at the last position (chapter 10's lens).

    The residual stream after embedding (layer -1) and after each block, put through the
    final RMSNorm and the tied unembedding. Returns dict(layers (list of ints, -1 first),
    p (probability of token_id), rank (0 = top), top (the top token id)), lists per layer.
    """
    ids = check_net(model).check_ids(ids)
    if ids.dim() != 1:
        fail(f"the logit lens reads one prompt, ids of shape (T,), but got a batch of shape {tuple(ids.shape)}")
    token_id = check_index(token_id, "token_id", model.cfg.vocab_size)
    names = ["h0"] + [f"L{layer}.h" for layer in range(model.cfg.n_layers)]
    got = capture(model, ids.view(1, -1), names, stop_after=names[-1])
    with torch.no_grad():                # the read-out of the last position only: (layers + 1, V)
        logits = model.unembed(torch.stack([got[name][0, -1] for name in names]))
    probs = torch.softmax(logits, dim=-1)
    rank = (logits > logits[:, token_id:token_id + 1]).sum(-1)
    return dict(layers=list(range(-1, model.cfg.n_layers)), p=probs[:, token_id].tolist(),
                rank=rank.tolist(), top=logits.argmax(-1).tolist())


def first_top_layer(lens):
    """The first layer after which the token is the top prediction and stays so, or None. lens: what
    ``logit_lens`` returns, its 'layers' whole numbers and its 'rank' whole numbers >= 0 (0 = top)."""
    if not (isinstance(lens, dict) and isinstance(lens.get("layers"), list) and isinstance(lens.get("rank"), list)
            and length(lens["layers"]) == length(lens["rank"])):   # (read by the built-ins: a subclass's may raise)
        fail(f"expected what logit_lens returns (a dict whose 'layers' and 'rank' are lists of one length), "
             f"but got {type(lens).__name__} {shown(lens)}")
    layers = [whole(layer, "each layer of the lens", "a whole number (-1: the embedding)")
              for layer in items_of(lens["layers"])]
    ranks = [check_positive_int(r, "each rank of the lens", minimum=0)   # True, NaN: refused
             for r in items_of(lens["rank"])]
    first = 1 + max((i for i, r in enumerate(ranks) if r != 0), default=-1)   # after the last layer it is not top
    return layers[first] if first < len(layers) else None


# ---------------------------------------------------------------- sampling, timing

@torch.no_grad()
def next_logits(model, tok, prompt):
    """The logits (V,) of the token after ``prompt``."""
    check_pair(model, tok)
    return model(torch.tensor(tok.encode(check_text(prompt))))[-1]


def top_tokens(tok, probs, k=5):
    """[(piece, probability)] of the k most probable tokens of probs (V,), one distribution (finite,
    none negative, summing to 1 within 1e-3: logits are refused, softmax them first)."""
    V = len(check_tok(tok).vocab)
    if not isinstance(probs, torch.Tensor) or probs.dim() != 1 or not probs.is_floating_point() or len(probs) != V:
        fail(f"probs should be one distribution over the tokenizer's {V:,} tokens, a float tensor ({V},), but got "
             f"{type(probs).__name__}"
             + (f" of shape {tuple(probs.shape)}" if isinstance(probs, torch.Tensor) else f" {shown(probs)}"))
    from ..sampling.compute import check_probs

    check_probs(probs)   # finite, none negative, summing to 1: logits (or NaN) are no probabilities
    k = check_positive_int(k, "k")
    if k > len(probs):
        fail(f"k should be at most the {len(probs):,} entries of probs, but got {count(k)}")
    p, i = torch.topk(probs, k)
    return [(tok.pieces([int(j)])[0], float(q)) for q, j in zip(p, i)]


def temperature_view(model, tok, prompt=FACT, temperatures=(0.5, 1.0, 2.0), k=5, logits=None):
    """Chapter 09's real-model view: {temperature: dict(top (k (piece, p)), entropy (nats),
    nucleus_90 (tokens in the top-p = 0.9 set))} for the next token after prompt.

    logits: None, or ``next_logits(model, tok, prompt)`` as the caller has them: checked against that
    one pass (a few hundred ms), so the view always stands for this model and this prompt."""
    from ..sampling import compute as sampling

    check_pair(model, tok)
    check_text(prompt)
    temperatures = check_temperatures(temperatures)
    check_k(model, k)
    if logits is not None and (not isinstance(logits, torch.Tensor) or logits.shape != (model.cfg.vocab_size,)
                               or not logits.is_floating_point()):
        fail(f"logits should be the next token's logits, a float tensor of shape ({model.cfg.vocab_size},), "
             f"but got {type(logits).__name__}"
             + (f" of shape {tuple(logits.shape)} and dtype {logits.dtype}" if isinstance(logits, torch.Tensor) else ""))
    own = next_logits(model, tok, prompt)
    if logits is not None:
        check_logits_of(logits, own, prompt)
    logits = own
    out = {}
    for t in temperatures:
        probs = sampling.with_temperature(logits, t)
        entropy = float(-(probs * torch.log(probs.clamp_min(1e-30))).sum())
        out[t] = dict(top=top_tokens(tok, probs, k), entropy=entropy,
                      nucleus_90=len(sampling.nucleus(probs, 0.9)))
    return out


LOGITS_TOLERANCE = 1e-3   # the largest |difference| from the prompt's own logits (float rounding of another batch)


def check_logits_of(logits, own, prompt):
    """Refuse, in one sentence, logits (V,) that are not ``own`` (V,), the model's logits after ``prompt``,
    within LOGITS_TOLERANCE (relative to the largest of them): another prompt's, another model's, NaN."""
    gap = float((logits.detach().double() - own.double()).abs().max())
    if not gap <= LOGITS_TOLERANCE * max(1.0, float(own.abs().max())):
        fail(f"logits should be next_logits(model, tok, prompt) for the prompt {shown(prompt)}, but they "
             + (f"differ from them by up to {gap:.3g} (another prompt's or model's?)" if math.isfinite(gap)
                else "hold NaN or infinite values"))


MAX_ROWS = 64   # the most rows (temperatures, seeds) a real-model view draws side by side
MAX_NEW = 1_000   # the most new tokens one call decodes (time is bounded before the first pass)


def check_temperatures(temperatures):
    """A list or tuple of 1 to MAX_ROWS temperatures, each a finite number > 0."""
    if not isinstance(temperatures, (list, tuple)) or not 1 <= length(temperatures) <= MAX_ROWS:
        fail(f"temperatures should be a list of 1 to {MAX_ROWS} numbers (e.g. (0.5, 1.0)), but got {shown(temperatures)}")
    seen, temperatures = set(), items_of(temperatures)   # (read by the built-ins: a subclass's __len__ may raise)
    for t in temperatures:
        value = check_number(t, "each temperature", low=0, low_open=True)
        if value in seen:   # a dict by temperature holds one row for both
            fail(f"temperatures should be different numbers, but {shown(t)} comes twice in {shown(temperatures)}")
        seen.add(value)
    return temperatures


def check_new_tokens(model, ids, n_new, name="n_new", last_fed=False):
    """How many tokens to add after ids (T,): at least 1, and the positions the passes see within
    ``sampling.window`` (the course's 1,024, not SmolLM2's n_max): the prompt and the new tokens, the
    last one drawn left out unless ``last_fed`` (a loop that feeds it too). Refused before any pass,
    as ``sampling.check_length`` does."""
    from ..sampling.compute import window

    n_new = check_positive_int(n_new, name)
    if n_new > MAX_NEW:
        fail(f"{name} should be at most {MAX_NEW:,} (each new token is one pass of the real model), but got {count(n_new)}")
    room, need = window(model), len(ids) + n_new - (0 if last_fed else 1)
    if need > room:
        fail(f"expected a prompt and {name} that fit in the model's {room:,} tokens, but the prompt has "
             f"{len(ids):,} and {name}={count(n_new)} would need {need:,}")
    return n_new


def _ms(seconds):
    return 1000 * seconds


@torch.no_grad()
def continuations(model, ids, n_new, seeds, temperature=0.8, top_p=0.9):
    """Several continuations of one prompt ids (T,), all drawn at once: one batched pass per new
    token, through one KV cache. The row of seed s draws what ``sampling.generate(model, ids, n_new,
    temperature, top_p=top_p, seed=s)`` draws (the same distribution, a torch.Generator seeded once
    for that row); a seed of None is greedy. A cached step reads every weight once whatever the
    batch, so n rows cost about as much as one. Returns [(T + n_new,) ids], one per seed. The passes are
    counted first and refused above about a minute (``check_real_passes``)."""
    from ..sampling import compute as sampling

    ids = check_net(model).check_ids(ids)
    if ids.dim() != 1 or isinstance(seeds, (list, tuple)) and not length(seeds):
        fail(f"expected one prompt (T,) and at least one seed, but got shape {tuple(ids.shape)} and seeds {shown(seeds)}")
    if not isinstance(seeds, (list, tuple)) or length(seeds) > MAX_ROWS:
        fail(f"seeds should be a list of 1 to {MAX_ROWS} seeds, one per continuation, but got {shown(seeds)}")
    seeds = items_of(seeds)   # (read by the built-ins: a subclass's __len__ or __iter__ may lie or raise)
    n_new = check_new_tokens(model, ids, n_new)
    sampling.check_sampling(temperature, top_p=top_p, vocab_size=model.cfg.vocab_size)
    T, rows = len(ids), len(seeds)   # the prompt's pass, then n_new - 1 steps of one token a row (at most T + n_new seen)
    check_real_passes(model, [(1, rows, T, 0), (n_new - 1, rows, 1, T + n_new)], "continuations",
                      "ask for fewer new tokens or seeds, or give a shorter prompt")
    draws = [None if s is None else torch.Generator().manual_seed(check_seed(s)) for s in seeds]
    cache, out = KVCache(model.cfg.n_layers), ids.repeat(len(seeds), 1)
    fed = out
    for _ in range(n_new):
        logits = model(fed, cache=cache)[:, -1].float()                   # (rows, V)
        fed = torch.stack([row.argmax().reshape(1) if g is None else
                           torch.multinomial(sampling.next_distribution(row, temperature, top_p=top_p), 1, generator=g)
                           for row, g in zip(logits, draws)])             # (rows, 1)
        out = torch.cat([out, fed], 1)
    return list(out)


def check_real_work(model, runs, what, advice):
    """Refuse up front a timing of the real model whose work would pass chapter 09's MAX_TIMED_WORK:
    ``runs`` lists (times, n_new, n_seen), as ``sampling.check_timed_work`` counts them, each pass with
    REAL_PASS_WORK for reading the weights."""
    from ..sampling.compute import check_timed_work

    check_timed_work(model, runs, what, advice, pass_work=REAL_PASS_WORK, fixed="for reading the real model's weights")


@torch.no_grad()
def kv_timing(model, prompt_ids, new_tokens=4, repeats=1, warm_up=True):
    """Milliseconds per token: prefill (the prompt in one pass) against decoding with the
    cache (one new token at a time) and without it (the whole sequence again for each token).

    Greedy tokens; wall-clock medians of ``repeats`` runs (each time its own median), after a
    warm-up (the prompt in one pass and one cached step; warm_up=False leaves it out, for a model
    that has run before in this process). The runs without the cache start from
    the first new token the prefill chose, so the prompt is not run again only to choose it; their
    first pass predicts that token too, and must agree. Timings vary with the machine and its
    load. Returns dict(prefill, decode_cached, decode_uncached) in ms per token, and the generated ids.
    The work is counted first and refused above about a minute (``check_real_work``); the chapter's
    call (a prompt of 32 tokens, 2 new tokens, 1 repeat) needs about a third of it.
    """
    ids = check_net(model).check_ids(prompt_ids)
    if ids.dim() != 1:
        fail(f"kv_timing times one prompt, ids of shape (T,), but got a batch of shape {tuple(ids.shape)}")
    new_tokens = check_new_tokens(model, ids, new_tokens, "new_tokens", last_fed=True)   # (its cached loop feeds the last)
    repeats, warm_up = check_positive_int(repeats, "repeats"), check_switch(warm_up, "warm_up")
    if repeats > 100:
        fail(f"repeats should be at most 100 (each repeat runs the whole timing again), but got {count(repeats)}")
    T, n = len(ids), new_tokens   # the warm-up, the cached runs (prefill, n steps), the uncached (n passes, at most T + n)
    check_real_work(model, [(int(warm_up), T, 0), (int(warm_up), 1, T), (repeats, T, 0), (repeats * n, 1, T + n),
                            (repeats * n, T + n, 0)], "kv_timing", "ask for fewer new_tokens or repeats, or a shorter prompt")

    def cached(n):
        """(prefill seconds, seconds for n decoding steps, the ids), with the KV cache."""
        cache = KVCache(model.cfg.n_layers)
        start = time.perf_counter()
        logits = model(ids, cache=cache)
        prefill, out, start = time.perf_counter() - start, ids, time.perf_counter()
        for _ in range(n):
            nxt = logits[-1].argmax().reshape(1)
            out = torch.cat([out, nxt])
            logits = model(nxt, cache=cache)
        return prefill, time.perf_counter() - start, out

    def uncached(first):
        """(seconds for new_tokens decoding steps, the ids), rerunning the whole sequence each step."""
        out, start = torch.cat([ids, first]), time.perf_counter()
        for step in range(new_tokens):
            logits = model(out)
            if step == 0 and logits[len(ids) - 1].argmax() != first[0]:
                fail("the pass without the cache and the prefill chose different first tokens; "
                     "one of the two paths is broken")
            if step < new_tokens - 1:
                out = torch.cat([out, logits[-1].argmax().reshape(1)])
        return time.perf_counter() - start, out

    if warm_up:
        cached(1)
    with_cache = [cached(new_tokens) for _ in range(repeats)]
    first = with_cache[0][2][len(ids):len(ids) + 1]
    without = [uncached(first) for _ in range(repeats)]
    if any(not torch.equal(r[-1], with_cache[0][2]) for r in with_cache + without):
        fail("the cached and uncached loops chose different tokens; the KV cache is broken")
    median = lambda times: sorted(times)[repeats // 2]
    return dict(prefill=_ms(median([r[0] for r in with_cache])) / len(ids),
                decode_cached=_ms(median([r[1] for r in with_cache])) / new_tokens,
                decode_uncached=_ms(median([r[0] for r in without])) / new_tokens, ids=with_cache[0][2])


MAX_REPEATS = 100   # the most timed passes of forward_seconds (the chapter times 3)


@torch.no_grad()
def forward_seconds(model, T=32, repeats=3, seed=0):
    """Median wall-clock seconds of one forward pass over T random tokens (after a warm-up);
    repeats: 1 .. MAX_REPEATS passes timed. The work is counted first and refused above about a
    minute (``check_real_work``: a pass of 1,024 tokens is more than that on its own)."""
    check_net(model)
    T, repeats, seed = check_positive_int(T, "T"), check_positive_int(repeats, "repeats"), check_seed(seed)
    most = min(model.cfg.n_max, MAX_TOKENS)   # the model's window, and the course's limit on one pass
    if T > most:   # (before any tensor of T ids is made)
        fail(f"T should be at most {most:,} tokens (the most one pass of this model takes), but got {count(T)}")
    if repeats > MAX_REPEATS:
        fail(f"repeats should be at most {MAX_REPEATS} (this course's limit), but got {count(repeats)}")
    g = torch.Generator().manual_seed(seed)
    check_real_work(model, [(repeats + 1, T, 0)], "forward_seconds", "ask for fewer repeats or a smaller T")
    ids = torch.randint(0, model.cfg.vocab_size, (T,), generator=g)
    model(ids)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model(ids)
        times.append(time.perf_counter() - start)
    return sorted(times)[repeats // 2]


# ---------------------------------------------------------------- views for chapters 06-08, 10

ROTARY_BYTES_PER_CELL = 32   # rotary_view's scores (n, n) in float64 and the diagonals' work: 4 such tables


def rotary_view(model, tok, text=BOOK_SENTENCE, layer=0, head=0, query=-1, key=0, n=16):
    """Chapter 06's real-model view: one real query and key of a head, placed at every pair of
    positions 0..n-1 and rotated there with the model's own base.

    Returns dict(scores (n, n): S[t, s], which depends only on t - s; spread (the largest
    difference between two entries of one diagonal), base). The model keeps Hugging Face's Llama
    column order (pair i = columns i, i + d_k/2); here they are reordered to adjacent pairs for
    chapter 06's ``reference.rotate_pairs``, which is the same rotation. Scores are divided by
    sqrt(d_k), as the model does.
    """
    from ..positions import compute as positions

    check_pair(model, tok)
    ids = torch.tensor(tok.encode(check_text(text, "the text")))
    cfg, d_k = model.cfg, model.cfg.d_k
    layer, head = check_layer(model, layer), check_index(head, "head", cfg.n_heads)
    query, key = check_index(query, "query", len(ids), negative=True), check_index(key, "key", len(ids), negative=True)
    n = check_positive_int(n, "n")
    check_bytes(ROTARY_BYTES_PER_CELL * n * n, f"a rotary view of n={count(n)} positions",   # the model is loaded:
                f"take n at most {int((MAX_TRACE_BYTES / ROTARY_BYTES_PER_CELL) ** 0.5):,}",   # its trace's limit
                limit=MAX_TRACE_BYTES)
    record = trace(model, ids)
    group = cfg.n_heads // cfg.kv_heads
    q = record[f"L{layer}.q"][query, head * d_k:(head + 1) * d_k]
    kv = head // group
    k = record[f"L{layer}.k"][key, kv * d_k:(kv + 1) * d_k]
    order = torch.stack([torch.arange(d_k // 2), torch.arange(d_k // 2) + d_k // 2], 1).flatten()
    where = np.arange(n)
    Q = ref.rotate_pairs(np.tile(q[order].numpy(), (n, 1)), where, base=cfg.rotary_base)
    K = ref.rotate_pairs(np.tile(k[order].numpy(), (n, 1)), where, base=cfg.rotary_base)
    scores = Q @ K.T / math.sqrt(d_k)
    spread = positions.diagonal_spread(scores)
    return dict(scores=scores, spread=spread, base=cfg.rotary_base)


def swiglu_view(model, tok, text=BOOK_SENTENCE, layer=0):
    """Chapter 07's real-model view: SwiGLU against GELU.

    dict(x, silu, gelu: the two curves on [-4, 4]; gate: the real gate values x @ W_G of layer
    ``layer`` (T * d_ff,); negative_share: the share of them below zero, where silu lets little
    through; params_swiglu, params_gelu: one MLP's parameters, 3 d d_ff against a GELU MLP's
    2 d (4 d)).
    """
    check_pair(model, tok)
    ids = torch.tensor(tok.encode(check_text(text, "the text")))
    layer = check_layer(model, layer)
    gate = trace(model, ids)[f"L{layer}.gate"].flatten()
    x = torch.linspace(-4, 4, 161)
    d, d_ff = model.cfg.d_model, model.cfg.d_ff
    return dict(x=x, silu=F.silu(x), gelu=F.gelu(x), gate=gate,
                negative_share=float((gate < 0).float().mean()),
                params_swiglu=3 * d * d_ff, params_gelu=2 * d * 4 * d)


def norm_view(model, tok, text=BOOK_SENTENCE):
    """Chapter 08's real-model view: RMSNorm against LayerNorm, and the residual stream's growth.

    Per layer (h0 then each block's h): rms (the root mean square of h, averaged over tokens),
    mean_over_rms (|mean of h's d numbers| / rms, averaged: how much LayerNorm's centring would
    change), gap (the largest difference between RMSNorm and LayerNorm of h, both without their
    learned scales). Lists of floats, one per stream.
    """
    check_pair(model, tok)
    ids = torch.tensor(tok.encode(check_text(text, "the text")))
    record = trace(model, ids)
    streams = [record["h0"]] + [record[f"L{layer}.h"] for layer in range(model.cfg.n_layers)]
    out = dict(rms=[], mean_over_rms=[], gap=[])
    for h in streams:
        rms = h.pow(2).mean(-1, keepdim=True).sqrt()
        out["rms"].append(float(rms.mean()))
        out["mean_over_rms"].append(float((h.mean(-1, keepdim=True).abs() / rms).mean()))
        gap = F.rms_norm(h, (h.shape[-1],)) - F.layer_norm(h, (h.shape[-1],))
        out["gap"].append(float(gap.abs().max()))
    return out


def stream_sizes(model, tok, text=BOOK_SENTENCE):
    """Chapter 08's real-model view, per token: the residual stream's size at every point.

    dict(pieces (T,), rms (n_layers + 1, T): each row's root mean square, h0 first, then each
    block's h; peak, peak_dim (n_layers + 1, T): each row's largest |entry| and its coordinate).
    """
    check_pair(model, tok)
    ids = torch.tensor(tok.encode(check_text(text, "the text")))
    record = trace(model, ids)
    h = torch.stack([record["h0"]] + [record[f"L{layer}.h"] for layer in range(model.cfg.n_layers)])
    peak = h.abs().max(-1)
    return dict(pieces=tok.pieces(ids), rms=h.pow(2).mean(-1).sqrt(), peak=peak.values, peak_dim=peak.indices)


@torch.no_grad()
def patched_logits(model, clean_ids, corrupt_ids, layer, position):
    """Run corrupt_ids, but after block ``layer`` put the clean run's residual stream at
    ``position`` in place of the corrupt one (the ``replace`` switch on ``L{layer}.h``).
    Both (T,) of one length. Returns logits (T, V)."""
    clean_ids, corrupt_ids = check_net(model).check_ids(clean_ids), model.check_ids(corrupt_ids)
    if clean_ids.shape != corrupt_ids.shape or clean_ids.dim() != 1:
        fail(f"the clean and corrupted prompts should be one sequence (T,) each, of as many tokens, but have shapes "
             f"{tuple(clean_ids.shape)} and {tuple(corrupt_ids.shape)}")
    layer = check_index(layer, "layer", model.cfg.n_layers)
    position = check_index(position, "position", len(clean_ids), negative=True)
    return patched_run(model, trace(model, clean_ids)[f"L{layer}.h"], corrupt_ids, layer, position)


@torch.no_grad()
def patched_run(model, clean, corrupt_ids, layer, position):
    """``patched_logits``' second pass, its arguments checked: the corrupted run corrupt_ids (T,) with
    the clean run's residual stream clean (T, d_model), after block ``layer``, put in at ``position``.
    Returns logits (T, V)."""
    def patch(h):                                    # (B, T, d_model)
        h = h.clone()
        h[:, position] = clean[position]
        return h

    return model(corrupt_ids, replace={f"L{layer}.h": patch})


def check_layers(model, layers):
    """A non-empty list, tuple or range of different layers of the model (each patched once); return
    them as a list of ints. A repeat is refused as soon as it comes (a long list is not read to its end)."""
    if not isinstance(layers, (list, tuple, range)) or not length(layers):
        fail(f"layers should be a non-empty list of layers, but got {shown(layers)}")
    seen = []
    for layer in (layers if isinstance(layers, range) else items_of(layers)):   # (a subclass's __len__ may raise)
        value = check_layer(model, layer)
        if value in seen:
            fail(f"layers should be different layers (each is patched once), but {shown(layer)} comes twice in "
                 f"{shown(layers)}")
        seen.append(value)
    return seen


def patching_view(model, tok, clean=FACT, corrupt="The capital of Italy is", answers=(" Paris", " Rome"),
                  layers=None):
    """Chapter 10's real-model view: activation patching on the real model.

    The logit difference answers[0] - answers[1] at the last position: clean, corrupted, and
    with the clean residual stream patched in after each of ``layers`` (default: all) at the
    position where the two prompts differ. dict(clean, corrupt, layers, patched (one per layer),
    position, restored (per layer: (patched - corrupt) / (clean - corrupt))). The clean prompt is traced
    once; a pass for the corrupted one and one per patched layer follow, counted first and refused above
    about a minute (``check_real_passes``).
    """
    check_pair(model, tok)
    a, b = tok.encode(check_text(clean)), tok.encode(check_text(corrupt))
    if not isinstance(answers, (list, tuple)) or length(answers) != 2:
        fail(f"answers should be two texts, the clean and the corrupted answer (e.g. (' Paris', ' Rome')), "
             f"but got {shown(answers)}")
    targets = [tok.encode(check_text(t, "each answer")) for t in items_of(answers)]   # (read by the built-ins)
    layers = list(range(model.cfg.n_layers)) if layers is None else check_layers(model, layers)
    if len(a) != len(b) or any(len(t) != 1 for t in targets):
        fail(f"patching needs two prompts of one length and one-token answers, but got {len(a)} and "
             f"{len(b)} tokens and answers of {[len(t) for t in targets]} tokens")
    differ = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(differ) != 1:
        fail(f"the two prompts should differ in exactly one token, but differ in {len(differ)}")
    (p_id,), (q_id,) = targets
    if p_id == q_id:   # the logit difference of a token with itself is 0 in every run: nothing to restore
        fail(f"answers should be two different tokens, the clean and the corrupted answer, but both are "
             f"{shown(tok.decode([p_id]))}")
    check_real_passes(model, [(2 + len(layers), 1, len(a), 0)], "patching_view",
                      "patch fewer layers or give shorter prompts")
    diff = lambda logits: float(logits[-1, p_id] - logits[-1, q_id])
    record = trace(model, torch.tensor(a))                    # the clean run, once: its logits and every stream
    with torch.no_grad():
        clean_d, corrupt_d = diff(record["logits"]), diff(model(torch.tensor(b)))
    patched = [diff(patched_run(model, record[f"L{layer}.h"], torch.tensor(b), layer, differ[0]))
               for layer in layers]
    restored = [(p - corrupt_d) / (clean_d - corrupt_d) for p in patched]
    return dict(clean=clean_d, corrupt=corrupt_d, layers=layers, patched=patched, position=differ[0],
                restored=restored)


# ---------------------------------------------------------------- the explorer's compute

MAX_PROMPT_TOKENS = 40   # the explorer's heatmap stays readable up to here


@torch.no_grad()
def prompt_view(model, tok, prompt, k=8):
    """What the explorer draws for one prompt: dict(pieces (T,), weights (layers, heads, T, T),
    top (k (piece, probability)) for the next token)."""
    check_pair(model, tok)
    ids = tok.encode(check_text(prompt))
    k = check_k(model, k)
    if len(ids) > MAX_PROMPT_TOKENS:
        fail(f"the prompt should have at most {MAX_PROMPT_TOKENS} tokens (the explorer's limit), "
             f"but this one has {len(ids)}")
    record = trace(model, ids)
    weights = torch.stack([record[f"L{layer}.weights"] for layer in range(model.cfg.n_layers)])
    return dict(pieces=tok.pieces(ids), weights=weights, top=top_tokens(tok, record["probs"][-1], k))


# ---------------------------------------------------------------- the file's row order

def file_order(W, n_heads):
    """W (d_in, n_heads * d_k) with each head's columns in llama.cpp's order, (0, d_k/2, 1,
    d_k/2 + 1, ...): the inverse of ``smollm2.unpermute``, on columns."""
    n_heads = check_positive_int(n_heads, "n_heads")
    if not isinstance(W, torch.Tensor) or W.dim() != 2 or W.shape[1] % (2 * n_heads):
        fail(f"W should be a matrix (d_in, n_heads * d_k) with an even d_k, whose columns split into {count(n_heads)} heads, "
             f"but got {'shape ' + str(tuple(W.shape)) if isinstance(W, torch.Tensor) else shown(W)}")
    d_in, width = W.shape
    d_k = width // n_heads
    return W.T.reshape(n_heads, 2, d_k // 2, d_in).transpose(1, 2).reshape(width, d_in).T


@torch.no_grad()
def rotary_orders(model, ids, layer=0):
    """Layer ``layer``'s attention weights two more ways, against the model's own (the published
    Hugging Face order, pairs (i, i + d_k/2)): dict(file_adjacent: max |difference| with the
    file's column order (Meta's original Llama order) turned in adjacent pairs (2i, 2i+1), as
    llama.cpp does; file_halves: the file's order turned in pairs (i, i + d_k/2), the wrong mix)."""
    from ..model import Attention

    cfg, layer = check_net(model).cfg, check_layer(model, layer)
    names = [f"L{layer}.ln1", f"L{layer}.weights"]             # the pass stops once layer's weights are made
    record = {name: t[0] for name, t in capture(model, model.check_ids(ids).view(1, -1), names, stop_after=names[-1]).items()}
    own = model.blocks[layer].attn
    out = {}
    for name, pairs in (("file_adjacent", "adjacent"), ("file_halves", "halves")):
        attn = Attention(cfg.d_model, cfg.n_heads, bias=False, n_kv_heads=cfg.n_kv_heads,
                         rotary=dict(base=cfg.rotary_base, pairs=pairs))
        attn.W_Q = torch.nn.Parameter(file_order(own.W_Q, cfg.n_heads))
        attn.W_K = torch.nn.Parameter(file_order(own.W_K, cfg.kv_heads))
        attn.W_V, attn.W_O = own.W_V, own.W_O
        kept = {}
        attn(record[f"L{layer}.ln1"][None], keep=lambda n, x: kept.__setitem__(n, x[0]))
        out[name] = float((kept["weights"] - record[f"L{layer}.weights"]).abs().max())
    return out
