"""The course's one Transformer, configured (never subclassed) into every model.

Notation follows the source texts: a row vector times a matrix, ``x @ W_Q + b_Q``,
with W_Q of shape (d_model, h * d_k) and W_O of shape (h * d_v, d_model), so
head i owns the rows ``W_O[i*d_k:(i+1)*d_k]``.

``model(ids, trace=True)`` returns every named intermediate of the forward pass
in the order of the Primer's shape table::

    h0, L0.ln1, L0.q, L0.k, L0.v, L0.scores, L0.weights, L0.head_out, L0.concat,
    L0.attn, L0.h_mid, L0.ln2, L0.pre, L0.act, L0.mlp, L0.h, L1.ln1, ...,
    final_ln, logits, probs

Layers and heads are counted from 0 (the Primer's "layer 1, head 1" is L0H0).
Switches (``causal``, ``attention``, ``ablate_heads``, ``positions``, ``scaled``) change one
forward pass only; the stored weights are never modified. ``replace={"L1.head_out": fn}``
swaps any named intermediate x for fn(x) (batched: head_out is (B, H, T, d_k), per head
before W_O) and runs on from it: the tool of ablation and activation patching.

The same class runs the real pretrained model of chapter 11 (SmolLM2-135M, a Llama), set up
by its Config alone: ``n_kv_heads`` (grouped-query attention: fewer key/value heads than
query heads), ``norm_kind="rmsnorm"``, ``activation="swiglu"`` (a gated MLP with a third
matrix W_G, traced as ``gate``), ``rotary_pairs="halves"`` and ``rotary_base`` (Llama's
rotary convention), ``bias=False``. The defaults are the tiny models' choices.
"""
import functools
import inspect
import math
import threading
from collections import abc
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, fields

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as torch_module

from .errors import MAX_BYTES, CourseInputError, about_gib, check_bytes, check_choice, check_ids_given, check_index, \
    check_finite, check_number, check_positive_int, check_seed, check_switch, check_tensor, count, described, fail, gib, \
    items_of, length, message_of, next_seed, real_number, shown, tensor_refusal, type_name, unreadable, whole
from .reference import BASE_RANGE
from .states import course_modes, digest, on_the_cpu

POSITIONS = ("sinusoidal", "learned", "rotary", "none")
MAX_TOKENS = 1024   # the longest sequence a model runs at once: its attention weights must fit Binder's 2 GB
NORMS = ("pre", "post", "none")
NORM_KINDS = ("layernorm", "rmsnorm")
ACTIVATIONS = ("gelu", "relu", "swiglu")
INITS = ("small", "unit")   # the first weights: embeddings N(0, 0.02²) (GPT-2's) or N(0, 1) (the shipped models')
EMBEDDING_STD = {"small": 0.02, "unit": 1.0}
LAYER_NAMES = ("ln1", "q", "k", "v", "scores", "weights", "head_out", "concat", "attn", "h_mid",
               "ln2", "pre", "gate", "act", "mlp", "h")   # what each layer's pass may name (gate: SwiGLU)
ROTARY_PAIRS = ("adjacent", "halves")   # columns (2i, 2i+1), as chapter 06; or (i, i + d_k/2), as Llama
MAX_FLOATS = 400_000_000   # the most float32 numbers a model may hold (1.5 GiB): Binder gives 2 GB in all
# the most a trace (every intermediate of one pass) may keep: 0.5 GiB. A kernel that has loaded the
# real model holds about 0.9 GB already, so a trace within this keeps it under 1.5 GiB (Binder: 2 GB)
MAX_TRACE_BYTES = 2**29
SWITCHES = ("trace", "causal", "attention", "ablate_heads", "positions", "cache", "replace", "scaled")   # forward's
ATTENTION_SWITCHES = ("causal", "positions", "ablate", "cache", "layer", "start", "keep", "scaled")   # Attention's
MAX_LAYERS = 1_000   # the most layers a model may have: 1,000 of the smallest take about 1.5 s to build
RANGES = {"norm_eps": (1e-12, 1.0),        # below, float32 adds nothing to a variance; above, it swamps it
          "rotary_base": BASE_RANGE}       # > 1 and at most 1e12: reference.py says why (one rule for both)


@dataclass(frozen=True)
class Config:
    """Every size and choice of a model. d_ff=0 means no MLP (attention-only)."""

    vocab_size: int = None   # (None: not given, refused with the others missing in one sentence)
    d_model: int = None
    n_heads: int = None
    n_layers: int = None
    d_ff: int = None
    n_max: int = 64
    positions: str = "sinusoidal"
    norm: str = "pre"
    final_norm: bool = True
    bias: bool = True
    activation: str = "gelu"
    # the real model's choices (chapter 11); the defaults are the course's tiny models
    n_kv_heads: int = 0          # key/value heads shared by the query heads; 0 means n_heads (no sharing)
    norm_kind: str = "layernorm"
    norm_eps: float = 1e-5
    rotary_pairs: str = "adjacent"
    rotary_base: float = 10000.0
    dropout: float = 0.0         # the share of the residual writes' entries zeroed while training (model.train())

    def __new__(cls, *args, **kwargs):
        """Refuse, with a sentence, a setting Config does not have (a misspelt ``n_head``) or too
        many values given in order: Python's own error would come from the generated __init__."""
        names = [field.name for field in fields(cls)]
        unknown = [key for key in kwargs if key not in names]
        if unknown:
            fail(f"Config's settings should be among {', '.join(names)}, but got {shown(', '.join(unknown))}")
        if len(args) > len(names):
            fail(f"Config should get at most {len(names)} values in order ({', '.join(names)}), but got {len(args)}")
        return super().__new__(cls)

    def __post_init__(self):
        missing = [field.name for field in fields(self)[:5] if getattr(self, field.name) is None]
        if missing:
            fail(f"Config should get vocab_size, d_model, n_heads, n_layers and d_ff, but {', '.join(missing)} "
                 f"{'is' if len(missing) == 1 else 'are'} missing")
        # every field checked before anything is computed from it; NumPy numbers and bools (and subclasses of
        # the built-ins) are stored as Python ones (the config is saved as JSON)
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "n_max", "d_ff", "n_kv_heads"):
            object.__setattr__(self, name, check_positive_int(
                getattr(self, name), f"Config.{name}", minimum=0 if name in ("d_ff", "n_kv_heads") else 1))
        for name in ("bias", "final_norm"):
            object.__setattr__(self, name, check_switch(getattr(self, name), f"Config.{name}"))
        for name, allowed in (("positions", POSITIONS), ("norm", NORMS), ("activation", ACTIVATIONS),
                              ("norm_kind", NORM_KINDS), ("rotary_pairs", ROTARY_PAIRS)):
            check_choice(getattr(self, name), f"Config.{name}", allowed)
        for name in ("norm_eps", "rotary_base"):
            value = getattr(self, name)
            number = check_number(value, f"Config.{name}", *RANGES[name])
            object.__setattr__(self, name, value if type(value) in (int, float) else number)
        object.__setattr__(self, "dropout", check_dropout(self.dropout, "Config.dropout"))
        check_depth(self.n_layers, "Config.n_layers")
        check_heads_split(self.d_model, self.n_heads, self.n_kv_heads)
        if self.positions == "sinusoidal" and self.d_model % 2:
            fail(f"sinusoidal positions pair the columns as (sin, cos), so d_model should be even, "
                 f"but got d_model={self.d_model}")
        if self.positions == "rotary":
            check_rotary_width(self.d_k)
        check_floats(self.floats(), "a course model", "this Config")

    def floats(self):
        """How many float32 numbers a model of this Config holds: its parameters and its
        sinusoidal position table (what building it allocates)."""
        d = self.d_model
        attention = attention_floats(d, self.kv_heads * self.d_k, self.bias)
        mlp = mlp_floats(d, self.d_ff, self.bias, self.activation)
        norms = 4 * d
        positions = self.n_max * d if self.positions in ("learned", "sinusoidal") else 0
        return self.vocab_size * d + positions + self.n_layers * (attention + mlp + norms) + 2 * d

    def trace_bytes(self, T, T_k=None):
        """The bytes a ``trace=True`` pass on T new tokens keeps (T_k keys in all: T plus a cache's
        tokens), counted name by name in float32: per layer ln1, q, k, v, scores and weights
        (heads x T x T_k each), head_out, concat, attn, h_mid, and with an MLP ln2, pre, (gate,)
        act, mlp; h in every layer; h0, final_ln, logits and probs (T x vocab_size each)."""
        T_k = T if T_k is None else T_k
        d, d_kv, f = self.d_model, self.kv_heads * self.d_k, self.d_ff
        per_layer = T * (7 * d + 2 * d_kv) + 2 * self.n_heads * T * T_k
        if f:
            per_layer += T * (2 * d + (3 if self.activation == "swiglu" else 2) * f)
        return 4 * (self.n_layers * per_layer + 2 * T * d + 2 * T * self.vocab_size)

    def pass_bytes(self, B, T, T_k=None, grad=False):
        """About the most bytes one pass on a batch (B, T) holds at once, in float32: the
        logits (B x T x vocab_size), one layer's scores, masked scores and weights (B x heads x T x T_k,
        T_k keys in all: T plus a cache's tokens) and its activations (B x T x (8 d_model + 3 d_ff)).
        With ``grad`` (torch records the pass for a backward), every layer's activations are kept
        too: about a trace's bytes per sequence (``trace_bytes``) on top. An estimate for refusing a
        batch up front."""
        T_k = T if T_k is None else T_k
        kept = B * self.trace_bytes(T, T_k) if grad else 0
        return 4 * B * T * (self.vocab_size + 3 * self.n_heads * T_k + 8 * self.d_model + 3 * self.d_ff) + kept

    def check_pass(self, B, T, T_k=None, grad=False):
        """Refuse, before any work, a pass on a batch (B, T) whose ``pass_bytes`` exceed MAX_BYTES
        (1.5 GiB); the sentence names the largest batch of sequences this long that fits."""
        need = self.pass_bytes(B, T, T_k, grad)
        if need > MAX_BYTES:
            most = MAX_BYTES // self.pass_bytes(1, T, T_k, grad)
            check_bytes(need, f"a pass on a batch of {count(B)} sequences of {count(T)} tokens",
                        f"give at most {count(most)} sequences of this length at once" if most else
                        "give shorter sequences")

    def longest_trace(self, start=0):
        """The most new tokens a trace may take after ``start`` cached ones within MAX_TRACE_BYTES (0: none)."""
        low, high = 0, MAX_TOKENS - start
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if self.trace_bytes(mid, start + mid) <= MAX_TRACE_BYTES else (low, mid - 1)
        return low

    @property
    def d_k(self):
        return self.d_model // self.n_heads

    @property
    def kv_heads(self):
        """How many key/value heads there are (n_heads unless they are shared)."""
        return self.n_kv_heads or self.n_heads

    def to_dict(self):
        return asdict(self)


def check_depth(n_layers, name="n_layers"):
    """A number of layers: a whole number from 1 to MAX_LAYERS; return it as int."""
    n_layers = check_positive_int(n_layers, name)
    if n_layers > MAX_LAYERS:
        fail(f"{name} should be at most {MAX_LAYERS:,} (this course's limit: a deeper model takes minutes "
             f"to build), but got {count(n_layers)}")
    return n_layers


def attention_floats(d, d_kv, bias):
    """How many float32 numbers an Attention holds: W_Q and W_O (d x d), W_K and W_V (d x d_kv), biases."""
    return 2 * d * d + 2 * d * d_kv + (2 * d + 2 * d_kv) * bias


def mlp_floats(d, d_ff, bias, activation):
    """How many float32 numbers an MLP holds: W_1, W_2 (and SwiGLU's W_G), d x d_ff each, and their
    biases (b_1 and SwiGLU's b_G d_ff each, b_2 d)."""
    gated = activation == "swiglu"
    return (3 if gated else 2) * d * d_ff + ((2 if gated else 1) * d_ff + d) * bias


