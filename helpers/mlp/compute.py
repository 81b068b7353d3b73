"""Chapter 07's compute: the MLP block per token, GELU, d_ff, where the parameters live,
and the key-value memory view.

* ``mlp_forward``: the block in NumPy, x (T, d) -> pre (T, d_ff) -> act -> out (T, d).
* ``mlp_weights``, ``apply_block_mlp``: one layer's MLP of a trained model, applied to
  any h_mid (torch), exactly as the model applies it.
* ``layer_parameters``, ``block_counts``, ``gpt_parameters``: parameter accounting by
  formula and by counting.
* ``collect_activations``, ``unit_means``, ``unit_profile``, ``value_readout``: which
  hidden units fire for which tokens across the cat-world corpus, and what they write.
* ``corpus_words``, ``probe``: the explorer's compute, one unit's profile in words.
"""
import numpy as np
import torch

from .. import reference as ref
from ..errors import as_array, check_positive_int, fail

ACTIVATIONS = {"gelu": ref.gelu, "relu": ref.relu, "none": lambda x: as_array(x, "x")}

# (d_model, n_layers, vocabulary, context) of the two published models the Lecture uses.
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
    if not model.cfg.bias or block.ln2 is None:
        fail(f"expected an MLP with biases and a LayerNorm, but got bias={model.cfg.bias}, "
             f"norm={model.cfg.norm!r}")
    tensors = {name: getattr(block.mlp, name) for name in ("W_1", "b_1", "W_2", "b_2")}
    tensors.update(ln2_weight=block.ln2.weight, ln2_bias=block.ln2.bias)
    return {name: t.detach().numpy().astype(float) for name, t in tensors.items()}


def check_block(model, layer):
    """The block ``layer`` of ``model`` if it has an MLP; else a clear error."""
    cfg = model.cfg
    if not 0 <= layer < cfg.n_layers:
        fail(f"layer should be in 0..{cfg.n_layers - 1}, but got {layer}")
    if not cfg.d_ff:
        fail("this model has no MLP blocks (d_ff=0, attention only)")
    return model.blocks[layer]


def apply_block_mlp(model, layer, h_mid):
    """Run layer ``layer``'s MLP part on h_mid (T, d) with the model's own sub-block
    (``block.mlp_part``: its LayerNorm, W_1 + b_1, the activation, W_2 + b_2).
    Returns what the MLP writes into the residual stream, a (T, d) torch tensor."""
    block = check_block(model, layer)
    h_mid = torch.as_tensor(h_mid, dtype=torch.float32)
    if h_mid.dim() != 2 or h_mid.shape[1] != model.cfg.d_model:
        fail(f"h_mid should have shape (T, {model.cfg.d_model}), but it has shape {tuple(h_mid.shape)}")
    kept = {}
    with torch.no_grad():
        block.mlp_part(h_mid[None], keep=kept.__setitem__)
    return kept["mlp"][0]


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
        part = {"attn": "attention", "mlp": "mlp"}.get(name.split(".")[0], "norms")
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
    scores = (block.mlp.W_2[unit] @ model.E.T).detach().numpy()
    order = np.argsort(-scores, kind="stable")[:top]
    return [(int(i), float(scores[i])) for i in order]


def corpus_words(collected, vocab):
    """The words that occur at some input position of ``collected``, in vocabulary order."""
    present = set(collected["tokens"].tolist())
    return [w for w in vocab if w in present]


def probe(model, world, collected, layer=0, unit=0):
    """What unit ``unit`` of layer ``layer`` responds to, over ``collected``
    (``collect_activations(model, world)``).

    Returns dict(layer, unit, words, means (len(words),) the mean activation per current
    word, top_contexts [(context, value)], share of positions above 0.5, promotes: the
    3 words its value row W_2[unit] scores highest through the unembedding).
    """
    if not isinstance(collected, dict) or "act" not in collected:
        fail("collected should be the dict returned by mlp.collect_activations(model, world)")
    words = corpus_words(collected, world.tokenizer.vocab)
    profile = unit_profile(collected, layer, unit, words)
    promotes = [world.tokenizer.vocab[i] for i, _ in value_readout(model, layer, unit)]
    return dict(layer=layer, unit=unit, words=words, promotes=promotes, **profile)
