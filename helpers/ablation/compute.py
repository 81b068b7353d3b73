"""Switching attention off, whole or one head at a time, replacing heads, patching, reading the stream.

The Primer, Appendix A: Method 1 deletes the attention blocks, Method 2 keeps them but
zeroes their write-back (W_O and b_O). Zeroing one head's rows of W_O is a single-head
ablation. The model's own switches (``attention=False``, ``ablate_heads=...``) do the
same without touching the stored weights; they are one intervention written three ways.

Beyond the appendix, everything goes through ``model(ids, replace={trace name: fn})``; the
machinery for any model (capture, ablation_replace, patching, the logit lens, direct logit
attribution) lives on the ground floor in ``helpers/patching.py``, where the chapter imports it
from. This file holds what is the chapter's own: the cat world's and the induction model's
tasks, their references, metrics and the explorer's view.
"""
import copy
import math

import numpy as np
import torch

from .. import worlds
from ..errors import check_bytes, check_choice, check_finite, check_index, check_positive_int, check_seed, \
    check_switch, check_tensor_size, check_text, count, fail, items_of, length, next_seed, real_number, shown, to_numpy
from ..heads.compute import copy_losses, model_and_tokenizer, prompt_attention
from ..model import MAX_LAYERS, MAX_TOKENS, check_model, measuring
from ..patching import (KINDS, ablation_replace, capture, check_memory, direct_effects, direct_effects_kept, head_outputs,
                        mean_head_outputs, patch_residual, residual_names)
from ..states import on_the_cpu

MAX_DRAWS = 10_000   # the most resample draws (or repeated rows) one batched pass here takes


@on_the_cpu
def without_attention_blocks(model, ids):
    """Method 1: logits (T, V) for ids (T,) (or (B, T, V) for (B, T)) with the attention
    sub-blocks deleted: h0 goes straight into each block's MLP part, then the read-out.

    Uses the model's own parts (``embed``, ``block.mlp_part``, ``unembed``), so its norm,
    activation and final norm are honoured. In a pre-LN model (the cat model) this equals
    ``attention=False`` to the last bit; in a post-LN model the attention sub-block's
    LayerNorm is deleted with it, so the two differ.
    """
    ids = check_model(model).check_ids(ids)
    single = ids.dim() == 1
    # its own parts, not the model's forward: so the model's own pass check does not run; this one counts first
    check_memory(model, *(ids[None] if single else ids).shape, what="without_attention_blocks")
    with measuring(model), torch.no_grad():   # eval mode: no dropout in the MLP parts
        h = model.embed(ids[None] if single else ids)
        for block in model.blocks:
            h = block.mlp_part(h)
        logits = model.unembed(h)
    return logits[0] if single else logits


@on_the_cpu
def zeroed_copy(model, heads=None):
    """Method 2 by surgery: a copy of ``model`` whose attention writes (partly) nothing.

    heads: None zeroes every ``attn.W_O`` and ``attn.b_O`` (attention writes nothing);
    otherwise a set of (layer, head) pairs whose d_k rows of W_O are zeroed. The original
    is untouched.
    """
    heads = None if heads is None else check_model(model).check_heads(heads)
    clone = copy.deepcopy(check_model(model))
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


@on_the_cpu
def max_abs_diff(a, b):
    """Largest |a - b| over all entries of two tensors of one shape, as a float: the difference taken
    in float64, so integers never wrap round (uint8 0 and 1 differ by 1). Finite real numbers only;
    True/False, complex, sparse, meta and nested tensors are refused with one sentence."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape or a.numel() == 0:
        fail(f"a and b should be two non-empty tensors of one shape, but got {_described(a)} and {_described(b)}")
    for name, x in (("a", a), ("b", b)):
        check_tensor_size(x, name)
        if x.dtype == torch.bool:
            fail(f"{name} should hold numbers, but it holds True/False values (write 1.0 and 0.0 if you mean numbers)")
        check_finite(x.detach(), name)
    check_bytes(24 * a.numel(), f"the difference of two tensors of {count(a.numel())} numbers (in float64)",
                "compare smaller tensors")
    gap = (a.detach().double() - b.detach().double()).abs().max().item()
    if not math.isfinite(gap):
        fail("a and b should differ by at most about 1.8e308 (a float64), but their entries lie so far apart that "
             "the difference overflows to inf")
    return gap


def _described(x):
    return f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else shown(x)


def check_draws(draws, name="draws"):
    """A number of draws (or repeated rows) for one batched pass: 1 .. MAX_DRAWS."""
    draws = check_positive_int(draws, name)
    if draws > MAX_DRAWS:
        fail(f"{name} should be at most {MAX_DRAWS:,} (one batched pass), but got {shown(draws)}")
    return draws


def check_ablation(kind, draws, seed):
    """An ablation's kind (one of KINDS: 'zero', 'mean', 'resample'), its resample draws and their seed,
    each checked before any work; returned as (kind, draws, seed). A resample ablation reports the
    spread of its draws (a standard deviation), so it takes 2 draws at least."""
    kind, draws = check_choice(kind, "the ablation kind", KINDS), check_draws(draws)
    if kind == "resample" and draws < 2:
        fail(f"draws should be at least 2 for a resample ablation (its spread is a standard deviation over the "
             f"draws), but got {draws}")
    return kind, draws, check_seed(seed)


def check_world(world):
    """A helpers.worlds.World (such as worlds.cat_world()), else one sentence; return it."""
    if not isinstance(world, worlds.World):
        fail(f"world should be a helpers.worlds.World such as worlds.cat_world(), but got {shown(world)}")
    return world


CAT_WORDS = worlds.ANIMALS + worlds.SURFACES + worlds.COPULAS + worlds.ANIMAL_ADJ + worlds.SURFACE_ADJ + ("<BOS>", "the")


def check_cat_world(world):
    """The cat world (worlds.cat_world()): a World with the words the class rule reads and its copula
    sentences ('<BOS> the cat is big'), else one sentence; return it. The class rule, its prompts and
    the 64 sentence types are the cat world's: another world has none of them."""
    if not isinstance(world, worlds.World):
        fail(f"world should be the cat world (worlds.cat_world(), a helpers.worlds.World), but got {shown(world)}")
    words = getattr(world.tokenizer, "ids", None)
    copulas = [s for s in world.sentences if isinstance(s, list) and len(s) > 3 and s[3] in worlds.COPULAS]
    if not isinstance(words, dict) or any(w not in words for w in CAT_WORDS) or not copulas:
        fail(f"world should be the cat world (worlds.cat_world()), with the copula sentences ('<BOS> the cat is big') "
             f"and the words the class rule reads, but got the {shown(world.name)} world, which has "
             f"{'no copula sentences' if not copulas else 'other words'}")
    return world


