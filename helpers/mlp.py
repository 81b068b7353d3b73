"""The MLP block (chapter 07): per token, GELU, d_ff, where the parameters live, and the
key-value memory view.

* ``mlp_forward``: the block in NumPy, x (T, d) -> pre (T, d_ff) -> act -> out (T, d).
* ``mlp_weights``, ``apply_block_mlp``: one layer's MLP of a trained model, applied to
  any h_mid (torch), exactly as the model applies it.
* ``layer_parameters``, ``block_counts``, ``gpt_parameters``: parameter accounting by
  formula and by counting.
* ``collect_activations``, ``unit_means``, ``unit_profile``: which hidden units fire
  for which tokens across the cat-world corpus.
"""
import numpy as np

from . import reference as ref
from .errors import as_array, check_positive_int, fail

ACTIVATIONS = {"gelu": ref.gelu, "relu": ref.relu, "none": lambda x: as_array(x, "x")}

# (d_model, n_layers, vocabulary, context) of the two published models the lecture uses.
GPT = {"GPT-2 small": (768, 12, 50257, 1024), "GPT-3": (12288, 96, 50257, 2048)}


def mlp_forward(x, W_1, b_1, W_2, b_2, activation="gelu"):
    """The MLP block on rows x (T, d): pre = x W_1 + b_1 (T, d_ff), act = activation(pre),
    out = act W_2 + b_2 (T, d). Returns dict(pre, act, out). activation: gelu, relu or none.
    """
    x, W_1, W_2 = as_array(x, "x", (1, 2)), as_array(W_1, "W_1", 2), as_array(W_2, "W_2", 2)
    if activation not in ACTIVATIONS:
        fail(f"activation should be one of {tuple(ACTIVATIONS)}, but got {activation!r}")
    if W_1.shape[0] != x.shape[-1] or W_2.shape[0] != W_1.shape[1]:
        fail(f"x has width {x.shape[-1]}, W_1 is {W_1.shape} and W_2 is {W_2.shape}; "
             "expected W_1 (d, d_ff) and W_2 (d_ff, d)")
    pre = x @ W_1 + as_array(b_1, "b_1", 1)
    act = ACTIVATIONS[activation](pre)
    return dict(pre=pre, act=act, out=act @ W_2 + as_array(b_2, "b_2", 1))


def mlp_weights(model, layer):
    """Layer ``layer``'s MLP of a course Transformer as float64 NumPy arrays: W_1 (d, d_ff),
    b_1, W_2 (d_ff, d), b_2, plus the LayerNorm before it, ln2_weight and ln2_bias (d,)."""
    block = check_block(model, layer)
    tensors = {name: getattr(block, name) for name in ("W_1", "b_1", "W_2", "b_2")}
    tensors.update(ln2_weight=block.ln2.weight, ln2_bias=block.ln2.bias)
    return {name: t.detach().numpy().astype(float) for name, t in tensors.items()}


def check_block(model, layer):
    """The block ``layer`` of ``model`` if it has a biased, pre-LN MLP; else a clear error."""
    cfg = model.cfg
    if not 0 <= layer < cfg.n_layers:
        fail(f"layer should be in 0..{cfg.n_layers - 1}, but got {layer}")
    if not cfg.d_ff or cfg.norm != "pre" or not cfg.bias:
        fail(f"expected a pre-LN model with biased MLP blocks, but got d_ff={cfg.d_ff}, "
             f"norm={cfg.norm!r}, bias={cfg.bias}")
    return model.blocks[layer]


def apply_block_mlp(model, layer, h_mid):
    """Run layer ``layer``'s MLP sub-block on h_mid (T, d) the way the model does:
    LN_2, W_1 + b_1, the activation, W_2 + b_2. Returns the (T, d) torch tensor it writes."""
    import torch
    import torch.nn.functional as F

    block = check_block(model, layer)
    h_mid = torch.as_tensor(h_mid, dtype=torch.float32)
    with torch.no_grad():
        pre = F.linear(block.ln2(h_mid), block.W_1.T, block.b_1)
        act = F.gelu(pre) if model.cfg.activation == "gelu" else F.relu(pre)
        return F.linear(act, block.W_2.T, block.b_2)


def layer_parameters(d, d_ff=None, bias=True):
    """Parameters of one pre-LN layer by formula: dict(attention, mlp, norms, total).

    attention: W_Q, W_K, W_V, W_O (4 d²) and their biases (4d); mlp: W_1 and W_2
    (2 d d_ff; 8 d² when d_ff = 4d) and b_1, b_2 (d_ff + d); norms: two LayerNorms (4d).
    """
    d = check_positive_int(d, "d")
    d_ff = 4 * d if d_ff is None else check_positive_int(d_ff, "d_ff")
    attention = 4 * d * d + (4 * d if bias else 0)
    mlp = 2 * d * d_ff + ((d_ff + d) if bias else 0)
    norms = 4 * d
    return dict(attention=attention, mlp=mlp, norms=norms, total=attention + mlp + norms)


