"""Chapter 11's circuit in SmolLM2, measured on task-matched data, batched.

Induction on repeated random token sequences: every head's previous-token and induction score
(means over the sequences), mean ablation with a task-matched reference (each head's output
averaged over the same task's sequences, position by position), random heads as controls, and
path patching from a previous-token head into an induction head's queries or keys. Factual
recall ("The capital of X is") with matched clean and corrupted prompts, the residual stream
patched per layer and position in both directions, as the normalised logit difference
(0 = the corrupted run, 1 = the clean run). And the 4-bit weights' rounding: its size per
matrix from the file's block scales, and what a second rounding of that size does.

``data/smollm2_circuit/build.py`` runs these at full size and ships the numbers; chapter 11
recomputes a small subset live with the same functions.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

from .. import patching
from ..errors import check_bytes, check_choice, check_finite, check_ids_given, check_index, check_number, \
    check_positive_int, check_seed, check_tensor, count, fail, items_of, length, shown
from ..heads import compute as heads
from .smollm2 import check_net, check_real_passes, check_tok

FIRST_ID = 100   # random tokens are drawn from ids 100.. (below: special tokens and single bytes)


def capture(model, ids, names, replace=None, stop_after=None):
    """{name: batched tensor} of the trace names ``names`` from one pass over ids (B, T), with
    ``replace`` (None or a dict {trace name: function of one tensor}) applied; the pass stops as soon as ``stop_after`` has been made
    (``helpers.patching.capture``, its tensors only)."""
    return patching.capture(model, ids, names, replace, stop_after=stop_after)[1]


def random_heads(cfg, k, avoid=(), seed=0):
    """k (layer, head) pairs drawn without replacement (seeded), none of them in ``avoid``; k at
    most the heads left (no fewer are returned than asked for)."""
    from ..model import Config, check_collection

    if not isinstance(cfg, Config):
        fail(f"cfg should be the model's Config (model.cfg), but got {shown(cfg)}")
    k, g = check_positive_int(k, "k"), torch.Generator().manual_seed(check_seed(seed))
    if isinstance(avoid, (str, bytes)) or not isinstance(avoid, (list, tuple, set, frozenset)):
        fail(f"avoid should be a list of (layer, head) pairs, but got {shown(avoid)}")
    avoid = check_collection(avoid, "avoid", "a list of (layer, head) pairs")   # (read by the built-ins)
    for pair in avoid:
        if not (isinstance(pair, (tuple, list)) and length(pair) == 2 and all(
                isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)) for i in items_of(pair))):
            fail(f"avoid should hold (layer, head) pairs of whole numbers, but it holds {shown(pair)}")
    avoid = {tuple(items_of(pair)) for pair in avoid}
    pool = [(l, h) for l in range(cfg.n_layers) for h in range(cfg.n_heads) if (l, h) not in avoid]
    if k > len(pool):
        fail(f"k should be at most the {len(pool):,} heads not avoided ({cfg.n_layers} layers x {cfg.n_heads} heads, "
             f"{cfg.n_layers * cfg.n_heads - len(pool):,} avoided), but got {count(k)}")
    return [pool[int(i)] for i in torch.randperm(len(pool), generator=g)[:k]]


# ---------------------------------------------------------------- induction on random tokens

def random_repeats(n, length, vocab_size, seed, start_id=0):
    """(n, 2*length + 1) token ids: the start token, then ``length`` random tokens (ids FIRST_ID..
    vocab_size - 1, a seeded draw) written twice."""
    n, length = check_positive_int(n, "n"), check_positive_int(length, "length", minimum=2)
    vocab_size = check_positive_int(vocab_size, "vocab_size", minimum=FIRST_ID + 2)
    if vocab_size > 2**31:
        fail(f"vocab_size should be at most 2**31 (token ids are int64 draws of a real vocabulary), but got {shown(vocab_size)}")
    seed, start_id = check_seed(seed), check_index(start_id, "start_id", vocab_size)
    check_bytes(3 * 8 * n * (2 * length + 1), f"{count(n)} sequences of 2 x {count(length)} random tokens", "ask for fewer or shorter ones")
    g = torch.Generator().manual_seed(seed)
    first = torch.randint(FIRST_ID, vocab_size, (n, length), generator=g)
    return torch.cat([torch.full((n, 1), start_id), first, first], 1)


def _chunks(ids, chunk):
    return torch.split(torch.as_tensor(ids), check_positive_int(chunk, "chunk"))


def check_chunk_work(model, ids, chunk, what, names=(), extra=0):
    """Refuse up front a call whose passes over ids (N, T), one of the model per ``chunk`` sequences, would
    need more than about a minute (``smollm2.check_real_passes``), or whose largest pass, keeping the trace
    ``names`` and ``extra`` bytes a sequence, more than patching's limit (``patching.check_memory``, the
    sentence naming ``what`` and a smaller chunk, not the capture inside): the ids are the model's (T within
    its limit) and chunk a whole number >= 1, checked first. Returns chunk."""
    chunk = check_positive_int(chunk, "chunk")
    N, T = check_net(model).check_ids(ids).shape
    full, rest = divmod(N, chunk)                 # full chunks, then one pass over the rest
    check_real_passes(model, [(full, chunk, T, 0), (int(rest > 0), rest, T, 0)], what,
                      "give fewer or shorter sequences (the chapter gives 2)")
    B = min(chunk, N)
    patching.check_memory(model, B, T, names, f"{what} with chunk={chunk}" + (
        f" ({B} sequences in each pass: a smaller chunk needs less)" if B > 1 else " (one sequence a pass)"),
        extra=B * extra)
    return chunk


MAX_REPEATS = 100_000   # repeated sequences in one call (the chapter passes 100)


def check_repeats(ids):
    check_ids_given(ids, "ids", MAX_REPEATS)   # a range is made lazily: its length first
    try:
        ids = torch.as_tensor(ids)
    except (TypeError, ValueError, RuntimeError, OverflowError, RecursionError):
        fail(f"ids should be repeated sequences (N, 2L+1) of token ids, but got {shown(ids)}")
    check_tensor(ids, "ids")
    if ids.dim() != 2 or ids.shape[1] % 2 == 0 or ids.shape[1] < 5 or \
            not torch.equal(ids[:, 1:(ids.shape[1] + 1) // 2], ids[:, (ids.shape[1] + 1) // 2:]):
        fail(f"expected repeated sequences (N, 2L+1): a start token, then L tokens written twice, "
             f"but got shape {tuple(ids.shape)}" + ("" if ids.dim() != 2 else " not repeating"))
    return ids, (ids.shape[1] - 1) // 2


@torch.no_grad()
def head_statistics(model, ids, chunk=25):
    """One clean pass over repeated sequences ids (N, 2L+1). Returns dict(previous, induction:
    (N, layers, heads) each sequence's scores (chapter 05's); means: {layer: (heads, T, d_k)}
    each head's output averaged over the N sequences at each position, the task's mean-ablation
    reference)."""
    check_net(model)
    ids, length = check_repeats(ids)
    n_layers = model.cfg.n_layers
    names = [f"L{l}.{part}" for l in range(n_layers) for part in ("weights", "head_out")]
    check_chunk_work(model, ids, chunk, "head_statistics", names)
    previous, induction, sums = [], [], {}
    for part in _chunks(ids, chunk):
        kept = capture(model, part, names, stop_after=names[-1])
        w = torch.stack([kept[f"L{l}.weights"] for l in range(n_layers)], 1)   # (B, layers, H, T, T)
        previous.append(heads.previous_token_score(w))
        induction.append(heads.induction_score(w, length))
        for l in range(n_layers):
            sums[l] = sums.get(l, 0) + kept[f"L{l}.head_out"].sum(0)
    return dict(previous=torch.cat(previous), induction=torch.cat(induction),
                means={l: s / len(ids) for l, s in sums.items()})


def check_ablation(model, heads_off, means, T, whose="each head of heads_off"):
    """heads_off: (layer, head) pairs of the model (``Transformer.check_heads``); means: what
    ``head_statistics`` returns as means ({layer: (heads, T, d_k)}), for every layer of heads_off: each
    head's mean a float tensor (at least T, d_k) of finite numbers, one row for each of the T positions."""
    check_net(model)
    if isinstance(heads_off, (str, bytes, dict)) or not isinstance(heads_off, (list, tuple, set)):
        fail(f"heads_off should be a list of (layer, head) pairs, e.g. [(1, 4)], but got {shown(heads_off)}")
    pairs = model.check_heads(heads_off)

    def has(layer, head):
        try:
            return isinstance(means[layer][head], torch.Tensor)
        except (TypeError, KeyError, IndexError):
            return False
    if not all(has(layer, head) for layer, head in pairs):
        fail(f"means should hold a mean output for {whose} (head_statistics(...)['means'] or "
             f"shipped_means()), but got {type(means).__name__} {shown(means)}")
    d_k = model.cfg.d_k
    for layer, head in sorted(pairs):
        mean = check_tensor(means[layer][head], f"means[{layer}][{head}]")
        if mean.dim() != 2 or mean.shape[0] < T or mean.shape[1] != d_k or not mean.is_floating_point():
            fail(f"means[{layer}][{head}] should be a float tensor (T, d_k) with a row for each of the {T} positions "
                 f"and d_k={d_k}, but got dtype {mean.dtype} and shape {tuple(mean.shape)}")
        check_finite(mean[:T], f"means[{layer}][{head}]")