def check_floats(floats, what, whose):
    """Refuse, before allocating, a model or part holding more than MAX_FLOATS float32 numbers."""
    if floats > MAX_FLOATS:
        fail(f"{what} should fit in {gib(MAX_FLOATS * 4)} (at most {MAX_FLOATS:,} "
             f"float32 numbers), but {whose} needs {shown(floats)} of them")


def check_dropout(value, name):
    """A dropout share: a number with 0 <= p < 1, read by ``real_number`` (a NumPy number, whose JSON
    cannot be written, or a subclass, whose comparisons may lie: the plain float is compared); return it as float."""
    expected = "a number with 0 <= dropout < 1"
    p = real_number(value, name, expected)
    if not 0 <= p < 1:   # (NaN too)
        fail(f"{name} should be {expected}, but got {shown(value)}")
    return p


def check_heads_split(d_model, n_heads, n_kv_heads):
    """d_model splits into n_heads equal heads, which share the n_kv_heads (0: n_heads) equally."""
    if d_model % n_heads:
        fail(f"d_model should split into n_heads equal heads, but d_model={shown(d_model)} "
             f"does not split into n_heads={shown(n_heads)}")
    if n_kv_heads > n_heads or n_heads % (n_kv_heads or n_heads):
        fail(f"the n_heads={shown(n_heads)} query heads should share the n_kv_heads={shown(n_kv_heads)} "
             "key/value heads equally, but they do not")


def check_rotary_width(d_k):
    if d_k % 2:
        fail(f"rotary positions turn pairs of columns, so d_k = d_model / n_heads should be even, "
             f"but got d_k={d_k}")


def check_rotary(rotary, d_k):
    """Attention's rotary: False, True (base 10000, adjacent pairs) or dict(base=..., pairs=...)."""
    if rotary is False:
        return False
    rotary = dict(base=10000.0, pairs="adjacent") if rotary is True else rotary
    if not isinstance(rotary, dict) or set(rotary) != {"base", "pairs"}:
        fail(f"rotary should be False, True or a dict(base=..., pairs=...), but got {shown(rotary)}")
    check_rotary_width(d_k)
    return dict(base=check_number(rotary["base"], "the rotary base", *RANGES["rotary_base"]),
                pairs=check_choice(rotary["pairs"], "the rotary pairs", ROTARY_PAIRS))


def check_unknown(unknown, allowed, whose):
    """Refuse keywords a call does not take (a misspelt switch, e.g. ``casual``) with a sentence."""
    if unknown:
        fail(f"{whose} switches should be among {', '.join(allowed)}, but got "
             f"{shown(', '.join(map(str, sorted(unknown))))}")


class _Checked(threading.local):
    depth = 0   # > 0 inside a pass whose input the model has checked once, at its entry


_CHECKED = _Checked()


@contextmanager
def checked_once():
    """Inside this, the model's parts skip their own checks: the model has checked its input once, at
    the outermost call (``Transformer.forward``), so its blocks need not check it again on every layer.
    A part called on its own (``block.attn(x)``) checks everything."""
    _CHECKED.depth += 1
    try:
        yield
    finally:
        _CHECKED.depth -= 1


@contextmanager
def unchecked():
    """Learner code run inside a checked pass (a ``replace`` function) is checked again when it calls a part."""
    depth, _CHECKED.depth = _CHECKED.depth, 0
    try:
        yield
    finally:
        _CHECKED.depth = depth


def check_squares(x, name="x", dtype=np.float64):
    """Refuse finite, non-empty x (..., d) (an array or a tensor) whose rows' deviations from the mean,
    squared and summed in ``dtype`` (a NumPy or torch float type), would overflow: a norm's variance would
    be inf and every z 0 or NaN."""
    if isinstance(dtype, torch.dtype):
        dtype = torch.empty(0, dtype=dtype, device="cpu").numpy().dtype if dtype != torch.bfloat16 else np.float32
    top = float(np.finfo(dtype).max)
    largest = float(x.abs().max()) if isinstance(x, torch.Tensor) else float(np.abs(x).max())
    limit = math.sqrt(top / (4 * x.shape[-1]))
    if largest > limit:
        fail(f"{name} should hold numbers whose squares stay finite in {np.dtype(dtype).name} (each of size at most "
             f"about {limit:.1e}), but one has size {largest:.3g}")


def check_stream(x, d, dtype, name, dims=3):
    """x: a non-empty float tensor of shape (B, T, d) (``dims=3``) or (..., d) (``dims=None``) with the
    weights' dtype, as the parts of the model take it, dense and in memory (``check_tensor``, before its shape is
    read: a nested tensor has none); return it."""
    want = "(B, T, d_model)" if dims == 3 else "(..., d_model)"
    if not isinstance(x, torch.Tensor):
        fail(f"{name} should be a torch tensor of shape {want} with d_model={d}, but got {type(x).__name__} {shown(x)}")
    check_tensor(x, name)
    if x.dim() != (dims or x.dim()) or x.dim() == 0 or x.shape[-1] != d or x.numel() == 0:
        fail(f"{name} should be a non-empty tensor of shape {want} with d_model={d}, but has shape {tuple(x.shape)}")
    if x.dtype != dtype:
        fail(f"{name} should have the weights' dtype {dtype}, but has dtype {x.dtype}")
    # a part makes several tensors of x's size (an expanded x stands for more numbers than it stores)
    check_bytes(8 * x.numel() * x.element_size(), f"a part of the model on {name} of shape {tuple(x.shape)}",
                "give fewer or shorter sequences")
    return x


def check_part_input(x, name, dtype):
    """The input of a part called on its own (``check_stream``'s tensor): refuse NaN or inf, and entries
    whose squares would overflow ``dtype`` (the weights' dtype; a norm's variance, attention's scores)."""
    x = x.detach()
    check_finite(x, name)
    check_squares(x, name, dtype)


FINITE_PIECE = 2**22   # numbers all_finite reads at a time


def all_finite(x):
    """Whether every number of the tensor ``x`` is finite, read FINITE_PIECE numbers at a time: ``isfinite``
    makes about 7 bytes of masks a number (|x| in float32 and three bool masks), which at once would add
    0.74 GB to the logits of a batched pass of 270 rows of 8 tokens on SmolLM2."""
    return all(bool(piece.isfinite().all()) for piece in x.detach().reshape(-1).split(FINITE_PIECE))


def check_made(y, what, inputs, weights=(), keep=None):
    """Refuse ``y``, what ``what`` (e.g. "Attention") made from finite ``inputs`` (a dict name -> tensor),
    when it holds NaN or inf: its products overflowed y's dtype. The sentence names the inputs' largest
    entries, or ``weights`` (tensors, e.g. a part's parameters) when they hold NaN or inf, or ``keep`` (a
    learner's function that received the intermediates) when given. Return y. A check after the work:
    for the parts called on their own (never inside a model's pass) and the course's attention functions."""
    if all_finite(y):
        return y
    if not all(all_finite(w) for w in weights):
        fail(f"{what} should give finite numbers, but gave NaN or inf: its weights hold NaN or inf")
    sizes = ", ".join(f"{name} up to {float(x.detach().abs().max()):.3g}" for name, x in inputs.items())
    fail(f"{what} should give finite numbers, but gave NaN or inf: "
         + ("" if keep in (None, _same) else "what keep returned may hold NaN or inf, or ")
         + f"its products overflow {str(y.dtype).replace('torch.', '')} with entries this large ({sizes}); "
           "give smaller numbers")


def check_span(n):
    """Refuse n positions (a start plus the tokens, or a cache's and the new ones) past MAX_TOKENS."""
    if n > MAX_TOKENS:
        fail(f"expected at most {MAX_TOKENS:,} positions at once (this course's limit), but got {count(n)}")


def longest_prompt(cfg):
    """The most tokens a model of ``cfg`` reads in one pass: n_max when its positions are learned (its table has
    rows for no more), MAX_TOKENS otherwise (a sinusoidal table is extended past n_max; rotary and no positions
    need no table). The one rule every view of a prompt follows."""
    return cfg.n_max if cfg.positions == "learned" else MAX_TOKENS


def check_prompt_length(cfg, n, name="the prompt", unit="tokens", extra=0):
    """Refuse a prompt of n tokens (``unit``: what the sentence counts) when a model of ``cfg`` cannot read it
    with ``extra`` positions still to come (longest_prompt's rule); ``name`` is what the sentence calls it."""
    room = longest_prompt(cfg) - extra
    if n > room:
        why = f"its positions are learned for {cfg.n_max}" if cfg.positions == "learned" \
            else f"the course runs at most {MAX_TOKENS:,} positions at once"
        fail(f"{name} should have at most {room:,} {unit} for this model"
             + (f", leaving room for {extra} more" if extra else "") + f" ({why}), but has {count(n)}")


def trace_names(cfg):
    """Every name a pass of a model of this Config may make: h0, L{layer}.{LAYER_NAMES}, final_ln, logits."""
    return {"h0", "final_ln", "logits"} | {f"L{layer}.{name}" for layer in range(cfg.n_layers) for name in LAYER_NAMES}


def check_replace(cfg, replace):
    """``replace`` as the forward pass takes it: None (as {}) or a dict {trace name: function of one
    tensor}, each name one a model of this Config makes; anything else is refused with a sentence."""
    if replace is None:
        return {}
    if not isinstance(replace, dict):
        fail(f"replace should be a dict {{trace name: function}} such as {{'L1.head_out': fn}}, "
             f"but got {type(replace).__name__}")
    names = trace_names(cfg)
    for name, fn in replace.items():
        if not isinstance(name, str) or not callable(fn):
            fail(f"replace should map trace names to functions, but got {shown(name)}: {type(fn).__name__}")
        if name not in names:
            fail(f"replace should name an intermediate this model makes, such as 'L0.head_out' "
                 f"(layers 0..{cfg.n_layers - 1}), but got {shown(name)}, which it never makes")
        try:
            inspect.signature(fn).bind(None)
        except TypeError:
            fail(f"replace[{name!r}] should be a function of one tensor, fn(x), but it cannot be called with one")
        except Exception:   # noqa: BLE001 (a built-in without a signature to read, or a callable of the
            pass            # learner's whose __signature__ raises: it is called as it is, its errors caught)
    return replace


def sinusoidal_table(n, d, rows=2**16):
    """(n, d) fixed positions, interleaved [sin, cos] pairs, frequencies 10000**(-2i/d). Made
    ``rows`` positions at a time, so that building it needs little more than the table itself
    (Config.floats counts the table: its temporaries, made whole, would need twice as much)."""
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    table = torch.zeros(n, d)
    for start in range(0, n, rows):
        p = torch.arange(start, min(start + rows, n), dtype=torch.float32)[:, None]
        table[start:start + rows, 0::2] = torch.sin(p * w)
        table[start:start + rows, 1::2] = torch.cos(p * w)
    return table


def rotate_pairs(x, start, base=10000.0, pairs="adjacent"):
    """RoPE on (B, H, T, d_k): turn column pair i of position p by p * base**(-2i/d_k).

    pairs="adjacent": pair i is columns (2i, 2i+1) (chapter 06); "halves": columns
    (i, i + d_k/2), Llama's layout (the same rotation with the columns of each head reordered).
    """
    T, d_k = x.shape[-2], x.shape[-1]
    check_choice(pairs, "pairs", ROTARY_PAIRS)
    if d_k % 2:
        fail(f"rotate_pairs turns pairs of columns, so x's last axis should have an even width, but it has {d_k}")
    check_number(base, "base", *RANGES["rotary_base"])
    cos, sin = rotary_cos_sin(start, T, d_k, base)
    if pairs == "halves":
        first, second = x[..., :d_k // 2], x[..., d_k // 2:]
        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def sinusoidal_angles(start, T, d, base=10000.0):
    """(T, d/2) angles p * base**(-2i/d) for positions start .. start+T-1."""
    p = torch.arange(start, start + T, dtype=torch.float32)[:, None]
    return p * base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)