def block_counts(model, layer=0):
    """Parameters of one block of ``model``, counted from its tensors: dict(attention, mlp,
    norms, total)."""
    if not 0 <= layer < model.cfg.n_layers:
        fail(f"layer should be in 0..{model.cfg.n_layers - 1}, but got {layer}")
    counts = dict(attention=0, mlp=0, norms=0)
    for name, p in model.blocks[layer].named_parameters():
        part = "norms" if name.startswith("ln") else "mlp" if name[2] in "12" else "attention"
        counts[part] += p.numel()
    counts["total"] = sum(counts.values())
    return counts


def gpt_parameters(name):
    """A published model's parameters by formula (d_ff = 4d, biases, learned positions,
    tied unembedding): dict(d, n_layers, attention, mlp, norms, embedding, positions, total),
    where attention, mlp and norms are summed over all layers."""
    if name not in GPT:
        fail(f"expected one of {tuple(GPT)}, but got {name!r}")
    d, n_layers, vocab, context = GPT[name]
    per_layer = layer_parameters(d)
    out = dict(d=d, n_layers=n_layers, **{part: n_layers * per_layer[part] for part in ("attention", "mlp", "norms")},
               embedding=vocab * d, positions=context * d, final_norm=2 * d)
    out["total"] = sum(out[k] for k in ("attention", "mlp", "norms", "embedding", "positions", "final_norm"))
    return out


def collect_activations(model, world, sentences=None):
    """Every position of every sentence's input (the sentence minus its last word), traced.

    Returns dict(tokens (N,) the word at each position, contexts (N,) the words up to and
    including it, act {layer: (N, d_ff)}, pre {layer: (N, d_ff)}).
    """
    import torch

    sentences = world.sentences if sentences is None else sentences
    tokens, contexts = [], []
    act = {layer: [] for layer in range(model.cfg.n_layers)}
    pre = {layer: [] for layer in range(model.cfg.n_layers)}
    with torch.no_grad():
        for s in sentences:
            words = s[:-1]
            trace = model(world.tokenizer.encode(words), trace=True)
            tokens += words
            contexts += [" ".join(words[:t + 1]) for t in range(len(words))]
            for layer in act:
                act[layer].append(trace[f"L{layer}.act"].numpy())
                pre[layer].append(trace[f"L{layer}.pre"].numpy())
    return dict(tokens=np.array(tokens), contexts=np.array(contexts),
                act={k: np.concatenate(v) for k, v in act.items()},
                pre={k: np.concatenate(v) for k, v in pre.items()})


def unit_means(collected, layer, words):
    """(len(words), d_ff): the mean activation of each hidden unit of ``layer`` over the
    positions holding each word."""
    acts = collected["act"][check_layer(collected, layer)]
    rows = []
    for word in words:
        here = collected["tokens"] == word
        if not here.any():
            fail(f"the word '{word}' never occurs at an input position of the collected corpus")
        rows.append(acts[here].mean(axis=0))
    return np.array(rows)


def check_layer(collected, layer):
    if layer not in collected["act"]:
        fail(f"layer should be one of {sorted(collected['act'])}, but got {layer}")
    return layer


def unit_profile(collected, layer, unit, words, top=3):
    """What hidden unit ``unit`` of ``layer`` responds to.

    Returns dict(means (len(words),) the unit's mean activation per current word,
    top_contexts: the ``top`` distinct contexts where it is largest, as (context, value),
    share: the fraction of all positions where the unit is above 0.5).
    """
    acts = collected["act"][check_layer(collected, layer)]
    if not 0 <= unit < acts.shape[1]:
        fail(f"unit should be in 0..{acts.shape[1] - 1}, but got {unit}")
    column = acts[:, unit]
    seen, best = set(), []
    for i in np.argsort(-column, kind="stable"):
        context = str(collected["contexts"][i])
        if context not in seen:
            seen.add(context)
            best.append((context, float(column[i])))
        if len(best) == top:
            break
    means = unit_means(collected, layer, words)[:, unit]
    return dict(means=means, top_contexts=best, share=float((column > 0.5).mean()))


def value_readout(model, layer, unit, top=3):
    """The words unit ``unit`` of ``layer`` promotes most when it fires: its value row
    W_2[unit] read through the tied unembedding (E), skipping the later layers and the
    final LayerNorm. Returns [(word index, score)] for the ``top`` highest scores."""
    block = check_block(model, layer)
    if not 0 <= unit < model.cfg.d_ff:
        fail(f"unit should be in 0..{model.cfg.d_ff - 1}, but got {unit}")
    scores = (block.W_2[unit] @ model.E.T).detach().numpy()
    order = np.argsort(-scores, kind="stable")[:top]
    return [(int(i), float(scores[i])) for i in order]