def check_head(model, pair, name):
    """A (layer, head) pair of the model, each a whole number in range; returned as two ints."""
    if not isinstance(pair, (tuple, list)) or length(pair) != 2:
        fail(f"{name} should be a (layer, head) pair such as (24, 4), but got {shown(pair)}")
    layer, head = items_of(pair)   # (read by the built-ins: a subclass's __len__ or __iter__ may lie or raise)
    return (check_index(layer, f"{name}'s layer", model.cfg.n_layers),
            check_index(head, f"{name}'s head", model.cfg.n_heads))


def mean_ablation(heads_off, means):
    """``replace`` for the model: each (layer, head) of heads_off has its output replaced, at every
    position, by ``means[layer][head]`` (T, d_k): the task's mean at that position."""
    by_layer = {}
    for layer, head in heads_off:
        by_layer.setdefault(layer, []).append(head)

    def replace_in(layer):
        def fn(head_out):                     # (B, H, T, d_k)
            head_out = head_out.clone()
            for head in by_layer[layer]:
                head_out[:, head] = means[layer][head][:head_out.shape[2]]
            return head_out
        return fn
    return {f"L{layer}.head_out": replace_in(layer) for layer in by_layer}


@torch.no_grad()
def copy_loss(model, ids, heads_off=(), means=None, chunk=25, copy=2):
    """(N,) each sequence's mean next-token loss (nats) on its second copy (the copy's first token
    left out: nothing announces it), with ``heads_off`` mean-ablated to ``means``. copy=1: on the
    first copy's tokens 2..L instead, where nothing can be copied."""
    ids, length = check_repeats(ids)
    if isinstance(copy, bool) or not isinstance(copy, (int, np.integer)) or copy not in (1, 2):
        fail(f"copy should be 1 or 2 (which copy's tokens are scored), but got {shown(copy)}")
    check_ablation(model, heads_off, means, ids.shape[1])
    check_chunk_work(model, ids, chunk, "copy_loss", ["final_ln"])
    replace = mean_ablation(heads_off, means) if heads_off else {}
    where = torch.arange(length + 1, 2 * length) if copy == 2 else torch.arange(1, length)  # predicting tokens 2..L
    out = []
    for part in _chunks(ids, chunk):
        final = capture(model, part, ["final_ln"], replace, stop_after="final_ln")["final_ln"]
        logits = final[:, where] @ model.E.T
        out.append(F.cross_entropy(logits.transpose(1, 2), part[:, where + 1], reduction="none").mean(1))
    return torch.cat(out)