def check_cat_model(model, world):
    """A course model and the cat world (``check_cat_world``) that share one vocabulary (a model of
    another world is refused), else one sentence."""
    V = len(check_world(world).tokenizer.vocab)
    if check_model(model).cfg.vocab_size != V:
        fail(f"the model should be one of this world's (a vocabulary of {V} words), but it has {model.cfg.vocab_size}")
    check_cat_world(world)


@on_the_cpu
def configurations(model):
    """The experiments of Appendix A: [(label, switches)] for none, attention off, each head removed."""
    check_model(model)
    out = [("none (the trained model)", {}), ("attention off", {"attention": False})]
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            out.append((f"L{layer}H{head} removed", {"ablate_heads": {(layer, head)}}))
    return out


@on_the_cpu
def prompt_row(model, world, prompt, **switches):
    """dict(top token, p_top, p_animal_adj = p(big) + p(small)) after ``prompt`` under the switches."""
    check_cat_model(model, world)
    probs = worlds.next_token_probs(model, world, [check_text(prompt, "prompt").split()], **switches)[0]
    ids = world.tokenizer.ids
    top = int(probs.argmax())
    return dict(top=world.tokenizer.vocab[top], p_top=float(probs[top]),
                p_animal_adj=float(probs[ids["big"]] + probs[ids["small"]]))


@on_the_cpu
def damage_row(model, world, **switches):
    """dict(held_out_rule: rule accuracy on the held-out copula types, bigram: top-1 on the
    432 bigram slots, copula: right class on the 16 copula slots) under the switches."""
    check_cat_model(model, world)
    slots = worlds.slot_accuracy(model, world, **switches)
    return dict(held_out_rule=worlds.rule_accuracy(model, world, **switches),
                bigram=slots["bigram_correct"] / slots["bigram_total"],
                copula=slots["copula_correct"] / slots["copula_total"])


@on_the_cpu
def attention_on_subject(model, world):
    """(L, h) mean attention from the copula to the subject noun, over the 8 copula prompts."""
    check_cat_model(model, world)
    prompts = sorted({tuple(s[:4]) for s in world.sentences if s[3] in worlds.COPULAS})
    total = torch.zeros(model.cfg.n_layers, model.cfg.n_heads)
    with measuring(model), torch.no_grad():
        for p in prompts:
            trace = model(world.tokenizer.encode(list(p)), trace=True)
            for layer in range(model.cfg.n_layers):
                total[layer] += trace[f"L{layer}.weights"][:, -1, 2]  # query "is", key = the noun
    return total / len(prompts)


@on_the_cpu
def class_probability_drop(model, world):
    """(L, h) fall in mean p(class adjectives) over the 16 copula types when each head is removed."""
    check_cat_model(model, world)
    base = sum(r["p_class"] for r in worlds.copula_report(model, world))
    drop = torch.zeros(model.cfg.n_layers, model.cfg.n_heads)
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            report = worlds.copula_report(model, world, ablate_heads={(layer, head)})
            drop[layer, head] = (base - sum(r["p_class"] for r in report)) / len(report)
    return drop


# ------------------------------------------------------------ the cat world, in one batched pass

@on_the_cpu
def cat_batch(world, sentences=None):
    """(ids (B, T), lengths (B,)) of the sentences minus their last word, padded: row b's
    position t predicts word t+1 of sentence b. world: the cat world (``check_cat_world``)."""
    sentences = check_cat_world(world).sentences if sentences is None else sentences
    ids, _ = world.batch(sentences)
    return ids, torch.tensor([len(s) - 1 for s in sentences])


@on_the_cpu
def cat_scores(model, world, rows=1, **switches):
    """Rule and collateral figures from one batched pass over the 64 sentence types.

    Returns dict(held_out_rule, bigram (top-1 on the 432 non-copula slots), copula (right class
    on the 16 copula slots), p_class (mean p(class adjectives) over the 16 copula types)), equal
    to ``damage_row`` and ``worlds.copula_report``; switches go to the model (e.g. replace=...).
    rows: the 64 types repeated ``rows`` times in the batch (one resample draw each): the figures
    are then the mean over the repeats, and p_class_spread their standard deviation of p_class.
    """
    check_cat_model(model, world)
    worlds.check_logit_switches(model, switches)   # no trace or cache: one batched pass read as logits
    rows = check_draws(rows, "rows")
    ids, _ = cat_batch(world)
    check_cat_scores_memory(model, ids, rows)
    with measuring(model), torch.no_grad():
        probs = torch.softmax(model(ids.repeat(rows, 1), **switches), dim=-1).view(rows, *ids.shape, -1)
    bigram, copula = _slots(world)
    top = probs.argmax(-1)
    b, t, target = bigram.T
    right = top[:, b, t] == target                                            # (rows, 432)
    b, t, adj1, adj2, held = copula.T
    p_class = probs[:, b, t, adj1].double() + probs[:, b, t, adj2].double()   # (rows, 16)
    in_class = (top[:, b, t] == adj1) | (top[:, b, t] == adj2)
    per_row = dict(held_out_rule=in_class[:, held == 1].double().mean(-1), bigram=right.double().mean(-1),
                   copula=in_class.double().mean(-1), p_class=p_class.mean(-1))
    out = {k: float(v.mean()) for k, v in per_row.items()}
    if rows > 1:
        out["p_class_spread"] = float(per_row["p_class"].std())
    return out


