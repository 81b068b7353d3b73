"""Switching attention off, whole or one head at a time, and measuring what breaks.

The Primer, Appendix A: Method 1 deletes the attention blocks, Method 2 keeps them but
zeroes their write-back (W_O and b_O). Zeroing one head's rows of W_O is a single-head
ablation. The model's own switches (``attention=False``, ``ablate_heads=...``) do the
same without touching the stored weights.
"""
import copy

import torch

from .. import worlds
from ..errors import fail


def without_attention_blocks(model, ids):
    """Method 1: logits (T, V) for ids (T,) (or (B, T, V) for (B, T)) with the attention
    sub-blocks deleted: h0 goes straight into each block's MLP part, then the read-out.

    Uses the model's own parts (``embed``, ``block.mlp_part``, ``unembed``), so its norm,
    activation and final norm are honoured. In a pre-LN model (the cat model) this equals
    ``attention=False`` to the last bit; in a post-LN model the attention sub-block's
    LayerNorm is deleted with it, so the two differ.
    """
    ids = model.check_ids(ids)
    single = ids.dim() == 1
    with torch.no_grad():
        h = model.embed(ids[None] if single else ids)
        for block in model.blocks:
            h = block.mlp_part(h)
        logits = model.unembed(h)
    return logits[0] if single else logits


def zeroed_copy(model, heads=None):
    """Method 2 by surgery: a copy of ``model`` whose attention writes (partly) nothing.

    heads: None zeroes every ``attn.W_O`` and ``attn.b_O`` (attention writes nothing);
    otherwise a set of (layer, head) pairs whose d_k rows of W_O are zeroed. The original
    is untouched.
    """
    heads = None if heads is None else model.check_heads(heads)
    clone = copy.deepcopy(model)
    d_k = model.cfg.d_k
    with torch.no_grad():
        for layer, block in enumerate(clone.blocks):
            attn = block.attn
            if heads is None:
                attn.W_O.zero_()
                if attn.b_O is not None:
                    attn.b_O.zero_()
            for (lay, head) in heads or ():
                if lay == layer:
                    attn.W_O[head * d_k:(head + 1) * d_k] = 0.0
    return clone


def max_abs_diff(a, b):
    """Largest |a - b| over all entries of two tensors of one shape, as a float."""
    return (a - b).abs().max().item()


def configurations(model):
    """The experiments of Appendix A: [(label, switches)] for none, attention off, each head removed."""
    out = [("none (the trained model)", {}), ("attention off", {"attention": False})]
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            out.append((f"L{layer}H{head} removed", {"ablate_heads": {(layer, head)}}))
    return out


def prompt_row(model, world, prompt, **switches):
    """dict(top token, p_top, p_animal_adj = p(big) + p(small)) after ``prompt`` under the switches."""
    probs = worlds.next_token_probs(model, world, [prompt.split()], **switches)[0]
    ids = world.tokenizer.ids
    top = int(probs.argmax())
    return dict(top=world.tokenizer.vocab[top], p_top=float(probs[top]),
                p_animal_adj=float(probs[ids["big"]] + probs[ids["small"]]))


def damage_row(model, world, **switches):
    """dict(held_out_rule: rule accuracy on the held-out copula types, bigram: top-1 on the
    432 bigram slots, copula: right class on the 16 copula slots) under the switches."""
    slots = worlds.slot_accuracy(model, world, **switches)
    return dict(held_out_rule=worlds.rule_accuracy(model, world, **switches),
                bigram=slots["bigram_correct"] / slots["bigram_total"],
                copula=slots["copula_correct"] / slots["copula_total"])


def attention_on_subject(model, world):
    """(L, h) mean attention from the copula to the subject noun, over the 8 copula prompts."""
    prompts = sorted({tuple(s[:4]) for s in world.sentences if s[3] in worlds.COPULAS})
    total = torch.zeros(model.cfg.n_layers, model.cfg.n_heads)
    with torch.no_grad():
        for p in prompts:
            trace = model(world.tokenizer.encode(list(p)), trace=True)
            for layer in range(model.cfg.n_layers):
                total[layer] += trace[f"L{layer}.weights"][:, -1, 2]  # query "is", key = the noun
    return total / len(prompts)


def class_probability_drop(model, world):
    """(L, h) fall in mean p(class adjectives) over the 16 copula types when each head is removed."""
    base = sum(r["p_class"] for r in worlds.copula_report(model, world))
    drop = torch.zeros(model.cfg.n_layers, model.cfg.n_heads)
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            report = worlds.copula_report(model, world, ablate_heads={(layer, head)})
            drop[layer, head] = (base - sum(r["p_class"] for r in report)) / len(report)
    return drop


def ablation_view(model, world, prompt, heads_off=(), attention=True):
    """What the explorer shows for one setting of the switches.

    Returns dict(probs: (V,) after ``prompt``, in_class: copula types answered in class,
    types: how many copula types there are (16)).
    """
    switches = dict(ablate_heads=set(heads_off), attention=attention)
    probs = worlds.next_token_probs(model, world, [prompt.split()], **switches)[0]
    report = worlds.copula_report(model, world, **switches)
    return dict(probs=probs, in_class=sum(r["in_class"] for r in report), types=len(report))


# ------------------------------------------------------------ capture and replace (any model)

KINDS = ("zero", "mean", "resample")


