"""Checks for chapter 12 (your GPT): one BPE merge by hand, the learner's GPT assembled from
their pieces against the cat model on the whole cat world, and the learner's training loop
against the course's, step for step.

Each check names the likely mistake by computing the known wrong versions and comparing.
"""
import contextlib
import copy
import functools
import re

import numpy as np
import torch

from .. import grading, worlds
from ..errors import check_text, fail, shown
from ..explorer import check_model_and_world
from ..exercises import Function, Module, NOT_ANSWERED, Seen, Wrong, call, exercise, gradient_problems, model_kept, \
    narrow_float_problem, numbers
from . import compute, corpus
from . import tokenize as tk

NOT_YET = NOT_ANSWERED.split(":")[0]

# ------------------------------------------------------------ one BPE merge

MERGE_TEXT = 20_000   # the first characters of the training text the library case uses

# (what, words, the hint when the answer is the one a known slip gives: computed below)
MERGE_CASES = (
    ("a run of three a's", [list("aaa")] * 3 + [list("ab")] * 5),
    ("words of one symbol each", [["a"], ["b"]] * 5 + [list("cd")] * 2),
    ("a tie between (z, y) and (b, a)", [list("zy"), list("ba")]),
    ("a pair that occurs twice in one word", [list("abcab"), list("ab"), list("xy")]),
    ("a word with the pair in the middle", [list("cabd"), list("ab")]),
    ("a run of four a's", [list("aaaa")] * 2 + [list("ba")] * 3),
    ("a pair (h, e) beside the longer symbol th", [["th", "e"], ["h", "e"], ["h", "e"]]),
)


def merge_slips(words):
    """[((pair, merged words) a known mistake gives, the sentence that names it)] on ``words``."""
    right_pair, right = tk.merge_step(words)
    flat = [s for w in words for s in w]
    slips = []
    across = tk.pair_counts([flat])
    best = max(across.values())
    slips.append(((min(p for p, n in across.items() if n == best), None),
                  "you counted pairs across word boundaries: count only neighbours inside each word "
                  "(a merge never joins two words)"))
    plain = {}
    for w in words:   # counting non-overlapping occurrences, as str.count does
        text, seen = w, set()
        for a, b in zip(text, text[1:]):
            if (a, b) in seen:
                continue
            seen.add((a, b))
            i, n = 0, 0
            while i + 1 < len(text):
                if (text[i], text[i + 1]) == (a, b):
                    n, i = n + 1, i + 2
                else:
                    i += 1
            plain[a, b] = plain.get((a, b), 0) + n
    best = max(plain.values())
    slips.append(((min(p for p, n in plain.items() if n == best), None),
                  "in a run like a a a the pair (a, a) stands twice (positions 0-1 and 1-2): count every "
                  "neighbouring pair, overlapping ones too"))
    counts = tk.pair_counts(words)
    first = max(counts, key=counts.get)   # the first of the tied pairs, in the order they were seen
    slips.append(((first, None), f"on a tie you took {first}, the pair seen first or the largest: take the "
                                 f"smallest of the tied pairs, {right_pair} (min of them, in Python's order of "
                                 "tuples of strings), as the library does between single characters"))
    largest = max(p for p, n in counts.items() if n == max(counts.values()))
    slips.append(((largest, None), f"on a tie you took {largest}, the largest of the tied pairs (max): take the "
                                   f"smallest, {right_pair}, with min of the tied pairs, as the library does between "
                                   "single characters"))
    a, b = right_pair
    variants = {
        "first": "only the first occurrence was merged: replace every occurrence of the pair, in every word",
        "keep_second": "the merge kept the second symbol too: replace the two symbols by one, a + b",
        "keep_first": "the merge kept the first symbol too: replace the two symbols by one, a + b",
        "right_to_left": "in a run the pairs were merged from the right: read each word left to right, "
                         "and after a merge go on after the merged pair",
        "overlapping": "a symbol was used in two merges: in a a a, after merging the first two, the third "
                       "a stays alone (read left to right, skip past each merged pair)",
    }
    for name, hint in variants.items():
        slips.append(((right_pair, [_merge_word(w, a, b, name) for w in words]), hint))
    joined = [" ".join(w).replace(f"{a} {b}", a + b).split(" ") for w in words]   # a string replace
    slips.append(((right_pair, joined),
                  f"the merge joined part of a longer symbol (as a string replace of '{a} {b}' does): "
                  "compare whole symbols, word[i] == a and word[i + 1] == b, so th e stays th e when the "
                  "pair is (h, e)"))
    return slips