@torch.no_grad()
def copy_effects(model, ids, heads_off=(), means=None, chunk=25):
    """One pass over repeated sequences ids (N, 2L+1) with ``heads_off`` mean-ablated to ``means``:
    dict(loss (N,): ``copy_loss``; direct (N, layers, heads): each head's direct contribution to
    the right next token's logit, averaged over the same positions (the predictions of the second
    copy's tokens 2..L), the final RMSNorm's divisor that run's own (``patching.direct_effects``)).
    With one head ablated, a head whose direct contribution grows is a backup head."""
    ids, length = check_repeats(ids)
    check_ablation(model, heads_off, means, ids.shape[1])
    check_chunk_work(model, ids, chunk, "copy_effects", *patching.direct_effects_kept(model, 1, ids.shape[1]))
    replace = mean_ablation(heads_off, means) if heads_off else {}
    where = torch.arange(length + 1, 2 * length)
    loss, direct = [], []
    for part in _chunks(ids, chunk):
        targets = torch.cat([part[:, 1:], part[:, :1]], 1)        # the next token (the last position's unused)
        got = patching.direct_effects(model, part, targets, replace)
        logits = model.unembed(got["h"][:, where])
        loss.append(F.cross_entropy(logits.transpose(1, 2), part[:, where + 1], reduction="none").mean(1))
        direct.append(got["heads"][..., where].mean(-1))
    return dict(loss=torch.cat(loss), direct=torch.cat(direct))


