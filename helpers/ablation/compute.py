"""Switching attention off, whole or one head at a time, replacing heads, patching, reading the stream.

The Primer, Appendix A: Method 1 deletes the attention blocks, Method 2 keeps them but
zeroes their write-back (W_O and b_O). Zeroing one head's rows of W_O is a single-head
ablation. The model's own switches (``attention=False``, ``ablate_heads=...``) do the
same without touching the stored weights; they are one intervention written three ways.

Beyond the appendix, everything goes through ``model(ids, replace={trace name: fn})``: zero,
mean and resample ablation (``ablation_replace``), activation patching (``patch_heads``,
``patch_residual``), the logit lens and direct logit attribution.
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


# ------------------------------------------------------------ capture and replace (any model)

KINDS = ("zero", "mean", "resample")


def capture(model, ids, names, replace=None, **switches):
    """One forward pass on ids (B, T) -> (logits (B, T, V), {name: the batched tensor}), e.g.
    names=("L0.head_out",) gives (B, H, T, d_k). A tensor also in ``replace`` is captured after
    its replacement; switches go to the model."""
    got, hooks = {}, dict(replace or {})
    for name in names:
        inner = hooks.get(name, _same)
        hooks[name] = lambda x, name=name, inner=inner: got.setdefault(name, inner(x))
    with torch.no_grad():
        logits = model(ids, replace=hooks, **switches)
    return logits, got


def _same(x):
    return x


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
    bigram, copula = _slots(world)
    top = probs.argmax(-1)
    b, t, target = bigram.T
    right = top[b, t] == target                                         # (432,)
    b, t, adj1, adj2, held = copula.T
    p_class = probs[b, t, adj1].double() + probs[b, t, adj2].double()   # (16,)
    in_class = (top[b, t] == adj1) | (top[b, t] == adj2)
    return dict(held_out_rule=float(in_class[held == 1].double().mean()), bigram=float(right.double().mean()),
                copula=float(in_class.double().mean()), p_class=float(p_class.mean()))


def _slots(world):
    """The cat world's decisions as index rows: bigram (N, 3) [sentence, position, next id];
    copula (M, 5) [sentence, position, class adjective ids (2), held out (0/1)]."""
    word, bigram, copula = world.tokenizer.ids, [], []
    for b, s in enumerate(world.sentences):
        for t in range(1, len(s)):
            if s[t - 1] in worlds.COPULAS:
                adjs = [word[a] for a in worlds.adjectives_of(s[t - 2])]
                copula.append([b, t - 1, *adjs, int(s in world.held_out)])
            else:
                bigram.append([b, t - 1, word[s[t]]])
    return torch.tensor(bigram), torch.tensor(copula)


def cat_ablation(model, world, heads, kind, per_position=True, seed=0):
    """``cat_scores`` with ``heads`` ablated. mean: means over the 64 sentence types (per
    position, or over positions too); resample: each sentence takes the heads' outputs from
    another sentence at least as long (a seeded draw)."""
    ids, lengths = cat_batch(world)
    means = mean_head_outputs(model, ids, lengths, per_position) if kind == "mean" else None
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


def induction_ablation(model, ids, heads, kind, per_position=True, reference=None):
    """Copy losses dict(first, second, chance) on repeated sequences ids (B, 2L+1) with ``heads``
    ablated. mean: means over ``reference`` (default ids itself); resample: sequence b takes the
    heads' outputs from sequence b-1 (another random sequence; row 0 from the last row)."""
    from ..heads import compute as heads_compute
    inputs = ids[:, :-1]
    means = source = None
    if kind == "mean":
        means = mean_head_outputs(model, (ids if reference is None else reference)[:, :-1],
                                  per_position=per_position)
    elif kind == "resample":
        source = {layer: x.roll(1, dims=0) for layer, x in head_outputs(model, inputs).items()}
    length = (ids.shape[1] - 1) // 2
    return heads_compute.copy_losses(model, ids, length, replace=ablation_replace(heads, kind, means, source))


# ------------------------------------------------------------ activation patching

