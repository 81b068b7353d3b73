"""Multi-head attention, counted and compared, and the heads of trained models (chapter 05).

* ``split_heads`` / ``merge_heads``: the view/transpose that cuts one long query vector per
  token into heads, and its inverse, in torch.
* ``book_attention`` (from chapter 04): the Book's seeded layer as a ``model.Attention``;
  ``intermediates`` runs any such layer and keeps every step.
* ``attention_parameters`` and ``attention_weights_bytes``: the counts.
* ``torch_differences``: our module against torch's own implementations.
* ``previous_token_score``, ``induction_score``, ``head_scores``, ``loss_by_position``,
  ``copy_losses``, ``restart_probability``, ``read_through_losses``: what the chapter measures
  on trained heads; ``even_weights`` gives a
  score's chance level, ``attention_profile`` where a head's weight goes, ``repeat_score``
  the induction score of any prompt; ``induction_figures`` and
  ``card_problems``: the induction model's card, measured and judged.
* ``head_view``: the explorer's compute (one head of a shipped model, or of any Transformer
  with its tokenizer, on one prompt).
* ``MultiHeadAttention``: the course's own version of the learner's module (the fallback of
  ``learner.use``); ``module_cases`` the shipped layers and real inputs the chapter's check
  runs a learner's module on, ``slipped_attention`` the layer computed with one known mistake.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import weights, worlds
from ..exercises import sealed
from ..errors import MAX_BYTES, MAX_WIDTH, as_array, check_bytes, check_finite, check_ids_given, check_index, \
    check_number, check_positive_int, check_size, check_switch, check_tensor, check_tensor_size, count, fail, length, \
    items_of, refuse_bools, shape_of, shown, to_numpy, whole
from ..masking.compute import book_attention  # noqa: F401  (chapter 05 builds the Book's layer too)
from ..model import Attention, check_heads_split, check_model, check_prompt_length, linear, measure, weights_state
from ..patching import ablation_replace
from ..states import on_the_cpu


SHIPPED = ("cat", "dragon", "induction")   # the shipped models an exercise check may run on


def check_shipped(model, name):
    """The shipped model ``name`` ('cat', 'dragon' or 'induction'; an exercise check runs on it), as
    ``helpers.weights.load_<name>()`` gives it, else one sentence naming what arrived; return it."""
    if type(name) is not str or name not in SHIPPED:
        fail(f"name should be one of {SHIPPED}, but got {shown(name)}")
    check_model(model, f"the {name} model")
    shipped = getattr(weights, f"load_{name}")().cfg
    if model.cfg != shipped:
        fail(f"the {name} model should be the shipped one (weights.load_{name}()), but got a model with "
             f"d_model={model.cfg.d_model}, {model.cfg.n_layers} layers and {model.cfg.vocab_size} tokens")
    return model


# ------------------------------------------------------------ splitting heads

@on_the_cpu
def split_heads(x, n_heads):
    """(B, T, h*d_k) -> (B, h, T, d_k): columns [i*d_k, (i+1)*d_k) of each token become head i."""
    x = as_tensor(x, "x", "numbers of shape (B, T, width)")
    n_heads = check_positive_int(n_heads, "n_heads")
    if x.dim() != 3:
        fail(f"x should have shape (B, T, width) for split_heads, but got shape {tuple(x.shape)}")
    B, T, width = x.shape
    if width % n_heads:
        fail(f"the width of x should split into n_heads={n_heads} equal heads, but got width {width}")
    return x.view(B, T, n_heads, width // n_heads).transpose(1, 2)


@on_the_cpu
def merge_heads(x):
    """(B, h, T, d_k) -> (B, T, h*d_k): the heads side by side again."""
    x = as_tensor(x, "x", "numbers of shape (B, heads, T, d_k)")
    if x.dim() != 4:
        fail(f"x should have shape (B, heads, T, d_k) for merge_heads, but got shape {tuple(x.shape)}")
    B, H, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, H * d_k)


# What a call on an attention layer holds at once, in tables of the layer's dtype: (B, heads, T, T) ones and
# (B, T, d_model) ones beside x (measured in float32: intermediates 2.2 and 8, torch_differences 5.3 and 13.3).
LAYER_TABLES = (3, 8)         # intermediates: scores, weights and softmax's work; x's finite test, q, k, v, outputs
DIFFERENCES_TABLES = (6, 14)  # torch_differences: those of both modules and their differences


def check_attention(attn):
    """``attn`` if it is an attention layer (helpers.model.Attention), else one sentence."""
    if not isinstance(attn, Attention):
        fail(f"expected an attention layer (helpers.model.Attention, e.g. model.blocks[0].attn), "
             f"but got a {type(attn).__name__}")
    return attn


def check_layer_input(attn, x, what="attention", tables=LAYER_TABLES):
    """``attn`` as an attention layer (helpers.model.Attention) and x (B, T, d_model) as finite real numbers
    (a tensor, an array or a list; not True/False), else one sentence; return x as a tensor in the layer's
    dtype (float32; float64, float16 or bfloat16 for a layer made so), the dtype the layer computes in:
    a number that dtype cannot hold (above 65,504 for float16) is refused, never made inf.
    The call's memory (``what``, holding ``tables``: see LAYER_TABLES) is counted from x's shape before its
    numbers are read (``check_layer_work``)."""
    check_attention(attn)
    shape = shape_of(x, "x")   # a tensor's or an array's, read without converting it
    if shape is None:          # a list or a number: to_numpy counts it as it converts it
        x = to_numpy(x, "x")
        shape = x.shape
    check_layer_work(attn, shape, what, tables)
    if isinstance(x, torch.Tensor):
        if x.dtype == torch.bool:
            refuse_bools("x")
    else:
        x = to_numpy(x, "x")
    check_finite(x, "x")
    return fits_dtype(torch.as_tensor(x).detach(), attn.W_Q.dtype, "x")


def check_layer_work(attn, shape, what, tables):
    """Refuse x's ``shape`` unless it is (B, T, d_model) for the layer ``attn``, and refuse up front a call
    (``what``) whose ``tables`` (B, heads, T, T) and (B, T, d_model) tables of the layer's dtype (float32 at least,
    as the layer counts them) pass MAX_BYTES."""
    d_model = attn.W_Q.shape[0]
    if len(shape) != 3 or shape[-1] != d_model:
        fail(f"expected x of shape (B, T, {d_model}), but got {tuple(shape)}")
    B, T, _ = shape
    scores, rows = tables
    need = max(4, attn.W_Q.element_size()) * (scores * B * attn.n_heads * T * T + rows * B * T * d_model)
    check_bytes(need, f"{what} on {count(B)} sequences of {count(T)} tokens", "give fewer or shorter sequences")


def fits_dtype(x, dtype, name):
    """The finite tensor ``x`` in ``dtype`` (a torch float type), or one sentence when an entry is larger
    than that dtype holds (the cast would make it inf); return the cast tensor."""
    top = torch.finfo(dtype).max
    if x.numel() and (not x.is_floating_point() or torch.finfo(x.dtype).max > top):
        largest = float(x.abs().max() if x.is_floating_point() else x.double().abs().max())
        if largest > top:
            most = f"{top:,.0f}" if top < 1e15 else f"{top:.3g}"
            fail(f"{name} should hold numbers the layer's dtype {dtype} can hold (each of size at most {most}), "
                 f"but one has size {largest:.3g}")
    return x.to(dtype)


SWITCHES = ("causal", "positions", "ablate", "scaled", "start")   # what intermediates passes on to the layer


@on_the_cpu
@torch.no_grad()
def intermediates(attn, x, **switches):
    """Run the attention layer ``attn`` on x (B, T, d_model), read in the layer's dtype
    (``check_layer_input``), and keep every step.

    Returns a dict: q, k, v (B, T, d_model), scores and weights (B, h, T, T), head_out
    (B, h, T, d_k), concat and attn (B, T, d_model; attn is the layer's output).
    switches go to the layer (e.g. causal=False): some of SWITCHES (the steps are kept by this function itself).
    """
    x = check_layer_input(attn, x)
    unknown = [name for name in switches if name not in SWITCHES]
    if unknown:
        fail(f"the switches should be some of {', '.join(SWITCHES)}, but got {shown(unknown[0])}")
    kept = {}
    attn(x, keep=kept.__setitem__, **switches)
    return kept


# ------------------------------------------------------------- the counts

def attention_parameters(d_model, bias=True):
    """Parameters of one multi-head attention layer, by part (the number of heads does not matter).
    d_model: a whole number from 1 to MAX_WIDTH (1,048,576), so the total is exact in float64 too.

    Returns dict(qkv_weight=3d², qkv_bias=3d, proj_weight=d², proj_bias=d, total).
    """
    d, bias = check_size(d_model, "d_model", MAX_WIDTH), check_switch(bias, "bias")
    parts = dict(qkv_weight=3 * d * d, qkv_bias=3 * d if bias else 0,
                 proj_weight=d * d, proj_bias=d if bias else 0)
    parts["total"] = sum(parts.values())
    return parts


def attention_weights_bytes(batch, n_heads, T, bytes_per_number=4):
    """Bytes of one layer's attention-weights tensor (batch, n_heads, T, T): one number per
    (query, key) pair per head, 4 bytes each in float32."""
    batch, n_heads = check_positive_int(batch, "batch"), check_positive_int(n_heads, "n_heads")
    T, bytes_per_number = check_positive_int(T, "T"), check_positive_int(bytes_per_number, "bytes_per_number")
    return batch * n_heads * T * T * bytes_per_number   # Python ints: exact (NumPy's int32 or int64 would wrap)


@on_the_cpu
@torch.no_grad()
def torch_differences(attn, x):
    """Largest absolute differences between our layer ``attn`` on x and torch's own attention.

    attn: a ``model.Attention`` with biases, without rotary positions, a key and value for each head;
    x: (B, T, d_model).
    Returns dict(sdpa=..., multihead=..., weights=...): ``scaled_dot_product_attention`` fed
    the layer's own q, k, v (is_causal=True), then the layer's W_O; ``nn.MultiheadAttention``
    with the layer's weights copied in (nn.Linear's layout: each W transposed, W_Q, W_K, W_V
    stacked) and a causal mask; and the two modules' attention weights.
    """
    if check_attention(attn).rotary or attn.b_Q is None or attn.n_kv_heads != attn.n_heads:
        why = ("with rotary positions" if attn.rotary else "without biases" if attn.b_Q is None else
               f"whose {attn.n_heads} heads share {attn.n_kv_heads} key/value heads")
        fail(f"torch_differences should get a layer with biases, no rotary positions and a key and value for "
             f"each head (as nn.MultiheadAttention has), but got one {why}")
    x = check_layer_input(attn, x, "torch_differences", DIFFERENCES_TABLES)
    T = x.shape[1]
    ours = intermediates(attn, x)
    H, d = attn.n_heads, attn.W_Q.shape[0]
    q, k, v = (split_heads(ours[name], H) for name in "qkv")
    fused = linear(merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)), attn.W_O, attn.b_O)
    with torch.random.fork_rng(devices=[]):   # its init draws from torch's global generator: put back after
        mha = nn.MultiheadAttention(d, H, batch_first=True, dtype=attn.W_Q.dtype).eval()   # the layer's dtype
    mha.load_state_dict({"in_proj_weight": torch.cat([attn.W_Q.T, attn.W_K.T, attn.W_V.T]),
                         "in_proj_bias": torch.cat([attn.b_Q, attn.b_K, attn.b_V]),
                         "out_proj.weight": attn.W_O.T, "out_proj.bias": attn.b_O})
    hidden = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    theirs, their_weights = mha(x, x, x, attn_mask=hidden, need_weights=True, average_attn_weights=False)
    return dict(sdpa=float((fused - ours["attn"]).abs().max()),
                multihead=float((theirs - ours["attn"]).abs().max()),
                weights=float((their_weights - ours["weights"]).abs().max()))


# ------------------------------------------------------------- what trained heads do

def as_tensor(value, name, what):
    """``value`` as ``torch.as_tensor`` makes it (a list of floats as float32, a NumPy array in its own
    dtype) and ``check_tensor`` takes it; anything else is refused with one sentence: ``name`` should
    be ``what``. Its size is counted before anything is made (a range is made number by number, a
    broadcast array or an expanded tensor stands for more numbers than it stores). Return the tensor."""
    if isinstance(value, torch.Tensor):
        return check_tensor_size(value, name)
    size = length(value) if isinstance(value, range) else value.size if isinstance(value, np.ndarray) else 0
    check_bytes(8 * size, f"{name} ({count(size)} numbers)", "give fewer numbers")
    if isinstance(value, np.ma.MaskedArray):   # torch would read its hidden entries: to_numpy refuses those
        to_numpy(value, name, bools=True)
        value = np.ma.getdata(value)
    try:
        value = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError, OverflowError, RecursionError):
        fail(f"{name} should be {what}, but got {type(value).__name__} {shown(value)}")
    return check_tensor(value, name)


WEIGHTS = "attention weights, real numbers between 0 and 1"


WEIGHTS_ATOL = 1e-3   # how far a float32 softmax row (of up to a few thousand keys) may sum from 1


def check_weights(weights):
    """Attention weights as a tensor (``as_tensor``) of finite real numbers from 0 to 1, each row (the last
    axis) summing to 1 (within WEIGHTS_ATOL), as a softmax makes them; whole numbers and True/False are
    refused. Return it detached: the measures read the weights, and reading a number of a tensor that requires grad
    (a learner's softmax of scores being trained) makes torch print a warning; their scores carry no gradient.
    Memory: ``weights_work(w)`` bytes, counted before the tests, which make the largest of them (the finite test's
    |w| and True/False tables, ``softmax_rows``' float64 copy); the measures that take the weights make at most
    one more copy of them after that (``attention_profile``, ``repeat_score``), within the same count."""
    w = as_tensor(weights, "weights", WEIGHTS).detach()
    if not w.is_floating_point():
        fail(f"weights should be {WEIGHTS} (a float tensor), but got dtype {w.dtype}")
    check_bytes(weights_work(w), f"a measure on weights of shape {tuple(w.shape)}", "give fewer or shorter rows of weights")
    check_finite(w, "weights")
    if w.numel() and not (w.min() >= -WEIGHTS_ATOL and w.max() <= 1 + WEIGHTS_ATOL):
        fail(f"weights should be {WEIGHTS}, but they range from {float(w.min()):.4g} to {float(w.max()):.4g}")
    return w


def weights_work(w):
    """Bytes the work on the weights ``w`` (a float tensor) may hold at once beside them: 8 a number for a float64
    copy (the rows' sums) and as many as one of w's own numbers takes for a copy of w. Measured (float32, 8000 x 8000):
    the finite test 6.7 bytes a number, the float64 sums 7.7, attention_profile's copy 4."""
    return (8 + w.element_size()) * w.numel()


@on_the_cpu
def softmax_rows(w):
    """Refuse checked weights (``check_weights``, their shape checked by the caller) whose rows (the last
    axis) do not each sum to 1 within WEIGHTS_ATOL, as a softmax makes them; return w."""
    if w.dim() and w.numel():
        sums = w.sum(-1, dtype=torch.float64)
        worst = int((sums - 1).abs().reshape(-1).argmax())
        if abs(float(sums.reshape(-1)[worst]) - 1) > WEIGHTS_ATOL:
            fail(f"weights should be {WEIGHTS} whose rows (the last axis) each sum to 1, as a softmax makes them, "
                 f"but a row sums to {float(sums.reshape(-1)[worst]):.4g}")
    return w


@on_the_cpu
def previous_token_score(weights):
    """Mean attention each query (after the first) puts on the token just before it.

    weights: (..., T, T) finite real numbers -> (...) scores in [0, 1]; 1 is a perfect previous-token head.
    """
    w = check_weights(weights)
    if w.dim() < 2 or w.shape[-1] != w.shape[-2] or w.shape[-1] < 2:
        fail(f"expected square attention weights (..., T, T) with T >= 2, but got shape {tuple(w.shape)}")
    return torch.diagonal(softmax_rows(w), offset=-1, dim1=-2, dim2=-1).mean(-1)


@on_the_cpu
def induction_score(weights, length):
    """Mean attention from each token of the second copy to the token after its earlier occurrence.

    weights: (..., 2*length+1, 2*length+1) on a sequence <BOS> a_1..a_L a_1..a_L.
    The query a_j of the second copy sits at position L+j; the token after the
    first a_j sits at position j+1: an offset of L-1 back, for j = 1..L.
    Returns (...) scores in [0, 1]; 1 is a perfect induction head.
    """
    w = check_weights(weights)
    length = check_positive_int(length, "length", minimum=2)
    T = 2 * length + 1
    if w.dim() < 2 or tuple(w.shape[-2:]) != (T, T):
        fail(f"weights for a repeated sequence of length {length} should end in ({T}, {T}), "
             f"but have shape {tuple(w.shape)}")
    diagonal = torch.diagonal(softmax_rows(w), offset=-(length - 1), dim1=-2, dim2=-1)  # queries L-1 .. 2L
    return diagonal[..., 2:].mean(-1)                                      # queries L+1 .. 2L


MAX_EVEN_T = math.isqrt(MAX_BYTES // 12)   # the largest T whose even_weights fit in MAX_BYTES


@on_the_cpu
def even_weights(T):
    """(T, T) causal attention spread evenly: query t gives 1/(t+1) to each of tokens 0..t.

    The chance level of a score: a head that prefers nothing scores ``score(even_weights(T))``.
    Its three (T, T) float32 tables must fit 1.5 GiB: T at most ``MAX_EVEN_T`` (11,585).
    """
    T = check_positive_int(T, "T")
    check_bytes(12 * T * T, f"even_weights({count(T)})",
                f"T should be at most {MAX_EVEN_T:,} (three float32 tables of T x T numbers)")
    visible = torch.tril(torch.ones(T, T))
    return visible / visible.sum(-1, keepdim=True)


def attention_profile(weights):
    """Where a head's weight goes, averaged over the queries 1..T-1 (the first query sees only itself).

    weights: (..., T, T), T >= 2. Each weight is counted once, in the first of these that
    fits its key: the query itself, the token just before, the token two back, ``<BOS>``
    (position 0), elsewhere. Returns a dict of those five (...)-shaped means, which add up
    to 1; ``previous`` equals ``previous_token_score`` (to float rounding).
    Memory: one copy of the weights (the keys 3 or more back), within ``check_weights``' count.
    """
    w = check_weights(weights)
    if w.dim() < 2 or w.shape[-1] != w.shape[-2] or w.shape[-1] < 2:
        fail(f"expected square attention weights (..., T, T) with T >= 2, but got shape {tuple(w.shape)}")
    T = softmax_rows(w).shape[-1]
    further = w.tril(-3)          # keys 3 or more back: <BOS> (key 0) and elsewhere
    bos = further[..., 0].clone()
    further[..., 0] = 0
    per_query = dict(itself=w.diagonal(0, -2, -1)[..., 1:], previous=w.diagonal(-1, -2, -1),
                     two_back=w.diagonal(-2, -2, -1), bos=bos[..., 1:], elsewhere=further[..., 1:, :].sum(-1))
    return {name: queries_1_on(values, T).mean(-1) for name, values in per_query.items()}


@on_the_cpu
def queries_1_on(values, T):
    """One kind's weights (..., n) of the last n queries, as the weights of queries 1..T-1 (..., T - 1): the
    queries before them (too early to have a key that far back) get 0."""
    return F.pad(values, (T - 1 - values.shape[-1], 0))


@on_the_cpu
def repeat_score(weights, ids, vocab_size=None):
    """Mean weight each query puts on the tokens that followed the earlier occurrences of its own token.

    weights: (T, T) attention of one head; ids (T,): the one sequence of token ids it was computed on, whole
    numbers from 0 (below ``vocab_size``, the model's vocabulary, when given). A query at position t whose token
    also stands at s < t scores the weight on every position s+1 (summed); queries whose token has not occurred
    before are left out. On the repeated layout of ``induction_score`` with no symbol twice in one copy the two
    agree. Returns a float; ids in which no token repeats are refused (the mean would be over no query).
    """
    w = check_weights(weights)
    if w.dim() != 2 or w.shape[0] != w.shape[1]:
        fail(f"weights should be one head's attention, a square (T, T) table, but have shape {tuple(w.shape)}")
    ids = check_sequence_ids(ids, w.shape[0], vocab_size)
    T = ids.shape[0]
    if tuple(w.shape) != (T, T):
        fail(f"weights should be ({T}, {T}) for {T} tokens, but have shape {tuple(w.shape)}")
    softmax_rows(w)
    same = earlier_same(ids)
    repeats = same.any(-1)
    if not repeats.any():
        fail(f"ids should hold a token that repeats (the score is a mean over the queries whose token came "
             f"before), but no token of these {T} repeats")
    follows = torch.zeros(T, T, dtype=torch.bool)
    follows[:, 1:] = same[:, :-1]   # query t scores its weight on s + 1 for each earlier s holding its token
    return float((w * follows).sum(-1)[repeats].double().mean())


def check_sequence_ids(ids, most, vocab_size=None):
    """One sequence of token ids (T,), T at most ``most``, as an integer tensor: whole numbers from 0 (to
    vocab_size - 1 when given); else one sentence. A range is made lazily, so its length is read first."""
    if vocab_size is not None:
        vocab_size = check_positive_int(vocab_size, "vocab_size")
    what = "one sequence (T,) of whole-number token ids"
    check_ids_given(ids, "ids", most)
    ids = as_tensor(ids, "ids", what)
    if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
        fail(f"ids should be {what}, but got dtype {ids.dtype} and shape {tuple(ids.shape)}")
    top = "" if vocab_size is None else f" to {vocab_size - 1}, the model's vocabulary"
    if ids.numel() and (int(ids.min()) < 0 or vocab_size is not None and int(ids.max()) >= vocab_size):
        fail(f"ids should be token ids from 0{top}, but they range from {int(ids.min())} to {int(ids.max())}")
    return ids


def earlier_same(ids):
    """(T, T) bool for token ids (T,): [t, s] is True where query t's token already stood at s < t."""
    return (ids[:, None] == ids[None, :]).tril(-1)


def check_weights_bytes(cfg, B, T, size=4, beside=0):
    """Refuse up front a layer_weights pass whose tables pass MAX_BYTES: the (B, layers, heads, T, T) weights
    it returns, beside what the pass itself holds at once (``Config.pass_bytes``) and ``beside`` bytes for each
    number of one sequence's (layers, heads, T, T) weights (what a caller makes of them after the pass);
    ``size``: bytes a number (4 in float32, 8 for a model.double())."""
    table = cfg.n_layers * cfg.n_heads * T * T
    need = size * B * table + size // 4 * cfg.pass_bytes(B, T) + beside * table
    most = max(0, MAX_BYTES - beside * table) // (size * table + size // 4 * cfg.pass_bytes(1, T))
    check_bytes(need, f"the attention weights of {cfg.n_layers} layers on {count(B)} sequences of {count(T)} tokens",
                f"give at most {count(most)} sequences of this length at once" if most else "give shorter sequences")


# Every measure below that runs a model runs inside ``model.measuring`` (the ``measure`` decorator): a model whose
# weights hold NaN or inf is refused in one sentence, and the pass runs in eval mode (no dropout), the model's
# modes put back afterwards. Its numbers are read in float32 at least (``widened``) and refused when the pass
# made NaN or inf from those finite weights (``check_output``).

HALF = (torch.float16, torch.bfloat16)   # the dtypes a model's numbers are widened from


def widened(t):
    """A model's output ``t`` as float32 when the model computes in float16 or bfloat16 (a loss, a mean or a
    softmax then rounds to 24 bits, not 11 or 8); any other dtype (float32, float64) as it is. The one rule
    for reading a half-precision model's numbers: ``as_weights`` and ``as_numpy`` follow it too."""
    return t.float() if t.dtype in HALF else t


def as_weights(w):
    """Attention weights w (..., T, T) from a model's pass, as the scores read them (``check_weights``): a model
    in float16 or bfloat16 rounds each weight to 11 or 8 bits, so a row sums to 1 only within a few
    thousandths; its rows come as float32, divided by their sums. Any other dtype as it is."""
    return widened(w) / widened(w).sum(-1, keepdim=True) if w.dtype in HALF else w


def check_output(t, what):
    """Refuse ``what``, numbers a measure read from a model's pass (a tensor), when they hold NaN or inf: the
    model's weights are finite (``measuring`` checked them), so a number overflowed the model's dtype in the
    pass, or a hook registered on the model changed what it computes. Return t."""
    if not bool(torch.isfinite(t).all()):
        fail(f"{what} should be finite numbers, but the model's pass gave NaN or inf from finite weights: a number "
             f"overflowed its dtype {t.dtype} (weights too large for it), or a hook registered on the model changed it")
    return t


@on_the_cpu
@measure
@torch.no_grad()
def layer_weights(model, ids):
    """Attention weights of every layer and head: ids (B, T) -> (B, layers, heads, T, T), in the model's
    dtype (float32 for a float16 or bfloat16 model: ``as_weights``).
    Memory: the weights returned and the pass, counted first (``check_weights_bytes``)."""
    ids = check_model(model).check_ids(ids)
    if ids.dim() == 1:
        ids = ids[None]
    (B, T), L = ids.shape, model.cfg.n_layers
    size = max(4, model.E.element_size())   # (a half-precision model's weights are kept as float32's)
    check_weights_bytes(model.cfg, B, T, size)
    out = []                   # the (B, layers, heads, T, T) table, made at the first layer

    def keeper(layer):         # hands the pass its weights back unchanged, a copy kept in out
        def keep(weights):
            kept = as_weights(weights.detach())
            if not out:
                out.append(kept.new_empty((B, L) + tuple(kept.shape[1:])))
            out[0][:, layer] = kept
            return weights
        return keep
    # one pass over the whole batch: (B, heads, T, T) per layer
    model(ids, replace={f"L{layer}.weights": keeper(layer) for layer in range(L)})
    return check_output(out[0], "the attention weights")


@on_the_cpu
def head_scores(model, ids, length):
    """Previous-token and induction scores of every head, averaged over the sequences ``ids``.

    ids: (B, 2*length+1) repeated sequences. Returns (previous (layers, heads), induction (layers, heads)).
    """
    ids, length = repeated_ids(model, ids, length)   # checked before the pass
    size = max(4, model.E.element_size())
    # beside the weights returned: their mean over the batch and the scores' work on it (``weights_work``)
    check_weights_bytes(model.cfg, *ids.shape, size, beside=2 * size + 8)
    w = layer_weights(model, ids).mean(0)            # (layers, heads, T, T)
    return previous_token_score(w), induction_score(w, length)


@on_the_cpu
@measure
@torch.no_grad()
def loss_by_position(model, ids, **switches):
    """Cross-entropy of predicting each next token, averaged over the batch.

    ids: (B, T) with T >= 2 -> (T-1,): entry t is the loss of predicting ids[:, t+1] from ids[:, :t+1].
    switches go to the model (e.g. ablate_heads=[(1, 0)]): some of worlds.LOGIT_SWITCHES (a trace or a KVCache
    would not give logits, or would fill the cache).
    """
    ids = check_model(model).check_ids(ids)
    if ids.dim() == 1:
        ids = ids[None]
    if ids.shape[1] < 2:
        fail(f"ids should have at least 2 tokens in each sequence (a token to predict after the first), "
             f"but got shape {tuple(ids.shape)}")
    model.check_switches(switches, worlds.LOGIT_SWITCHES)
    logits = widened(model(ids[:, :-1], **switches))
    losses = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").mean(0)
    return check_output(losses, "the losses")


@on_the_cpu
def repeated_ids(model, ids, length):
    """(ids (B, 2*length+1), length) for a course model of at least 2 tokens (<BOS> and a symbol):
    repeated sequences <BOS> a_1..a_L a_1..a_L (one (T,) counts as a batch of one) whose length fits
    ``length`` and whose second copy repeats the first (``check_repeats``); else one sentence."""
    ids = check_model(model).check_ids(ids)
    if model.cfg.vocab_size < 2:
        fail(f"the model should know at least 2 tokens (<BOS> and a symbol to repeat), but has vocab_size="
             f"{model.cfg.vocab_size}")
    if ids.dim() == 1:
        ids = ids[None]
    length = check_positive_int(length, "length", minimum=2)
    if ids.shape[1] != 2 * length + 1:
        fail(f"ids for a repeated sequence of length {length} should have {2 * length + 1} tokens, "
             f"but have {ids.shape[1]}")
    check_repeats(ids, length)
    return ids, length


def check_repeats(ids, length):
    """Refuse ids (B, 2*length+1) unless each sequence's last ``length`` tokens repeat the ``length`` after its
    first (<BOS> a_1..a_L a_1..a_L): the second copy's loss means nothing without a copy."""
    differ = ids[:, 1:length + 1] != ids[:, length + 1:]   # (B, length)
    if differ.any():
        sequence = int(differ.any(1).int().argmax())
        position = length + 1 + int(differ[sequence].int().argmax())
        fail(f"ids should be a sequence and its repeat after the first token (<BOS> a_1..a_L a_1..a_L with "
             f"L = {length}), but sequence {sequence} differs from its first copy at position {position}")


@on_the_cpu
def copy_losses(model, ids, length, **switches):
    """Mean loss on the first copy and on the second (dict), from ``loss_by_position``.

    First copy: predicting a_1..a_L, each a fresh random draw. Second copy: predicting
    a_2..a_L the second time (a_1 of the second copy is left out: nothing announces it).
    chance: ln(vocab_size - 1), the loss of a uniform guess among the symbols.
    """
    ids, length = repeated_ids(model, ids, length)
    per_position = loss_by_position(model, ids, **switches)   # entry t: the target at t+1
    return dict(first=float(per_position[:length].mean()),
                second=float(per_position[length + 1:].mean()),
                chance=math.log(model.cfg.vocab_size - 1))


@on_the_cpu
@measure
@torch.no_grad()
def restart_probability(model, ids, length):
    """Mean probability the model gives a_1, the first symbol, as the next token in the first copy.

    ids: (B, 2*length+1) repeated sequences. Returns (length,): entry i is for predicting
    position i+2 from the tokens up to position i+1 (positions 2..length+1). A restart of the
    pattern after i+1 symbols would bring a_1 there; at position length+1 it really comes.
    """
    ids, length = repeated_ids(model, ids, length)
    probs = torch.softmax(widened(model(ids[:, :length + 1])), dim=-1)[:, 1:]    # (B, length, V)
    first = ids[:, 1, None, None].expand(-1, length, 1)
    return check_output(probs.gather(-1, first)[..., 0].mean(0), "the probabilities")


@on_the_cpu
@measure
@torch.no_grad()
def read_through_losses(model, ids, length, head, means, reader=1):
    """Copy losses when the earlier ``head`` is mean-ablated only where layer ``reader`` reads it.

    head: (layer, h) with layer < reader; means: ``patching.mean_head_outputs`` on the
    same inputs ids[:, :-1]. One pass with ``head`` mean-ablated records layer ``reader``'s
    queries, keys and values (B, T, d_model, before the split into heads); then each of the
    three is patched alone into an otherwise clean pass. Returns {"q" | "k" | "v": the
    ``copy_losses`` dict}: how much the copying needs the head through that input.
    """
    ids, length = repeated_ids(model, ids, length)   # checked before any pass
    reader = check_index(reader, "reader", model.cfg.n_layers)
    pair = items_of(head) if isinstance(head, (tuple, list)) else ()   # (a subclass's __len__ may lie or raise)
    if len(pair) == 2:   # (int's own values: an int subclass's comparisons may lie)
        head = tuple(whole(i, "each number of the ablated head (layer, head)", "a whole number") for i in pair)
    if len(pair) != 2 or not 0 <= head[0] < reader or not 0 <= head[1] < model.cfg.n_heads:
        fail(f"the ablated head should be (layer, head) with its layer before the reading layer {reader}, "
             f"but got {shown(head)}")
    seen = {}
    replace = ablation_replace([head], "mean", means)
    replace.update({f"L{reader}.{part}": (lambda x, part=part: seen.setdefault(part, x)) for part in "qkv"})
    model(ids[:, :-1], replace=replace)
    return {part: copy_losses(model, ids, length, replace={f"L{reader}.{part}": lambda _, x=seen[part]: x})
            for part in "qkv"}


# ------------------------------------------------------------- the induction model's card

INDUCTION_TEST = dict(n=200, length=8, seed=2024)   # the chapter's test sequences


@on_the_cpu
def induction_figures(model, test=INDUCTION_TEST):
    """The figures the induction model's card records, measured on ``test`` sequences
    (``worlds.repeated_tokens``): losses on the two copies, chance, and every head's
    previous-token and induction scores (lists, [layer][head]). test: a dict of n, length and seed."""
    check_model(model)
    if not isinstance(test, dict) or set(test) != set(INDUCTION_TEST):
        got = f"a dict of {', '.join(map(str, test)) or 'nothing'}" if isinstance(test, dict) else shown(test)
        fail(f"test should be a dict of n, length and seed (as INDUCTION_TEST), but got {got}")
    length = check_positive_int(test["length"], "test['length']", minimum=2)   # (n, seed: repeated_tokens checks them)
    ids = worlds.repeated_tokens(test["n"], length, model.cfg.vocab_size, test["seed"])
    previous, induction = head_scores(model, ids, length)
    losses = copy_losses(model, ids, length)
    return dict(test=dict(test), loss_first_copy=losses["first"], loss_second_copy=losses["second"],
                chance=losses["chance"], previous_token_score=previous.tolist(),
                induction_score=induction.tolist())


FIGURES = ("loss_first_copy", "loss_second_copy", "chance", "previous_token_score", "induction_score")


TARGETS = ("previous_token_layer0", "induction_layer1", "induction_layer0", "first_copy_vs_chance",
           "second_copy_vs_first")   # what a card's targets may bound (card_problems measures them)


def check_card(figures, card):
    """card_problems' arguments: ``figures`` a dict holding FIGURES, the scores of a model of at least 2 layers
    ((layers, heads) tables of numbers from 0 to 1), the losses positive numbers (the second copy's may be 0: the
    ratios divide by the others); ``card`` a dict of targets (at_least, at_most: numbers, by names of TARGETS),
    tolerances (numbers >= 0) and figures (dicts); else one sentence. Returns the three losses as floats, by name."""
    if not isinstance(figures, dict) or any(name not in figures for name in FIGURES) \
            or any(not isinstance(figures[name], (list, tuple)) or len(figures[name]) < 2 for name in FIGURES[3:]):
        fail(f"figures should be the dict induction_figures(model) gives for a model of at least 2 layers "
             f"({', '.join(FIGURES)}), but got {shown(figures)}")
    losses = {name: check_number(figures[name], f"figures['{name}']", low=0, low_open=name != "loss_second_copy")
              for name in FIGURES[:3]}
    for name in FIGURES[3:]:
        scores = as_array(figures[name], f"figures['{name}']", ndim=2)
        outside = int((~((scores >= 0) & (scores <= 1))).sum())   # (NaN is neither)
        if scores.shape[1] == 0 or outside:
            fail(f"figures['{name}'] should be scores from 0 to 1, at least one per layer, but got shape "
                 f"{scores.shape} with {outside} entries outside that range (or NaN)")
    parts = (card, card.get("targets"), card.get("tolerances"), card.get("figures")) if isinstance(card, dict) else ()
    if not parts or not all(isinstance(part, dict) for part in parts) \
            or not all(isinstance(card["targets"].get(bound), dict) for bound in ("at_least", "at_most")):
        fail(f"card should be the induction model's card, a dict of targets (at_least, at_most), tolerances and "
             f"figures, but got {shown(card)}")
    for bound in ("at_least", "at_most"):
        for name, value in card["targets"][bound].items():
            if name not in TARGETS:
                fail(f"the card's targets should bound some of {', '.join(TARGETS)}, but {bound} names {shown(name)}")
            check_number(value, f"the card's target {bound} {name}")
    for name, tolerance in card["tolerances"].items():
        check_number(tolerance, f"the card's tolerance for {shown(name)}", low=0)
        if name in figures and name not in card["figures"] and name not in card:
            fail(f"the card should hold its own figure for each tolerance, but it has none for {shown(name)}")
    return losses


def card_problems(figures, card):
    """Every way ``figures`` (``induction_figures``) miss the model card: a target not met, or
    a figure further from the card's own than the card's tolerance. [] when all hold.

    card["targets"]["at_least"] and ["at_most"] bound, by name: previous_token_layer0 (the
    best layer-0 head's previous-token score), induction_layer1 (the best layer-1 head's
    induction score), induction_layer0 (the best layer-0 head's), first_copy_vs_chance
    (first-copy loss / chance), second_copy_vs_first (second-copy loss / first-copy loss).
    card["tolerances"]: the largest allowed |figure - the card's figure|, by name, for each
    name ``figures`` holds (a training figure such as mean_loss_last_50_steps is compared
    with the card's own only when the caller measured it).
    """
    losses = check_card(figures, card)
    previous, induction = figures["previous_token_score"], figures["induction_score"]
    measured = dict(previous_token_layer0=max(previous[0]), induction_layer1=max(induction[1]),
                    induction_layer0=max(induction[0]),
                    first_copy_vs_chance=losses["loss_first_copy"] / losses["chance"],
                    second_copy_vs_first=losses["loss_second_copy"] / losses["loss_first_copy"])
    targets = card["targets"]
    problems = [f"{name} = {measured[name]:.3f}, below its target {bound}"
                for name, bound in targets["at_least"].items() if measured[name] < bound]
    problems += [f"{name} = {measured[name]:.3f}, above its target {bound}"
                 for name, bound in targets["at_most"].items() if measured[name] > bound]
    for name, tolerance in card["tolerances"].items():
        if name not in figures:
            continue
        shipped = card["figures"][name] if name in card["figures"] else card[name]
        gap = figure_gap(figures[name], shipped, name)
        if gap > tolerance:
            problems.append(f"{name} is {gap:.3f} away from the card's figure, more than its tolerance {tolerance}")
    return problems


def figure_gap(figure, shipped, name):
    """The largest |figure - shipped| of a figure ``name`` (a number or a table) and the card's own, which must
    be finite numbers of one shape; else one sentence."""
    ours, theirs = to_numpy(figure, f"figures['{name}']"), to_numpy(shipped, f"the card's figure {name}")
    if ours.shape != theirs.shape:
        fail(f"figures['{name}'] should have the shape of the card's figure, {theirs.shape}, "
             f"but has shape {ours.shape}")
    check_finite(ours, f"figures['{name}']")
    check_finite(theirs, f"the card's figure {name}")
    return float(np.abs(ours - theirs).max(initial=0.0))


# ------------------------------------------------------------- the explorer's compute

MODELS = ("cat", "induction")
PROMPTS = {
    "cat": ("<BOS> the cat sat on the red mat",
            "<BOS> the big dog ran fast",
            "<BOS> the mat is blue",
            "<BOS> the small cat sat on the floor"),
    "induction": ("<BOS> k i n g m a d e k i n g m a d e",
                  "<BOS> c a f e b a b e c a f e b a b e",
                  "<BOS> h e l l o h e l l o h e l l o",
                  "<BOS> b a n j o b a n j o b a n j o b a n j o"),
}


@sealed
def _loaded_cat():
    """The shipped cat model and its tokenizer, read from disk once (a fresh copy each call: ``sealed``)."""
    return weights.load_cat(), worlds.cat_world().tokenizer


@sealed
def _loaded_induction():
    """The shipped induction model and its tokenizer, read from disk once (a fresh copy each call)."""
    model = weights.load_induction()
    return model, worlds.Tokenizer(worlds.induction_vocab(model.cfg.vocab_size))


def get_model(name):
    """The shipped model ``name`` ('cat' or 'induction') and its tokenizer: read from disk once, and a
    fresh copy on every call (a few ms), so code that changes the model it gets (a learner's module
    zeroing a weight) changes its own copy, never the one the explorer, head_view and the checks use."""
    if type(name) is not str or name not in MODELS:
        fail(f"the model should be one of {MODELS}, but got {shown(name)}")
    return _loaded_cat() if name == "cat" else _loaded_induction()


YOURS = "your model"   # the model menu's name for a model the caller hands in


def model_and_tokenizer(model, tokenizer=None):
    """(net, tokenizer, name) for a shipped model's name ('cat', 'induction'), or for any
    ``helpers.model.Transformer`` with its tokenizer (an object with ``vocab``, one token per id of the
    model, ``encode(text)`` and ``decode(ids)``, or a ``helpers.worlds.World``), named YOURS. A shipped model
    takes no tokenizer (None): it brings its own."""
    from ..model import Transformer

    if isinstance(model, str):
        net, shipped = get_model(model)
        if tokenizer is not None:   # (it would be ignored: the shipped model's own is used)
            fail(f"tokenizer goes with a model of your own (the {model} model brings its own), so it should be None "
                 f"here, but got {shown(tokenizer)}")
        return net, shipped, model
    if not isinstance(model, Transformer):
        fail(f"the model should be one of {MODELS} or a helpers.model.Transformer, but got {type(model).__name__}")
    tokenizer = tokenizer.tokenizer if isinstance(tokenizer, worlds.World) else tokenizer
    vocab, encode, decode = (worlds.tokenizer_part(tokenizer, name) for name in worlds.TOKENIZER_PARTS)
    if vocab is None or encode is None or decode is None:
        fail(f"a model of your own needs its tokenizer (with vocab, encode and decode, or a World), "
             f"but got {type(tokenizer).__name__}")
    size = len(vocab) if isinstance(vocab, (list, tuple)) else None
    if size != model.cfg.vocab_size:   # another world's tokenizer would give another world's results
        V = model.cfg.vocab_size
        fail(f"your model knows ids 0..{V - 1} (a vocabulary of {V}), so its tokenizer's vocab should list its {V} "
             f"tokens, but it {'lists ' + count(size) if size is not None else 'is ' + shown(vocab)}: "
             "is it the model's own tokenizer?")
    worlds.tokenizer_vocab(tokenizer, model.cfg.vocab_size)   # texts a picture can show
    return model, tokenizer, YOURS


def prompt_tokens(net, tokenizer, prompt, name=YOURS):
    """(ids (T,), tokens (T texts, the tokenizer's decode)) of one prompt, with one sentence for a
    prompt or tokenizer that does not fit ``net``: no work on the model."""
    cfg, who = net.cfg, "your model" if name == YOURS else f"the {name} model"
    vocab = worlds.tokenizer_part(tokenizer, "vocab")
    ids = worlds.prompt_encode(tokenizer, prompt, min(cfg.vocab_size, len(vocab)), cfg.vocab_size)
    check_prompt_length(cfg, len(ids), f"the prompt for {who}")
    return ids, worlds.tokenizer_decode(tokenizer, ids)


@on_the_cpu
@torch.no_grad()
def prompt_attention(net, tokenizer, prompt, name=YOURS):
    """(ids (T,), the attention weights of every layer and head (layers, heads, T, T) as NumPy) of
    ``net`` on one prompt, with one sentence for a prompt or tokenizer that does not fit the model."""
    ids, _ = prompt_tokens(net, tokenizer, prompt, name)
    return ids, ids_attention(net, ids)


@on_the_cpu
@measure
@torch.no_grad()
def ids_attention(net, ids):
    """The attention weights of every layer and head (layers, heads, T, T), NumPy in the model's
    dtype, of ``net`` on checked ids (T,) (``prompt_tokens``); a model in float16 or bfloat16 gives
    float32 rows divided by their sums (``as_weights``), so the scores read them as weights."""
    record = net(ids, trace=True)
    w = torch.stack([record[f"L{layer}.weights"] for layer in range(net.cfg.n_layers)])
    return as_numpy(check_output(as_weights(w), "the attention weights"))


def as_numpy(t):
    """A model's output tensor ``t`` (any shape, detached) as NumPy, read as the measures read it
    (``widened``): float16 and bfloat16 (which NumPy has no type for) as float32, which holds each of their
    values exactly; float32 and float64 as they are."""
    return widened(t).numpy()


@on_the_cpu
def head_view(model="cat", layer=0, head=0, prompt=None, tokenizer=None, cache=None):
    """The attention weights of one head on one prompt: of a shipped model (its name) or of any
    ``Transformer`` with its ``tokenizer`` (see ``model_and_tokenizer``).

    Returns dict(weights (T, T) NumPy, tokens (T pieces, from the tokenizer's decode),
    previous = the mean weight on the token just before (``previous_token_score``; nan for a prompt of one
    token, which has no token before), repeat = the mean weight on what followed the earlier occurrences of
    the query's token (``repeat_score``; nan when no token repeats), title: says "none" for each nan). ``cache``: a dict (the explorer's) keeping each prompt's
    attention for every layer and head, so another layer or head is not computed again; a model
    of your own is keyed by its weights' state (``weights_state``), so one changed in place since
    is computed again, never shown as it was.
    """
    net, tokenizer, name = model_and_tokenizer(model, tokenizer)
    cfg = net.cfg
    layer = check_index(layer, f"layer (the {name} model has {cfg.n_layers})", cfg.n_layers)
    head = check_index(head, f"head (the {name} model has {cfg.n_heads} per layer)", cfg.n_heads)
    check_cache(cache)
    prompt = PROMPTS[model][0] if prompt is None and name in PROMPTS else prompt
    ids, tokens = prompt_tokens(net, tokenizer, prompt, name)   # checked before any key is made of it
    weights = cached_attention(net, name, ids, cache)
    w = torch.from_numpy(weights[layer, head])
    previous = float(previous_token_score(w)) if len(ids) > 1 else float("nan")
    repeats = bool(earlier_same(torch.as_tensor(ids)).any())
    repeat = repeat_score(w, ids, cfg.vocab_size) if repeats else float("nan")
    before = "none (one token)" if math.isnan(previous) else f"{previous:.2f}"
    induction = f"{repeat:.2f}" if repeats else "none (no token repeats)"
    title = f"{name} L{layer}H{head}: previous-token score {before}, induction score {induction}"
    return dict(weights=weights[layer, head].copy(), tokens=tokens, previous=previous, repeat=repeat, title=title)


MAX_CACHED = 256   # prompts' attention a head_view cache keeps at most; past it, the oldest go first
MAX_CACHE_BYTES = 256 * 2**20   # and the most bytes their (layers, heads, T, T) tables may hold together


def cached_attention(net, name, ids, cache):
    """``ids_attention(net, ids)`` (layers, heads, T, T), from ``cache`` (a dict or None) when it
    holds it: keyed by a shipped model's name (a fresh copy each call) or a model's weights' state,
    and the ids (so a tokenizer changed since is read again too). The cache keeps at most MAX_CACHED
    tables of MAX_CACHE_BYTES in all (256 MB), the oldest dropped first (``keep_cached``)."""
    key = (name if name in MODELS else weights_state(net), tuple(ids.tolist()))
    weights = None if cache is None else cache.get(key)
    if weights is None:
        weights = ids_attention(net, ids)
    else:   # checked before it is taken out: a refused call leaves the cache as it was
        check_table(weights, (net.cfg.n_layers, net.cfg.n_heads, len(ids), len(ids)))
        cache.pop(key)   # put back last: the newest
    if cache is not None:
        keep_cached(cache, key, weights)
    return weights


CACHE = "cache should be None or a dict of head_view's attention tables (the explorer's)"


def check_cache(cache):
    """None, or a dict whose entries are each a NumPy table (what ``keep_cached`` puts in it); else one sentence."""
    if cache is not None and not isinstance(cache, dict):
        fail(f"{CACHE}, but got {shown(cache)}")
    bad = next((table for table in dict.values(cache or {}) if not isinstance(table, np.ndarray)), None)
    if bad is not None:
        fail(f"{CACHE}, but it holds {shown(bad)}")


def check_table(table, shape):
    """A cached table for this prompt: finite attention weights of ``shape`` (layers, heads, T, T), as
    ``ids_attention`` made it (not edited since, nor another prompt's); else one sentence."""
    if table.dtype.kind != "f":   # (text or objects: np.isfinite would raise)
        fail(f"{CACHE}, but its table for this prompt holds {table.dtype} entries, not real numbers")
    if table.shape != shape or not np.isfinite(table).all():
        fail(f"{CACHE}, but its table for this prompt " + (f"has shape {table.shape}, not {shape}" if
             table.shape != shape else "holds NaN or inf"))


def keep_cached(cache, key, weights):
    """Put the NumPy table ``weights`` (layers, heads, T, T) in ``cache`` under ``key`` (as its newest entry),
    first dropping the oldest entries (a dict keeps its order) until fewer than MAX_CACHED remain and their
    bytes and the table's fit MAX_CACHE_BYTES (a model trained between views leaves stale keys behind).
    A table larger than MAX_CACHE_BYTES on its own is not kept: it is computed again on each view."""
    if weights.nbytes > MAX_CACHE_BYTES:
        return
    held = sum(getattr(table, "nbytes", 0) for table in cache.values())
    while cache and (len(cache) >= MAX_CACHED or held + weights.nbytes > MAX_CACHE_BYTES):
        held -= getattr(cache.pop(next(iter(cache))), "nbytes", 0)
    cache[key] = weights


# ------------------------------------------------------------- multi-head attention as a module

DTYPE_NAMES = {torch.float64: " (double)", torch.float16: " (half)"}   # the names torch's own errors use


class MultiHeadAttention(nn.Module):
    """Causal multi-head self-attention, written out: the course's own version of the piece the
    learner writes in chapter 05 (what ``learner.use("MultiHeadAttention", course=...)`` falls
    back to).

    W_Q, W_K, W_V, W_O are (d_model, d_model), used as ``x @ W + b`` (row vectors, the layout of
    ``helpers.model.Attention``, so a shipped layer's ``state_dict`` loads into it by name);
    head i owns columns i*d_k:(i+1)*d_k of W_Q, W_K, W_V and rows i*d_k:(i+1)*d_k of W_O.
    bias=False leaves the four biases out (None).
    """

    ROWS = 9   # the (B, T, d_model) tables a pass holds at most: x read whole, q, k, v, the copies the score
               # matmuls make of q and k, the heads' outputs, concat and the output

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        d_model, n_heads = check_positive_int(d_model, "d_model"), check_positive_int(n_heads, "n_heads")
        bias = check_switch(bias, "bias")
        check_bytes(16 * d_model * (d_model + 1), f"MultiHeadAttention({count(d_model)}, ...)",
                    f"d_model should be at most {math.isqrt(MAX_BYTES // 16) - 1:,} (four d_model x d_model float32 matrices)")
        check_heads_split(d_model, n_heads, 0)
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.W_Q, self.W_K, self.W_V, self.W_O = (
            nn.Parameter(torch.randn(d_model, d_model) / math.sqrt(d_model)) for _ in range(4))
        self.b_Q, self.b_K, self.b_V, self.b_O = (
            nn.Parameter(torch.zeros(d_model)) if bias else None for _ in range(4))

    @on_the_cpu
    def forward(self, x):
        """x: (B, T, d_model) -> (B, T, d_model), in the weights' dtype (float32; float64 after
        .double()), as helpers.model.Attention takes it; x is checked first (``check_call``)."""
        B, T, d_model = self.check_call(x)
        H, d_k = self.n_heads, self.d_k
        q, k, v = (linear(x, W, b) for W, b in
                   ((self.W_Q, self.b_Q), (self.W_K, self.b_K), (self.W_V, self.b_V)))  # (B, T, d_model)
        q, k, v = (t.view(B, T, H, d_k).transpose(1, 2) for t in (q, k, v))        # (B, H, T, d_k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)                            # (B, H, T, T)
        later = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)          # keys after the query
        scores = scores.masked_fill(later, float("-inf"))
        weights = torch.softmax(scores, dim=-1)                                      # each row sums to 1
        head_out = weights @ v                                                       # (B, H, T, d_k)
        concat = head_out.transpose(1, 2).reshape(B, T, d_model)                     # heads side by side
        return linear(concat, self.W_O, self.b_O)

    def check_call(self, x):
        """Refuse, before any work, an x that is not a dense (B, T, d_model) tensor of the weights' dtype (another
        dtype would meet the weights in a matmul torch refuses; ``check_tensor`` before its shape is read: a nested
        tensor has none), or whose pass passes MAX_BYTES: its (B, H, T, T) scores, weights and mask, and ROWS
        (B, T, d_model) tables (an expanded x stands for more numbers than it stores); return its shape."""
        d = self.W_Q.shape[0]
        if not isinstance(x, torch.Tensor) or check_tensor(x, "x").dim() != 3 or x.shape[-1] != d:
            fail(f"MultiHeadAttention expects x of shape (B, T, {d}), "
                 f"but got {tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
        if x.dtype != self.W_Q.dtype:
            fail(f"x should have the weights' dtype {self.W_Q.dtype}, but has dtype "
                 f"{x.dtype}{DTYPE_NAMES.get(x.dtype, '')}: give x.to({self.W_Q.dtype})")
        B, T, _ = x.shape
        tables = 3 * B * self.n_heads * T * T + self.ROWS * B * T * d   # scores, masked, weights; the rows
        check_bytes(x.element_size() * tables + T * T,   # (and the bool mask)
                    f"attention on {count(B)} sequences of {count(T)} tokens of width {count(d)}",
                    "give fewer or shorter sequences")
        return B, T, d


SLIPS = ("transposed", "no_W_O", "no_W_O_bias_kept", "sqrt_d_model", "unscaled", "scaled_twice",
         "no_mask", "mask_hides_diagonal", "mask_after_softmax", "softmax_over_queries", "softmax_over_heads",
         "interleaved_split", "interleaved_split_and_merge", "split_without_transpose",
         "split_and_merge_without_transpose", "merge_without_transpose", "heads_reversed", "no_biases",
         "scores_transposed", "scaled_after_softmax", "mask_with_zero", "mask_hides_past", "b_O_before_W_O",
         "residual_added", "no_b_O")


@on_the_cpu
@torch.no_grad()
def slipped_attention(x, state, n_heads, slip=None):
    """Multi-head attention on x (B, T, d_model) with the parameters ``state`` (the names of
    ``Attention``), computed with one known mistake ``slip`` (one of ``SLIPS``; None: none).

    The chapter's check compares a learner's module with each of these to name the mistake.
    x: finite numbers; n_heads divides d_model; state: W_Q, W_K, W_V, W_O (d_model, d_model) and
    b_Q, b_K, b_V, b_O (d_model,); the (B, n_heads, T, T) scores must fit in MAX_BYTES."""
    if slip is not None and (type(slip) is not str or slip not in SLIPS):
        fail(f"slip should be None or one of the {len(SLIPS)} names of SLIPS (such as 'transposed'), but got {shown(slip)}")
    arr = as_array(x, "x", ndim=3)
    B, T, d = arr.shape
    H = check_positive_int(n_heads, "n_heads")
    if d % H:
        fail(f"n_heads should divide d_model = {d}, but got {count(H)}")
    # float32: four (B, H, T, T) tables (scores, masked, weights, a slip's change) and eight (B, T, d) ones (x, q, k, v,
    # their split copies, the heads' outputs, concat, the output)
    check_bytes(4 * (4 * B * H * T * T + 8 * B * T * d), "slipped_attention", "pass fewer or shorter sequences in x")
    check_finite(arr, "x")
    if not isinstance(state, dict):
        fail(f"state should be a dict of the attention's parameters (W_Q, b_Q, ...), but got {shown(state)}")
    for name in "QKVO":
        for key, shape in ((f"W_{name}", (d, d)), (f"b_{name}", (d,))):
            if key not in state or as_array(state[key], f"state['{key}']").shape != shape:
                fail(f"state['{key}'] should be an array of shape {shape}, but got "
                     f"{shown(state[key]) if key in state else 'none'}")
    x = torch.as_tensor(arr, dtype=torch.float32)
    d_k = d // H
    W, b = ({name: torch.as_tensor(to_numpy(state[f"{kind}_{name}"]), dtype=torch.float32) for name in "QKVO"}
            for kind in "Wb")
    if slip == "transposed":
        W = {name: w.T for name, w in W.items()}
    if slip == "no_biases":
        b = {name: torch.zeros_like(v) for name, v in b.items()}
    q, k, v = (x @ W[name] + b[name] for name in "QKV")
    if slip in ("interleaved_split", "interleaved_split_and_merge"):
        q, k, v = (t.view(B, T, d_k, H).permute(0, 3, 1, 2) for t in (q, k, v))
    elif slip in ("split_without_transpose", "split_and_merge_without_transpose"):
        q, k, v = (t.reshape(B, H, T, d_k) for t in (q, k, v))
    else:
        q, k, v = (t.view(B, T, H, d_k).transpose(1, 2) for t in (q, k, v))
    scale = {"sqrt_d_model": math.sqrt(d), "unscaled": 1.0, "scaled_twice": float(d_k)}.get(slip, math.sqrt(d_k))
    if slip == "scaled_after_softmax":
        scale = 1.0
    scores = (k @ q.transpose(-2, -1) if slip == "scores_transposed" else q @ k.transpose(-2, -1)) / scale
    later = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=0 if slip == "mask_hides_diagonal" else 1)
    if slip == "mask_hides_past":
        later = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)
    if slip == "mask_after_softmax":
        weights = torch.softmax(scores, dim=-1).masked_fill(later, 0.0)
    else:
        if slip != "no_mask":
            scores = scores.masked_fill(later, 0.0 if slip == "mask_with_zero" else float("-inf"))
        dim = {"softmax_over_queries": -2, "softmax_over_heads": 1}.get(slip, -1)
        weights = torch.softmax(scores, dim=dim)
    if slip == "scaled_after_softmax":
        weights = weights / math.sqrt(d_k)
    head_out = weights @ v                                   # (B, H, T, d_k)
    if slip == "heads_reversed":
        head_out = head_out.flip(1)
    if slip == "interleaved_split_and_merge":
        concat = head_out.permute(0, 2, 3, 1).reshape(B, T, d)
    elif slip in ("merge_without_transpose", "split_and_merge_without_transpose"):
        concat = head_out.reshape(B, T, d)
    else:
        concat = head_out.transpose(1, 2).reshape(B, T, d)
    if slip == "no_W_O":
        return concat
    if slip == "no_W_O_bias_kept":
        return concat + b["O"]
    if slip == "b_O_before_W_O":
        return (concat + b["O"]) @ W["O"]
    if slip == "residual_added":
        return concat @ W["O"] + b["O"] + x
    if slip == "no_b_O":
        return concat @ W["O"]
    return concat @ W["O"] + b["O"]


@sealed   # made once, then a fresh copy on every call: a learner's module that reached them by import and
def _module_cases():   # changed them in place changes its own copy only
    cat, tokenizer = get_model("cat")
    long = [s for s in worlds.cat_world().sentences if len(s) == 10]       # the 16 ten-token sentences
    traces = [cat(tokenizer.encode(" ".join(s)), trace=True) for s in long]
    cases = []
    for layer in range(cat.cfg.n_layers):
        cases.append(dict(
            what=f"the cat model's layer {layer} on the cat world's {len(long)} ten-token sentences",
            args=(cat.cfg.d_model, cat.cfg.n_heads),
            state={name: t.detach().clone() for name, t in cat.blocks[layer].attn.state_dict().items()},
            x=torch.stack([t[f"L{layer}.ln1"] for t in traces]), layer=("cat", layer)))
    induction, _ = get_model("induction")
    ids = worlds.repeated_tokens(4, 8, induction.cfg.vocab_size, seed=2024)
    attn = induction.blocks[1].attn
    x = torch.stack([induction(row, trace=True)["L1.ln1"] for row in ids])
    cases.append(dict(
        what=(f"the induction model's layer 1 (d_model {induction.cfg.d_model}, {induction.cfg.n_heads} heads "
              f"of {induction.cfg.d_k}) on 4 repeated sequences, without the positions it adds inside attention"),
        args=(induction.cfg.d_model, induction.cfg.n_heads),
        state={name: t.detach().clone() for name, t in attn.state_dict().items()},
        x=x, layer=("induction", 1)))
    return tuple(cases)   # (no right outputs kept: a learner's function could read them out of the sealed closure)


@on_the_cpu
def module_cases():
    """The inputs the chapter's check runs a learner's MultiHeadAttention on: a list of dicts
    (what, args = (d_model, n_heads), state = a shipped layer's state_dict, x (B, T, d_model),
    expected = the course's layer on x). The cat model's layers 0 and 1 take their input and
    output from the model's trace (``L{i}.ln1`` -> ``L{i}.attn``); the induction model's layer 1
    is run with ``positions=False`` (its rotary positions live inside attention, which the
    chapter's module leaves out; for the cat model's layers this equals the trace's ``L{i}.attn``).
    Fresh copies on every call, the expected outputs computed anew (no store holds them)."""
    cases = [{key: ({n: t.clone() for n, t in value.items()} if key == "state" else
                    value.clone() if isinstance(value, torch.Tensor) else value)
              for key, value in case.items() if key != "layer"} | {"expected": _layer_output(*case["layer"], case["x"])}
             for case in _module_cases()]
    return cases


@torch.no_grad()
def _layer_output(name, layer, x):
    """(B, T, d_model) what the shipped model ``name``'s attention in ``layer`` writes for x (B, T, d_model),
    without positions (the cat model's are added before attention; the induction model's inside it)."""
    return get_model(name)[0].blocks[layer].attn(x, positions=False)