@torch.no_grad()
def induction_scores(model, ids, heads_off=(), means=None, chunk=25):
    """(N, layers, heads) every head's induction score on repeated sequences ids (N, 2L+1), with
    ``heads_off`` mean-ablated to ``means``: the attention side of the backup test. A head whose
    score rises when another is off has taken over its attention (a backup head that attends
    where the removed one did, even if it writes nothing directly into the logit)."""
    ids, length = check_repeats(ids)
    check_ablation(model, heads_off, means, ids.shape[1])
    names = [f"L{l}.weights" for l in range(model.cfg.n_layers)]
    check_chunk_work(model, ids, chunk, "induction_scores", names)
    replace = mean_ablation(heads_off, means) if heads_off else {}
    out = []
    for part in _chunks(ids, chunk):
        kept = capture(model, part, names, replace, stop_after=names[-1])
        out.append(heads.induction_score(torch.stack([kept[n] for n in names], 1), length))
    return torch.cat(out)


@torch.no_grad()
def receiver_scores(model, ids, receiver, sender=None, means=None, via="all", chunk=25):
    """(N,) the receiver head's induction score on each sequence, with the sender head's output
    replaced by its task mean: via="all" everywhere (the receiver sees every downstream effect),
    via="q" / "k" / "qk" only in the direct path into the receiver's queries / keys / both (the
    residual stream the receiver's query or key projection reads has the sender's own write
    replaced; every other head and MLP sees the clean run). sender=None: the clean score."""
    check_net(model)
    ids, length = check_repeats(ids)
    r_layer, r_head = receiver = check_head(model, receiver, "receiver")
    check_choice(via, "via", ("all", "q", "k", "qk"))
    if sender is not None:
        sender = check_head(model, sender, "sender")
        if sender[0] >= r_layer:
            fail(f"the sender should sit in a layer below the receiver {receiver}, but got {sender}")
        check_ablation(model, [sender], means, ids.shape[1], f"the sender {sender}")
    target = f"L{r_layer}.weights"
    check_chunk_work(model, ids, chunk, "receiver_scores", [target])
    out = []
    for part in _chunks(ids, chunk):
        if sender is None:
            replace, names = {}, [target]
        elif via == "all":
            replace, names = mean_ablation([sender], means), [target]
        else:
            replace, names = _path_replace(model, sender, r_layer, r_head, means, via), [target]
        w = capture(model, part, names, replace, stop_after=target)[target][:, r_head]
        out.append(heads.induction_score(w, length))
    return torch.cat(out)


def _path_replace(model, sender, r_layer, r_head, means, via):
    """``replace`` entries that give the receiver layer's q and/or k as computed from a residual
    stream in which only the sender's direct write is replaced by its task mean."""
    s_layer, s_head = sender
    d_k, block = model.cfg.d_k, model.blocks[r_layer]
    rows = slice(s_head * d_k, (s_head + 1) * d_k)
    W_O = model.blocks[s_layer].attn.W_O[rows]
    seen = {}

    def keep_sender(head_out):
        seen["delta"] = (means[s_layer][s_head][:head_out.shape[2]] - head_out[:, s_head]) @ W_O
        return head_out

    def keep_input(h):
        seen["x"] = block.ln1(h + seen["delta"])        # what the receiver would read without the sender
        return h

    def swap(name, cols):
        def fn(t):
            t = t.clone()
            W = block.attn.W_Q if name == "q" else block.attn.W_K
            t[..., cols] = (seen["x"] @ W)[..., cols]
            return t
        return fn

    group = model.cfg.n_heads // model.cfg.kv_heads
    replace = {f"L{s_layer}.head_out": keep_sender, (f"L{r_layer - 1}.h" if r_layer else "h0"): keep_input}
    if "q" in via:
        replace[f"L{r_layer}.q"] = swap("q", slice(r_head * d_k, (r_head + 1) * d_k))
    if "k" in via:
        kv = r_head // group
        replace[f"L{r_layer}.k"] = swap("k", slice(kv * d_k, (kv + 1) * d_k))
    if f"L{s_layer}.head_out" == f"L{r_layer - 1}.h":
        fail("internal: sender and receiver names collide")
    return replace


# ---------------------------------------------------------------- factual recall, patched