_ROTARY_TABLES = {}   # (d, base) -> (cos, sin, their versions), each (MAX_TOKENS, d/2): read by every later pass


def rotary_cos_sin(start, T, d, base=10000.0):
    """(cos, sin), each (T, d/2), of ``sinusoidal_angles(start, T, d, base)``: rows of a table made
    once per (d, base) for positions 0 .. MAX_TOKENS-1 (a cached generation step reads one row
    instead of recomputing its angles in every layer); the same numbers to the last bit, since
    each entry is the same float32 product and the same elementwise cos and sin. Positions past
    the table are computed directly. The rows are copies, and a table changed in place since it
    was made (``cos.fill_(1)``, also through a view: torch counts every in-place op on a tensor, in
    its ``_version``) is made again: a caller cannot change every rotary model's positions for the session."""
    if start < 0 or start + T > MAX_TOKENS:
        angle = sinusoidal_angles(start, T, d, base)
        return torch.cos(angle), torch.sin(angle)
    key = (int(d), float(base))
    entry = _ROTARY_TABLES.get(key)
    if entry is None or (entry[0]._version, entry[1]._version) != entry[2]:
        if len(_ROTARY_TABLES) >= 64:     # a bound on what the tables hold (each 2 x 1,024 x d/2 floats)
            _ROTARY_TABLES.clear()
        with torch.inference_mode(False):   # (made inside inference mode, the table would have no version counter)
            angle = sinusoidal_angles(0, MAX_TOKENS, d, base)
            cos, sin = torch.cos(angle), torch.sin(angle)
        entry = _ROTARY_TABLES[key] = (cos, sin, (cos._version, sin._version))
    cos, sin, _ = entry
    return cos[start:start + T].clone(), sin[start:start + T].clone()


def seeded(module, seed):
    """Draw a sub-block's weight matrices, each N(0, 1/rows), from a generator seeded ``seed`` (the
    global generator is left alone); its biases stay 0. seed None leaves them unset (torch.empty),
    for a Transformer that draws every weight itself. Returns nothing."""
    if seed is None:
        return
    g = torch.Generator().manual_seed(check_seed(seed))
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[0]), generator=g)