def capture(model, ids, names, **switches):
    """One forward pass on ids (B, T) -> (logits (B, T, V), {name: the batched tensor}), e.g.
    names=("L0.head_out",) gives (B, H, T, d_k). switches go to the model (not ``replace``)."""
    got = {}

    def grab(name):
        return lambda x: got.__setitem__(name, x) or x
    with torch.no_grad():
        logits = model(ids, replace={name: grab(name) for name in names}, **switches)
    return logits, got


def head_outputs(model, ids):
    """{layer: (B, H, T, d_k)} every head's output (before W_O) on ids (B, T)."""
    names = [f"L{layer}.head_out" for layer in range(model.cfg.n_layers)]
    got = capture(model, ids, names)[1]
    return {layer: got[name] for layer, name in enumerate(names)}


def mean_head_outputs(model, ids, lengths=None, per_position=True):
    """{layer: (H, T, d_k)} each head's output averaged over the reference batch ids (B, T).

    lengths: (B,) real lengths of padded rows (position t of row b counts only if t < lengths[b]).
    per_position=False also averages over positions: (H, 1, d_k), the same at every position.
    """
    B, T = ids.shape
    lengths = torch.full((B,), T) if lengths is None else torch.as_tensor(lengths)
    real = (torch.arange(T)[None] < lengths[:, None]).float()[:, None, :, None]   # (B, 1, T, 1)
    out = {}
    for layer, x in head_outputs(model, ids).items():
        if per_position:
            out[layer] = (x * real).sum(0) / real.sum(0)
        else:
            out[layer] = (x * real).sum((0, 2))[:, None] / real.sum()
    return out


def ablation_replace(heads, kind="zero", means=None, source=None):
    """The ``replace`` dict that ablates ``heads`` ((layer, head) pairs) in one forward pass.

    Each head's output (B, H, T, d_k) is replaced by 0 (zero), by means[layer][head, :T] from
    ``mean_head_outputs`` (mean), or by source[layer][:, head, :T] from ``head_outputs`` on
    other prompts, (B or 1, H, >= T, d_k) (resample).
    """
    if kind not in KINDS:
        fail(f"the ablation kind should be one of {KINDS}, but got {kind!r}")
    need = {"mean": means, "resample": source}.get(kind, ())
    if need is None:
        fail(f"{kind} ablation needs the {'means' if kind == 'mean' else 'source'} argument, but got None")
    by_layer = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def swap(layer, chosen):
        def fn(x):
            x = x.clone()
            T = x.shape[2]
            for head in chosen:
                x[:, head] = 0.0 if kind == "zero" else (
                    means[layer][head, :T] if kind == "mean" else source[layer][:, head, :T])
            return x
        return fn
    return {f"L{layer}.head_out": swap(layer, chosen) for layer, chosen in by_layer.items()}


# ------------------------------------------------------------ the cat world, in one batched pass

def cat_batch(world, sentences=None):
    """(ids (B, T), lengths (B,)) of the sentences minus their last word, padded: row b's
    position t predicts word t+1 of sentence b."""
    sentences = world.sentences if sentences is None else sentences
    ids, _ = world.batch(sentences)
    return ids, torch.tensor([len(s) - 1 for s in sentences])


def cat_scores(model, world, **switches):
    """Rule and collateral figures from one batched pass over the 64 sentence types.

    Returns dict(held_out_rule, bigram (top-1 on the 432 non-copula slots), copula (right class
    on the 16 copula slots), p_class (mean p(class adjectives) over the 16 copula types)), equal
    to ``damage_row`` and ``worlds.copula_report``; switches go to the model (e.g. replace=...).
    """
    ids, _ = cat_batch(world)
    with torch.no_grad():
        probs = torch.softmax(model(ids, **switches), dim=-1)
    top = probs.argmax(-1)
    word = world.tokenizer.ids
    bigram = [0, 0]
    copula, rule, p_class = [], [], []
    for b, s in enumerate(world.sentences):
        for t in range(1, len(s)):
            if s[t - 1] in worlds.COPULAS:
                adjs = [word[a] for a in worlds.adjectives_of(s[t - 2])]
                copula.append(int(top[b, t - 1]) in adjs)
                p_class.append(float(probs[b, t - 1, adjs].sum()))
                if s in world.held_out:
                    rule.append(copula[-1])
            else:
                bigram[0] += int(top[b, t - 1]) == word[s[t]]
                bigram[1] += 1
    return dict(held_out_rule=sum(rule) / len(rule), bigram=bigram[0] / bigram[1],
                copula=sum(copula) / len(copula), p_class=sum(p_class) / len(p_class))


def cat_ablation(model, world, heads, kind, seed=0):
    """``cat_scores`` with ``heads`` ablated. mean: per-position means over the 64 sentence
    types; resample: each sentence takes the heads' outputs from another sentence at least
    as long (a seeded draw)."""
    ids, lengths = cat_batch(world)
    means = mean_head_outputs(model, ids, lengths) if kind == "mean" else None
    source = None
    if kind == "resample":
        donors = resample_donors(lengths, seed)
        source = {layer: x[donors] for layer, x in head_outputs(model, ids).items()}
    return cat_scores(model, world, replace=ablation_replace(heads, kind, means, source))


def resample_donors(lengths, seed):
    """(B,) for each row b a seeded other row b' != b with lengths[b'] >= lengths[b]."""
    g = torch.Generator().manual_seed(seed)
    donors = []
    for b, n in enumerate(lengths.tolist()):
        pool = [c for c, m in enumerate(lengths.tolist()) if c != b and m >= n]
        donors.append(pool[int(torch.randint(len(pool), (1,), generator=g))])
    return torch.tensor(donors)