TEMPLATE = "The capital of {} is"
# the candidates: the build script keeps those whose capital the model names first
CAPITALS = dict(
    France="Paris", Italy="Rome", Germany="Berlin", Spain="Madrid", Japan="Tokyo", Russia="Moscow",
    China="Beijing", Egypt="Cairo", Greece="Athens", Portugal="Lisbon", Austria="Vienna", Poland="Warsaw",
    Ireland="Dublin", Norway="Oslo", Sweden="Stockholm", Finland="Helsinki", Denmark="Copenhagen",
    Hungary="Budapest", Canada="Ottawa", Australia="Canberra", Kenya="Nairobi", Peru="Lima", Chile="Santiago",
    Cuba="Havana", Thailand="Bangkok", Turkey="Ankara", Iran="Tehran", Iraq="Baghdad", Syria="Damascus",
    Lebanon="Beirut", Israel="Jerusalem", Pakistan="Islamabad", Belgium="Brussels", Netherlands="Amsterdam",
    Switzerland="Bern", Argentina="Buenos Aires", Brazil="Brasília", Colombia="Bogotá", Venezuela="Caracas",
    Ukraine="Kyiv", Romania="Bucharest", Bulgaria="Sofia", Serbia="Belgrade", Croatia="Zagreb", Czech="Prague",
    Indonesia="Jakarta", Philippines="Manila", Vietnam="Hanoi", Korea="Seoul", Nigeria="Abuja", Ghana="Accra",
    Ethiopia="Addis Ababa", Morocco="Rabat", Algeria="Algiers", Tunisia="Tunis", Libya="Tripoli",
    Sudan="Khartoum", Uganda="Kampala", Afghanistan="Kabul", Nepal="Kathmandu", Iceland="Reykjavik",
    Estonia="Tallinn", Latvia="Riga", Lithuania="Vilnius", Scotland="Edinburgh", England="London",
    Wales="Cardiff", Jamaica="Kingston", Qatar="Doha", Jordan="Amman", Senegal="Dakar", Zimbabwe="Harare",
    Zambia="Lusaka", Malaysia="Kuala Lumpur", Bangladesh="Dhaka")


MAX_PAIRS = 1_000   # the most prompt pairs of one patching batch (the chapter takes 2 to 8)


def fact_batch(tok, pairs, capitals):
    """(clean (N, T), corrupt (N, T), answers (N, 2)) for pairs [(country, other country)]: the
    template with each; answers: the first token of each country's capital (with its space)."""

    check_tok(tok)
    if not isinstance(pairs, (list, tuple)) or not length(pairs) or not all(   # (read by the built-ins: a subclass's
            isinstance(p, (list, tuple)) and length(p) == 2                  # __len__ or __iter__ may lie or raise)
            and all(isinstance(c, str) and c.strip() for c in items_of(p)) for p in items_of(pairs)):
        fail(f"pairs should be a non-empty list of (country, other country) pairs of names, but got {shown(pairs)}")
    if length(pairs) > MAX_PAIRS:
        fail(f"pairs should be at most {MAX_PAIRS:,} (this course's limit), but got {length(pairs):,}")
    pairs = [items_of(p) for p in items_of(pairs)]   # (each name a plain str)
    if not isinstance(capitals, dict):
        fail(f"capitals should be a dict {{country: capital}} such as circuit.CAPITALS, but got {shown(capitals)}")
    for country in {c for p in pairs for c in p}:
        if not isinstance(capitals.get(country), str) or not capitals[country].strip():
            fail(f"capitals should name the capital of every country in pairs, but has {shown(capitals.get(country))} "
                 f"for {shown(country)}")
    clean = [tok.encode(TEMPLATE.format(a)) for a, _ in pairs]
    corrupt = [tok.encode(TEMPLATE.format(b)) for _, b in pairs]
    if len({len(x) for x in clean + corrupt}) != 1:
        fail("every prompt of a patching batch should have as many tokens; these have "
             f"{sorted({len(x) for x in clean + corrupt})}")
    answers = [[tok.encode(" " + capitals[a])[0], tok.encode(" " + capitals[b])[0]] for a, b in pairs]
    return torch.tensor(clean), torch.tensor(corrupt), torch.tensor(answers)


def check_answers(answers, n, vocab_size):
    """answers: an integer tensor (n, 2) of token ids below vocab_size (the clean, the corrupted answer)."""
    if not isinstance(answers, torch.Tensor) or answers.dtype not in (torch.int64, torch.int32) \
            or answers.dim() != 2 or answers.shape[1] != 2 or n is None or len(answers) != n:
        fail(f"answers should be a tensor ({n}, 2) of token ids (clean answer, corrupted answer) per prompt, as "
             f"fact_batch gives, but got {type(answers).__name__}"
             + (f" of shape {tuple(answers.shape)}" if isinstance(answers, torch.Tensor) else f" {shown(answers)}"))
    if answers.min() < 0 or answers.max() >= vocab_size:
        fail(f"answers should be token ids in 0..{vocab_size - 1}, but got {int(answers.min())}..{int(answers.max())}")
    return answers