class Attention(nn.Module):
    """Multi-head causal self-attention, the course's one attention module.

    Holds W_Q (d_model, n_heads * d_k), W_K and W_V (d_model, n_kv_heads * d_k), W_O
    (n_heads * d_k, d_model) and their biases. With n_kv_heads < n_heads (grouped-query
    attention) each key/value head serves n_heads / n_kv_heads consecutive query heads.
    Call it on its own: ``attn(x)`` with x (B, T, d_model) returns the write-back
    (B, T, d_model); ``causal=False`` switches the mask off. ``keep(name, tensor)``, if
    given, receives q, k, v, scores, weights, head_out, concat and attn as they are made.
    rotary: False, or a dict(base=..., pairs=...) for ``rotate_pairs``. dropout: the share of the
    write-back's entries zeroed in training mode (nanoGPT also drops attention weights; here they
    stay whole, so that a training pass can use the fused attention below: with its dropout, torch
    runs it about half as fast on a CPU). ``fused = True`` (set by a training loop, e.g.
    helpers.gpt.train) computes an unwatched pass (no ``keep``, no cache) with torch's fused
    ``F.scaled_dot_product_attention``: the same attention, other rounding, less memory and time.
    seed: its weight matrices are drawn N(0, 1/rows) from a generator seeded so (``seeded``), its
    biases 0, so that one built alone computes numbers; a Transformer draws its own (seed=None).
    """
    fused = False

    def __init__(self, d_model, n_heads, bias=True, rotary=False, n_kv_heads=0, dropout=0.0, seed=0):
        super().__init__()
        d_model, n_heads = check_positive_int(d_model, "d_model"), check_positive_int(n_heads, "n_heads")
        n_kv_heads, bias = check_positive_int(n_kv_heads, "n_kv_heads", minimum=0), check_switch(bias, "bias")
        check_heads_split(d_model, n_heads, n_kv_heads)
        self.dropout = check_dropout(dropout, "dropout")
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.rotary = check_rotary(rotary, self.d_k)
        self.n_kv_heads = n_kv_heads or n_heads
        d, d_kv = d_model, self.n_kv_heads * self.d_k
        check_floats(attention_floats(d, d_kv, bias), "an Attention", f"Attention({count(d_model)}, {count(n_heads)})")
        self.W_Q, self.W_K, self.W_V, self.W_O = (nn.Parameter(torch.empty(d, width))
                                                  for width in (d, d_kv, d_kv, d))
        self.b_Q, self.b_K, self.b_V, self.b_O = (
            (nn.Parameter(torch.zeros(width)) if bias else None) for width in (d, d_kv, d_kv, d))
        seeded(self, seed)

    @on_the_cpu   # (the CPU, no autocast: inside torch.device("meta") as outside)
    def forward(self, x, *, causal=True, positions=True, ablate=(), cache=None, layer=0, start=0,
                keep=None, scaled=True, **unknown):
        """x: (B, T, d_model) -> write-back (B, T, d_model).

        scaled=False leaves out the division of the scores by √d_k (chapter 03's experiment).

        ablate: head indices whose rows of W_O are zeroed for this call (a new tensor; the
        stored W_O is untouched). cache: a KVCache whose entry ``layer`` is read and extended.
        start: the position of x's first token (for rotary positions after a cache).
        Every argument is checked first (see ``check_call``); called on its own, the cache too, as a
        model's pass checks it (``check_cache``), and a call that fails leaves it as it was. Called on its
        own, a write-back holding NaN or inf (scores past the dtype) is refused after the work (``check_made``).
        """
        if _CHECKED.depth:   # a part of a model's pass, which has checked everything once
            return self._forward(x, causal, positions, ablate, cache, layer, start, keep, scaled)
        ablate = self.check_call(x, ablate, cache, layer, start, keep, unknown)
        causal, positions, scaled = (check_switch(value, name) for value, name in
                                     ((causal, "causal"), (positions, "positions"), (scaled, "scaled")))
        with restored_on_failure(cache):
            if cache is not None:
                self.check_cache(cache, x, layer, start, causal, positions)
            return check_made(self._forward(x, causal, positions, ablate, cache, layer, start, keep, scaled),
                              "Attention", dict(x=x), self.parameters(), keep)

    def _forward(self, x, causal, positions, ablate, cache, layer, start, keep, scaled):
        """The attention of checked input (see ``forward``)."""
        fused = check_switch(self.fused, "Attention.fused") and keep in (None, _same) and cache is None
        keep = _through(keep)
        B, T, d = x.shape
        H, d_k = self.n_heads, self.d_k
        q, k, v = (linear(x, W, b) for W, b in
                   ((self.W_Q, self.b_Q), (self.W_K, self.b_K), (self.W_V, self.b_V)))
        q, k, v = keep("q", q), keep("k", k), keep("v", v)
        q = q.view(B, T, H, d_k).transpose(1, 2)  # (B, H, T, d_k)
        k, v = (t.view(B, T, self.n_kv_heads, d_k).transpose(1, 2) for t in (k, v))  # (B, H_kv, T, d_k)
        if self.rotary and positions:
            q, k = rotate_pairs(q, start, **self.rotary), rotate_pairs(k, start, **self.rotary)
        if cache is not None:
            k, v = cache.extend(layer, k, v)
        if self.n_kv_heads != H:  # grouped-query attention: each key/value head serves a group
            k, v = (t.repeat_interleave(H // self.n_kv_heads, dim=1) for t in (k, v))
        if fused:   # the same attention in one call; nothing is kept, so nothing is lost
            head_out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=None if scaled else 1.0)
            return self.write_back(head_out, ablate)
        T_k = k.shape[-2]
        scores = q @ k.transpose(-2, -1)  # (B, H, T, T_k)
        if scaled:
            scores = scores / math.sqrt(d_k)
        if causal:
            hidden = torch.triu(torch.ones(T, T_k, dtype=torch.bool), diagonal=T_k - T + 1)
            scores = scores.masked_fill(hidden, float("-inf"))
        scores = keep("scores", scores)
        weights = keep("weights", torch.softmax(scores, dim=-1))
        head_out = keep("head_out", weights @ v)  # (B, H, T, d_k)
        return self.write_back(head_out, ablate, keep)

    def check_call(self, x, ablate, cache, layer, start, keep, unknown):
        """Refuse, before any work, what ``forward`` cannot run: x not a non-empty (B, T, d_model) tensor
        of the weights' dtype, or holding NaN, inf or entries whose squares overflow that dtype
        (``check_part_input``), more than MAX_TOKENS positions or MAX_BYTES of scores, ablate not a set,
        list or tuple of this module's head indices (an iterator may never end: ``check_collection``), a negative start, a cache that is not a KVCache, a layer it lacks,
        a keep that is not a function, an unknown keyword. Returns ablate as a set of ints."""
        check_unknown(unknown, ATTENTION_SWITCHES, "Attention's")
        d = self.W_Q.shape[0]
        B, T = check_stream(x, d, self.W_Q.dtype, "x").shape[:2]
        start = check_positive_int(start, "start", minimum=0)
        if cache is not None:
            if not isinstance(cache, KVCache):
                fail(f"cache should be a KVCache, but got {type(cache).__name__}")
            cache.check_lists()
            layer = check_index(layer, "layer", len(cache.k))
            if cache.owner is None or cache.owner is self:   # (another's: check_extension's sentence names it)
                cache.check_layer(layer, (self.n_kv_heads, self.d_k), str(self.W_Q.dtype), maker="this Attention")
        if keep is not None and not callable(keep):
            fail(f"keep should be a function keep(name, tensor), but got {shown(keep)}")
        T_k = T + (cache.rows(layer) if cache is not None else 0)
        check_span(max(start + T, T_k))
        check_bytes(12 * B * self.n_heads * T * T_k, f"attention on {count(B)} sequences of {count(T)} tokens",
                    "give fewer or shorter sequences")
        check_part_input(x, "x", self.W_Q.dtype)   # the scores are products of x's entries
        ablate = check_collection(ablate, "ablate", "a set of head indices such as {0}")
        return {check_index(head, "each ablated head", self.n_heads) for head in ablate}

    def check_cache(self, cache, x, layer, start, causal, positions):
        """For a call on its own (a model's pass checks its cache itself): refuse a cache that another
        model or Attention fills, another batch size, switches or dtype other than those it was filled
        with, a causal=False call it cannot take (``KVCache.check_extension``), and a rotary start other
        than the position after the tokens the cache holds in ``layer``."""
        held = cache.rows(layer)
        if self.rotary and positions and start != held:
            fail(f"start should be the position of x's first token, {held} (the tokens this KVCache holds in "
                 f"layer {layer}), as rotary positions turn each token by its position, but got start={shown(start)}")
        cache.check_extension(self, x.shape[0], x.shape[1], dict(positions=positions, dtype=str(self.W_Q.dtype)),
                              causal)

    def write_back(self, head_out, ablate=(), keep=None):
        """head_out (B, H, T, d_k) -> the heads side by side (concat) @ W_O + b_O, (B, T, d_model)."""
        keep = _through(keep)
        B, H, T, d_k = head_out.shape
        d = H * d_k
        concat = keep("concat", head_out.transpose(1, 2).reshape(B, T, d))
        W_O = self.W_O
        if ablate:
            row_kept = torch.ones(d, 1, dtype=W_O.dtype)   # (a float16 or bfloat16 model keeps its dtype)
            for head in ablate:
                row_kept[head * d_k:(head + 1) * d_k] = 0.0
            W_O = W_O * row_kept  # a new tensor: the stored W_O is untouched
        return keep("attn", dropped(linear(concat, W_O, self.b_O), self.dropout, self.training))


class MLP(nn.Module):
    """The per-token MLP: x @ W_1 + b_1, the activation, @ W_2 + b_2.

    activation="swiglu" (Llama's gated MLP) adds a gate W_G (d_model, d_ff):
    act = silu(x @ W_G) * (x @ W_1). Call it on its own: ``mlp(x)`` with x (..., d_model)
    returns (..., d_model). ``keep(name, tensor)``, if given, receives pre, (gate,) act and mlp.
    seed: as Attention's (its weight matrices N(0, 1/rows), seeded; None for a Transformer's).
    """

    def __init__(self, d_model, d_ff, bias=True, activation="gelu", dropout=0.0, seed=0):
        super().__init__()
        d_model, d_ff = check_positive_int(d_model, "d_model"), check_positive_int(d_ff, "d_ff")
        bias, activation = check_switch(bias, "bias"), check_choice(activation, "activation", ACTIVATIONS)
        self.activation, self.dropout = activation, check_dropout(dropout, "dropout")
        check_floats(mlp_floats(d_model, d_ff, bias, activation), "an MLP", f"MLP({count(d_model)}, {count(d_ff)})")
        self.W_1 = nn.Parameter(torch.empty(d_model, d_ff))
        self.W_2 = nn.Parameter(torch.empty(d_ff, d_model))
        self.b_1 = nn.Parameter(torch.zeros(d_ff)) if bias else None
        self.b_2 = nn.Parameter(torch.zeros(d_model)) if bias else None
        if activation == "swiglu":
            self.W_G = nn.Parameter(torch.empty(d_model, d_ff))
            self.b_G = nn.Parameter(torch.zeros(d_ff)) if bias else None
        seeded(self, seed)

    @on_the_cpu   # (the CPU, no autocast: inside torch.device("meta") as outside)
    def forward(self, x, keep=None):
        """x (..., d_model) -> (..., d_model); x is checked first (shape, dtype, NaN or inf, entries too
        large: ``check_part_input``), and the memory its hidden layer needs; called on its own, an output
        holding NaN or inf is refused too (``check_made``)."""
        if _CHECKED.depth:   # a part of a model's pass, which has checked everything once
            return self._forward(x, keep)
        d, d_ff = self.W_1.shape
        rows = check_stream(x, d, self.W_1.dtype, "x", dims=None).numel() // d
        check_bytes(16 * rows * d_ff, f"an MLP pass on {count(rows)} positions", "give fewer positions")
        if keep is not None and not callable(keep):
            fail(f"keep should be a function keep(name, tensor), but got {shown(keep)}")
        check_part_input(x, "x", self.W_1.dtype)
        return check_made(self._forward(x, keep), "the MLP", dict(x=x), self.parameters(), keep)

    def _forward(self, x, keep):
        """The MLP of checked input (see ``forward``)."""
        keep = _through(keep)
        pre = keep("pre", linear(x, self.W_1, self.b_1))
        if self.activation == "swiglu":
            act = keep("act", F.silu(keep("gate", linear(x, self.W_G, self.b_G))) * pre)
        else:
            act = keep("act", F.gelu(pre) if self.activation == "gelu" else F.relu(pre))
        return keep("mlp", dropped(linear(act, self.W_2, self.b_2), self.dropout, self.training))


class Block(nn.Module):
    """One layer: an attention part, then (unless d_ff=0) an MLP part, each with its residual.

    ``block.attn`` and ``block.mlp`` are the sub-blocks; ``attention_part(h)`` and
    ``mlp_part(h_mid)`` add the LayerNorm and the residual around each, as the forward pass
    does (pre-LN: h + attn(ln1(h)); post-LN: ln1(h + attn(h)); none: h + attn(h)).
    seed: the attention part's weights are seeded so, the MLP's seed + 1 (None: left to a Transformer).
    """

    def __init__(self, cfg, seed=0):
        super().__init__()
        if not isinstance(cfg, Config):
            fail(f"expected a helpers.model.Config, but got {shown(cfg)}")
        seed = None if seed is None else check_seed(seed)
        self.cfg = cfg
        d = cfg.d_model
        self.ln1 = norm_layer(cfg) if cfg.norm != "none" else None
        rotary = cfg.positions == "rotary" and dict(base=cfg.rotary_base, pairs=cfg.rotary_pairs)
        self.attn = Attention(d, cfg.n_heads, bias=cfg.bias, rotary=rotary, n_kv_heads=cfg.n_kv_heads,
                              dropout=cfg.dropout, seed=seed)
        self.ln2 = norm_layer(cfg) if cfg.norm != "none" and cfg.d_ff else None
        self.mlp = (MLP(d, cfg.d_ff, bias=cfg.bias, activation=cfg.activation, dropout=cfg.dropout,
                        seed=None if seed is None else next_seed(seed)) if cfg.d_ff else None)

    @on_the_cpu   # (the CPU, no autocast: inside torch.device("meta") as outside)
    def forward(self, h, keep=None, **switches):
        """h: (B, T, d_model) -> (B, T, d_model). switches: see ``attention_part``. Called on its own, a
        call that fails leaves a cache as it was (a model's pass restores its cache itself)."""
        with restored_on_failure(None if _CHECKED.depth else switches.get("cache")):
            return self.mlp_part(self.attention_part(h, keep=keep, **switches), keep=keep)

    @on_the_cpu   # (the CPU, no autocast: inside torch.device("meta") as outside)
    def attention_part(self, h, keep=None, attention=True, **switches):
        """h (B, T, d_model) -> h_mid. attention=False writes zero; other switches go to ``attn``."""
        if not _CHECKED.depth:
            check_stream(h, self.cfg.d_model, self.attn.W_Q.dtype, "h")
            check_unknown(set(switches) - set(ATTENTION_SWITCHES), ATTENTION_SWITCHES + ("attention",), "a Block's")
            attention = check_switch(attention, "attention")
            check_part_input(h, "h", self.attn.W_Q.dtype)   # the norm's variance, the scores
            with restored_on_failure(switches.get("cache")):   # (a model's pass restores its cache itself)
                return check_made(self._attention_part(h, keep, attention, switches), "the block's attention part",
                                  dict(h=h), self.parameters(), keep)
        return self._attention_part(h, keep, attention, switches)

    def _attention_part(self, h, keep, attention, switches):
        """The attention part of checked input (see ``attention_part``)."""
        keep = _through(keep)
        x = keep("ln1", self.ln1(h) if self.cfg.norm == "pre" else h)
        if attention:
            attn = self.attn(x, keep=keep, **switches)
        else:
            attn = keep("attn", torch.zeros_like(h))
        h_mid = h + attn
        if self.cfg.norm == "post":
            h_mid = self.ln1(h_mid)
        return keep("h_mid", h_mid)

    @on_the_cpu   # (the CPU, no autocast: inside torch.device("meta") as outside)
    def mlp_part(self, h_mid, keep=None):
        """h_mid (B, T, d_model) -> h, the layer's output (h_mid itself when d_ff=0)."""
        if not _CHECKED.depth:
            check_stream(h_mid, self.cfg.d_model, self.attn.W_Q.dtype, "h_mid")
            check_part_input(h_mid, "h_mid", self.attn.W_Q.dtype)   # the norm's variance
            return check_made(self._mlp_part(h_mid, keep), "the block's MLP part", dict(h_mid=h_mid),
                              self.parameters(), keep)
        return self._mlp_part(h_mid, keep)

    def _mlp_part(self, h_mid, keep):
        """The MLP part of checked input (see ``mlp_part``)."""
        keep = _through(keep)
        if self.mlp is None:
            return keep("h", h_mid)
        x = keep("ln2", self.ln2(h_mid) if self.cfg.norm == "pre" else h_mid)
        h = h_mid + self.mlp(x, keep=keep)
        if self.cfg.norm == "post":
            h = self.ln2(h)
        return keep("h", h)


def _through(keep):
    """``keep`` as a function that returns the tensor to carry on with: what ``keep`` returns
    (``check_returned``), or the tensor itself when ``keep`` returns None (a recorder such as
    ``dict.__setitem__``); a keep that stops is named in one sentence."""
    if keep is None or getattr(keep, "returns", False):
        return keep or _same

    def through(name, x):
        try:
            y = keep(name, x)
        except CourseInputError:   # a sentence already, from a course function it called
            raise
        except Exception as error:   # noqa: BLE001 — the learner's code: one sentence, not a traceback
            fail(f"keep({name!r}, tensor) should return None or a tensor, but it stopped with "
                 f"{type(error).__name__}: {message_of(error, 200)}")
        return x if y is None else check_returned(y, x, f"keep({name!r}, tensor)")
    through.returns = True
    return through


def check_returned(y, x, who):
    """``y``, what a function of the learner's (``who``: replace['L0.h'], keep('q', tensor))
    returned in place of the tensor ``x``: a dense tensor of x's shape, dtype and device, else
    one sentence; return it, a view read negated (``x.conj().imag``) made plain, so that whatever reads the
    trace can hand it to NumPy."""
    if isinstance(y, torch.Tensor) and (getattr(y, "is_nested", False) or y.layout != torch.strided
                                        or y.device != x.device or y.is_quantized):
        fail(f"{who} should return a dense tensor on the device {x.device} like its input, but returned "
             + ("a nested tensor" if getattr(y, "is_nested", False) else f"one of layout {y.layout} on the device {y.device}"))
    if not isinstance(y, torch.Tensor) or y.shape != x.shape or y.dtype != x.dtype:
        fail(f"{who} should return a tensor of shape {tuple(x.shape)} and dtype {x.dtype}, but returned "
             + (f"shape {tuple(y.shape)} and dtype {y.dtype}" if isinstance(y, torch.Tensor) else type(y).__name__))
    return y.resolve_neg()


def check_replaced(y, x, name):
    """``y``, what ``replace[name]`` returned in place of ``x`` (``check_returned`` took it): refuse NaN,
    and inf, except where x held the same (the mask's -inf, or NaN the model made before it) or, among the scores, a -inf that hides a
    key, as long as each row keeps a key it sees; return y. Only a pass with ``replace`` pays for this."""
    scores = name.endswith(".scores")
    if y is x or all_finite(y):   # the common case, without a mask as large as y (capture's)
        return y
    kept = torch.isfinite(y) | (y == x) | (torch.isnan(y) & torch.isnan(x))   # what it got, handed on
    if scores:
        kept |= torch.isneginf(y)
    if not bool(kept.all()):
        nan = torch.isnan(y)
        what = f"{count(int(nan.sum()))} NaN" if bool(nan.any()) else f"{count(int((~kept).sum()))} inf"
        masked = bool(nan.any()) and bool(torch.isneginf(x[nan]).all())
        fail(f"replace[{name!r}] should return finite numbers{' (or -inf, to hide a key)' if scores else ''}, but "
             f"returned {what} entries" + (", where the mask put -inf (-inf * 0 is NaN): leave those -inf" if masked else ""))
    if scores and bool(torch.isneginf(y).all(-1).any()):
        fail(f"replace[{name!r}] should leave each query a key it sees, but returned a row of scores all -inf "
             "(its softmax would be NaN)")
    return y


def _same(name, x):
    return x


_same.returns = True   # (the course's own: nothing to check in what it returns)


def norm_layer(cfg):
    """The configured normalisation over d_model: LayerNorm, or RMSNorm (no centring, no bias)."""
    if cfg.norm_kind == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)


def dropped(x, p, training):
    """x with a share p of its entries zeroed (the rest scaled by 1/(1-p)) in training mode; else x itself."""
    return F.dropout(x, p, training=True) if p and training else x


def linear(x, W, b):
    """x @ W + b, the Primer's row-vector convention (W: (d_in, d_out))."""
    return F.linear(x, W.T, b)


MAX_HEAD_PAIRS = 100_000   # (layer, head) pairs in one ablate_heads (a model has far fewer heads)


