"""Checks for chapter 11 (a real model): one layer's parameters, the KV cache per token, the
best induction head, a task-matched mean ablation on SmolLM2.

Each check judges the answer against a reference computed from the model's sizes or scores
and names the likely slip, without printing the expected answer.
"""
import functools
import math

import torch

from ..errors import as_array, fail, shown
from ..exercises import Function, Whole, Wrong, call, exercise, number_problems, slip
from ..sampling.checks import model_kept
from . import circuit
from . import compute as real


@exercise("the parameters of one SmolLM2 layer", answer=Whole())
def layer_parameters(answer, cfg):
    """``answer`` is the number of parameters in one layer of the model configured by ``cfg``."""
    cfg = real.check_cfg(cfg)
    d, d_ff, d_kv = cfg.d_model, cfg.d_ff, cfg.kv_heads * cfg.d_k
    reference = real.parameter_formula(cfg)["per_layer"]
    hint = slip(answer, (
        (reference + 2 * d * (d - d_kv), "you gave W_K and W_V as many columns as W_Q, but the "
         f"{cfg.n_heads} query heads share {cfg.kv_heads} key/value heads"),
        (reference - d * d_ff, "that MLP has two matrices; SwiGLU has three (gate, up and down)"),
        (reference + 2 * d, "RMSNorm keeps a scale but no bias: d numbers each, not 2d"),
        (reference - 2 * d, "you left out the two RMSNorms' scales"),
        (reference - d, "each layer has two RMSNorms (before attention and before the MLP)"),
        (reference + 2 * d + 2 * d_kv + 2 * d_ff + d, "this model has no biases on its projections"),
        (reference + 2 * d * (d - d_kv) - d * d_ff, "K and V are shared by groups of heads, and the MLP "
         "has three matrices: both are off"),
        (reference + 2 * d * (d - d_kv) - 2 * d, "that is the Lecture's 12d² of a GPT-style layer: here the "
         "query heads share their keys and values, and each RMSNorm adds its scales"),
    ), atol=0.5)
    if hint:
        yield hint
    else:
        yield from number_problems(answer, reference, "the parameters of one layer", atol=0.5)