def check_cat_scores_memory(model, ids, rows):
    """Refuse, before any work, a ``cat_scores`` pass over ``rows`` repeats of the batch ids (B, T) (and its
    probabilities, rows x B x T x V) that would hold more than patching's limit (``check_memory``)."""
    check_memory(model, rows * ids.shape[0], ids.shape[1], what="cat_scores",
                 extra=4 * rows * ids.numel() * model.cfg.vocab_size)


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


@on_the_cpu
def cat_ablation(model, world, heads, kind, per_position=True, draws=20, seed=0):
    """``cat_scores`` with ``heads`` ablated, the reference the 64 sentence types (the task these
    figures measure). mean: means over the 64 types (per position, or over positions too);
    resample: ``draws`` seeded draws, in each every sentence takes the heads' outputs from another
    sentence at least as long; the figures are the mean over the draws (p_class_spread: their
    standard deviation of p_class), all in one batched pass."""
    check_cat_model(model, world)
    heads, per_position = sorted(model.check_heads(heads)), check_switch(per_position, "per_position")
    kind, draws, seed = check_ablation(kind, draws, seed)
    ids, lengths = cat_batch(world)
    if kind != "resample":
        means = mean_head_outputs(model, ids, lengths, per_position) if kind == "mean" else None
        return cat_scores(model, world, replace=ablation_replace(heads, kind, means))
    check_cat_scores_memory(model, ids, draws)                         # the pass's size before the donors
    shorter = lengths[None, :] < lengths[:, None]                      # (64, 64): c is shorter than b
    donors = torch.cat(donor_draws(len(ids), len(ids), draws, seed, same=shorter))
    source = {layer: x[donors] for layer, x in head_outputs(model, ids).items()}
    return cat_scores(model, world, rows=draws, replace=ablation_replace(heads, kind, source=source))


MAX_DONOR_ROWS = 10_000   # rows resample_donors pairs (it compares every pair)


def check_two_rows(lengths, what, need):
    """Refuse, in one sentence, a reference of rows of these ``lengths`` (tokens in each) in which the last
    position is reached by one row alone: a per-position mean over it, or a donor from it, is there that row's
    own output, so an ablation taken from it changes nothing. (Two rows of the longest length reach every
    position.) ``what`` names the rows, ``need`` what a second row gives."""
    lengths = [int(n) for n in lengths]
    if lengths.count(max(lengths)) < 2:
        fail(f"{what} should have a second row at every position ({need}: a mean or a donor of one row alone is "
             f"that row's own output, so ablating with it changes nothing), but only one row has the longest length "
             f"{max(lengths):,}")


@on_the_cpu
def resample_donors(lengths, seed):
    """(B,) for each row b a seeded other row b' != b with lengths[b'] >= lengths[b]."""
    g = torch.Generator().manual_seed(check_seed(seed))
    lengths = to_numpy(lengths, "lengths")
    if lengths.ndim != 1 or not 2 <= len(lengths) <= MAX_DONOR_ROWS:
        fail(f"lengths should be a list of 2 to {MAX_DONOR_ROWS:,} sequence lengths (a donor needs another row), "
             f"but got shape {lengths.shape}")
    if not (np.isfinite(lengths).all() and (lengths == np.round(lengths)).all() and lengths.min() >= 1):
        fail(f"lengths should be whole numbers of at least 1 (tokens in each row), but got {shown(lengths.tolist())}")
    check_two_rows(lengths, "lengths", "a donor for each row, at least as long")
    donors = []
    for b, n in enumerate(lengths.tolist()):
        pool = [c for c, m in enumerate(lengths.tolist()) if c != b and m >= n]
        donors.append(pool[int(torch.randint(len(pool), (1,), generator=g))])
    return torch.tensor(donors)


def check_repeated(model, ids, name="ids"):
    """Repeated sequences for the induction model: ``model`` a course Transformer and ``ids`` its token
    ids (B, 2L+1) with L >= 2, an odd length of at least 5 (a first copy, its repeat, and one token
    after: the second copy's tokens 2..L are what is measured, so L = 1 leaves nothing); as a
    LongTensor, else one sentence."""
    ids = check_model(model).check_ids(ids)
    if ids.dim() != 2 or ids.shape[1] < 5 or ids.shape[1] % 2 == 0:
        fail(f"{name} should be repeated sequences (B, 2L+1) with L >= 2, an odd length of at least 5 (the second "
             f"copy's tokens 2..L are measured), but got shape {tuple(ids.shape)}")
    return ids


def checked_reference(model, ids, reference):
    """``reference`` as ``induction_reference`` gives it, for test sequences ids (B, 2L+1): None (ids
    itself), repeated sequences of ids's length, or a dict ``induction_reference`` made of them."""
    if reference is None:
        return induction_reference(model, ids)
    if not isinstance(reference, dict):
        return checked_reference(model, ids, induction_reference(model, reference))
    means = reference.get("means")
    if set(reference) != {"ids", "outputs", "means"} or not isinstance(reference["ids"], torch.Tensor) \
            or reference["ids"].dim() != 2 or not isinstance(reference["outputs"], dict) \
            or not isinstance(means, dict) or not all(isinstance(means.get(pp), dict) for pp in (True, False)):
        fail(f"reference should be None, repeated sequences (R, 2L+1) or what induction_reference returns (a dict "
             f"of ids, outputs and means), but got {shown(reference)}")
    if reference["ids"].shape[1] != ids.shape[1]:
        fail(f"the reference sequences should have the test sequences' length {ids.shape[1]}, "
             f"but have {reference['ids'].shape[1]}")
    return check_reference_of(model, reference)