def check_collection(heads, name, expected):
    """Heads to ablate (``ablate_heads``' pairs, ``ablate``'s indices): a set, list or tuple (any
    abc.Set or abc.Sequence but text) of at most MAX_HEAD_PAIRS entries, else one sentence naming
    ``expected``; return it. An iterator or generator is refused: it may never end."""
    if isinstance(heads, (str, bytes)) or not isinstance(heads, (abc.Set, abc.Sequence)):
        fail(f"{name} should be {expected}, but got {shown(heads)}")
    try:
        size = length(heads)   # (a list's, tuple's or set's by the built-in: a subclass's __len__ may lie or raise)
    except Exception as error:   # noqa: BLE001 (a collection of the learner's own class may raise anything)
        unreadable(heads, error, f"{name} should be {expected}")
    if size > MAX_HEAD_PAIRS:
        fail(f"{name} should name at most {MAX_HEAD_PAIRS:,} heads, but got {count(size)}")
    if isinstance(heads, (set, frozenset)):   # read by the built-in's own iterator, as items_of reads a list
        return list((set if isinstance(heads, set) else frozenset).__iter__(heads))
    return items_of(heads) if isinstance(heads, (list, tuple)) else heads


class KVCache:
    """The keys and values of every layer for the tokens seen so far.

    Each entry is (B, H_kv, T_seen, d_k) (H_kv = n_kv_heads); ``extend`` appends the new tokens' rows. A cache belongs
    to the model that first fills it (or the Attention, called on its own, that does), and holds the ids it was
    fed, so a cache from another model is refused with a sentence, and so is the same ids object fed again,
    unchanged, by the next call (a cell run twice). New ids that happen to repeat the tokens it holds ("the cat",
    then "the cat" encoded again) are a valid continuation: tokens alone cannot tell the two apart.
    """

    def __init__(self, n_layers):
        if check_positive_int(n_layers, "n_layers") > 10_000:
            fail(f"n_layers should be at most 10,000 (a list per layer), but got {shown(n_layers)}")
        self.k = [None] * n_layers
        self.v = [None] * n_layers
        self.owner, self.ids, self.last, self.switches = None, None, None, None
        self.made = ([None] * n_layers, [None] * n_layers, None)   # (k, v, ids) as the passes left them (check_entries)
        self.unmasked = False   # filled by a pass of several tokens without the causal mask: no later pass may extend it

    def __len__(self):
        return self.rows(0)

    def rows(self, layer):
        """How many tokens layer ``layer`` holds (``len(cache)``: layer 0's)."""
        return 0 if self.k[layer] is None else self.k[layer].shape[-2]

    def check_entries(self, model):
        """Refuse, before any work, a cache whose lists or entries were set by hand (``cache.k[0] = ...``): k and v
        lists of one entry a layer, each layer's keys and values both None (no token yet) or both dense tensors on
        the CPU of one shape (B, H_kv, T, d_k) (``layer_shape``), switches None or a dict. A cache of another owner
        is left there, to ``check_extension``, which names it; a cache of ``model`` (or of no one yet: a copy) should
        also have room for its layers, the same number of tokens in each (as the model's passes leave them), the
        model's H_kv (n_kv_heads) and d_k, one B, the weights' dtype and finite numbers (``cached_numbers``), and
        ids None or the (B, T) LongTensor of the tokens it holds. An entry the passes left there (``made``: the same
        object) is not read again: every read of a tensor is a torch call, which chapter 09 counts, and a cache is
        checked at every generated token. (Numbers changed in place inside such an entry are not looked for.)"""
        self.check_lists()
        if self.switches is not None and type(self.switches) is not dict:
            fail(f"cache.switches should be None or the dict of switches it was filled with, but got "
                 f"{shown(self.switches)}")
        made_ids = self.made[2] if _is_made(self.made, len(self.k)) else None
        own = [self.own_entry(layer) for layer in range(len(self.k))]
        if all(own) and self.ids is made_ids:
            return   # (all as the passes left them: ``check`` compares the layers' rows)
        shapes = [self.layer_shape(layer) for layer in range(len(self.k))]
        if self.owner is not None and self.owner is not model:
            return   # (check_extension's sentence names its owner)
        if len(self.k) != model.cfg.n_layers:
            fail(f"expected a KVCache with room for the model's {model.cfg.n_layers} layers, "
                 f"but this one has {len(self.k)}")
        rows = [0 if shape is None else shape[0][2] for shape in shapes]
        if min(rows) != max(rows):
            fail(f"expected a KVCache whose layers hold the same number of tokens, as the model's passes leave them, "
                 f"but its layers hold {min(rows)} to {max(rows)} (it was filled some other way); make a new KVCache")
        filled = [(layer, shape) for layer, shape in enumerate(shapes) if shape is not None]
        sizes, dtype = (model.cfg.kv_heads, model.cfg.d_k), model.weights_dtype()
        B = filled[0][1][0][0] if filled else None
        for layer, (k_shape, v_shape) in filled:
            for name, shape in (("k", k_shape), ("v", v_shape)):
                if shape[0] != B:
                    fail(f"cache.{name}[{layer}] should hold as many sequences as cache.k[{filled[0][0]}], {B}, but "
                         f"holds {shape[0]}")
            self.check_layer(layer, sizes, dtype, (k_shape, v_shape), "the model")
        held = None if B is None else (B, rows[0])   # the ids' shape (B, T)
        if self.ids is not made_ids and self.ids is not None and (not isinstance(self.ids, torch.Tensor) or tensor_refusal(self.ids) is not None
                                     or self.ids.dtype != torch.long or tuple(self.ids.shape) != held):
            fail(f"cache.ids should be None or the ids of the tokens it holds, a LongTensor of shape "
                 f"{held or '(B, T)'}, but got {described(self.ids, 'cache.ids')}")

    def check_lists(self):
        """Refuse k and v set by hand to anything but lists of one entry a layer, as KVCache(n_layers) makes them."""
        for name in ("k", "v"):
            held = getattr(self, name)
            if type(held) is not list or not held:
                fail(f"cache.{name} should be a list of one entry a layer (as KVCache(n_layers) makes it), but got "
                     f"{type_name(held)} {shown(held)}")
        if len(self.k) != len(self.v):
            fail(f"cache.k and cache.v should hold one entry a layer each, but hold {len(self.k)} and {len(self.v)}")

    def own_entry(self, layer):
        """Whether layer ``layer``'s keys and values are the very tensors the passes left there (``made``)."""
        if not _is_made(self.made, len(self.k)):
            return False
        return self.k[layer] is self.made[0][layer] and self.v[layer] is self.made[1][layer]

    def check_layer(self, layer, sizes, dtype, shapes=None, maker="the model"):
        """Refuse layer ``layer``'s keys and values unless they are None (no token yet) or dense CPU tensors of one
        shape (B, H_kv, T, d_k) with (H_kv, d_k) = ``sizes``, as ``maker`` makes them, of ``dtype`` with finite
        numbers (an entry the passes left, ``own_entry``, is not read again). ``shapes``: ``layer_shape``'s, if read.
        ``check_entries`` calls it for each layer of a model's cache (dtype as text: 'torch.float32'); an Attention
        called on its own, for its layer."""
        shapes = self.layer_shape(layer) if shapes is None else shapes
        if shapes is None:
            return
        k_shape, v_shape = shapes
        for name, shape in (("k", k_shape), ("v", v_shape)):
            if shape[1::2] != sizes:
                fail(f"cache.{name}[{layer}] should have shape (B, H_kv, T, d_k) = (B, {sizes[0]}, T, {sizes[1]}), "
                     f"as {maker} makes it, but has shape {shape}")
        if v_shape != k_shape:
            fail(f"cache.v[{layer}] should hold the values of the tokens cache.k[{layer}] holds, shape {k_shape}, "
                 f"but has shape {v_shape}")
        if not self.own_entry(layer):
            cached_numbers(self.k[layer], f"cache.k[{layer}]", dtype)
            cached_numbers(self.v[layer], f"cache.v[{layer}]", dtype)

    def layer_shape(self, layer):
        """The shapes (B, H_kv, T, d_k) of layer ``layer``'s keys and values, both dense tensors on the CPU with 4
        axes (``cached_shape``), as a pair; None when both are None (no token yet); else one sentence."""
        k, v = self.k[layer], self.v[layer]
        if (k is None) != (v is None):
            fail(f"cache.k[{layer}] and cache.v[{layer}] should both be None (no token yet) or both tensors (the "
                 f"keys and values of the same tokens), but cache.{'k' if k is None else 'v'}[{layer}] is None")
        return None if k is None else (cached_shape(k, f"cache.k[{layer}]"), cached_shape(v, f"cache.v[{layer}]"))

    def check(self, model, ids, given=None, switches=None, causal=True):
        """Refuse what ``check_extension`` refuses (after ``check_entries``: every layer holds the same number of
        tokens), or the object ``given`` (what the caller passed, ``ids`` checked) fed again, unchanged, right after
        it was fed; keep ids."""
        T = ids.shape[-1]
        rows = [self.rows(layer) for layer in range(len(self.k))]   # (each layer read once: a step's every
        self.check_extension(model, ids.shape[0], T, switches, causal, cached=max(rows))   # read is a torch call)
        if min(rows) != max(rows):
            fail(f"expected a KVCache whose layers hold the same number of tokens, as the model's passes leave them, "
                 f"but its layers hold {min(rows)} to {max(rows)} (it was filled some other way); make a new KVCache")
        if self.ids is not None and T > 1 and given is not None and given is self.last \
                and torch.equal(ids, self.ids[..., -T:]):
            fail(f"expected only new tokens, but this KVCache already holds these {T} tokens: "
                 "feed each token once, or make a new KVCache for a new prompt")
        self.ids = ids if self.ids is None else torch.cat([self.ids, ids], dim=-1)
        self.last = given
        if _is_made(self.made, len(self.k)):
            self.made = (self.made[0], self.made[1], self.ids)

    def check_extension(self, owner, B, T, switches, causal=True, cached=None):
        """What a pass of B sequences of T new tokens must meet to extend the cache, a model's pass
        (``check``) or an Attention's called on its own (``owner``, which the cache then belongs to):
        refuse a cache of another owner, another batch size, or ``switches`` (a dict of what changes the
        keys and values) other than those the cache was filled with. Without the causal mask (``causal``
        False) the keys and values of earlier tokens would change with every new one, so such a pass
        may only feed one token (the mask changes nothing then) or fill an empty cache (the unmasked
        prefill), which no later pass may extend. ``cached``: the most tokens a layer holds, if known."""
        if self.unmasked:
            fail("expected a KVCache filled with the causal mask, but this one was filled without it (causal=False), "
                 "so its keys and values would change with every new token; make a new KVCache")
        if not causal and T > 1:
            cached = max(self.rows(layer) for layer in range(len(self.k))) if cached is None else cached
        if not causal and T > 1 and cached:
            fail(f"a KVCache needs the causal mask when a pass feeds several tokens after cached ones (earlier rows "
                 f"would change with every new token), so expected causal=True, but got causal=False with {T} new "
                 f"tokens after {cached} cached ones")
        if self.owner is None:
            self.owner = owner
        elif self.owner is not owner:
            kind = "model" if isinstance(owner, Transformer) else "Attention"
            other = (("another model" if kind == "model" else "a model's passes") if isinstance(self.owner, Transformer)
                     else "another Attention" if kind == "Attention" else "an Attention called on its own")
            fail(f"expected the KVCache of this {kind}, but this one holds the keys and values of {other}; "
                 "make a new KVCache for this one")
        if self.switches is None:
            self.switches = switches
        elif switches != self.switches:
            changed = [name for name in switches if switches[name] != self.switches.get(name)]
            fail(f"expected the switches this KVCache was filled with, but this pass changes {', '.join(changed)}: "
                 "the keys and values it holds came from the other setting; make a new KVCache")
        held = next((k.shape[0] for k in self.k if k is not None), B)
        if B != held:
            fail(f"expected a batch of {held} sequences, as this KVCache holds, but got {B}")
        self.unmasked = not causal and T > 1

    def copied(self):
        """A new KVCache holding this one's keys and values (the same tensors: a pass replaces a layer's, never changes
        it), of no owner and no ids yet; its entries still known as the passes' (``made``), so a pass reads them no
        more than this cache's (``check_entries``: a check over every number at every timed step would be timed too)."""
        copy = KVCache(len(self.k))
        copy.k, copy.v = list(self.k), list(self.v)
        if _is_made(self.made, len(self.k)):
            copy.made = (list(self.made[0]), list(self.made[1]), None)
        return copy

    def saved(self):
        """What the cache holds now, for ``restore`` (its tensors are never changed in place)."""
        return list(self.k), list(self.v), self.owner, self.ids, self.last, self.switches, self.unmasked, self.made

    def restore(self, saved):
        """Put back what ``saved`` returned: a pass that failed half-way leaves no trace."""
        k, v, self.owner, self.ids, self.last, self.switches, self.unmasked, made = saved
        self.k[:], self.v[:] = k, v
        self.made = (list(made[0]), list(made[1]), made[2]) if _is_made(made, len(k)) else made

    def extend(self, layer, k, v):
        if self.k[layer] is not None:
            k = torch.cat([self.k[layer], k], dim=-2)
            v = torch.cat([self.v[layer], v], dim=-2)
        self.k[layer], self.v[layer] = k, v
        if _is_made(self.made, len(self.k)):
            self.made[0][layer], self.made[1][layer] = k, v
        return k, v