def _merge_word(word, a, b, how):
    """The word after merging (a, b) the wrong way ``how`` (see ``merge_slips``)."""
    if how == "right_to_left":
        reverse = [s[::-1] for s in word[::-1]]
        return [s[::-1] for s in _merge_word(reverse, b[::-1], a[::-1], "right")[::-1]]
    out, i, merges = [], 0, 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == (a, b) and not (how == "first" and merges):
            merges += 1
            out += {"keep_second": [a + b, b], "keep_first": [a, a + b]}.get(how, [a + b])
            # "overlapping": the second symbol is read again as the start of the next pair
            i += 1 if how == "overlapping" and i + 2 < len(word) and (word[i + 1], word[i + 2]) == (a, b) else 2
        else:
            out.append(word[i])
            i += 1
    return out


def two_things(out, function, names, on=""):
    """``out``, a learner's function's (a, b), as a tuple; else Wrong (None: not answered yet)."""
    if out is None:
        raise Wrong(f"{NOT_YET}: {function} returns None; return ({names})")
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise Wrong(f"{on}{function} should return two things, ({names}), but it returned {shown(out)}")
    return tuple(out)


def merge_answer(out, words, what):
    """(pair, merged) from the learner's output, else Wrong with one sentence."""
    pair, merged = two_things(out, "merge_step", "pair, merged_words", on=f"on {what} ")
    if isinstance(pair, str):
        raise Wrong(f"on {what} the pair should be a tuple of the two symbols, like ('a', 'b'), not the merged "
                    f"string {shown(pair)}")
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(isinstance(s, str) for s in pair):
        raise Wrong(f"on {what} the pair should be a tuple of two strings, like ('a', 'b'), but it is {shown(pair)}")
    if not isinstance(merged, (list, tuple)) or len(merged) != len(words) or \
            not all(isinstance(w, (list, tuple)) and all(isinstance(s, str) for s in w) for w in merged):
        raise Wrong(f"on {what} the merged words should be a list of {len(words)} words, each a list of strings, "
                    f"in the order of the input, but got {shown(merged)}")
    return tuple(pair), [list(w) for w in merged]


def merge_problem(fn, words, what, library_pair=None):
    """One sentence if ``fn`` does not merge ``words`` as a BPE merge step does, else None."""
    out = call(fn, [list(w) for w in words], what=f"on {what}")
    out = merge_answer(out, words, what)
    right_pair, right = tk.merge_step(words)
    if out == (right_pair, right):
        return None
    for (pair, merged), hint in merge_slips(words):
        if pair == out[0] and pair != right_pair or merged is not None and out == (pair, merged):
            return f"on {what}: {hint}"
    if out[0] != right_pair:
        where = "the library's first merge" if library_pair else "the most frequent pair"
        return f"on {what}: your pair {shown(out[0])} is not {where}; count the neighbours inside each word"
    return (f"on {what}: the pair is right, but the merged words are not: replace each (a, b), read left to "
            "right, by the one symbol a + b, in every word, and keep every other symbol as it is")


def merge_words(train_text):
    """The words of the first MERGE_TEXT characters of the training text (``tk.pretokenize``)."""
    return tk.pretokenize(train_text[:MERGE_TEXT])


@exercise("your BPE merge step", answer=Function("a function merge_step(words) -> (pair, merged_words)", own=(
    "helpers.gpt.tokenize.merge_step", "helpers.gpt.tokenize.train_bpe",
    "helpers.gpt.tokenize.pair_counts")))   # step 1 of the exercise, counting the pairs, is the learner's too
def merge_step(fn, train_text):
    """``fn(words)`` returns (the pair merged, the words after merging it) as ``tk.merge_step``;
    on the first MERGE_TEXT characters of ``train_text`` its pair is the library's first merge."""
    check_text(train_text, "train_text")
    text_words = merge_words(train_text)
    if not any(len(word) >= 2 for word in text_words):
        fail(f"train_text should hold a word of two or more characters in its first {MERGE_TEXT:,} (a pair to "
             f"merge), but got {shown(train_text)}")
    for what, words in MERGE_CASES:
        problem = merge_problem(fn, words, what)
        if problem:
            yield problem
            return
    library = tk.merges(tk.train_bpe(train_text[:MERGE_TEXT], tk.BYTES + 1))[0]
    what = f"the first {MERGE_TEXT:,} characters of the training text"
    problem = merge_problem(fn, text_words, what, library_pair=library)
    if problem:
        yield problem


# ------------------------------------------------------------ the learner's GPT