def check_reference_of(model, reference):
    """``reference`` (a dict of ids, outputs and means) made by ``induction_reference(model, ...)``, else one
    sentence: outputs {layer: (R, H, T-1, d_k)} for every layer of the model, the first sequence's the ones
    the model computes (one short pass: another model of the same sizes computes others), and means theirs."""
    ids = check_repeated(model, reference["ids"], "reference['ids']")
    cfg, outputs, means = model.cfg, reference["outputs"], reference["means"]
    shape = (len(ids), cfg.n_heads, ids.shape[1] - 1, cfg.d_k)
    layers = set(range(cfg.n_layers))
    if set(outputs) != layers or any(not isinstance(x, torch.Tensor) or tuple(x.shape) != shape for x in outputs.values()):
        fail(f"reference should be induction_reference(model, ...) of this model, with outputs of shape {shape} for "
             f"each of its {cfg.n_layers} layers, but its outputs are {shown({k: _described(x) for k, x in outputs.items()})}")
    first = head_outputs(model, ids[:1, :-1])
    expected = {True: {l: x.mean(0) for l, x in outputs.items()}, False: {l: x.mean((0, 2))[:, None] for l, x in outputs.items()}}
    same = lambda a, b: isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a, b, rtol=1e-3, atol=1e-4)
    if not all(same(outputs[l][:1], first[l]) for l in layers) or \
            not all(set(means[pp]) == layers and all(same(means[pp][l], expected[pp][l]) for l in layers) for pp in expected):
        fail("reference should be induction_reference(model, ...) of this model, but its head outputs or their means "
             "differ from the ones this model computes (another model's?)")
    return reference


def checked_mean_reference(model, ids, reference, per_position):
    """``checked_reference(model, ids, reference)`` for a mean ablation: per position, a reference of one
    sequence is refused (``check_two_rows``: its mean is that sequence's own output), the default (ids
    itself) before any pass."""
    def two_rows(rows):
        if per_position:
            check_two_rows([ids.shape[1]] * len(rows), "the mean reference (reference, or ids by default)",
                           "a mean over two sequences at least")
    if reference is None:
        two_rows(ids)
    ref = checked_reference(model, ids, reference)
    two_rows(ref["ids"])
    return ref


@on_the_cpu
def induction_reference(model, reference):
    """What the ablations of ``induction_ablation`` take from a reference of repeated sequences
    (R, 2L+1), computed once: dict(ids, outputs {layer: (R, H, T, d_k)} every head's output, means
    {per_position (True / False): ``mean_head_outputs``})."""
    reference = check_repeated(model, reference, "reference")
    return dict(ids=reference, outputs=head_outputs(model, reference[:, :-1]),
                means={pp: mean_head_outputs(model, reference[:, :-1], per_position=pp) for pp in (True, False)})


@on_the_cpu
def induction_ablation(model, ids, heads, kind, per_position=True, reference=None, draws=20, seed=0):
    """Copy losses dict(first, second, chance) on repeated sequences ids (B, 2L+1) with ``heads``
    ablated, the reference task-matched: ``reference`` (default ids itself) holds repeated
    sequences of the same length and form (or is ``induction_reference`` of them, computed once for
    many calls). mean: per-position means over the reference (or over positions too); resample:
    ``draws`` seeded draws, in each every sequence takes the heads' outputs from a reference
    sequence other than itself; the losses are the mean over the draws and second_spread is the
    standard deviation of the second-copy loss over them."""
    ids = check_repeated(model, ids)
    heads, per_position = sorted(model.check_heads(heads)), check_switch(per_position, "per_position")
    kind, draws, seed = check_ablation(kind, draws, seed)
    if kind == "resample":   # the draws' pass, their logits' log-softmax copy and the donors' head outputs
        rows, T, cfg = draws * len(ids), ids.shape[1] - 1, model.cfg
        check_memory(model, rows, T, what=f"induction_ablation with draws={draws} (one pass of draws x sequences "
                     f"rows: fewer draws need less)",
                     extra=4 * rows * T * (cfg.vocab_size + cfg.n_layers * cfg.n_heads * cfg.d_k))
    ref = checked_mean_reference(model, ids, reference, per_position) if kind == "mean" and heads \
        else checked_reference(model, ids, reference)
    length = (ids.shape[1] - 1) // 2
    if kind != "resample":
        means = ref["means"][per_position] if kind == "mean" else None
        return copy_losses(model, ids, length, replace=ablation_replace(heads, kind, means))
    same = torch.equal(ref["ids"], ids)
    donors = torch.cat(donor_draws(len(ids), len(ref["ids"]), draws, seed, avoid_self=same))
    source = {layer: x[donors] for layer, x in ref["outputs"].items()}
    with measuring(model), torch.no_grad():                 # every draw in one batched pass
        logits = model(ids[:, :-1].repeat(draws, 1), replace=ablation_replace(heads, kind, source=source))
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:].repeat(draws, 1), reduction="none")
    loss = loss.view(draws, len(ids), -1).mean(1)           # (draws, T-1): entry t predicts position t+1
    first, second = loss[:, :length].mean(-1), loss[:, length + 1:].mean(-1)
    return dict(first=float(first.mean()), second=float(second.mean()), chance=math.log(model.cfg.vocab_size - 1),
                second_spread=float(second.std()))