def restored_fraction(patched, clean, corrupt):
    """(patched - corrupt) / (clean - corrupt): 0 = nothing restored, 1 = all of it."""
    return (patched - corrupt) / (clean - corrupt)


def patch_heads(model, clean, corrupt, metric, watch=()):
    """Patch each head's clean output into the corrupted run, one head at a time, every head
    (and every sequence) in one batched pass.

    clean, corrupt: ids (T,) or (B, T), pairs of the same length. metric(out) -> (rows,) with
    out = {"logits": (rows, T, V), plus every name in ``watch``, batched}. Returns (layers, heads):
    the restored fraction of the metric's mean over the B pairs.
    """
    L, H = model.cfg.n_layers, model.cfg.n_heads
    clean_ids, corrupt_ids = _pair(model, clean, corrupt)
    B = clean_ids.shape[0]
    clean_out = head_outputs(model, clean_ids)

    def patch(layer):
        def fn(x):
            x = x.clone()
            for head in range(H):
                rows = slice((layer * H + head) * B, (layer * H + head + 1) * B)
                x[rows, head] = clean_out[layer][:, head]
            return x
        return fn
    replace = {f"L{l}.head_out": patch(l) for l in range(L)}
    patched = _measure(model, corrupt_ids.repeat(L * H, 1), metric, watch, replace).view(L, H, B).mean(-1)
    return restored_fraction(patched, *_ends(model, clean_ids, corrupt_ids, metric, watch))


def residual_names(model):
    """The residual-stream points, in order: h0, then each block's h_mid (if it has an MLP) and h."""
    names = ["h0"]
    for layer in range(model.cfg.n_layers):
        names += ([f"L{layer}.h_mid"] if model.cfg.d_ff else []) + [f"L{layer}.h"]
    return names


def patch_residual(model, clean, corrupt, metric, names=None, watch=()):
    """Patch the clean residual stream at one point and one position into the corrupted run.

    clean, corrupt: ids (T,) or (B, T). names: residual points (default: h0 and each block's
    output L{l}.h). Returns (len(names), T) restored fractions of the metric's mean over the B
    pairs, every (point, position) in one batched pass.
    """
    names = names or ["h0"] + [f"L{l}.h" for l in range(model.cfg.n_layers)]
    clean_ids, corrupt_ids = _pair(model, clean, corrupt)
    B, T = clean_ids.shape
    got = capture(model, clean_ids, names)[1]

    def patch(first, name):
        def fn(x):
            x = x.clone()
            for t in range(T):
                rows = slice((first + t) * B, (first + t + 1) * B)
                x[rows, t] = got[name][:, t]
            return x
        return fn
    replace = {name: patch(i * T, name) for i, name in enumerate(names)}
    patched = _measure(model, corrupt_ids.repeat(len(names) * T, 1), metric, watch, replace)
    patched = patched.view(len(names), T, B).mean(-1)
    return restored_fraction(patched, *_ends(model, clean_ids, corrupt_ids, metric, watch))


def _pair(model, clean, corrupt):
    """clean and corrupt ids as (B, T) each, of one shape."""
    clean, corrupt = (model.check_ids(x) for x in (clean, corrupt))
    clean, corrupt = (x[None] if x.dim() == 1 else x for x in (clean, corrupt))
    if clean.shape != corrupt.shape:
        fail(f"clean and corrupted ids should have one shape, but got {tuple(clean.shape)} and "
             f"{tuple(corrupt.shape)}")
    return clean, corrupt


def _measure(model, ids, metric, watch, replace):
    """metric of one pass with ``replace`` (and the ``watch`` names captured): (B,)."""
    logits, got = capture(model, ids, watch, replace)
    return metric({**got, "logits": logits})


def _ends(model, clean, corrupt, metric, watch):
    """(mean metric of the clean runs, of the corrupted runs), floats."""
    return tuple(float(_measure(model, ids, metric, watch, {}).mean()) for ids in (clean, corrupt))