def _is_made(made, n_layers):
    """Whether ``made`` is a KVCache's record of what its passes left (two lists of n_layers entries and the ids), as
    its __init__ makes it (a learner's code may have set it to anything: then every entry is checked)."""
    return type(made) is tuple and len(made) == 3 and all(type(held) is list and len(held) == n_layers
                                                         for held in made[:2])


def cached_shape(t, name):
    """The shape of ``t``, an entry of a KVCache (``name``: "cache.k[0]"), checked before anything reads it: a dense
    tensor on the CPU with 4 axes (B, H_kv, T, d_k); else one sentence."""
    if not isinstance(t, torch.Tensor):
        fail(f"{name} should be a tensor (B, H_kv, T, d_k) or None, but got {type_name(t)} {shown(t)}")
    if t.is_nested or t.layout != torch.strided or t.device.type != "cpu":
        fail(f"{name} should be a dense tensor on the CPU, but got {tensor_refusal(t) or f'a tensor on {t.device}'}")
    shape = tuple(t.shape)
    if len(shape) != 4:
        fail(f"{name} should have shape (B, H_kv, T, d_k), but has shape {shape}")
    return shape


def cached_numbers(t, name, dtype):
    """Refuse ``t``, an entry of a model's KVCache (``cached_shape``), when its dtype is not ``dtype`` (the
    weights', as text) or it holds NaN or inf."""
    if str(t.dtype) != dtype:
        fail(f"{name} should have the dtype of the model's weights, {dtype}, but has dtype {t.dtype}")
    if not torch.isfinite(t).all():
        check_finite(t, name)   # (its sentence counts the NaN and inf)


def restored_on_failure(cache):
    """``with restored_on_failure(cache):`` a call that fails (a learner's keep or replace may raise, say)
    leaves ``cache`` as it was: what it holds is saved first and put back. Anything but a KVCache (None,
    inside a model's pass) has nothing to restore: a context that does nothing, at almost no cost."""
    return _restoring(cache) if isinstance(cache, KVCache) else _NOTHING


_NOTHING = nullcontext()


@contextmanager
def _restoring(cache):
    cache.check_lists()   # (lists set by hand could not be saved as they are)
    saved = cache.saved()
    try:
        yield
    except BaseException:
        cache.restore(saved)
        raise