@exercise("the KV cache per token", answer=Whole())
def kv_per_token(answer, cfg):
    """``answer`` is the bytes the float32 KV cache of ``cfg``'s model grows by per token."""
    cfg = real.check_cfg(cfg)
    reference = real.kv_bytes_per_token(cfg)
    hint = slip(answer, (
        (reference * cfg.n_heads // cfg.kv_heads, "that caches one key and value per query head, but "
         "the cache holds only the shared key/value heads"),
        (reference // 2, "that is half: either K or V alone (the cache keeps both), or 2 bytes a number "
         "(these are float32)"),
        (reference // 4, "that counts numbers, not bytes: float32 takes 4 bytes"),
        (reference // cfg.n_layers, "that is one layer: every layer keeps its own"),
        (reference * 3 // 2, "queries are not cached: each is used once, by its own token"),
    ), atol=0.5)
    if hint:
        yield hint
    else:
        yield from number_problems(answer, reference, "the bytes per token", atol=0.5)


def score_table(scores, name):
    """The check's own (layers, heads) table of scores as a float tensor: numbers, no NaN, at least one head."""
    scores = torch.as_tensor(as_array(scores, f"the check's {name}", ndim=2))
    if not scores.numel() or bool(scores.isnan().any()):
        fail(f"the check's {name} should be a (layers, heads) table of scores without NaN, but got shape "
             f"{tuple(scores.shape)}" + (" with NaN" if scores.numel() else ""))
    return scores


@exercise("the best induction head", answer=Whole(length=2))
def best_induction_head(answer, induction, previous):
    """``answer`` is (layer, head) of the highest induction score; induction, previous: (layers, heads)."""
    induction, previous = score_table(induction, "induction"), score_table(previous, "previous")
    if induction.shape != previous.shape:
        fail(f"the check's previous should have induction's shape {tuple(induction.shape)}, but has {tuple(previous.shape)}")
    n_layers, n_heads = induction.shape
    best = real.best_heads(induction)[0]
    layer, head = answer
    if answer == best:
        return
    if answer == real.best_heads(previous)[0]:
        yield "that is the best previous-token head; the question asks for the induction score"
    elif (head, layer) == best:
        yield "you swapped the two: give (layer, head)"
    elif (layer - 1, head - 1) == best:
        yield "layers and heads are counted from 0 here, not from 1"
    elif not (0 <= layer < n_layers and 0 <= head < n_heads):
        yield f"there is no head ({layer}, {head}): layers run 0..{n_layers - 1}, heads 0..{n_heads - 1}"
    else:
        yield (f"head ({layer}, {head}) scores {float(induction[layer, head]):.2f}, and another head "
               "scores higher: look at the largest entry of the whole table")


@torch.no_grad()
def ablation_variants(model, seqs, heads_off):
    """The second-copy loss with heads_off mean-ablated (per-position means over seqs: "right") and
    the values known slips give, as a mapping that runs a pass only when a value is first asked for
    (one capture and one ablated run give right, unshifted, with_first, everything and bits; each
    other value costs one more pass of the model): pooled (means over positions too), per_sequence
    (each sequence's own mean over its positions), one_pass (means taken in the ablated run itself),
    zero (zero ablation), none (nothing ablated), overwritten (one replace entry per head: only the
    last head of each layer ablated; NaN when no layer has two)."""
    import torch.nn.functional as F

    seqs, length = circuit.check_repeats(seqs)
    names = sorted({f"L{l}.head_out" for l, _ in heads_off}, key=lambda n: int(n[1:].split(".")[0]))
    outs = circuit.capture(model, seqs, names, stop_after=names[-1])
    T = seqs.shape[1]
    task = {int(n[1:].split(".")[0]): outs[n].mean(0) for n in names}                  # (H, T, d_k)
    second = torch.arange(length + 1, 2 * length)
    by_layer = {}
    for layer, head in heads_off:
        by_layer.setdefault(layer, []).append(head)

    def loss(lg, where, shift=1):
        return float(F.cross_entropy(lg[:, where].flatten(0, 1), seqs[:, where + shift].flatten()))

    def ablated(heads, means):
        """The second-copy loss with ``heads`` replaced by ``means`` (None: nothing replaced)."""
        return loss(model(seqs, replace=circuit.mean_ablation(heads, means) if means is not None else {}), second)

    def own_means(layer, source):
        def fn(head_out):                      # (N, H, T, d_k)
            head_out = head_out.clone()
            taken = head_out if source is None else source
            for head in by_layer[layer]:
                head_out[:, head] = (taken[:, head].mean(0) if source is None
                                     else taken[:, head].mean(1, keepdim=True))
            return head_out
        return fn

    def overwritten():
        last_per_layer = list({l: (l, h) for l, h in heads_off}.values())      # one replace entry per head: the last wins
        return ablated(last_per_layer, task) if len(last_per_layer) < len(heads_off) else float("nan")

    right = model(seqs, replace=circuit.mean_ablation(heads_off, task))
    known = dict(right=loss(right, second), with_first=loss(right, torch.arange(length, 2 * length)),
                 everything=loss(right, torch.arange(0, T - 1)), unshifted=loss(right, second, shift=0))
    known["bits"] = known["right"] / math.log(2)
    del right
    return _Lazy(known, {
        "overwritten": overwritten,
        "pooled": lambda: ablated(heads_off, {l: m.mean(1, keepdim=True).expand_as(m) for l, m in task.items()}),
        "per_sequence": lambda: loss(model(seqs, replace={f"L{l}.head_out": own_means(l, outs[f"L{l}.head_out"])
                                                          for l in by_layer}), second),
        "one_pass": lambda: loss(model(seqs, replace={f"L{l}.head_out": own_means(l, None) for l in by_layer}), second),
        "zero": lambda: ablated(heads_off, {l: torch.zeros_like(m) for l, m in task.items()}),
        "none": lambda: ablated(heads_off, None)})


class _Lazy(dict):
    """A dict of values, some of them computed (once) only when first looked up: ``later`` maps a
    key to the function that gives its value."""

    def __init__(self, known, later):
        super().__init__(known)
        self.later = later

    def __missing__(self, key):
        self[key] = value = self.later[key]()
        return value


MAX_CHECK_LOGITS = 2 * 10**8   # numbers in one pass's logits over the check's seqs (800 MB): 100 sequences of 41 tokens fit


def checked_ablation(model, seqs, heads_off):
    """The check's own inputs, refused with one sentence before any pass: model the course's
    Transformer, seqs repeated sequences (N, 2L+1) of its token ids whose logits hold at most
    MAX_CHECK_LOGITS numbers, heads_off a non-empty list of its (layer, head) pairs; returns
    (seqs as a LongTensor, heads_off as a list of (int, int), in the order given)."""
    from ..model import Transformer

    if not isinstance(model, Transformer):
        fail(f"model should be the course's Transformer (real.load()[0]), but got {shown(model)}")
    seqs = model.check_ids(seqs)
    seqs, _ = circuit.check_repeats(seqs)
    if seqs.numel() * model.cfg.vocab_size > MAX_CHECK_LOGITS:
        fail(f"seqs should give logits of at most {MAX_CHECK_LOGITS:,} numbers (N × (2L+1) × {model.cfg.vocab_size:,}), "
             f"but its {seqs.shape[0]:,} sequences of {seqs.shape[1]:,} tokens give {seqs.numel() * model.cfg.vocab_size:,}")
    if isinstance(heads_off, (str, bytes, dict, set)) or not isinstance(heads_off, (list, tuple)) or not heads_off:
        fail(f"heads_off should be a non-empty list of (layer, head) pairs, e.g. [(4, 0)], but got {shown(heads_off)}")
    model.check_heads(heads_off)
    return seqs, [(int(layer), int(head)) for layer, head in heads_off]


def one_number(got):
    """What ablated_copy_loss returned as a float, else Wrong (run through ``call``: a tensor
    subclass's or an object's own __float__ is the learner's code)."""
    try:
        return float(got)
    except (TypeError, ValueError, RuntimeError):
        raise Wrong(f"ablated_copy_loss should return one number (the mean loss), but returned "
                    f"{type(got).__name__}") from None


def pristine(model):
    """The original weights of ``model`` when it is the shipped SmolLM2 (loaded again, from its
    float32 cache when there is one, without touching the model in use), else None."""
    from . import smollm2

    if not smollm2.load.cache_info().currsize or smollm2.load()[0] is not model:
        return None
    return lambda: smollm2.load.__wrapped__()[0].state_dict()


# The slips of ablated_copy_loss, each with its hint: those the ablated run's logits give first, then
# those that cost a pass of the model each (looked at in this order, and only until one matches).
ABLATION_SLIPS = [
    ("unshifted", "the targets are not shifted: the logits at position t predict the token at t + 1, "
                  "so compare logits[:, t] with seqs[:, t + 1]"),
    ("with_first", "that counts the second copy's first token too: nothing announces it, so predict "
                   "only tokens 2..L of the copy (positions L+1 .. 2L-1 predict them)"),
    ("everything", "that is the loss over every position: take only the second copy's, where copying "
                   "can help"),
    ("bits", "that is in bits: use the natural logarithm (F.cross_entropy), nats"),
    ("overwritten", "only the last head of each layer was ablated: one replace entry per head for the same "
                    "\"L<layer>.head_out\" keeps only the last one; replace every listed head of a layer "
                    "in one function"),
    ("pooled", "that mean is taken over the positions too: average each head's output over the "
               "sequences only (axis 0 of head_out[:, h]), one mean per position"),
    ("per_sequence", "that mean is each sequence's own mean over its positions: average each head's "
                     "output over the sequences (axis 0 of head_out[:, h]), one mean per position, "
                     "the same for every sequence"),
    ("one_pass", "those means were taken in the ablated run itself, so a later layer's heads were "
                 "averaged after the earlier ones were already switched off: take every mean from "
                 "one clean run first, then ablate in a second run"),
    ("zero", "that is zero ablation: put the head's mean output over the sequences in its place, not 0"),
    ("none", "that is the loss with nothing ablated: the heads' outputs were not replaced in the "
             "second run (replace \"L<layer>.head_out\" and return the changed tensor)"),
]


@exercise("a task-matched mean ablation on SmolLM2",
          answer=Function("a function ablated_copy_loss(model, seqs, heads_off)"))
def ablated_copy_loss(answer, model, seqs, heads_off):
    """answer(model, seqs, heads_off) -> the mean second-copy loss (nats) with each head of heads_off
    replaced, position by position, by its mean output over seqs (repeated sequences (N, 2L+1))."""
    seqs, heads_off = checked_ablation(model, seqs, heads_off)
    where = f"on {len(seqs)} repeated sequences with {', '.join(f'L{l}H{h}' for l, h in heads_off)} off"
    with model_kept(model, pristine=pristine(model)):   # a weight it zeroes is put back
        got = call(answer, model, seqs, heads_off, what=where, seconds=60)   # the model is large, the machine may be busy
    if got is None:
        raise Wrong("not answered yet: ablated_copy_loss returns None; write its body where the cell says "
                    "# YOUR CODE HERE, so that it returns the loss")
    value = call(functools.partial(one_number, got), what=where)   # its own __float__ runs with a time limit too
    v = ablation_variants(model, seqs, heads_off)   # a pass for each slip only as far as it is looked at
    if abs(value - v["right"]) <= 2e-3:
        return
    hint = next((h for name, h in ABLATION_SLIPS if slip(value, [(v[name], h)], atol=2e-3)), None)
    yield hint or next(number_problems(value, v["right"], "the ablated second-copy loss", atol=2e-3))