@on_the_cpu
def donor_draws(n, pool, draws, seed, avoid_self=True, same=None):
    """``draws`` seeded donor assignments, each (n,): for row b a row of the pool (size ``pool``),
    never b itself when avoid_self, never a row c with same[b, c] when ``same`` ((n, pool) bool) is given."""
    g = torch.Generator().manual_seed(check_seed(seed))
    n, pool, draws = check_positive_int(n, "n"), check_positive_int(pool, "pool"), check_positive_int(draws, "draws")
    avoid_self = check_switch(avoid_self, "avoid_self")
    check_bytes(9 * n * pool * (draws + 2), f"{count(draws)} donor draws of {count(n)} rows from {count(pool)}",
                "ask for fewer draws or rows")
    if avoid_self and pool < 2 or avoid_self and n > pool:
        fail(f"with avoid_self each of the n rows should have another row of the pool to take, "
             f"but got n={count(n)} and pool={count(pool)}")
    if same is not None and (not isinstance(same, torch.Tensor) or same.dtype != torch.bool or same.shape != (n, pool)):
        fail(f"same should be None or an (n, pool) = ({count(n)}, {count(pool)}) bool tensor, but got {shown(same)}")
    banned = torch.zeros(n, pool, dtype=torch.bool) if same is None else same.clone()
    if avoid_self:
        banned[torch.arange(n), torch.arange(n)] = True
    stuck = torch.nonzero(banned.all(1)).flatten()
    if len(stuck):
        fail(f"each row should have a row of the pool it may take, but row {int(stuck[0])} has none "
             f"({count(len(stuck))} rows in all){' (same bans every other row)' if same is not None else ''}")
    out = []
    for _ in range(draws):
        weights = (~banned).double()
        out.append(torch.multinomial(weights, 1, generator=g)[:, 0])
    return out


# ------------------------------------------------------------ the class rule's own task

@on_the_cpu
def copula_prompts(world):
    """The class rule's task: the 8 copula prompts <BOS> the NOUN COPULA (4 nouns x 2 copulas) as
    ids (8, 4), each prompt's two class adjectives (8, 2) and the four predicate adjectives (4,)."""
    tok = check_cat_world(world).tokenizer
    prompts = sorted({tuple(s[:4]) for s in world.sentences if len(s) > 3 and s[3] in worlds.COPULAS})
    ids = torch.stack([tok.encode(list(p)) for p in prompts])
    cls = torch.tensor([[tok.ids[a] for a in worlds.adjectives_of(p[2])] for p in prompts])
    adjectives = torch.tensor([tok.ids[a] for a in worlds.ANIMAL_ADJ + worlds.SURFACE_ADJ])
    return ids, cls, adjectives


@on_the_cpu
def copula_figures(model, world, rows=None, **switches):
    """Mean over the 8 copula prompts of p(class) (the two class adjectives), p(adjective) (any of
    the four predicate adjectives: 'an adjective comes next') and the class share
    p(class) / p(adjective), each a float, or (n,) for ``rows`` = n repeats of the 8 prompts."""
    check_cat_model(model, world)
    worlds.check_logit_switches(model, switches)   # no trace or cache: one batched pass read as logits
    ids = copula_prompts(world)[0]
    n = 1 if rows is None else check_draws(rows, "rows")
    with measuring(model), torch.no_grad():   # a model whose weights hold NaN refused before the pass
        probs = torch.softmax(model(ids.repeat(n, 1), **switches)[:, -1].double(), -1).view(n, len(ids), -1)
    out = _rule_figures(world, probs)
    return {k: float(v[0]) if rows is None else v for k, v in out.items()}


def _rule_figures(world, probs):
    """dict(p_class, p_adjective, class_share), each (n,): the means over the 8 copula prompts of
    probs (n, 8, V), the next-token probabilities after them."""
    _, cls, adjectives = copula_prompts(world)
    n = probs.shape[0]
    p_class = probs.gather(-1, cls.expand(n, -1, -1)).sum(-1)         # (n, 8)
    p_adj = probs[..., adjectives].sum(-1)
    return dict(p_class=p_class.mean(-1), p_adjective=p_adj.mean(-1), class_share=(p_class / p_adj).mean(-1))


@on_the_cpu
def class_pairs(world):
    """The class rule's 8 matched patching pairs, {cat, dog} x {mat, floor} x {is, was}: clean ids
    (8, 4) "<BOS> the ANIMAL COPULA" (answer: an animal adjective), corrupted ids (8, 4) the same
    with the surface noun, and 8 labels such as "cat/mat is". Pair 0 is "the cat is" / "the mat is"."""
    tok, labels, clean, corrupt = check_cat_world(world).tokenizer, [], [], []
    for animal in worlds.ANIMALS:
        for surface in worlds.SURFACES:
            for copula in worlds.COPULAS:
                labels.append(f"{animal}/{surface} {copula}")
                clean.append(tok.encode(["<BOS>", "the", animal, copula]))
                corrupt.append(tok.encode(["<BOS>", "the", surface, copula]))
    return torch.stack(clean), torch.stack(corrupt), labels


MAX_PAIRS = 64   # the most pairs per_pair patches, one call of ``patch`` each (the chapter has 8)


@on_the_cpu
def per_pair(patch, model, clean, corrupt, *args, **kwargs):
    """``patch`` (e.g. patching.patch_heads or path_patch) run on each pair alone, so each is
    normalised by its own clean and corrupted runs (0 = corrupted, 1 = clean). clean, corrupt: ids
    (P, T) of one shape, 1 <= P <= MAX_PAIRS. Returns the P results stacked, (P, ...), or {key: (P,)}
    for a dict result."""
    if not callable(patch):
        fail(f"patch should be a patching function such as patching.patch_heads, but got {shown(patch)}")
    check_model(model)
    if not all(isinstance(x, torch.Tensor) and x.dim() == 2 for x in (clean, corrupt)) or clean.shape != corrupt.shape \
            or not 1 <= len(clean) <= MAX_PAIRS:
        fail(f"clean and corrupt should be ids (P, T) of one shape, 1 to {MAX_PAIRS} pairs, but got {_described(clean)} "
             f"and {_described(corrupt)}")
    got = [patch(model, c, k, *args, **kwargs) for c, k in zip(clean, corrupt)]
    if all(isinstance(g, dict) and g.keys() == got[0].keys() for g in got):
        for g in got:
            for key, value in g.items():
                if not (isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype != torch.bool
                        and not value.dtype.is_complex):   # a tensor of one number stacks as that number
                    real_number(value, f"patch's result[{shown(key)}]",
                                "one number (a dict result's values are stacked over the pairs)")
        return {key: torch.tensor([g[key] for g in got]) for key in got[0]}
    if all(isinstance(g, torch.Tensor) and g.shape == got[0].shape for g in got):
        return torch.stack(got)
    fail(f"patch should return a tensor of one shape, or a dict of the same keys, for every pair, but returned "
         f"{shown(got[0])} for the first")