class Transformer(nn.Module):
    """A decoder-only Transformer with a tied unembedding (logits = final_ln @ E.T).

    seed: the seed of the first weights; None leaves them unset (torch.empty), for a loader
    that assigns every weight next (the real model's 134.5 M would take a second to draw).
    init: how the first weights are drawn (``INITS``). "small", the default, draws the token
    and position embeddings from N(0, 0.02²), as GPT-2 does: the tied unembedding then gives
    logits near 0 and a fresh model's loss starts near ln V, a uniform guess. "unit" draws them
    from N(0, 1), the start the course's shipped models were trained from (their recipes pin it):
    after the final LayerNorm the logits then spread about √d_model and the first loss is far
    above ln V. Matrices are N(0, 1/d_in) either way, except that "small" also scales W_O and
    W_2, the two writes of each layer into the residual stream, by 1/√(2·n_layers) (GPT-2's
    rule), so a deep stack without normalisation starts near ln V too. Biases 0, norm scales 1.
    """

    def __init__(self, cfg, seed=0, init="small"):
        super().__init__()
        if not isinstance(cfg, Config):
            fail(f"expected a helpers.model.Config, but got {shown(cfg)}")
        check_choice(init, "init", INITS)
        if seed is not None:
            seed = check_seed(seed)
        self.cfg, self.init = cfg, init
        self.E = nn.Parameter(torch.empty(cfg.vocab_size, cfg.d_model))
        self.P = nn.Parameter(torch.empty(cfg.n_max, cfg.d_model)) if cfg.positions == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg, seed=None) for _ in range(cfg.n_layers))   # drawn below
        self.final_ln = norm_layer(cfg) if cfg.final_norm else None
        # the fixed sinusoidal rows, computed once (not a parameter, not saved)
        self.register_buffer("PE", sinusoidal_table(cfg.n_max, cfg.d_model)
                             if cfg.positions == "sinusoidal" else None, persistent=False)
        if seed is not None:
            self.reset_parameters(seed=seed)
        self.__dict__["_built"] = built_of(self)   # what check_structure compares with (not in state_dict),
        self.__dict__["_structure_key"] = None     # and the key of its last check (structure_key)

    def reset_parameters(self, seed):
        """Draw fresh weights from a seeded generator, as ``self.init`` says (see the class)."""
        g = torch.Generator().manual_seed(check_seed(seed))
        embedding_std = EMBEDDING_STD[self.init]
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(("ln1.weight", "ln2.weight", "final_ln.weight")):
                    p.fill_(1.0)
                elif p.dim() == 1:
                    p.zero_()
                elif name in ("E", "P"):
                    p.normal_(0.0, embedding_std, generator=g)
                else:
                    std = 1.0 / math.sqrt(p.shape[0])
                    if self.init == "small" and name.endswith(("attn.W_O", "mlp.W_2")):
                        std /= math.sqrt(2 * self.cfg.n_layers)   # each layer's two writes to the residual
                    p.normal_(0.0, std, generator=g)

    @on_the_cpu   # (the CPU, no autocast: inside torch.device("meta") as outside)
    def forward(self, ids, *, trace=False, causal=True, attention=True,
                ablate_heads=(), positions=True, cache=None, replace=None, scaled=True, **unknown):
        """ids: (T,) or (B, T) token ids -> logits (T, V) or (B, T, V).

        trace=True returns a dict of every intermediate instead (single sequence only,
        detached from autograd).
        causal: apply the causal mask. attention: False makes every attention block
        write zero. ablate_heads: (layer, head) pairs whose rows of W_O are zeroed.
        positions: False leaves positions out. cache: a KVCache to read and extend.
        replace: {trace name: fn}; each named intermediate x, batched as the pass makes it
        (e.g. "L1.head_out" (B, H, T, d_k), "L0.h" (B, T, d_model)), is replaced by fn(x), a
        tensor of the same shape, and the pass carries on from it (the weights are untouched).
        scaled: False leaves out the division of the scores by √d_k.
        Any other keyword (a misspelt switch, e.g. ``casual``) is refused with a sentence. A batch
        whose pass would hold more than MAX_BYTES (``Config.pass_bytes``) is refused up front.
        """
        self.check_structure()
        check_unknown(unknown, SWITCHES, "the model's")
        given, ids = ids, self.check_ids(ids)
        trace, causal, attention, positions, scaled = (
            check_switch(value, name) for value, name in ((trace, "trace"), (causal, "causal"),
                                                          (attention, "attention"), (positions, "positions"),
                                                          (scaled, "scaled")))
        single = ids.dim() == 1
        if single:
            ids = ids[None]
        B, T = ids.shape   # (one look at the shape: op_count counts it)
        if trace and B != 1:
            fail(f"trace=True should get one sequence, but got a batch of {B}")
        heads = self.check_heads(ablate_heads)
        if cache is not None and not isinstance(cache, KVCache):
            fail(f"cache should be a KVCache, but got {type(cache).__name__}")
        if cache is not None and not attention:   # it would stay empty, and every token would sit at position 0
            fail("a KVCache holds the keys and values attention computes, but attention=False computes none: "
                 "expected cache=None with attention=False")
        if cache is not None:
            cache.check_entries(self)   # (before its rows are read: an entry set by hand may be anything)
        start = len(cache) if cache is not None else 0
        if start + T > MAX_TOKENS:
            fail(f"expected at most {MAX_TOKENS:,} tokens at once (this course's limit), but the cache holds "
                 f"{start:,} and {T:,} more came")
        self.check_room(start + T)
        if trace:
            self.check_trace_memory(T, start)
        recorded = torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())   # kept for a backward
        self.cfg.check_pass(B, T, start + T, grad=recorded)
        record, replace = {}, self.check_replace(replace)
        with restored_on_failure(cache):   # a pass that fails leaves the cache as it was
            if cache is not None:
                cache.check(self, ids, given, dict(attention=attention, positions=positions, scaled=scaled,
                                                   ablate_heads=sorted(heads), replace=sorted(replace),
                                                   dtype=self.weights_dtype()), causal=causal)
            with checked_once():   # checked here, once: the blocks need not check again
                try:
                    return self._forward(ids, single, trace, record, replace, heads, cache, start,
                                         causal=causal, attention=attention, positions=positions, scaled=scaled)
                except CourseInputError:
                    raise
                except Exception:   # a part changed in a way no hook tells (p.data = ..., del): its sentence
                    self.check_structure(full=True)
                    raise

    def _forward(self, ids, single, trace, record, replace, heads, cache, start, positions, **switches):
        """The forward pass of checked input (see ``forward``)."""
        keep = self.keeper(record if trace else None, replace)
        watched = trace or bool(replace)   # an unwatched pass tells its blocks no names (fused attention may run)
        h = keep("h0", dropped(self.embed(ids, start=start, positions=positions), self.cfg.dropout, self.training))
        for layer, block in enumerate(self.blocks):
            h = block(h, keep=(lambda name, x, layer=layer: keep(f"L{layer}.{name}", x)) if watched else None,
                      layer=layer, positions=positions,
                      ablate={head for (lay, head) in heads if lay == layer}, cache=cache, start=start,
                      **switches)
        logits = self.unembed(h, keep=keep)
        unused = sorted(set(replace) - set(keep.seen))
        if unused:
            fail(f"replace should name intermediates this forward pass makes, such as "
                 f"{list(keep.seen)[:3]}, but names {unused}, which it never makes")
        if replace and not keep.flags["model_made"] and not all_finite(logits):   # finite replacements, too large later
            fail(f"a pass with replace={sorted(replace)} should give finite logits, but gave NaN or inf: what the "
                 "functions returned overflowed later in the pass (return smaller numbers), or the model's weights hold NaN or inf")
        if not trace:
            return logits[0] if single else logits
        record["probs"] = torch.softmax(record["logits"], dim=-1)
        return record

    def check_structure(self, full=False):
        """Refuse, in one sentence, a model whose modules no longer match its Config (``structure_problem``: a
        learner's ``model.blocks = model.blocks[:1]``, a smaller E, ``model.to("meta")``); return the model. Checked
        in full when something may have changed since the last check (``structure_key``), or when ``full``; else
        the check costs about a microsecond. (A full check at every pass would add about a fifth to a cat model's
        pass, and its shape reads would show in chapter 09's ``op_count``.)"""
        if full or not same_key(self.__dict__.get("_structure_key"), structure_key(self)):
            problem = structure_problem(self)
            if problem is not None:
                fail(problem)
            self.__dict__["_structure_key"] = structure_key(self)   # (after the check, which may build a model;
        return self                                                 # not a module attribute: never in state_dict)

    def check_trace_memory(self, T, start=0):
        """Refuse, before the pass, a trace of T tokens (after ``start`` cached ones) that would keep
        more than MAX_TRACE_BYTES: ``Config.trace_bytes`` from the sizes alone."""
        need = self.cfg.trace_bytes(T, start + T)
        if need > MAX_TRACE_BYTES:
            fail(f"trace=True should keep at most {gib(MAX_TRACE_BYTES)} (this course's limit), but on "
                 f"{T:,} tokens this model's trace would keep {about_gib(need, MAX_TRACE_BYTES)}: give a shorter prompt "
                 f"(at most {self.cfg.longest_trace(start):,} tokens here), or call the model without trace=True")

    def check_room(self, T):
        """Refuse a sequence of T tokens (the cache's and the new ones) that learned positions cannot place."""
        if self.cfg.positions == "learned" and T > self.cfg.n_max:
            fail(f"expected at most n_max={self.cfg.n_max} tokens, as this model learned positions for no more, "
                 f"but the sequence would have {T}")

    @staticmethod
    def keeper(record, replace):
        """The forward pass's ``keep(name, x)``: apply ``replace[name]`` if given, record x[0]
        (detached) in ``record`` if it is a dict, and return the tensor to carry on with."""
        seen = {}  # a dict keeps the order names are made in
        flags = dict(changed=False, model_made=False)   # (not keep's own attributes: keep would hold itself, and
                                                        # record's tensors with it, in a cycle until gc came by)

        def keep(name, x):
            seen[name] = None
            if name in replace:
                if not flags["changed"] and not flags["model_made"]:   # NaN or inf the model made before any replacement
                    flags["model_made"] = not all_finite(x)
                try:
                    with unchecked():   # the learner's function: any part it calls checks its input
                        y = replace[name](x)
                except CourseInputError:   # a sentence already, from a course function it called
                    raise
                except Exception as error:   # noqa: BLE001 — the learner's code: one sentence, not a traceback
                    fail(f"replace[{name!r}] should return a tensor, but it stopped with {type(error).__name__}: "
                         f"{message_of(error, 200)}")
                flags["changed"] = flags["changed"] or y is not x
                x = check_replaced(check_returned(y, x, f"replace[{name!r}]"), x, name)
            if record is not None:
                record[name] = x[0].detach()
            return x
        keep.seen, keep.returns, keep.flags = seen, True, flags
        return keep

    def weights_dtype(self):
        """The dtype of the model's weights as text ('torch.float32'; model.double() makes it float64)."""
        return str(next(self.parameters()).dtype)

    def check_replace(self, replace):
        """replace as a dict {trace name: callable}, each name one this model's passes can make."""
        return check_replace(self.cfg, replace)

    def trace_names(self):
        """Every name a pass of this model may make (``replace`` and ``capture`` take these)."""
        return trace_names(self.cfg)

    @on_the_cpu   # (the CPU, no autocast: inside torch.device("meta") as outside)
    def embed(self, ids, start=0, positions=True):
        """ids (B, T) -> h0 (B, T, d_model): token rows of E plus the positions (unless switched off)."""
        cfg = self.cfg
        if not _CHECKED.depth:
            self.check_structure()
            ids = self.check_ids(ids)
            start, positions = check_positive_int(start, "start", minimum=0), check_switch(positions, "positions")
            check_span(start + ids.shape[-1])
            self.check_room(start + ids.shape[-1])
        T = ids.shape[-1]
        h = self.E[ids]
        if positions and cfg.positions == "sinusoidal":
            table = self.PE if start + T <= cfg.n_max else sinusoidal_table(start + T, cfg.d_model)
            h = h + table[start:start + T]
        elif positions and cfg.positions == "learned":
            h = h + self.P[start:start + T]
        return h

    @on_the_cpu   # (the CPU, no autocast: inside torch.device("meta") as outside)
    def unembed(self, h, keep=None):
        """h (..., d_model), the residual stream after the last block -> logits (..., V):
        the final LayerNorm (if any), then the tied unembedding E^T. ``keep`` receives
        final_ln and logits."""
        if not _CHECKED.depth:
            self.check_structure()
            check_stream(h, self.cfg.d_model, self.E.dtype, "h", dims=None)
            check_part_input(h, "h", self.E.dtype)   # the final norm's variance, the logits
            return check_made(self._unembed(h, keep), "unembed", dict(h=h), self.parameters(), keep)
        return self._unembed(h, keep)

    def _unembed(self, h, keep):
        """The logits of checked input (see ``unembed``)."""
        keep = _through(keep)
        final = keep("final_ln", self.final_ln(h) if self.final_ln is not None else h)
        return keep("logits", final @ self.E.T)

    def check_ids(self, ids):
        """Token ids as a LongTensor (T,) or (B, T), each in [0, vocab_size), at most MAX_TOKENS long."""
        check_ids_given(ids, "the token ids", MAX_TOKENS)
        if isinstance(ids, np.ndarray):   # a broadcast view stands for more ids than it stores
            check_bytes(8 * ids.size, f"token ids of shape {ids.shape}", "give fewer or shorter sequences")
        try:
            if isinstance(ids, (list, tuple)) and ids and all(isinstance(t, torch.Tensor) for t in ids):
                ids = torch.stack(list(ids))   # a list of (T,) id tensors, e.g. from tokenizer.encode: a batch
            device = ids.device if isinstance(ids, torch.Tensor) else "cpu"   # (named: not the ambient default
            ids = torch.as_tensor(ids, device=device)                             # device, torch.device("meta"))
        except Exception:   # noqa: BLE001 (a list of the learner's whose __len__ lies, a value torch cannot read)
            rows = list(ids[:MAX_TOKENS]) if isinstance(ids, (list, tuple)) else []
            lengths = {len(row) if isinstance(row, (list, tuple)) else -1 for row in rows}
            values = [t for row in rows for t in (row[:MAX_TOKENS] if isinstance(row, (list, tuple)) else [row])]
            if any(type(t) is int and not -2**63 <= t < 2**63 for t in values):   # [2**70]
                fail(f"token ids must lie in [0, {self.cfg.vocab_size}) (expected ids of this model's vocabulary), "
                     f"but got one too large for a 64-bit integer")
            fail(f"expected token ids as a list or array of integers"
                 + (", rows of one length (a (B, T) batch), but got rows of different lengths: pad them or pass each "
                    "alone" if len(lengths) > 1 else f", but got {type(ids).__name__} {shown(ids)}"))
        check_tensor(ids, "the token ids")
        check_bytes(8 * ids.numel(), f"token ids of shape {tuple(ids.shape)}", "give fewer or shorter sequences")
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool or ids.dim() not in (1, 2) \
                or ids.numel() == 0:
            fail(f"expected token ids as a non-empty (T,) or (B, T) integer array, "
                 f"but got dtype {ids.dtype} and shape {tuple(ids.shape)}")
        if ids.shape[-1] > MAX_TOKENS:
            fail(f"expected at most {MAX_TOKENS:,} tokens at once (this course's models' attention "
                 f"weights would not fit in memory), but got {ids.shape[-1]:,}")
        V = self.cfg.vocab_size
        if ids.dtype == torch.uint64 and ids.double().max() >= V:   # .long() would wrap 2**64 - 1 round to -1
            fail(f"token ids must lie in [0, {V}) (expected ids of this model's vocabulary), "
                 f"but got one of about {float(ids.double().max()):.3g}")
        ids = ids.long()   # any integer dtype (int8, uint16, ...) is taken as ids
        if ids.min() < 0 or ids.max() >= V:
            fail(f"token ids must lie in [0, {V}) (expected ids of this model's vocabulary), "
                 f"but got {int(ids.min())}..{int(ids.max())}")
        return ids

    def check_switches(self, switches, allowed=SWITCHES):
        """The forward pass's keyword switches (a dict), checked as ``forward`` checks them, without a
        pass: names among ``allowed`` (a subset of SWITCHES), True/False switches, heads in range,
        replace; for a caller that must refuse before it changes anything (a training run)."""
        check_unknown(set(switches) - set(allowed), allowed, "the model's")
        for name in ("trace", "causal", "attention", "positions", "scaled"):
            if name in switches:
                check_switch(switches[name], name)
        self.check_heads(switches.get("ablate_heads", ()))
        self.check_replace(switches.get("replace"))
        cache = switches.get("cache")
        if cache is not None and not isinstance(cache, KVCache):
            fail(f"cache should be a KVCache, but got {type(cache).__name__}")
        return switches

    def check_heads(self, heads):
        """A set of (layer, head) pairs, each in range."""
        cfg, checked = self.cfg, set()
        for pair in check_collection(heads, "ablate_heads", "a set of (layer, head) pairs"):
            if not (isinstance(pair, (tuple, list)) and length(pair) == 2):
                fail(f"ablate_heads should hold (layer, head) pairs, but got {shown(pair)}")
            layer, head = items_of(pair)   # (a subclass's __len__ or __iter__ may lie or raise)
            if any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) for i in (layer, head)):
                fail(f"a head should be named by two whole numbers (layer, head), but got {shown(pair)}")
            # compared as int's own values (an int subclass's comparisons may lie)
            layer, head = (whole(i, "each number of a head (layer, head)", "a whole number") for i in (layer, head))
            if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
                fail(f"expected a head of this model, but (layer={layer}, head={head}) is out of range: it has layers "
                     f"0..{cfg.n_layers - 1} and heads 0..{cfg.n_heads - 1}")
            checked.add((layer, head))
        return checked

    def parameter_count(self):
        """Parameters by part: embedding, positions, per_layer, layers, final_norm, total."""
        self.check_structure()
        per_layer = sum(p.numel() for p in self.blocks[0].parameters()) if self.blocks else 0
        counts = {
            "embedding": self.E.numel(),
            "positions": self.P.numel() if self.P is not None else 0,
            "per_layer": per_layer,
            "layers": sum(p.numel() for p in self.blocks.parameters()),
            "final_norm": sum(p.numel() for p in self.final_ln.parameters()) if self.final_ln else 0,
        }
        counts["total"] = sum(p.numel() for p in self.parameters())
        return counts


@contextmanager
def eval_mode(model, train=False):
    """Within the block ``model`` is in eval mode (no dropout: a seeded result repeats; train=True:
    in training mode); afterwards, also after an error, every module is back in the mode it was in
    (a model with one block in eval mode keeps it so). Inside ``with torch.device("meta"):`` or autocast the pass
    runs as outside (``states.course_modes``: the CPU, no autocast; grad mode left as the caller set it)."""
    modes = [(module, module.training) for module in model.modules()]
    model.train(train)
    try:
        with course_modes(grad=False):
            yield model
    finally:
        for module, mode in modes:
            module.training = mode


FAST_CHECK_NUMBERS = 2**22   # a model of at most this many numbers is checked in one copy (about 0.2 ms for the cat model)


def check_finite_weights(model, name="the model"):
    """Refuse, in one sentence naming the first such tensor, a model (a torch module) whose weights
    (its floating-point parameters and buffers) hold NaN or inf: a training run that diverged, or an
    edit. Every measure of such a model would be NaN, or a count made from NaN logits. A small model
    is checked in one pass over a copy of all its numbers; a larger one (or one found wanting) tensor by tensor.
    A model on the meta device, which holds no numbers, is refused first (``check_has_numbers``)."""
    check_has_numbers(model, name)
    tensors = [t.detach() for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()]
    if not tensors:
        return model
    if sum(t.numel() for t in tensors) <= FAST_CHECK_NUMBERS and len({t.dtype for t in tensors}) == 1 \
            and bool(torch.cat([t.reshape(-1) for t in tensors]).isfinite().all()):
        return model
    for label, t in (*model.named_parameters(), *model.named_buffers()):
        if t.is_floating_point() and not all_finite(t):
            bad = int((~t.detach().isfinite()).sum())
            if bad:
                fail(f"the weights of {name} should be finite numbers, but {label} holds NaN or inf in {count(bad)} "
                     f"of its {count(t.numel())} entries (a training run that diverged, or an edit): load or "
                     "train the model again")
    return model