GPT_ATOL = 1e-3   # the logits reach 21, float32 rounding moves them by about 1e-4; every slip below by 20 or more

ASSEMBLY_HINTS = {
    "no_final_norm": "the final LayerNorm is missing: logits = final_ln(h) @ E.T, after the last block",
    "no_positions": "the positions are not added: h0 = E[ids] + PE[:T], before the first block",
    "positions_after_blocks": "the positions are added after the blocks: add them to the token embeddings, "
                              "h0 = E[ids] + PE[:T], before the first block",
    "blocks_reversed": "the blocks run in the wrong order: blocks[0] first, then blocks[1], ...",
    "only_last_block": "every block reads h0, so only the last one counts: each block reads what the one "
                       "before it wrote, h = block(h)",
    "positions_from_1": "the positions start at row 1: the first token takes row 0 of the table, PE[:T]",
    "post_norm": "the blocks are post-norm (LayerNorm after each addition): the course's blocks are pre-norm, "
                 "h_mid = h + attn(ln1(h))",
    "probabilities": "you returned probabilities (a softmax): return the logits, final_ln(h) @ E.T",
    "final_norm_first": "the final LayerNorm is applied to h0, before the blocks: it goes after the last "
                        "block, just before the unembedding",
    "one_block_repeated": "every layer ran with the last layer's parameters: nn.ModuleList([Block(...)] * n_layers) "
                          "holds one Block n_layers times, so loading the state_dict writes each layer into that "
                          "same Block and the last layer's parameters stay; make a new Block for each layer, "
                          "nn.ModuleList([Block(d_model, n_heads, d_ff) for _ in range(n_layers)])",
    "residual_twice": "the input of each block is added twice: the Block already adds its input back "
                      "(h_mid = h + attn(ln1(h)), then h_mid + mlp(ln2(h_mid))), so write h = block(h), not h + block(h)",
    "embeddings_scaled": "the token embeddings are multiplied by √d_model (as the 2017 Transformer paper does): the "
                         "course's GPT adds them as they are, h0 = E[ids] + PE[:T]",
}


def short_names(listed):
    """A printed list of parameter names, shortened: the names inside blocks as one summary,
    "blocks.0.* ... (32 names)", the others as they are."""
    names = re.findall(r"'([^']*)'", listed)
    inside = [n for n in names if n.startswith("blocks.")]
    if len(inside) <= 3:
        return listed
    rest = [repr(n) for n in names if not n.startswith("blocks.")]
    return "[" + ", ".join(rest + [f"'{inside[0].split('.')[0]}.{inside[0].split('.')[1]}.*' ... ({len(inside)} names)"]) + "]"


def gpt_error(message):
    """A sentence for a GPT that stopped with ``message``: names the parameters and the unembedding."""
    if "should be named" in message:
        message = re.sub(r"\[[^\]]*\]", lambda m: short_names(m.group(0)), message)
        found = re.search(r"(\[[^\]]*\]) are extra", message)
        extra = found.group(1) if found else ""
        found = re.search(r"(\[[^\]]*\]) are missing", message)
        missing = found.group(1) if found else ""
        keys = " and ".join(f"{k} {'are' if k.count(',') else 'is'} {w}" for k, w in ((extra, "extra"), (missing, "missing")) if k)
        hint = f"your GPT's state_dict does not match the cat model's: {keys}; " if keys else ""
        if "E.weight" in extra:
            hint += "E is one nn.Parameter of shape (vocab_size, d_model), not an nn.Embedding; "
        elif "'PE'" in extra:
            hint += ("the positions table is saved with the parameters: register it with "
                     "self.register_buffer('PE', table, persistent=False), it is computed, not learned; ")
        elif re.search(r"'(?!blocks\.|final_ln\.)[^']*'", extra) and "persistent=False" not in message:
            hint += ("the unembedding is tied: the logits are final_ln(h) @ E.T, with no matrix of its own "
                     "(and positions are a buffer, not a parameter); ")
        return (f"{hint}the parameters are E, blocks.0.ln1 ... blocks.{{L-1}}.mlp (an nn.ModuleList named blocks "
                f"of Block) and final_ln, so the cat model's state_dict loads by name; {message}")
    if re.search(r"size of tensor a \(\d+\) must match the size of tensor b \(\d+\) at non-singleton dimension 1",
                 message):
        return (f"{message}; the positions table has a row for each of n_max positions: cut it to the window, "
                "h0 = E[ids] + PE[:T] with T = ids.shape[1]")
    if "shapes cannot be multiplied" in message or "size mismatch" in message:
        return (f"{message}; the unembedding multiplies by E transposed, final_ln(h) @ E.T, which gives "
                "vocab_size logits per position")
    if "Double" in message or "double" in message:
        return f"{message}; cast the positions table to float32, sinusoidal_positions(n_max, d_model).float()"
    return message