REFERENCES = ("copula", "all")   # the task's 8 prompts; the 64 sentence types (off-task for the rule)


@on_the_cpu
def rule_reference(world, reference):
    """(ids (R, 4)) the prompts a reference is taken over: the 8 copula prompts, or the first four
    tokens of each of the 64 sentence types. Both are the cat world's (``check_cat_world``)."""
    check_cat_world(world)
    if check_choice(reference, "the reference", REFERENCES) == "copula":
        return copula_prompts(world)[0]
    return cat_batch(world)[0][:, :4]


@on_the_cpu
def rule_ablation(model, world, heads, kind, reference="copula", per_position=True, draws=20, seed=0):
    """``copula_figures`` on the 8 copula prompts with ``heads`` ablated, the replacement taken over
    ``reference`` ("copula": the task's own prompts; "all": the 64 sentence types). mean: per
    position (or over positions too); resample: ``draws`` seeded donor draws (a donor is a reference
    prompt other than the prompt itself), all in one batched pass; the figures are the mean over the
    draws and p_class_spread their standard deviation."""
    got = _rule_figures(world, rule_probs(model, world, heads, kind, reference, per_position, draws, seed))
    return dict({k: float(v.mean()) for k, v in got.items()}, p_class_spread=float(got["p_class"].std())
                if kind == "resample" else 0.0)


@on_the_cpu
def rule_probs(model, world, heads, kind, reference="copula", per_position=True, draws=20, seed=0):
    """(n, 8, V) the next-token probabilities (float64) after the 8 copula prompts with ``heads``
    ablated as in ``rule_ablation``: n = ``draws`` for resample (one donor draw per row), else 1."""
    check_cat_model(model, world)
    heads, per_position = sorted(model.check_heads(heads)), check_switch(per_position, "per_position")
    kind, draws, seed = check_ablation(kind, draws, seed)
    ref, ids = rule_reference(world, reference), copula_prompts(world)[0]
    if kind == "resample":
        same = (ids[:, None, :] == ref[None, :, :]).all(-1)                   # (8, R)
        donors = torch.cat(donor_draws(len(ids), len(ref), draws, seed, avoid_self=False, same=same))
        replace = ablation_replace(heads, kind, source={layer: x[donors] for layer, x in head_outputs(model, ref).items()})
    else:
        draws = 1
        means = mean_head_outputs(model, ref, per_position=per_position) if kind == "mean" else None
        replace = ablation_replace(heads, kind, means)
    with measuring(model), torch.no_grad():
        logits = model(ids.repeat(draws, 1), replace=replace)[:, -1]
    return torch.softmax(logits.double(), -1).view(draws, len(ids), -1)


# ------------------------------------------------------------ the cat model's patching metric

@on_the_cpu
def logit_difference(world, up=worlds.ANIMAL_ADJ, down=worlds.SURFACE_ADJ):
    """metric(out) -> (B,): mean logit of the ``up`` words minus that of the ``down`` words at the last position."""
    ids = check_world(world).tokenizer.ids
    for words, name in ((up, "up"), (down, "down")):
        if isinstance(words, (str, bytes)) or not isinstance(words, (list, tuple)) or not length(words) or any(
                not isinstance(w, str) or w not in ids for w in items_of(words)):   # (read by the built-ins: a
            fail(f"{name} should be a non-empty list of this world's words, such as ['big', 'small'], but got "
                 f"{shown(words)}")                                                  # subclass's __len__ may raise)
    up, down = items_of(up), items_of(down)
    both = sorted(set(up) & set(down))
    if both:
        fail(f"up and down should share no word (the difference would cancel it), but both hold {shown(both)}")
    up_ids, down_ids, V = [ids[w] for w in up], [ids[w] for w in down], len(world.tokenizer.vocab)

    def metric(out):
        logits = out.get("logits") if isinstance(out, dict) else None
        if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or logits.shape[-1] != V:
            fail(f"this metric reads logits (rows, T, {V}) over the {shown(world.name)} world's {V} words, so the "
                 f"model should be one of that world's, but got "
                 + (f"logits of shape {tuple(logits.shape)}" if isinstance(logits, torch.Tensor) else shown(out)))
        return logits[:, -1, up_ids].mean(-1) - logits[:, -1, down_ids].mean(-1)
    metric.vocab_size = V   # what a check reads to refuse another world's model before it runs the metric
    return metric


# ------------------------------------------------------------ the value bias

@on_the_cpu
def value_bias_write(model):
    """{(layer, head): (d_model,)} what a head still writes when W_V = 0 but b_V stays: its values
    are all b_V's slice, its weights sum to 1, so its output is that slice and it writes b_V_h · W_O_h."""
    if not check_model(model).cfg.bias:
        fail("the model should have attention biases (b_V is what a head still writes with W_V = 0), "
             "but this one has bias=False")
    d_k, out = model.cfg.d_k, {}
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            for head in range(model.cfg.n_heads):
                rows = slice(head * d_k, (head + 1) * d_k)
                out[(layer, head)] = block.attn.b_V[rows] @ block.attn.W_O[rows]
    return out


@on_the_cpu
def value_zeroed_copy(model):
    """A copy of ``model`` with every W_V zeroed (b_V kept): the Primer's "equivalently W_V = 0"."""
    clone = copy.deepcopy(check_model(model))
    with torch.no_grad():
        for block in clone.blocks:
            block.attn.W_V.zero_()
    return clone


# ------------------------------------------------------------ the induction model's patching