def meta_tensor(model):
    """The name of the first parameter or buffer of the torch module ``model`` on the meta device
    (``model.to("meta")`` keeps only the shapes), or None."""
    return next((label for label, t in (*model.named_parameters(), *model.named_buffers()) if t.device.type == "meta"),
                None)


def check_has_numbers(model, name="the model"):
    """Refuse a torch module with a parameter or buffer on the meta device (``meta_tensor``): nothing can be read
    from it. Return it."""
    label = meta_tensor(model)
    if label is not None:
        fail(meta_sentence(name, label))
    return model


def meta_sentence(name, label):
    """The sentence for ``name``'s (a model's) tensor ``label`` found on the meta device."""
    return (f"the weights of {name} should hold numbers, but {label} is on the meta device, which keeps only shapes "
            "(model.to('meta') drops the numbers): load or build the model again")


@contextmanager
def measuring(model, name="the model"):
    """Within the block ``model`` (a course model) is measured as it is meant to be: refused first, in one
    sentence, when its weights hold NaN or inf (``check_finite_weights``), then in eval mode (no dropout:
    a measure gives one number for one model, and draws nothing from torch's global generator);
    afterwards, also after an error, every module is back in the mode it was in. Every model-level
    measure of chapters 00-06 (a loss, the top next words, an accuracy, a leak, ...) runs inside it. A course
    Transformer whose modules no longer match its Config is refused first (``check_structure``)."""
    if isinstance(model, Transformer):
        model.check_structure()
    check_finite_weights(model, name)
    with eval_mode(model):
        try:
            yield model
        except CourseInputError:
            raise
        except Exception as error:   # noqa: BLE001 (a learner's hook may raise anything)
            if not hooked(model):
                raise
            fail(f"{name}'s forward hooks should let its pass run, but one raised {type(error).__name__}: "
                 f"{shown(message_of(error, 200))} (remove the hook, or fix it)")


def hooked(model):
    """Whether a forward hook (a module's own, or a global one) runs in ``model``'s passes."""
    from torch.nn.modules import module as torch_module
    return bool(torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks) or any(
        m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def measure(function):
    """``function(model, ...)``, a measure of a course Transformer, run inside ``measuring(model)``: a model
    whose weights hold NaN or inf is refused in one sentence, and the measure runs in eval mode. (A first
    argument that is no Transformer is left to the function's own check, which names what arrived.)"""
    @functools.wraps(function)
    def measured(model, *args, **kwargs):
        if not isinstance(model, Transformer):
            return function(model, *args, **kwargs)
        with measuring(model):
            return function(model, *args, **kwargs)
    return measured


def check_model(model, name="the model"):
    """A course Transformer (this module's) whose modules match its Config (``check_structure``), else one
    sentence naming what arrived; return it."""
    if not isinstance(model, Transformer):
        got = shown(model) if not isinstance(model, torch.Tensor) else (   # a nested tensor has no one shape
            tensor_refusal(model, float8=True) or f"a tensor of shape {tuple(model.shape)}")
        fail(f"{name} should be a helpers.model.Transformer (as helpers.weights loads one), but got {got}")
    return model.check_structure()


# ------------------------------------------------------------ a model's structure against its Config

class _Edits:
    """How many modules, parameters and buffers torch has set on any module in this process, counted by
    torch's global registration hooks (``count_edit``): while the count stays the same, no ``model.x = ...``
    has changed a model's structure since it was last checked (``structure_key``)."""
    count = 0
    handle = None   # the module hook's handle: whether the hooks are still there


def count_edit(module, name, value):
    """torch's registration hook: count one module, parameter or buffer set (returns None: set as given)."""
    _Edits.count += 1


def edits():
    """``_Edits.count``, after the hooks are registered (again, when something took them away: a fence that
    puts back torch's globals as they were before this module was imported), which counts as an edit."""
    if _Edits.handle is None or _Edits.handle.id not in torch_module._global_module_registration_hooks:
        _Edits.handle = torch_module.register_module_module_registration_hook(count_edit)
        torch_module.register_module_parameter_registration_hook(count_edit)
        torch_module.register_module_buffer_registration_hook(count_edit)
        _Edits.count += 1
    return _Edits.count


def structure_key(model):
    """What changes whenever ``model``'s structure may have: the edit count (any ``x.name = module or
    parameter`` in the process), its Config, its E and its blocks (``del model.blocks[0]`` sets nothing), read
    without a torch call (chapter 09's ``op_count`` counts every one a pass makes). A change that sets nothing
    and moves none of these (``p.data = ...`` of another shape, ``model.to("meta")``) makes the pass fail, and
    ``Transformer.forward`` then checks in full (``structure_problem``): the sentence, not torch's error."""
    blocks = model._modules.get("blocks")
    return (edits(), model.__dict__.get("cfg"), model._parameters.get("E"),
            *(() if blocks is None else blocks._modules.values()))


def same_key(old, new):
    """Whether ``structure_key``s ``old`` (None: none yet) and ``new`` are the same: the same edit count and the
    very same objects (``is``: a tensor's ``==`` would compare its numbers)."""
    return (old is not None and len(old) == len(new) and old[0] == new[0]
            and all(a is b for a, b in zip(old[1:], new[1:])))


ADVICE = "it was changed after it was built (load or build the model again, or build one whose Config says so)"
_MISSING = object()


def part_of(model, path):
    """The module or tensor at ``path`` ('blocks.0.attn.W_Q') in ``model``, read name by name; _MISSING when a
    name is not there."""
    part = model
    for name in path.split("."):
        try:
            part = getattr(part, name, _MISSING)
        except Exception:   # noqa: BLE001 (a property of the learner's may raise anything)
            return _MISSING
        if part is _MISSING:
            return _MISSING
    return part


def built_of(model):
    """What the Transformer ``model`` is built of, read when it is built (``Transformer.__init__``): its Config,
    each module's path and class, and each parameter's and buffer's path and shape."""
    modules = tuple((path, type(module)) for path, module in model.named_modules() if path)
    tensors = tuple((path, tuple(t.shape)) for path, t in (*model.named_parameters(), *model.named_buffers()))
    return model.cfg, modules, tensors


def structure_problem(model):
    """The sentence for the first way ``model``'s modules differ from what it was built of (``built_of``):
    another number of blocks, a module of another class (a subclass, such as chapter 09's PlainBlock, is one),
    a parameter or buffer missing or of another shape (a 1-D one, a bias or a norm's scale, may be None: its
    part runs without it, as with bias=False), or weights on the meta device or of mixed devices or dtypes;
    None when they match."""
    cfg = model.__dict__.get("cfg")
    if not isinstance(cfg, Config):
        return f"the model's cfg should be a helpers.model.Config, but got {shown(cfg)}: {ADVICE}"
    blocks = model._modules.get("blocks")
    if isinstance(blocks, nn.ModuleList) and len(blocks) != cfg.n_layers:
        return (f"the model should have the {cfg.n_layers} blocks its Config says (n_layers={cfg.n_layers}), but it "
                f"has {len(blocks)}: {ADVICE}")
    built = model.__dict__.get("_built")
    if built is None:   # (not built by Transformer.__init__: nothing to compare with)
        return None
    if built[0] != cfg:
        return f"the model's cfg should be the Config it was built with, but it was replaced by another: {ADVICE}"
    _, modules, tensors = built
    for path, kind in modules:
        part = part_of(model, path)
        if not isinstance(part, kind):
            got = "missing" if part is _MISSING else "None" if part is None else f"of class {type_name(part)}"
            return (f"the model's {path} should be of class {kind.__name__}, as it was built, but it is {got}: "
                    f"{ADVICE}")
    first = None
    for path, shape in tensors:
        t = part_of(model, path)
        if t is None and len(shape) == 1:
            continue
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
            got = ("missing" if t is _MISSING else "None" if t is None else f"of class {type_name(t)}"
                   if not isinstance(t, torch.Tensor) else f"of shape {tuple(t.shape)}")
            return (f"the model's {path} should be a tensor of shape {shape}, as its Config says, but it is {got}: "
                    f"{ADVICE}")
        if t.device.type == "meta":
            return meta_sentence("the model", path)
        first = first or (path, t)
        if (t.device, t.dtype) != (first[1].device, first[1].dtype):
            return (f"the model's weights should share one device and dtype, but {first[0]} is {first[1].dtype} on "
                    f"{first[1].device} and {path} is {t.dtype} on {t.device}: {ADVICE}")
    return None


DIGEST_NUMBERS = 2 ** 22   # a model of at most this many numbers is also summed (a few ms) by weights_state


STRONG_NUMBERS = 2 ** 23   # a model of at most this many numbers is hashed (SHA-256) by weights_state(strong=True)


def tensor_version(t, strong=False):
    """What tells whether ``t`` was changed in place: its version counter, which every in-place op bumps. An
    inference tensor (made inside torch.inference_mode(), as a model loaded there holds) has no counter and
    changes in place only inside that mode, where nothing counts: its digest instead (``states.digest``;
    ``strong``: SHA-256), so a key holding it still changes with its numbers, at about 3 ms per 10^6 of them."""
    return digest(t, strong=strong) if t.is_inference() else t._version


def weights_state(net, exact=False, strong=False):
    """A hashable key that changes when ``net``'s weights do, cheaply: each parameter's and buffer's
    id, storage address and version counter (which every in-place change bumps: an optimizer's step,
    ``load_state_dict``, ``p.mul_`` under no_grad), and for a model of at most DIGEST_NUMBERS numbers
    each one's sum too (an edit through ``p.data``, which no counter sees). A cache keyed on it
    never shows a picture of weights changed since.

    ``exact``: instead, each one's name and digest (``states.digest``: shape, dtype, CRC-32 of its
    bytes), equal only for the same numbers, at any size (about 3 ms for 10^6 of them); CRC-32 can be
    matched on purpose (other bytes, the same CRC), so it keys only what the course's own code changes.
    ``strong``: a key no one can match with other weights, for a cache of a learner's model: for a model of
    at most STRONG_NUMBERS numbers, each one's name and SHA-256 digest (measured: 3 ms for the shipped
    Shakespeare model's 8 x 10^5 numbers, so about 30 ms at the limit); above it (a real model: 1 s a call),
    each one's name, shape, dtype, id, storage address and version counter (an edit through ``p.data`` or a
    NumPy view, which moves no counter, is not seen there). A model with a tensor on the meta device
    (``meta_tensor``) holds no numbers to key: each one's name, shape, dtype and device (whatever reads it
    refuses it). An inference tensor (a model loaded inside torch.inference_mode()) has no version counter:
    its digest stands in for it (``tensor_version``), so such a model works, and is keyed by its numbers."""
    if meta_tensor(net) is not None:
        named = (*net.named_parameters(), *net.named_buffers())
        return tuple((name, t.shape, t.dtype, t.device.type) for name, t in named)
    if exact or (strong and sum(t.numel() for t in (*net.parameters(), *net.buffers())) <= STRONG_NUMBERS):
        return tuple((name, digest(t, strong=strong)) for name, t in (*net.named_parameters(), *net.named_buffers()))
    if strong:
        named = (*net.named_parameters(), *net.named_buffers())
        return tuple((name, t.shape, t.dtype, id(t), t.data_ptr(), tensor_version(t, strong=True))
                     for name, t in named)
    tensors = [*net.parameters(), *net.buffers()]
    key = tuple((id(t), t.data_ptr(), tensor_version(t)) for t in tensors)
    if sum(t.numel() for t in tensors) <= DIGEST_NUMBERS:
        key += tuple(float(t.detach().sum(dtype=torch.float64)) for t in tensors if t.is_floating_point())
    return key