@exercise("your GPT", answer=Module("an nn.Module class GPT(vocab_size, d_model, n_heads, n_layers, d_ff, n_max)", own=(
    "helpers.gpt.compute.GPT", "helpers.model.Transformer",
    "helpers.gpt.compute.slipped_logits", "helpers.gpt.compute.cat_world_case")),   # (the check's assembled logits)
          keeps="12")
def gpt_module(run, cat):
    """``run``: the learner's class GPT as a ``run(args, state, ids)``. With the cat model's
    state_dict loaded by name, its logits on the whole cat world (the 64 sentences, one padded
    batch) equal the cat model's at every real position to GPT_ATOL."""
    check_model_and_world(cat, worlds.cat_world())   # the check's own argument: the cat model, else one sentence
    if isinstance(run, torch.nn.Module):
        yield "pass the class GPT itself, not a model built from it (GPT, not GPT(...))"
        return
    cfg = cat.cfg
    args = (cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.d_ff, cfg.n_max)
    ids, lengths, expected = compute.cat_world_case(cat)
    try:
        with model_kept(cat):   # a GPT whose code changes the cat model (a global, say) changes nothing
            out = call(run, args, cat.state_dict(), ids, what="on the cat world")
    except Wrong as wrong:
        text = str(wrong)
        if f"but {sorted(cat.state_dict())} are missing" in text:   # the skeleton: no parameters at all
            yield f"{NOT_YET}: GPT has no parameters yet; fill in __init__ and forward"
        else:
            yield gpt_error(text)
        return
    if out is None:
        yield f"{NOT_YET}: forward returns None; return the logits, (B, T, vocab_size)"
        return
    if hasattr(out, "shape") and tuple(out.shape) != tuple(expected.shape):
        yield (f"on the cat world (ids of shape {tuple(ids.shape)}) forward returned shape {tuple(out.shape)}; "
               f"it should return logits of shape {tuple(expected.shape)}, one row of vocab_size per position")
        return
    given, out = out, numbers(out, "the logits on the cat world", shape=tuple(expected.shape))
    real = (torch.arange(ids.shape[1])[None] < lengths[:, None]).numpy()
    gap = float(np.abs(out - expected.double().numpy())[real].max())
    if gap <= GPT_ATOL:   # the logits are right: so must the gradients be, at the real positions, for it to learn
        with model_kept(cat):
            problems = list(gradient_problems(run, compute.GPT, args, cat.state_dict(), (ids,), "GPT",
                                              weight=torch.as_tensor(real, dtype=torch.float32)[..., None]))
        yield from problems
        return
    narrow = narrow_float_problem(given, out[real], expected.double().numpy()[real], "the logits on the cat world",
                                  GPT_ATOL)
    if narrow:
        yield narrow
        return
    for slip in compute.ASSEMBLY_SLIPS:
        wrong = compute.slipped_logits(cat, ids, slip).double().numpy()
        if np.allclose(out[real], wrong[real], atol=GPT_ATOL, rtol=0):
            yield f"on the cat world: {ASSEMBLY_HINTS[slip]}"
            return
    bad = np.abs(out - expected.double().numpy()).max(-1) > GPT_ATOL
    sentence, position = (int(i) for i in np.argwhere(bad & real)[0])
    yield (f"on the cat world your logits differ from the cat model's by up to {gap:.2g} (first at sentence "
           f"{sentence}, position {position}); h0 = E[ids] + PE[:T], each block in turn, final_ln, then @ E.T")


# ------------------------------------------------------------ the learner's training loop

LOOP_SETTINGS = dict(steps=12, batch=8, context=32, lr=3e-3, warmup=4, min_lr=3e-4, clip=0.5, eval_every=4,
                     eval_batches=2, seed=0)
LOOP_ATOL = 1e-4        # float op order may move a loss by 1e-6; the nearest slip moves one by 4e-4
LOOP_WEIGHTS_ATOL = 1e-3   # float op order moves a trained weight by up to 7e-5; training moves them by up to about 3e-2
LOOP_CHARS = (20_000, 4_000)   # the training and validation characters the check trains on
LOOP_WHERE = "on a small model and the first characters of Tiny Shakespeare"   # where the check runs the loop

