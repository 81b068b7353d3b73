"""Switching attention off, whole or one head at a time, and measuring what breaks.

The Primer, Appendix A: Method 1 deletes the attention blocks, Method 2 keeps them but
zeroes their write-back (W_O and b_O). Zeroing one head's rows of W_O is a single-head
ablation. The model's own switches (``attention=False``, ``ablate_heads=...``) do the
same without touching the stored weights.
"""
import copy

import torch

from .. import worlds


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