def logit_difference(logits, answers):
    """(N,) logit of the clean answer minus the corrupted answer's; logits (N, V) finite numbers, answers (N, 2)."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or not logits.is_floating_point():
        fail(f"logits should be a float tensor (N, V), one row of logits per prompt, but got {shown(logits)}")
    check_finite(check_tensor(logits, "logits"), "logits")   # a NaN difference would print as a number
    check_answers(answers, len(logits), logits.shape[-1])
    return logits.gather(1, answers[:, :1])[:, 0] - logits.gather(1, answers[:, 1:])[:, 0]


@torch.no_grad()
def streams(model, ids):
    """(layers, N, T, d_model): the residual stream after each block, for ids (N, T)."""
    check_net(model)
    names = [f"L{l}.h" for l in range(model.cfg.n_layers)]
    kept = capture(model, ids, names, stop_after=names[-1])
    return torch.stack([kept[n] for n in names])


@torch.no_grad()
def run_from(model, h, layer):
    """Last-position logits (N, V) of a pass resumed from h (N, T, d_model), the stream after
    block ``layer`` (blocks layer+1 .. the last, then the read-out)."""
    from ..model import check_stream

    cfg = check_net(model).cfg
    layer = check_index(layer, "layer", cfg.n_layers)
    h = check_stream(h, cfg.d_model, model.E.dtype, "h (the residual stream)")
    patching.check_memory(model, h.shape[0], h.shape[1], what="run_from")
    for later in range(layer + 1, model.cfg.n_layers):
        h = model.blocks[later](h, layer=later)
    return model.unembed(h[:, -1])


@torch.no_grad()
def patch_grid(model, clean, corrupt, answers, layers=None, positions=None, direction="denoise"):
    """The residual stream patched at one (layer, position) at a time, all pairs at once.

    denoise: run the corrupted prompts with the clean stream put in (does it restore the clean
    answer: is that place sufficient?); noise: run the clean prompts with the corrupted stream put
    in (does it break it: is that place necessary?). Returns dict(clean, corrupt (N,) logit
    differences; layers, positions; patched (layers, positions, N) logit differences; normalised
    (layers, positions): (mean patched - mean corrupt) / (mean clean - mean corrupt), 0 = the
    corrupted run, 1 = the clean run)."""
    check_choice(direction, "direction", ("denoise", "noise"))
    clean, corrupt = check_net(model).check_ids(clean), model.check_ids(corrupt)
    if clean.dim() != 2 or clean.shape != corrupt.shape:
        fail(f"clean and corrupt should be batches (N, T) of one shape, but got shapes {tuple(clean.shape)} "
             f"and {tuple(corrupt.shape)}")
    check_answers(answers, len(clean), model.cfg.vocab_size)
    for name, given, size in (("layers", layers, model.cfg.n_layers), ("positions", positions, clean.shape[1])):
        if given is not None and (not isinstance(given, (list, tuple, range)) or not length(given)):
            fail(f"{name} should be a non-empty list, but got {shown(given)}")
    read = lambda given: given if isinstance(given, range) else items_of(given)   # (a subclass's __len__ may raise)
    layers = list(range(model.cfg.n_layers)) if layers is None else [check_index(l, "each layer", model.cfg.n_layers)
                                                                      for l in read(layers)]
    positions = list(range(clean.shape[1])) if positions is None else \
        [check_index(p, "each position", clean.shape[1]) for p in read(positions)]
    (n, T), cfg, P = clean.shape, model.cfg, len(positions)   # counted before the streams and the patched batch
    stream = T * cfg.d_model * model.E.element_size()        # one prompt's stream after one block
    check_bytes(2 * cfg.n_layers * n * stream + n * P * stream + cfg.pass_bytes(n * P, T),
                f"patch_grid (the streams of both runs at every layer, then a pass of {count(n)} prompts × {count(P)} "
                f"positions of {count(T)} tokens for each of the layers asked for, {count(len(layers))} in all)",
                "patch fewer positions (positions=[...]) or give fewer or shorter prompts", limit=patching.MAX_PASS_BYTES)
    h_clean, h_corrupt = streams(model, clean), streams(model, corrupt)
    last = model.cfg.n_layers - 1
    d_clean = logit_difference(run_from(model, h_clean[last], last), answers)
    d_corrupt = logit_difference(run_from(model, h_corrupt[last], last), answers)
    patching.normalised(0.0, float(d_clean.mean()), float(d_corrupt.mean()))   # refuses two runs that agree
    base, donor = (h_corrupt, h_clean) if direction == "denoise" else (h_clean, h_corrupt)
    patched = torch.zeros(len(layers), len(positions), len(clean))
    n = len(clean)
    for i, layer in enumerate(layers):          # every position of one layer in one batched pass
        h = base[layer].repeat(len(positions), 1, 1)
        for j, pos in enumerate(positions):
            h[j * n:(j + 1) * n, pos] = donor[layer][:, pos]
        patched[i] = logit_difference(run_from(model, h, layer), answers.repeat(len(positions), 1)).view(len(positions), n)
    normalised = (patched.mean(-1) - d_corrupt.mean()) / (d_clean.mean() - d_corrupt.mean())
    return dict(clean=d_clean, corrupt=d_corrupt, layers=layers, positions=positions, patched=patched,
                normalised=normalised)


@torch.no_grad()
def pair_shares(model, clean, answers):
    """Direct logit attribution over a batch of prompts, each with its own answer and foil: {part:
    (N,)} each part's direct contribution to logit(answer) - logit(foil) at the last position of
    clean (N, T), answers (N, 2) as ``fact_batch`` gives them; the final norm's divisor frozen at
    each prompt's own run (``patching.direct_effects``, read along both tokens' rows of E)."""
    clean = check_net(model).check_ids(clean)
    if clean.dim() != 2:
        fail(f"clean should be a batch of prompts (N, T), but got shape {tuple(clean.shape)}")
    check_answers(answers, len(clean), model.cfg.vocab_size)
    T = clean.shape[1]
    read = [patching.direct_effects(model, clean, answers[:, k:k + 1].expand(-1, T))["terms"] for k in (0, 1)]
    return {name: read[0][name][:, -1] - read[1][name][:, -1] for name in read[0]}


@torch.no_grad()
def frozen_scale_test(model, ids, direction, groups):
    """Direct logit attribution's assumption, tested: {label: (share, removed)} for each group of
    parts ({label: [part names of ``patching.residual_parts``]}). share: the group's direct
    contribution to direction · logits at the last position of ids (T,), the final norm's divisor
    frozen at this run; removed: how much direction · logits falls when the group's writes are
    taken out of the final residual stream and the divisor is recomputed (later layers are not
    rerun). The two agree exactly when the writes leave the divisor unchanged; where they differ,
    freezing the divisor is what misleads."""
    if not isinstance(groups, dict) or not groups:
        fail(f"groups should be a dict {{label: [part names]}}, such as {{'L23H4': ['L23H4']}}, but got {shown(groups)}")
    parts, h = patching.residual_parts(model, ids)
    direction = patching.check_direction(model, direction)
    for label, names in groups.items():
        if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)) or not names \
                or not all(isinstance(n, str) and n in parts for n in names):
            fail(f"groups[{label!r}] should be a list of part names such as ['L23H4', 'L29 MLP'], but got {shown(names)}")
    shares = patching.attribute(model, parts, direction, patching.final_norm_scale(model, h))

    def read(stream):
        return float(model.unembed(stream) @ direction)
    full = read(h)
    return {label: (sum(shares[n] for n in names), full - read(h - sum(parts[n] for n in names)))
            for label, names in groups.items()}


# ---------------------------------------------------------------- the 4-bit rounding

def block_steps(reader, model):
    """{parameter name: (tensor shaped like the parameter) each weight's rounding step}: the file's
    per-block scale d (Q4_1: 16 levels d apart; Q8_0: 255 levels d apart), laid out as the model
    holds the weights. Rounding to the nearest level moved each original weight by at most d/2.
    Float32 tensors (the norms' scales) are not rounded and are left out. reader: ``smollm2.read()``;
    model: the model built from that file (its sizes the file's), each else one sentence before any work."""
    import numpy as np

    from . import smollm2

    if not isinstance(reader, smollm2.GGUF):
        fail(f"reader should be the model's file as smollm2.read() opens it, but got {shown(reader)}")
    cfg, steps = check_net(model).cfg, {}
    sizes = ("vocab_size", "d_model", "n_layers", "n_heads", "kv_heads", "d_ff")
    own = smollm2.config(reader)
    if any(getattr(cfg, size) != getattr(own, size) for size in sizes):
        fail(f"model should be the model of the reader's file ({', '.join(f'{s}={getattr(own, s):,}' for s in sizes)}), "
             f"but it has {', '.join(f'{s}={getattr(cfg, s):,}' for s in sizes)}")
    for tensor in reader.tensors:
        kind = tensor.tensor_type.name
        if kind not in ("Q4_1", "Q8_0"):
            continue
        size = 20 if kind == "Q4_1" else 34
        raw = np.asarray(tensor.data)
        blocks = raw.reshape(-1, size)
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)[:, 0]
        w = np.repeat(d, 32).reshape(raw.shape[0], -1)                       # (out, in)
        if tensor.name == "token_embd.weight":
            steps["E"] = torch.from_numpy(w)
            continue
        _, layer, part, _ = tensor.name.split(".")
        if part in ("attn_q", "attn_k") and cfg.rotary_pairs == "halves":
            w = smollm2.unpermute(w, cfg.n_heads if part == "attn_q" else cfg.kv_heads)
        steps[f"blocks.{layer}.{smollm2.NAMES[part]}"] = torch.from_numpy(np.ascontiguousarray(w.T))
    return steps


def check_steps(model, steps):
    """``steps`` as ``block_steps(reader, model)`` makes them: a dict {parameter name of the model:
    a tensor of finite steps >= 0 shaped like that parameter}, else one sentence; return the
    model's parameters by name."""
    params = dict(check_net(model).named_parameters())
    if not isinstance(steps, dict):
        fail(f"steps should be a dict {{parameter name: tensor of rounding steps}} as block_steps(reader, model) "
             f"makes it, but got {shown(steps)}")
    for name, step in steps.items():
        if name not in params:
            fail(f"each key of steps should name a parameter of the model (such as 'E'), but got {shown(name)}")
        if not isinstance(step, torch.Tensor) or tuple(check_tensor(step, name).shape) != tuple(params[name].shape):
            fail(f"the step table for {name} should be a tensor of shape {tuple(params[name].shape)} like the weight, "
                 f"but got {shown(step)}")
        if not step.is_floating_point() or not (torch.isfinite(step) & (step >= 0)).all():
            fail(f"the step table for {name} should hold finite numbers >= 0, but it holds dtype {step.dtype} "
                 f"from {float(step.min()):g} to {float(step.max()):g}")
    return params


def rounding_sizes(model, steps):
    """{parameter name: (rounding bound d/2 largest, RMS of a uniform rounding error d/sqrt(12)
    over the weights' RMS)} per quantised matrix."""
    params = check_steps(model, steps)
    out = {}
    for name, step in steps.items():
        w = params[name]
        rms_error = float(step.pow(2).mean().sqrt()) / 12 ** 0.5
        out[name] = (float(step.max()) / 2, rms_error / float(w.pow(2).mean().sqrt()))
    return out


@torch.no_grad()
def rerounded(model, steps, seed):
    """A copy of the model whose quantised weights each moved by a seeded uniform draw in
    [-d/2, d/2], one more rounding's worth of error (the original weights lie that close to ours)."""
    import copy

    params = check_steps(model, steps)
    seed = check_seed(seed)
    largest = max((params[name].numel() for name in steps), default=0)   # the model once more, and the noise
    check_bytes(sum(p.numel() * p.element_size() for p in params.values()) + 3 * 4 * largest,
                "a copy of the model", "use a smaller model")
    clone = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    params = dict(clone.named_parameters())
    for name, step in steps.items():
        noise = (torch.rand(step.shape, generator=g) - 0.5) * step
        params[name].copy_(params[name] + noise)
    return clone


# ---------------------------------------------------------------- the shipped measurements

def shipped(part):
    """The build script's measurements: part "induction" or "facts" (data/smollm2_circuit/<part>.json)."""
    import json

    from ..weights import data_dir

    check_choice(part, "part", ("induction", "facts"))
    with open(data_dir() / "smollm2_circuit" / f"{part}.json") as f:
        return json.load(f)


def shipped_means():
    """{layer: {head: (T, d_k)}}: the task's per-position mean outputs of the heads the chapter
    ablates (the best 10 induction heads and the best previous-token heads), over the 100 sequences."""
    from safetensors.torch import load_file

    from ..weights import data_dir

    out = {}
    for name, t in load_file(data_dir() / "smollm2_circuit" / "means.safetensors").items():
        layer, head = name[1:].split("H")
        out.setdefault(int(layer), {})[int(head)] = t
    return out


def within(gap, bounds=(1e-3, 1e-2, 0.05)):
    """A largest difference as a stable phrase: 'within 0.001' (the first bound it is under)."""
    gap = check_number(gap, "gap (a largest difference)", low=0)
    if isinstance(bounds, (str, bytes)) or not isinstance(bounds, (list, tuple)) or not bounds \
            or any(isinstance(b, bool) or not isinstance(b, (int, float, np.integer, np.floating))
                   or not 0 < b < math.inf for b in bounds) \
            or any(a >= b for a, b in zip(bounds, bounds[1:])):
        fail("bounds should be a list of finite positive numbers in ascending order, such as (0.001, 0.01, 0.05), "
             f"but got {shown(bounds)}")
    for bound in bounds:
        if gap < bound:
            return f"within {bound:g}"
    return f"apart by up to {gap:.2f}"