@on_the_cpu
def induction_pairs(n, length, vocab_size, seed):
    """(clean, corrupt), each (n, 2*length + 1): clean sequences repeat their first copy
    (``worlds.repeated_tokens``); the corrupted ones keep the second copy but draw a fresh first
    copy (seed + 1), never the clean one, so the second copy does not repeat it: a row that drew
    its clean copy again takes, at every position, the next token of 1..vocab_size-1 instead (the
    last one's next is 1). vocab_size: at least 3 (<BOS> and two tokens to choose between)."""
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    if vocab_size < 3:
        fail(f"vocab_size should be at least 3 (<BOS> and two tokens, so that a corrupted first copy can differ "
             f"from the clean one), but got {vocab_size}")
    seed = check_seed(seed)
    clean = worlds.repeated_tokens(n, length, vocab_size, seed)
    first = clean[:, 1:length + 1]                                                   # (n, length)
    fresh = worlds.repeated_tokens(n, length, vocab_size, next_seed(seed))[:, 1:length + 1]
    same = (fresh == first).all(1)                                                   # (n,): drew the clean copy again
    fresh[same] = first[same] % (vocab_size - 1) + 1
    corrupt = clean.clone()
    corrupt[:, 1:length + 1] = fresh
    return clean, corrupt


@on_the_cpu
def induction_attention(length, layer=1):
    """metric(out) -> (rows,): the mean attention of ``layer``'s heads from each second-copy token
    to the position after its earlier occurrence in the clean sequence (needs watch=("L1.weights",)),
    for repeated sequences of 2 x length + 1 tokens (others are refused when the metric reads them)."""
    length, layer = check_positive_int(length, "length"), check_index(layer, "layer", MAX_LAYERS)
    if 2 * length + 1 > MAX_TOKENS:
        fail(f"length should be at most {(MAX_TOKENS - 1) // 2} (a sequence of 2 x length + 1 tokens, at most "
             f"{MAX_TOKENS:,} at once), but got {count(length)}")
    query, name = torch.arange(length + 1, 2 * length + 1), f"L{layer}.weights"

    def metric(out):
        if not isinstance(out, dict) or name not in out:
            fail(f"this metric reads {name}: it should be watched (watch=('{name}',), a layer of the model), "
                 f"but out holds {shown(sorted(out) if isinstance(out, dict) else out)}")
        weights = out[name]
        if not isinstance(weights, torch.Tensor) or weights.dim() != 4 or weights.shape[-1] != 2 * length + 1:
            T = weights.shape[-1] if isinstance(weights, torch.Tensor) and weights.dim() == 4 else None
            fail(f"this metric was made with length={length}, for repeated sequences of 2 x length + 1 = "
                 f"{2 * length + 1} tokens, but it reads {name} "
                 + (f"{shown(weights)}" if T is None else f"of sequences of {T} tokens (shape {tuple(weights.shape)})")
                 + (f": make it with induction_attention({(T - 1) // 2})" if T is not None and T % 2 and T > 1 else ""))
        return weights[:, :, query, query - length + 1].mean((1, 2))
    return metric