LOOP_HINTS = {
    "no_zero_grad": "the gradients are never cleared, so each step adds to the last: optimizer.zero_grad() "
                    "before loss.backward()",
    "clip_after_step": "the gradients are not clipped before the step (after optimizer.step() clipping changes "
                       "nothing): clip_grad_norm_(model.parameters(), clip) between backward() and step()",
    "no_clip": "the gradients are not clipped before the step (after optimizer.step() clipping changes nothing): "
               "clip_grad_norm_(model.parameters(), clip) between backward() and step()",
    "lr_next_step": "the schedule is one step ahead: step s (counted from 0) takes learning_rate(s, ...)",
    "lr_previous_step": "the schedule is one step behind: step s (counted from 0) takes learning_rate(s, ...)",
    "lr_constant": "the learning rate is never updated: set group['lr'] = learning_rate(step, ...) in every "
                   "param group before each optimizer.step()",
    "unshifted_targets": "the loss compares the logits with x itself: the target of position t is the next "
                         "token, y (windows gives x and y = x shifted by one)",
    "shifted_twice": "the targets are shifted twice: windows already gives y = x shifted by one, so compare "
                     "logits with y directly",
    "decay_everything": "weight decay is applied to every parameter: decay the matrices and embeddings "
                        "(p.dim() >= 2) and give biases and LayerNorm scales weight_decay 0",
    "adam": "that is Adam without weight decay: use torch.optim.AdamW with the two groups and betas (0.9, 0.99)",
    "zero_grad_after_backward": "optimizer.zero_grad() comes after loss.backward(), so it clears the gradients just "
                                "computed and optimizer.step() has no gradient to follow (the model does not learn; at most the "
                                "weight decay shrinks it): clear the old gradients before loss.backward()",
    "adam_betas": "AdamW runs with torch's default betas (0.9, 0.999): the course's loop, like nanoGPT's "
                  "Shakespeare example, uses betas=(0.9, 0.99), so the running size of the gradients forgets "
                  "faster",
    "val_generator_once": "the validation windows change from one evaluation to the next (the training losses "
                          "are right): make a fresh torch.Generator().manual_seed(seed + 1) at each evaluation, "
                          "so every evaluation measures the same windows",
    "adam_l2": "torch.optim.Adam's weight_decay is not AdamW's: Adam adds weight_decay * p to the gradient (an L2 "
               "penalty), which its division by the gradient's running size then scales differently for every "
               "parameter; AdamW shrinks the weights directly, apart from the gradient: use torch.optim.AdamW with "
               "the two groups and betas (0.9, 0.99)",
}
LOOP_HINTS["zero_grad_after_backward_zeros"] = LOOP_HINTS["zero_grad_after_backward"]   # zero_grad(set_to_none=False)
LOOP_HINTS["adam_l2_everything"] = LOOP_HINTS["adam_l2"]                              # Adam(model.parameters(), weight_decay=...)


# The course's code that does the loop's work: the whole loop (train's inner run included), its AdamW with the two
# groups and its loop's validation loss. The building blocks stay the learner's to call: windows and learning_rate,
# which the exercise names (and torch's AdamW, cross-entropy and clip_grad_norm_), and estimate_loss, which the
# notebook imports for the learner at its top (it computes its loss with train.loss_on, so that one is not listed).
LOOP_OWN = ("helpers.gpt.compute.train_loop", "helpers.gpt.compute.run_loop", "helpers.gpt.compute.course_losses",
            "helpers.gpt.compute.optimizer_for", "helpers.gpt.compute.evaluate", "helpers.gpt.train.train",
            "helpers.gpt.train.run")


class EvalSlip(Exception):
    """Raised by ``watch_passes`` inside the learner's loop: one sentence on the mode it ran the model in."""