def logit_difference(world, up=worlds.ANIMAL_ADJ, down=worlds.SURFACE_ADJ):
    """metric(out) -> (B,): mean logit of the ``up`` words minus that of the ``down`` words at the last position."""
    ids = world.tokenizer.ids
    up_ids, down_ids = [ids[w] for w in up], [ids[w] for w in down]
    return lambda out: out["logits"][:, -1, up_ids].mean(-1) - out["logits"][:, -1, down_ids].mean(-1)


# ------------------------------------------------------------ logit lens and direct logit attribution

def logit_lens(model, ids, names=None):
    """(names, logits (P, T, V)): the final norm and the unembedding applied to each residual point
    (default ``residual_names``) of one sequence ids (T,). The last point gives the model's logits."""
    names = names or residual_names(model)
    got = capture(model, model.check_ids(ids).view(1, -1), names)[1]
    with torch.no_grad():
        return names, torch.stack([model.unembed(got[name][0]) for name in names])


def direct_logit_attribution(model, ids, direction, position=-1):
    """Each part's direct contribution to direction · logits at ``position`` of ids (T,).

    direction: (V,) weights over the vocabulary (a one-hot for one logit; +1/2, -1/2 ... for a
    difference). The final LayerNorm is linear once its scale sigma is frozen at this run's value:
    LN(sum of parts) = sum of (part - its mean) / sigma * gamma, plus beta. Returns an ordered
    dict {"embedding", "L0H0", ..., "L0 b_O", "L0 MLP", ..., "final-norm bias": float}, whose sum
    equals the actual value (pre-LN or no-norm models only).
    """
    cfg = model.cfg
    if cfg.norm == "post":
        fail("direct logit attribution needs the residual stream to be a sum of parts: a pre-LN or "
             "no-norm model, but this one is post-LN")
    names = ["h0"] + [f"L{l}.{n}" for l in range(cfg.n_layers) for n in ("head_out", "mlp") if
                      n != "mlp" or cfg.d_ff] + [f"L{cfg.n_layers - 1}.h"]
    got = {k: v[0, ..., position, :] if k.endswith("head_out") else v[0, position]
           for k, v in capture(model, model.check_ids(ids).view(1, -1), names)[1].items()}
    with torch.no_grad():
        return _attribute(model, got, direction)


def _attribute(model, got, direction):
    """direct_logit_attribution's sum, from the captured parts at one position."""
    cfg = model.cfg
    parts = {"embedding": got["h0"]}
    for layer, block in enumerate(model.blocks):
        attn, d_k = block.attn, cfg.d_k
        for head in range(cfg.n_heads):
            parts[f"L{layer}H{head}"] = got[f"L{layer}.head_out"][head] @ attn.W_O[head * d_k:(head + 1) * d_k]
        if attn.b_O is not None:
            parts[f"L{layer} b_O"] = attn.b_O
        if cfg.d_ff:
            parts[f"L{layer} MLP"] = got[f"L{layer}.mlp"]
    u = model.E.T @ torch.as_tensor(direction, dtype=model.E.dtype)       # (d_model,)
    if model.final_ln is None:
        return {name: float(p @ u) for name, p in parts.items()}
    ln, h = model.final_ln, got[f"L{cfg.n_layers - 1}.h"]
    sigma = torch.sqrt(h.var(unbiased=False) + ln.eps)        # frozen at this run's value
    out = {name: float(((p - p.mean()) / sigma * ln.weight) @ u) for name, p in parts.items()}
    out["final-norm bias"] = float(ln.bias @ u)
    return out


def value_bias_write(model):
    """{(layer, head): (d_model,)} what a head still writes when W_V = 0 but b_V stays: its values
    are all b_V's slice, its weights sum to 1, so its output is that slice and it writes b_V_h · W_O_h."""
    d_k, out = model.cfg.d_k, {}
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            for head in range(model.cfg.n_heads):
                rows = slice(head * d_k, (head + 1) * d_k)
                out[(layer, head)] = block.attn.b_V[rows] @ block.attn.W_O[rows]
    return out


def value_zeroed_copy(model):
    """A copy of ``model`` with every W_V zeroed (b_V kept): the Primer's "equivalently W_V = 0"."""
    clone = copy.deepcopy(model)
    with torch.no_grad():
        for block in clone.blocks:
            block.attn.W_V.zero_()
    return clone