@on_the_cpu
def copy_log_prob(clean, length):
    """metric(out) -> (rows,): mean log-probability of the clean second copy's next tokens
    (a_2 .. a_L), predicted from the second copy. clean: (B, 2*length + 1), the rows repeat it."""
    length = check_positive_int(length, "length", minimum=2)   # a_2 .. a_L: one prediction at least
    if not isinstance(clean, torch.Tensor) or clean.dim() != 2 or clean.shape[1] != 2 * length + 1:
        fail(f"clean should be a (B, 2*length + 1) = (B, {count(2 * length + 1)}) tensor of ids, but got {shown(clean)}")
    query = torch.arange(length + 1, 2 * length)
    target = clean[:, query + 1]                                     # (B, L-1)

    def metric(out):
        logits = out.get("logits") if isinstance(out, dict) else None
        if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or logits.shape[1] != clean.shape[1] \
                or logits.shape[0] % len(clean):
            fail(f"this metric reads the logits (rows, {clean.shape[1]}, V) of a batch that repeats clean's "
                 f"{len(clean)} rows a whole number of times, but got "
                 + (f"logits of shape {tuple(logits.shape)}" if isinstance(logits, torch.Tensor) else shown(out)))
        logp = logits[:, query].log_softmax(-1)                     # (rows, L-1, V)
        rows = logp.shape[0]
        return logp.gather(-1, target.repeat(rows // len(clean), 1)[..., None])[..., 0].mean(-1)
    return metric


@on_the_cpu
def induction_direct_effects(model, ids, heads_off=(), reference=None):
    """The backup test on the induction model: dict(direct (layers, heads): each head's direct
    contribution to the right next token's logit, mean over the second copy of ids (B, 2L+1)
    (the predictions of its tokens 2..L), with ``heads_off`` mean-ablated (per-position means over
    ``reference``, repeated sequences of the same form, or their ``induction_reference``; default
    ids); scale: the final LayerNorm's mean divisor there; outputs {layer: (B, H, T, d_k)} every
    head's output in that run)."""
    ids = check_repeated(model, ids)
    heads_off = sorted(model.check_heads(heads_off))
    names, extra = direct_effects_kept(model, len(ids), ids.shape[1] - 1)
    check_memory(model, len(ids), ids.shape[1] - 1, names, "induction_direct_effects", extra)   # named for the caller
    length = (ids.shape[1] - 1) // 2
    replace = {}
    if heads_off:
        means = checked_mean_reference(model, ids, reference, True)["means"][True]
        replace = ablation_replace(heads_off, "mean", means)
    elif reference is not None:
        checked_reference(model, ids, reference)
    got = direct_effects(model, ids[:, :-1], ids[:, 1:], replace)
    where = torch.arange(length + 1, 2 * length)
    return dict(direct=got["heads"][..., where].mean((0, -1)), scale=float(got["scale"][:, where].mean()),
                outputs=got["outputs"])


# ------------------------------------------------------------ the explorer's view

SWAP = {"cat": "mat", "mat": "cat", "dog": "floor", "floor": "dog"}


class CatLab:
    """The cat model's ablations for the explorer, each reference computed once.

    ``view(prompt, heads, kind, reference)``: the reference is "copula" (the class rule's own 8
    copula prompts, the chapter's tables' reference; the default) or "all" (the 64 sentence
    types: off-task for the rule, but the task of the corpus-wide accuracies)."""

    def __init__(self, model, world, draws=20, seed=0):
        check_cat_model(model, world)
        _, self.draws, self.seed = check_ablation("resample", draws, seed)   # the draws of its resample views
        self.model, self.world = model, world
        self.prompts = [" ".join(p) for p in
                        sorted({tuple(s[:4]) for s in world.sentences if s[3] in worlds.COPULAS})]
        self.patches = {}

    def view(self, prompt, heads, kind, reference="copula"):
        """dict(probs (V,) after ``prompt`` (a copula prompt) under the ablation, the mean over the
        resample draws; rule: ``rule_ablation``'s figures on the 8 copula prompts; scores:
        ``cat_ablation``'s accuracies over the 64 sentence types when their own reference applies
        (reference "all", or zero ablation, which has none), else None; patch: (points, T) residual
        patching of ``prompt`` against its noun swapped)."""
        if not isinstance(prompt, str) or prompt not in self.prompts:
            fail(f"the prompt should be one of the copula prompts {shown(self.prompts)}, but got {shown(prompt)}")
        heads = sorted(self.model.check_heads(heads))
        probs = rule_probs(self.model, self.world, heads, kind, reference, draws=self.draws, seed=self.seed)
        figures = _rule_figures(self.world, probs)
        rule = dict({k: float(v.mean()) for k, v in figures.items()},
                    p_class_spread=float(figures["p_class"].std()) if kind == "resample" else 0.0)
        scores = None
        if reference == "all" or kind == "zero":
            scores = cat_ablation(self.model, self.world, heads, kind, draws=self.draws, seed=self.seed)
        return dict(probs=probs[:, self.prompts.index(prompt)].mean(0).float(), rule=rule, scores=scores,
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


MAX_PROMPTS = 32   # the general view's prompt menu: each prompt costs a pass of its own (about 0.15 s)


class AnyLab:
    """The ablation explorer's view for any course Transformer, its tokenizer and the caller's prompts.

    The mean reference is the prompts themselves (one mean per position over the prompts at
    least that long: the caller brings prompts of the task to be measured); resample takes each
    prompt's head outputs from the next prompt in the list (positions that prompt lacks keep the
    mean); a prompt that no other prompt is as long as has no reference but itself at its last
    positions, so its mean and resample views are refused. ``view(prompt, heads, kind)`` ->
    dict(probs (V,) after the prompt, lens (points, T):
    the probability the logit lens gives, at every residual point and position, to the token the
    unablated model predicts at that position, all under the ablation, from one forward pass;
    answer: the unablated model's next token after the prompt)."""

    def __init__(self, model, tokenizer, prompts):
        self.model, self.tokenizer, _ = model_and_tokenizer(check_model(model), tokenizer)   # a World: its tokenizer
        if not isinstance(prompts, (list, tuple)) or not length(prompts) or any(   # (read by the built-ins: a
                not isinstance(p, str) for p in items_of(prompts)):                  # subclass's __len__ may raise)
            fail(f"the prompts should be a non-empty list of strings, but got {shown(prompts)}")
        if length(prompts) > MAX_PROMPTS:
            fail(f"the prompts should be at most {MAX_PROMPTS} texts (a menu of them), but got {length(prompts):,}")
        self.prompts = items_of(prompts)
        self.ids = [prompt_attention(model, self.tokenizer, p)[0] for p in self.prompts]   # checks each prompt
        lengths = torch.tensor([len(i) for i in self.ids])
        batch = torch.zeros(len(self.ids), int(lengths.max()), dtype=torch.long)
        for b, i in enumerate(self.ids):
            batch[b, :len(i)] = i
        self.means = mean_head_outputs(model, batch, lengths)
        outs = head_outputs(model, batch)
        self.source = {}
        for layer, x in outs.items():
            donor = x.roll(-1, dims=0).clone()
            for b in range(len(self.ids)):
                short = int(lengths.roll(-1)[b])
                donor[b, :, short:] = self.means[layer][:, short:]
            self.source[layer] = donor
        self.points = residual_names(model)
        with measuring(model), torch.no_grad():
            self.answers = [model(i).argmax(-1) for i in self.ids]            # (T,) each: the unablated predictions

    def view(self, prompt, heads, kind):
        """The view (see the class), a mean or resample ablation of a prompt that no other prompt is as long
        as refused in one sentence (``check_two_rows``: its reference there would be the prompt itself)."""
        if not isinstance(prompt, str) or prompt not in self.prompts:
            fail(f"the prompt should be one of this lab's prompts {shown(self.prompts)}, but got {shown(prompt)}")
        heads = sorted(self.model.check_heads(heads))
        kind = check_choice(kind, "the ablation kind", KINDS)
        b = self.prompts.index(prompt)
        if heads and kind != "zero":   # the rows reaching each of this prompt's positions
            check_two_rows([min(len(i), len(self.ids[b])) for i in self.ids],
                           f"the prompts (the reference of a {kind} ablation of {shown(prompt)})",
                           "another prompt at least as long")
        ids = self.ids[b][None]
        source = {layer: x[b:b + 1] for layer, x in self.source.items()}
        logits, got = capture(self.model, ids, self.points, ablation_replace(heads, kind, self.means, source))
        with torch.no_grad():
            own = self.answers[b][:, None]
            lens = torch.stack([torch.softmax(self.model.unembed(got[p][0]), -1).gather(-1, own)[:, 0] for p in self.points])
        return dict(probs=torch.softmax(logits[0, -1], -1), lens=lens, answer=int(self.answers[b][-1]))