@contextlib.contextmanager
def watching_passes(model, val_ids, context):
    """Within the block every pass of ``model`` is watched, ``model(x)`` and ``model.forward(x)``
    alike (its forward is wrapped; the learner's loop gets the model itself, so everything it calls
    on it, estimate_loss included, works as in the notebook). A pass on validation windows in
    training mode or with gradients on, or a pass with gradients in eval mode on other windows (a
    training step), raises EvalSlip at once; an eval pass without gradients on other windows (a
    training loss estimated, as helpers.gpt.train.train does) is only noted: yields a dict whose
    "other_windows" is then True, for the check to name if the validation losses come out wrong."""
    val = {tuple(r.tolist()) for r in val_ids.unfold(0, context, 1)}
    seen = dict(other_windows=False, slip=None)   # slip: the sentence of the EvalSlip raised (see train_loop)
    forward, check_ids = type(model).forward, type(model).check_ids

    def slipped(sentence):
        seen["slip"] = sentence
        return EvalSlip(sentence)

    def watched(*args, **kwargs):
        x = args[0] if args else kwargs.get("ids")
        if x is not None:   # (without ids, forward itself says they are missing)
            x = check_ids(model, x)   # ids the model refuses (meta, sparse, text), in the model's own sentence
            evaluating = all(tuple(r.tolist()) in val for r in x.reshape(-1, x.shape[-1]))
            if evaluating and model.training:
                raise slipped("the validation loss was computed in training mode (dropout would be on): call "
                               "model.eval() before evaluating and model.train() after")
            if evaluating and torch.is_grad_enabled():
                raise slipped("the validation loss was computed with gradients on: evaluate inside "
                               "torch.no_grad(), so no graph is built and no gradient can leak into training")
            if not evaluating and not model.training and torch.is_grad_enabled():
                raise slipped("a training step ran in eval mode: call model.train() after evaluating")
            if not evaluating and not model.training:
                seen["other_windows"] = True
        return forward(model, *args, **kwargs)

    model.forward = watched
    try:
        yield seen
    finally:
        model.__dict__.pop("forward", None)


def loop_reference(slip=None):
    """A copy of ``_loop_reference(slip)`` (computed once): the check's own numbers, out of a learner's
    function's reach (a check's function: a learner's function that calls it is refused, see
    helpers.exercises._tripwired)."""
    losses, val_losses, _ = _loop_reference(slip)
    return copy.deepcopy((losses, val_losses))


def loop_trained():
    """A copy of the weights {name: tensor} the course's loop leaves in the check's model (``_loop_reference``)."""
    return copy.deepcopy(_loop_reference()[2])


@functools.lru_cache(maxsize=None)
def _loop_reference(slip=None):
    """(losses (steps,), val_losses (evaluations,), the trained weights {name: tensor}) of the course's loop
    on the check's model and data, as ``helpers.gpt.train.train`` runs it (slip None) or with one known
    mistake (computed once; read through ``loop_reference``)."""
    train_ids, val_ids = loop_data()
    model = loop_model()
    if slip is None:
        out = compute.course_losses(model, train_ids, val_ids, **LOOP_SETTINGS)
    else:
        out = compute.train_loop(model, train_ids, val_ids, **LOOP_SETTINGS, slip=slip)
    return (*loop_output(out), {name: t.detach().clone() for name, t in model.state_dict().items()})


OTHER_SEED = 1   # the second run's seed: its windows differ from seed 0's, so the losses do too


@functools.lru_cache(maxsize=None)
def _other_seed_reference():
    """(losses, val_losses) of the course's loop on the check's model and data with seed OTHER_SEED (computed once)."""
    train_ids, val_ids = loop_data()
    return loop_output(compute.course_losses(loop_model(), train_ids, val_ids, **{**LOOP_SETTINGS, "seed": OTHER_SEED}))


def other_seed_problems(fn, train_ids, val_ids):
    """One sentence unless ``fn``, run once more on a fresh model with seed=OTHER_SEED, gives the course's losses
    for that seed: a loop right for seed 0 that writes its seeds in (manual_seed(0)) ignores its argument."""
    settings = {**LOOP_SETTINGS, "seed": OTHER_SEED}
    try:
        losses, val = loop_output(call(fn, loop_model(), train_ids, val_ids, **settings, what=f"{LOOP_WHERE} with "
                                       f"seed={OTHER_SEED}", seconds=30))
    except Wrong as wrong:
        yield str(wrong)
        return
    right, right_val = copy.deepcopy(_other_seed_reference())
    if np.abs(losses - right).max() <= LOOP_ATOL and np.abs(val - right_val).max() <= LOOP_ATOL:
        return
    first, first_val = loop_reference()
    if np.abs(losses - first).max() <= LOOP_ATOL:
        yield (f"with seed={OTHER_SEED} your losses are those of seed=0: the loop ignored its seed argument; seed "
               "torch.manual_seed(seed) and the windows' torch.Generator().manual_seed(seed) with it")
    elif np.abs(losses - right).max() <= LOOP_ATOL:
        yield (f"with seed={OTHER_SEED} the training losses are right, but val_losses differ from the course's: "
               "draw the validation windows with torch.Generator().manual_seed(seed + 1), from the seed argument")
    else:
        yield (f"with seed={OTHER_SEED} your losses differ from the course's for that seed: seed "
               "torch.manual_seed(seed) and the windows' torch.Generator().manual_seed(seed), from the seed argument")


