"""Multi-head attention, counted and compared, and the induction-head model (chapter 05).

* ``split_heads`` / ``merge_heads``: the view/transpose that cuts one long query
  vector per token into heads, and its inverse, in torch.
* ``CausalSelfAttention``: one fused qkv projection, heads, causal mask, output
  projection: the seed's module at any size, written for this course.
* ``from_block``: the same module holding the weights of one layer of our
  ``helpers.model.Transformer``, so the two can be compared.
* ``attention_parameters`` and ``attention_weights_bytes``: the counts.
* ``torch_differences``: our module against torch's own implementations.
* The induction model: its recipe (``INDUCTION_CONFIG``, ``train_induction``),
  its tokens (``INDUCTION_VOCAB``, ``induction_prompt``) and the measurements the
  chapter makes on it (``previous_token_score``, ``induction_score``,
  ``head_scores``, ``loss_by_position``).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from .errors import check_positive_int, fail


# ------------------------------------------------------------ splitting heads

def split_heads(x, n_heads):
    """(B, T, h*d_k) -> (B, h, T, d_k): columns [i*d_k, (i+1)*d_k) of each token become head i."""
    x = torch.as_tensor(x)
    n_heads = check_positive_int(n_heads, "n_heads")
    if x.dim() != 3:
        fail(f"split_heads expects (B, T, width), but got shape {tuple(x.shape)}")
    B, T, width = x.shape
    if width % n_heads:
        fail(f"cannot split width {width} into n_heads={n_heads} equal heads")
    return x.view(B, T, n_heads, width // n_heads).transpose(1, 2)


def merge_heads(x):
    """(B, h, T, d_k) -> (B, T, h*d_k): the heads side by side again."""
    x = torch.as_tensor(x)
    if x.dim() != 4:
        fail(f"merge_heads expects (B, heads, T, d_k), but got shape {tuple(x.shape)}")
    B, H, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, H * d_k)


# ------------------------------------------------------------- the module

class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with one fused query/key/value projection.

    x (B, T, d_model) -> out (B, T, d_model), and the weights (B, h, T, T) when
    ``return_weights`` is True. ``qkv`` maps d_model -> 3*d_model (queries, then
    keys, then values, as GPT-2's c_attn); ``proj`` is W_O. Built in that order,
    so ``torch.manual_seed(123)`` before construction gives the seed's numbers.
    """

    def __init__(self, d_model, n_heads, n_max, bias=True):
        super().__init__()
        d_model, n_heads = check_positive_int(d_model, "d_model"), check_positive_int(n_heads, "n_heads")
        n_max = check_positive_int(n_max, "n_max")
        if d_model % n_heads:
            fail(f"d_model={d_model} does not split into n_heads={n_heads} equal heads")
        self.d_model, self.n_heads, self.d_k, self.n_max = d_model, n_heads, d_model // n_heads, n_max
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)
        hidden = torch.triu(torch.ones(n_max, n_max, dtype=torch.bool), diagonal=1)
        self.register_buffer("hidden", hidden, persistent=False)   # True = a future key

    def forward(self, x, return_weights=False):
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            fail(f"expected x of shape (B, T, {self.d_model}), but got {tuple(x.shape)}")
        T = x.shape[1]
        if T > self.n_max:
            fail(f"this module masks at most n_max={self.n_max} tokens, but x has T={T}")
        q, k, v = self.qkv(x).split(self.d_model, dim=-1)              # each (B, T, d_model)
        q, k, v = (split_heads(t, self.n_heads) for t in (q, k, v))    # each (B, h, T, d_k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)          # (B, h, T, T)
        scores = scores.masked_fill(self.hidden[:T, :T], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = self.proj(merge_heads(weights @ v))                       # (B, T, d_model)
        return (out, weights) if return_weights else out


def from_block(block):
    """A CausalSelfAttention holding the attention weights of one ``helpers.model`` Block.

    Our model stores W_Q, W_K, W_V, W_O as (d_in, d_out) for ``x @ W``; nn.Linear
    stores (d_out, d_in), so each is transposed, and the three are stacked into qkv.
    """
    cfg = getattr(block, "cfg", None)
    if cfg is None or not hasattr(block, "W_Q"):
        fail(f"from_block expects one layer of helpers.model.Transformer (model.blocks[i]), "
             f"but got a {type(block).__name__}")
    module = CausalSelfAttention(cfg.d_model, cfg.n_heads, cfg.n_max, bias=cfg.bias)
    with torch.no_grad():
        module.qkv.weight.copy_(torch.cat([block.W_Q.T, block.W_K.T, block.W_V.T]))
        module.proj.weight.copy_(block.W_O.T)
        if cfg.bias:
            module.qkv.bias.copy_(torch.cat([block.b_Q, block.b_K, block.b_V]))
            module.proj.bias.copy_(block.b_O)
    return module.eval()


# ------------------------------------------------------------- the counts

def attention_parameters(d_model, bias=True):
    """Parameters of one multi-head attention layer, by part (the number of heads does not matter).

    Returns dict(qkv_weight=3d², qkv_bias=3d, proj_weight=d², proj_bias=d, total).
    """
    d = check_positive_int(d_model, "d_model")
    parts = dict(qkv_weight=3 * d * d, qkv_bias=3 * d if bias else 0,
                 proj_weight=d * d, proj_bias=d if bias else 0)
    parts["total"] = sum(parts.values())
    return parts


def attention_weights_bytes(batch, n_heads, T, bytes_per_number=4):
    """Bytes of one layer's attention-weights tensor (batch, n_heads, T, T): one number per
    (query, key) pair per head, 4 bytes each in float32."""
    for name, value in (("batch", batch), ("n_heads", n_heads), ("T", T),
                        ("bytes_per_number", bytes_per_number)):
        check_positive_int(value, name)
    return batch * n_heads * T * T * bytes_per_number


@torch.no_grad()
def torch_differences(module, x):
    """Largest absolute differences between ``module(x)`` and torch's own attention.

    x: (B, T, d_model). Returns dict(sdpa=..., multihead=..., weights=...):
    ``scaled_dot_product_attention`` fed the module's own q, k, v (is_causal=True),
    then the module's projection; ``nn.MultiheadAttention`` with the module's
    weights copied in and a causal mask; and the two modules' attention weights.
    """
    if not isinstance(module, CausalSelfAttention):
        fail(f"torch_differences expects a CausalSelfAttention, but got a {type(module).__name__}")
    out, weights = module(x, return_weights=True)
    d, T = module.d_model, x.shape[1]
    q, k, v = (split_heads(t, module.n_heads) for t in module.qkv(x).split(d, dim=-1))
    fused = module.proj(merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
    mha = nn.MultiheadAttention(d, module.n_heads, bias=module.qkv.bias is not None, batch_first=True)
    mha.load_state_dict({"in_proj_weight": module.qkv.weight, "out_proj.weight": module.proj.weight,
                         **({"in_proj_bias": module.qkv.bias, "out_proj.bias": module.proj.bias}
                            if module.qkv.bias is not None else {})})
    mha.eval()
    theirs, their_weights = mha(x, x, x, attn_mask=module.hidden[:T, :T], need_weights=True,
                                average_attn_weights=False)
    return dict(sdpa=float((fused - out).abs().max()), multihead=float((theirs - out).abs().max()),
                weights=float((their_weights - weights).abs().max()))


def previous_token_score(weights):
    """Mean attention each query (after the first) puts on the token just before it.

    weights: (..., T, T) -> (...) scores in [0, 1]; 1 is a perfect previous-token head.
    """
    w = torch.as_tensor(weights)
    if w.dim() < 2 or w.shape[-1] != w.shape[-2] or w.shape[-1] < 2:
        fail(f"expected square attention weights (..., T, T) with T >= 2, but got shape {tuple(w.shape)}")
    return torch.diagonal(w, offset=-1, dim1=-2, dim2=-1).mean(-1)


def induction_score(weights, length):
    """Mean attention from each token of the second copy to the token after its earlier occurrence.

    weights: (..., 2*length+1, 2*length+1) on a sequence <BOS> a_1..a_L a_1..a_L.
    The query a_j of the second copy sits at position L+j; the token after the
    first a_j sits at position j+1: an offset of L-1 back, for j = 1..L.
    Returns (...) scores in [0, 1]; 1 is a perfect induction head.
    """
    w = torch.as_tensor(weights)
    length = check_positive_int(length, "length", minimum=2)
    T = 2 * length + 1
    if w.dim() < 2 or tuple(w.shape[-2:]) != (T, T):
        fail(f"weights for a repeated sequence of length {length} should end in ({T}, {T}), "
             f"but have shape {tuple(w.shape)}")
    diagonal = torch.diagonal(w, offset=-(length - 1), dim1=-2, dim2=-1)  # queries L-1 .. 2L
    return diagonal[..., 2:].mean(-1)                                      # queries L+1 .. 2L


@torch.no_grad()
def layer_weights(model, ids):
    """Attention weights of every layer and head: ids (B, T) -> (B, layers, heads, T, T)."""
    ids = model.check_ids(ids)
    if ids.dim() == 1:
        ids = ids[None]
    rows = [torch.stack([model(row, trace=True)[f"L{layer}.weights"]
                         for layer in range(model.cfg.n_layers)]) for row in ids]
    return torch.stack(rows)


def head_scores(model, ids, length):
    """Previous-token and induction scores of every head, averaged over the sequences ``ids``.

    ids: (B, 2*length+1) repeated sequences. Returns (previous (layers, heads), induction (layers, heads)).
    """
    w = layer_weights(model, ids).mean(0)       # (layers, heads, T, T)
    return previous_token_score(w), induction_score(w, length)


@torch.no_grad()
def loss_by_position(model, ids, **switches):
    """Cross-entropy of predicting each next token, averaged over the batch.

    ids: (B, T) -> (T-1,): entry t is the loss of predicting ids[:, t+1] from ids[:, :t+1].
    switches go to the model (e.g. ablate_heads=[(1, 0)]).
    """
    ids = model.check_ids(ids)
    if ids.dim() == 1:
        ids = ids[None]
    logits = model(ids[:, :-1], **switches)
    return F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").mean(0)


def copy_losses(model, ids, length, **switches):
    """Mean loss on the first copy and on the second (dict), from ``loss_by_position``.

    First copy: predicting a_1..a_L, each a fresh random draw. Second copy: predicting
    a_2..a_L the second time (a_1 of the second copy is left out: nothing announces it).
    chance: ln(vocab_size - 1), the loss of a uniform guess among the symbols.
    """
    per_position = loss_by_position(model, ids, **switches)   # entry t: the target at t+1
    return dict(first=float(per_position[:length].mean()),
                second=float(per_position[length + 1:].mean()),
                chance=math.log(model.cfg.vocab_size - 1))