# ------------------------------------------------------------ the induction model's patching

def induction_pairs(n, length, vocab_size, seed):
    """(clean, corrupt), each (n, 2*length + 1): clean sequences repeat their first copy; the
    corrupted ones keep the second copy but draw a fresh first copy, so nothing repeats."""
    clean = worlds.repeated_tokens(n, length, vocab_size, seed)
    fresh = worlds.repeated_tokens(n, length, vocab_size, seed + 1)
    corrupt = clean.clone()
    corrupt[:, 1:length + 1] = fresh[:, 1:length + 1]
    return clean, corrupt


def induction_attention(length, layer=1):
    """metric(out) -> (rows,): the mean attention of ``layer``'s heads from each second-copy token
    to the position after its earlier occurrence in the clean sequence (needs watch=("L1.weights",))."""
    query = torch.arange(length + 1, 2 * length + 1)
    return lambda out: out[f"L{layer}.weights"][:, :, query, query - length + 1].mean((1, 2))


def copy_log_prob(clean, length):
    """metric(out) -> (rows,): mean log-probability of the clean second copy's next tokens
    (a_2 .. a_L), predicted from the second copy. clean: (B, 2*length + 1), the rows repeat it."""
    query = torch.arange(length + 1, 2 * length)
    target = clean[:, query + 1]                                     # (B, L-1)

    def metric(out):
        logp = out["logits"][:, query].log_softmax(-1)              # (rows, L-1, V)
        rows = logp.shape[0]
        return logp.gather(-1, target.repeat(rows // len(clean), 1)[..., None])[..., 0].mean(-1)
    return metric


# ------------------------------------------------------------ the explorer's view

SWAP = {"cat": "mat", "mat": "cat", "dog": "floor", "floor": "dog"}


class CatLab:
    """The cat model's ablation references, computed once: the 64 sentence types' per-position
    means and a seeded resample source. ``view(prompt, heads, kind)`` is what the explorer shows."""

    def __init__(self, model, world, seed=0):
        self.model, self.world = model, world
        ids, lengths = cat_batch(world)
        self.means = mean_head_outputs(model, ids, lengths)
        outs = head_outputs(model, ids)
        self.source = {layer: x[resample_donors(lengths, seed)] for layer, x in outs.items()}
        # for one prompt: the outputs of another sentence type at least as long (the batch's row 0 donor)
        self.sentences = [" ".join(s[:-1]) for s in world.sentences]
        self.patches = {}

    def replace(self, heads, kind, rows=None):
        """The replace dict for the 64-sentence batch (rows=None) or for rows ``rows`` of it."""
        source = self.source if rows is None else {l: x[rows] for l, x in self.source.items()}
        return ablation_replace(heads, kind, self.means, source)

    def view(self, prompt, heads, kind):
        """dict(probs (V,) after ``prompt``, scores: ``cat_scores`` under the ablation, patch:
        (points, T) residual patching of ``prompt`` against its noun swapped)."""
        words = prompt.split()
        row = self.sentences.index(" ".join(words)) if " ".join(words) in self.sentences else \
            next(i for i, s in enumerate(self.world.sentences) if s[:len(words)] == words)
        ids = self.world.tokenizer.encode(words)[None]
        with torch.no_grad():
            probs = torch.softmax(self.model(ids, replace=self.replace(heads, kind, [row]))[0, -1], -1)
        return dict(probs=probs, scores=cat_scores(self.model, self.world, replace=self.replace(heads, kind)),
                    patch=self.patch(prompt))

    def patch(self, prompt):
        """(points, T) restored fraction, clean ``prompt`` patched into its noun-swapped twin (cached)."""
        if prompt not in self.patches:
            words = prompt.split()
            swapped = [SWAP.get(w, w) for w in words]
            tok = self.world.tokenizer
            sign = 1.0 if words[2] in worlds.ANIMALS else -1.0
            metric = logit_difference(self.world)
            self.patches[prompt] = patch_residual(self.model, tok.encode(words), tok.encode(swapped),
                                                  lambda out: sign * metric(out), residual_names(self.model))
        return self.patches[prompt]