def loop_data():
    """(train_ids, val_ids): the first LOOP_CHARS characters of each split, as character ids (a copy of
    ``_loop_data``'s: what a caller changes in place is not the check's)."""
    train_ids, val_ids = _loop_data()
    return train_ids.clone(), val_ids.clone()


@functools.lru_cache(maxsize=1)
def _loop_data():
    """``loop_data``, read once."""
    train, val = corpus.split(corpus.load_text())
    tokenizer = corpus.CharTokenizer()
    return tokenizer.encode(train[:LOOP_CHARS[0]]), tokenizer.encode(val[:LOOP_CHARS[1]])


def loop_model():
    """The small model the check trains: 2 layers, d_model 32, 4 heads, context 32, the small start."""
    from ..model import Config, Transformer

    return Transformer(Config(vocab_size=65, d_model=32, n_heads=4, n_layers=2, d_ff=64, n_max=32), seed=0)


def loop_output(out):
    """(losses (steps,), val_losses {step: loss}) from the learner's output, else Wrong."""
    steps, every = LOOP_SETTINGS["steps"], LOOP_SETTINGS["eval_every"]
    losses, val = two_things(out, "train_loop", "losses, val_losses")
    if losses is None or (empty(losses) and empty(val)):
        raise Wrong(f"{NOT_YET}: train_loop returned no losses; write the loop between the given lines")
    if isinstance(losses, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in losses):
        raise Wrong("losses holds tensors, not numbers: append loss.item(), so the list keeps the number "
                    "and not the whole step's graph")
    losses = numbers(losses, "losses")
    if losses.shape != (steps,):
        raise Wrong(f"losses should hold one number per step, {steps} for steps={steps}, but it has shape {losses.shape}")
    wanted = sorted(set(range(0, steps, every)) | {steps})
    by_step = steps_of(val)
    if by_step is None or sorted(by_step) != wanted:
        raise Wrong(f"val_losses should be a dict {{step: validation loss}} with the steps {wanted} (after 0, "
                    f"eval_every, ... and all {steps} updates), but got {shown(val)}")
    return losses, np.array([one_loss(by_step[s], f"val_losses[{s}]") for s in wanted])


def empty(value):
    """Whether ``value`` (a part of what train_loop returned) is None or an empty list, tuple or dict: the
    skeleton's answer (an array or a tensor is never read as true or false, which it cannot be)."""
    return value is None or isinstance(value, (list, tuple, dict)) and not value


def steps_of(val):
    """The dict ``val`` as {int step: loss} when every key is a whole number (an int or a NumPy integer; True and
    False, which equal 1 and 0, are no steps), else None: its keys are never compared with one another (an int
    and a str cannot be) nor written out."""
    if not isinstance(val, dict):
        return None
    if not all(isinstance(step, (int, np.integer)) and not isinstance(step, bool) for step in val):
        return None
    return {int(step): loss for step, loss in val.items()}


def one_loss(value, name):
    """One validation loss (a number, or an array or tensor holding one), else Wrong."""
    values = numbers(value, name).reshape(-1)
    if values.size != 1:
        raise Wrong(f"{name} should be one number, the mean validation loss, but it holds {values.size} values")
    return float(values[0])


def weights_trained(model, trained, initial):
    """Seen (exercises.Seen: the grader's record keeps it) unless ``model``'s weights are those the course's
    loop reaches (``trained``) to LOOP_WEIGHTS_ATOL: right losses from a model left as it was (``initial``)
    or trained otherwise were not computed by training it."""
    now = model.state_dict()
    if any(name not in now or now[name].shape != t.shape for name, t in trained.items()):
        raise Seen("the losses are right, but the model train_loop was given no longer holds the parameters it was "
                   "given (their names and shapes): train those in place, without replacing any")
    gap = max(float((now[name].detach() - t).abs().max()) for name, t in trained.items())
    if gap <= LOOP_WEIGHTS_ATOL:
        return
    if all(torch.equal(now[name], t) for name, t in initial.items()):
        raise Seen("the losses are right, but the model train_loop was given is unchanged: train that model in "
                   "place, each step's optimizer.step() updating model.parameters(), and report its own losses")
    raise Seen(f"the losses are right, but the weights of the model train_loop was given differ from those the "
               f"course's loop reaches by up to {gap:.2g}: train that model in place and report its own losses")


def counting_callback(calls):
    """The callback the check hands the learner's loop: each call appends to ``calls`` how many losses it was
    given. Losses that are not a list, a tuple, or a 1-D array or tensor are refused in one sentence (not met
    with the check's own len() failing, which would read as the learner's loop stopping on its own)."""
    def callback(losses, val_losses):
        flat = isinstance(losses, (np.ndarray, torch.Tensor)) and losses.ndim == 1
        if not (isinstance(losses, (list, tuple)) or flat):
            fail(f"callback should be given losses, the list of the losses so far, but got {shown(losses)}")
        calls.append(len(losses))
    return callback


@exercise("your training loop",
          answer=Function("a function train_loop(model, train_ids, val_ids, steps, batch, context, lr, warmup, "
                          "min_lr, clip, eval_every, eval_batches, seed=0, callback=None)", own=LOOP_OWN), keeps="12")
def train_loop(fn):
    """``fn`` trains a small model on the first characters of Tiny Shakespeare as ``compute.train_loop``
    does (AdamW, warm-up and cosine, clipping, a validation loss every eval_every steps): the same
    losses, step for step, to LOOP_ATOL."""
    train_ids, val_ids = loop_data()
    model = loop_model()
    initial = {name: t.detach().clone() for name, t in model.state_dict().items()}
    calls = []
    seen = dict(slip=None)
    try:
        with watching_passes(model, val_ids, LOOP_SETTINGS["context"]) as seen:
            out = call(fn, model, train_ids, val_ids, **LOOP_SETTINGS,
                       callback=counting_callback(calls),
                       what=LOOP_WHERE, seconds=30)
        losses, val = loop_output(out)
    except Wrong as wrong:
        # the watched model's own EvalSlip (raised in this run, or recorded as one for a replayed record) is the
        # check's sentence; a learner's own exception, ValueError("EvalSlip: ...") too, stays "your function stopped"
        text, said = str(wrong), f"your function stopped {LOOP_WHERE} with EvalSlip: "
        own = text.startswith(said) and (text[len(said):] == seen["slip"] or isinstance(fn, grading.Replay))
        yield text[len(said):] if own else text
        return
    right, right_val = loop_reference()
    if np.abs(losses - right).max() <= LOOP_ATOL and np.abs(val - right_val).max() <= LOOP_ATOL:
        steps = LOOP_SETTINGS["steps"]
        if calls != list(range(1, steps + 1)):
            yield (f"the losses are right, but callback was called {len(calls)} times for {steps} steps: after "
                   "each step's losses.append(loss.item()), call callback(losses, val_losses) if it is not None")
        else:
            if not isinstance(fn, grading.Replay):   # (the judge replays outputs only: the record run looked)
                weights_trained(model, loop_trained(), initial)
            yield from other_seed_problems(fn, train_ids, val_ids)
        return
    for slip in compute.LOOP_SLIPS:
        if slip == "eval_train_mode":
            continue
        wrong, wrong_val = loop_reference(slip)
        if np.abs(losses - wrong).max() <= LOOP_ATOL and np.abs(val - wrong_val).max() <= LOOP_ATOL:
            yield LOOP_HINTS[slip]
            return
    if abs(losses[0] - right[0]) > LOOP_ATOL:
        yield (f"the first step's loss is {losses[0]:.4f}, the course's {right[0]:.4f}: draw the batch with "
               "windows(train_ids, batch, context, generator) and take the mean cross-entropy of the logits "
               "against y")
        return
    if seen["other_windows"] and np.abs(val - right_val).max() > LOOP_ATOL:
        yield ("the validation loss was computed on windows of train_ids: draw them from val_ids, text the model "
               "never trains on")
        return
    if np.abs(val - right_val)[0] > LOOP_ATOL:
        yield ("the validation loss before training differs from the course's: the mean loss over eval_batches "
               "windows of val_ids drawn with torch.Generator().manual_seed(seed + 1), in eval mode, without gradients")
        return
    if np.abs(losses - right).max() <= LOOP_ATOL:
        differ = [s for s, a, b in zip(sorted(set(range(0, len(right) + 1, LOOP_SETTINGS["eval_every"])) | {len(right)}),
                                       val, right_val) if abs(a - b) > LOOP_ATOL]
        yield (f"the training losses are right, but val_losses at steps {differ} differ from the course's: each "
               "evaluation is the mean loss over eval_batches windows of val_ids drawn with a fresh "
               "torch.Generator().manual_seed(seed + 1), in eval mode, without gradients")
        return
    first = int(np.argmax(np.abs(losses - right) > LOOP_ATOL))
    yield (f"your losses follow the course's until step {first} and then differ: each step draws a batch, computes "
           "the loss, zero_grad, backward, clip, sets the learning rate, then one optimizer.step()")
