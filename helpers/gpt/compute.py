"""Chapter 12's own functions: the course's GPT assembled from the learner's pieces, the training
loop written out, the live run, and the measurements on the shipped Shakespeare model.

* ``GPT``: the course's own assembly (what ``learner.use("GPT", ...)`` falls back to): token
  embedding E, sinusoidal positions, the blocks, a final LayerNorm and the tied unembedding E^T,
  with the parameter names of ``helpers.model.Transformer`` so a shipped ``state_dict`` loads.
  ``cat_world_case`` is the whole cat world as one padded batch with the cat model's logits;
  ``slipped_logits`` the same pass with one known assembly mistake.
* ``train_loop``: the training loop written out, the course's own version of the learner's
  (same interface), step for step the losses of ``helpers.gpt.train.train``; ``slip=`` runs it
  with one known mistake (the check names a learner's loop by them).
* ``LiveRun``: a progress bar and a loss curve redrawn in place while a loop trains, stopped
  after a time limit.
* ``as_transformer``: any model with the course's parameter names (and a ``cfg``) as a
  ``helpers.model.Transformer``, so the trace, the switches and the explorers take it.
"""
import contextlib
import importlib
import math
import operator
import os
import signal
import sys
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import worlds
from ..exercises import own_thread, stop_threads, threads_now
from ..putback import torch_globals_outside_fence
from ..errors import CourseInputError, check_bytes, check_number, check_positive_int, check_seed, check_size, \
    check_switch, check_tensor, check_text, count, fail, is_tensor, message_of, next_seed, shown, tensor_refusal, \
    to_numpy, type_name
from ..heads.compute import MultiHeadAttention, copy_losses
from ..model import MAX_TOKENS, Config, Transformer, check_finite_weights, eval_mode
from ..normalization.compute import Block, LayerNorm
from ..patching import ablation_replace, mean_head_outputs
from ..positions.compute import sinusoidal_positions
from ..sampling.compute import forward_macs
from ..states import Stop, Stoppable, learners_function
from ..states import course_modes, random_states
from . import train as course_train
from .corpus import check_ids, windows

MAX_SECONDS = 60.0      # the live run's time limit
MAX_LIVE_SECONDS = 600.0   # the most seconds a live run may be given (ten minutes of a lesson)
MAX_NEW = 5_000         # the most tokens sample_text and samples_at draw in one call (each one is a pass)
MAX_PROMPT = 100_000    # the most characters sample_text's prompt may hold (each is encoded; the model reads the last)
MAX_ROWS = 64           # the most continuations samples_at draws side by side
MAX_EVAL_BATCHES = course_train.MAX_EVAL_BATCHES   # the most validation batches train_loop draws at each evaluation
MAX_SPANS = 10_000         # the most spans text_repeats and sequences head_ablations take (the chapter takes 64 and 8)


def check_new(n_new, name="n_new"):
    """How many tokens to draw: a whole number from 1 to MAX_NEW (each one is a pass: time is bounded)."""
    n_new = check_positive_int(n_new, name)
    if n_new > MAX_NEW:
        fail(f"{name} should be at most {MAX_NEW:,} (each new token is one pass of the model), but got {count(n_new)}")
    return n_new


# ------------------------------------------------------------ the GPT, assembled

class GPT(nn.Module):
    """A GPT assembled from the course's pieces: the course's own version of the learner's.

    Parameters: E (vocab_size, d_model), blocks.0 ... (each a pre-norm Block: ln1, attn, ln2,
    mlp), final_ln; the sinusoidal table PE (n_max, d_model) is a buffer, not saved. The names
    of helpers.model.Transformer, so ``GPT(...).load_state_dict(cat.state_dict())`` works.
    forward: ids (B, T) or (T,) -> logits (B, T, vocab_size) or (T, vocab_size).
    """

    def __init__(self, vocab_size, d_model, n_heads, n_layers, d_ff, n_max):
        super().__init__()
        self.cfg = Config(vocab_size, d_model, n_heads, n_layers, d_ff, n_max)   # checks every size
        self.E = nn.Parameter(0.02 * torch.randn(vocab_size, d_model))
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.final_ln = LayerNorm(d_model)
        self.register_buffer("PE", sinusoidal_positions(n_max, d_model).float(), persistent=False)

    def forward(self, ids, **unknown):
        if unknown:
            fail(f"this GPT expected only token ids (it has no switches; as_transformer(model) has them), "
                 f"but got the keyword {shown(', '.join(sorted(unknown)))}")
        if not isinstance(ids, torch.Tensor):
            fail(f"this GPT expected token ids as a tensor (tokenizer.encode(text)), but got {type(ids).__name__} {shown(ids)}")
        ids = Transformer.check_ids(self, ids)          # whole numbers in 0..vocab_size - 1, (T,) or (B, T)
        single = ids.dim() == 1
        ids = ids[None] if single else ids
        T = ids.shape[-1]
        if T > self.PE.shape[0]:
            fail(f"ids should hold at most this GPT's n_max={self.PE.shape[0]} tokens per row, but got {T}")
        self.cfg.check_pass(ids.shape[0], T)           # a batch whose pass would not fit in memory: refused
        h = self.E[ids] + self.PE[:T]                  # tokens plus positions: h0 (B, T, d_model)
        for block in self.blocks:                      # each block reads what the one before wrote
            h = block(h)
        logits = self.final_ln(h) @ self.E.T           # the tied unembedding
        return logits[0] if single else logits


def check_module(model):
    """A model that is an nn.Module (a GPT or helpers.model.Transformer), else one sentence; return it."""
    if not isinstance(model, nn.Module):
        fail(f"model should be a GPT or helpers.model.Transformer (an nn.Module), but got {type(model).__name__}")
    return model


def check_weights(model):
    """Refuse in one sentence a model whose parameters or buffers are no tensors of numbers in memory
    (``errors.check_tensor``: a model made on the meta device holds none, and loading into it does nothing)."""
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        check_tensor(tensor, f"the model's {name}")
    return model


def config_of(model):
    """The Config of a model that carries one (``model.cfg``), else a sentence."""
    cfg = getattr(model, "cfg", None)
    if not isinstance(cfg, Config):
        fail(f"expected a model with a .cfg (a helpers.model.Config), as GPT(...) sets in __init__, "
             f"but this {type(model).__name__} has {type(cfg).__name__}")
    return cfg


def model_raised(error, what):
    """The one sentence for a learner's model whose ``what`` ("forward on token ids of shape (8, 32)") raised
    ``error``, naming the learner's function it came from (``states.learners_function``), as ``learner_call``'s
    sentences do. The course's own errors (its refusals, a check's watch) pass as they are."""
    if type(error).__module__.split(".")[0] == "helpers":
        raise error
    code = learners_function(error.__traceback__)
    hint = ": model(ids) should take the token ids alone and give the logits" if isinstance(error, TypeError) else ""
    fail(f"the model's {what} should run to its end, but {f'your {code}' if code else 'it'} raised "
         f"{type_name(error)}: {' '.join(message_of(error, 200).split())}{hint}")


def logits_of(model, ids, finite=True, grad=False):
    """``model(ids)`` on token ids (B, T), the one way chapter 12's functions call a model (the learner's GPT or
    the course's), checked: logits, a tensor of floating-point numbers of shape (B, T, model.cfg.vocab_size)
    exactly, finite (unless not ``finite``: a training run that diverged records its NaN loss, which
    ``checked_losses`` names) and, with ``grad`` (a training pass), carrying a gradient; else one sentence naming
    what arrived. An error of the model's own is one sentence (``model_raised``)."""
    try:
        out = model(ids)
    except Exception as error:   # noqa: BLE001 (a learner's forward may raise anything)
        model_raised(error, f"forward on token ids of shape {tuple(ids.shape)}")
    expected = (*ids.shape, model.cfg.vocab_size)
    head = f"the model's forward should return logits, a tensor of floating-point numbers of shape (batch, context, " \
           f"vocab_size) = {expected}"
    if not is_tensor(out):
        kind = builtin_kind(out, (tuple, list))   # (its own methods: a learner's subclass may lie or raise)
        items = kind.__getitem__(out, slice(None)) if kind and kind.__len__(out) <= 4 else None
        got = f"a {type_name(out)} ({', '.join(map(shown, items))})" if items is not None else \
            f"a {type_name(out)} with the keys {shown(list(dict.keys(out)))}" if isinstance(out, dict) else shown(out)
        nano = " (the logits and a loss, as nanoGPT's forward gives them? return the logits alone)" \
            if items is not None and len(items) == 2 else ""
        fail(f"{head}, but it returned {got}{nano}")
    kind = tensor_refusal(out) or (None if out.is_floating_point() else f"a tensor of dtype {out.dtype}")
    if kind is not None or tuple(out.shape) != expected:
        fail(f"{head}, but it returned {kind or f'shape {tuple(out.shape)}'}")
    if grad and not out.requires_grad:
        fail("the model's logits should carry a gradient back to its parameters, so that it can learn, but they "
             "carry none: does its forward run under torch.no_grad(), or read its parameters through .data or "
             ".detach()?")
    if finite and not bool(torch.isfinite(out).all()):
        fail(f"the model's logits should be finite numbers, but its forward on token ids of shape {tuple(ids.shape)} "
             f"gave NaN or inf: do its weights hold NaN or inf, or does a number overflow in its pass?")
    return out


def check_tokenizer(tokenizer, cfg):
    """A text tokenizer of the model's vocabulary (a CharTokenizer: ``vocab``, ``encode(text)``,
    ``text(ids)``, as many tokens as the model's vocab_size), else one sentence; return it."""
    vocab, encode, text = (worlds.tokenizer_part(tokenizer, name) for name in ("vocab", "encode", "text"))
    if vocab is None or not callable(encode) or not callable(text):
        fail(f"tokenizer should be the model's tokenizer (a CharTokenizer, with vocab, encode and text), "
             f"but got {type(tokenizer).__name__} {shown(tokenizer)}")
    size = len(vocab) if isinstance(vocab, (list, tuple, str, dict)) else None   # (a learner's __len__ may lie)
    if size != cfg.vocab_size:
        fail(f"tokenizer should have the model's {count(cfg.vocab_size)} tokens (vocab_size), but its vocab has "
             f"{shown(size) if size is not None else shown(vocab)}: is it the model's own tokenizer?")
    return tokenizer


def as_transformer(model):
    """The course's Transformer holding ``model``'s parameters (the same names, so they load as
    they are): the trace, the switches and the explorers then come for free. The second model is counted
    beside the first before it is made: two copies above MAX_BYTES are refused."""
    cfg = config_of(check_module(model))
    course_train.check_copies(model, 2, "as_transformer(model) (the course's Transformer beside your model)")
    check_weights(model)
    course = Transformer(cfg, seed=None)
    course.load_state_dict(course_state(model, course.state_dict()))
    return course.eval()


def small_start(model, seed=0):
    """Give ``model`` the first parameters of Transformer(model.cfg, seed) (the course's small
    start: embeddings N(0, 0.02²), so the first loss is near ln V). Returns the model. The fresh
    Transformer is counted beside the model before it is made: two copies above MAX_BYTES are refused."""
    cfg, seed = config_of(check_module(model)), check_seed(seed)
    course_train.check_copies(model, 2, "small_start(model) (a fresh Transformer of its config beside it)")
    check_weights(model)
    ours = Transformer(cfg, seed=seed).state_dict()
    course_state(model, ours)                               # compared before anything is written
    model.load_state_dict(ours)
    return model


def course_state(model, ours):
    """``model.state_dict()`` checked against ``ours`` (the course's Transformer's, name -> tensor): the
    same names, each a dense tensor of real numbers in memory (``check_tensor``) of the course's shape,
    floating point where the course's is; return it, else one sentence."""
    try:
        theirs = model.state_dict()
    except CourseInputError:
        raise
    except Exception as error:   # noqa: BLE001 (a learner's module may override state_dict)
        fail(f"model.state_dict() should give the model's parameters by name, but it raised "
             f"{type(error).__name__}: {message_of(error, 200)}")
    if not isinstance(theirs, dict):
        fail(f"model.state_dict() should give a dict of the model's parameters by name, but gave {shown(theirs)}")
    for name in sorted(set(ours) | set(theirs), key=str):
        if name in theirs and not isinstance(theirs[name], torch.Tensor):
            fail(f"model.state_dict() should map the course's names to tensors of numbers, but {shown(name)} "
                 f"holds {type(theirs[name]).__name__} {shown(theirs[name])}")
        if name in theirs:
            check_tensor(theirs[name], f"the model's state_dict()[{shown(name)}]")
        if name not in theirs or name not in ours or theirs[name].shape != ours[name].shape:
            expected = f"shape {tuple(ours[name].shape)}" if name in ours else "no such parameter"
            got = f"shape {tuple(theirs[name].shape)}" if name in theirs else "none"
            fail(f"the model's parameters should be named and shaped as the course's Transformer of its config, "
                 f"but {shown(name)} has {got} where the course's has {expected}: a model of another shape?")
        if ours[name].is_floating_point() and not theirs[name].is_floating_point():
            fail(f"the model's state_dict()[{shown(name)}] should hold floating-point numbers as the course's "
                 f"{ours[name].dtype} does, but holds {theirs[name].dtype}")
    return theirs


def cat_world_case(cat):
    """(ids (B, T), lengths (B,), logits (B, T, V)): every sentence of the cat world, padded with
    <PAD> into one batch, and the cat model's logits on it (only positions < length are real)."""
    if not isinstance(cat, nn.Module):
        fail(f"cat should be the cat model (a GPT or helpers.model.Transformer), but got {shown(cat)}")
    world = worlds.cat_world()
    ids, _ = world.batch(world.sentences)                             # each sentence but its last token
    lengths = torch.tensor([len(s) - 1 for s in world.sentences])
    with torch.no_grad():
        logits = cat(ids)
    return ids, lengths, logits


ASSEMBLY_SLIPS = ("no_final_norm", "no_positions", "positions_after_blocks", "blocks_reversed",
                  "only_last_block", "positions_from_1", "post_norm", "probabilities", "final_norm_first",
                  "one_block_repeated", "embeddings_scaled", "residual_twice")


@torch.no_grad()
def slipped_logits(cat, ids, slip):
    """The cat model's logits on ids (B, T) computed with one known assembly mistake (``ASSEMBLY_SLIPS``).

    one_block_repeated: ``nn.ModuleList([Block(...)] * n_layers)`` holds one Block n_layers times, so
    loading a state_dict writes every layer's parameters into it in turn and the last layer's stay:
    the last block, run n_layers times. embeddings_scaled: h0 = sqrt(d_model) * E[ids] + PE[:T], the
    2017 paper's scaling of the token embeddings."""
    if type(slip) is not str or slip not in ASSEMBLY_SLIPS:
        fail(f"slip should be one of the {len(ASSEMBLY_SLIPS)} names of ASSEMBLY_SLIPS (such as "
             f"{', '.join(map(repr, ASSEMBLY_SLIPS[:3]))}), but got {shown(slip)}")
    if not isinstance(cat, nn.Module) or not all(hasattr(cat, n) for n in ("cfg", "E", "PE", "blocks", "final_ln")):
        fail(f"cat should be the cat model (a helpers.model.Transformer or a GPT), but got {shown(cat)}")
    ids = Transformer.check_ids(cat, ids)
    if ids.shape[-1] >= cat.PE.shape[0]:   # positions_from_1 reads one position further
        fail(f"ids should hold fewer than the model's n_max={cat.PE.shape[0]} tokens per row, but hold {count(ids.shape[-1])}")
    cat.cfg.check_pass(ids.shape[0] if ids.dim() == 2 else 1, ids.shape[-1])
    T = ids.shape[-1]
    E, pe = cat.E, cat.PE[:T]
    start = 1 if slip == "positions_from_1" else 0
    tokens = E[ids] * (math.sqrt(E.shape[1]) if slip == "embeddings_scaled" else 1.0)
    h = tokens + (0 if slip in ("no_positions", "positions_after_blocks") else cat.PE[start:start + T])
    if slip == "final_norm_first":
        h = cat.final_ln(h)
    blocks = list(cat.blocks)[::-1] if slip == "blocks_reversed" else list(cat.blocks)
    if slip == "one_block_repeated":
        blocks = [blocks[-1]] * len(blocks)
    h0 = h
    for block in blocks:
        if slip == "post_norm":
            h_mid = block.ln1(h + block.attn(h))
            h = block.ln2(h_mid + block.mlp(h_mid))
        else:
            h = block(h0 if slip == "only_last_block" else h) + (h if slip == "residual_twice" else 0)
    if slip == "positions_after_blocks":
        h = h + pe
    logits = (h if slip in ("no_final_norm", "final_norm_first") else cat.final_ln(h)) @ E.T
    return torch.softmax(logits, -1) if slip == "probabilities" else logits


# ------------------------------------------------------------ the training loop, written out

BETAS = course_train.BETAS
LOOP_SLIPS = ("no_zero_grad", "clip_after_step", "no_clip", "lr_next_step", "lr_previous_step", "lr_constant",
              "unshifted_targets", "shifted_twice", "decay_everything", "adam", "eval_train_mode",
              "zero_grad_after_backward", "zero_grad_after_backward_zeros", "adam_l2", "adam_l2_everything",
              "adam_betas", "val_generator_once")
MAX_LR = 10.0             # the largest learning rate optimizer_for takes (the course's runs use 1e-3 or so)
MAX_WEIGHT_DECAY = 10.0   # the largest weight decay optimizer_for takes (the course's runs use 0.1)
ZERO_GRAD_LATE = {"zero_grad_after_backward": True, "zero_grad_after_backward_zeros": False}   # set_to_none


def optimizer_for(model, lr, weight_decay=0.1, slip=None):
    """AdamW as the course's loop sets it up: weight decay on the matrices and embeddings, none on
    biases and LayerNorm scales, betas (0.9, 0.99). lr: above 0, at most MAX_LR; weight_decay: 0 to
    MAX_WEIGHT_DECAY; slip: None or one of LOOP_SLIPS."""
    if not callable(getattr(model, "parameters", None)):
        fail(f"model should be a course model (a GPT or helpers.model.Transformer), but got {shown(model)}")
    lr = check_number(lr, "lr", low=0, high=MAX_LR, low_open=True)
    weight_decay = check_number(weight_decay, "weight_decay", low=0, high=MAX_WEIGHT_DECAY)
    if slip is not None and (type(slip) is not str or slip not in LOOP_SLIPS):
        fail(f"slip should be None or one of the {len(LOOP_SLIPS)} names of LOOP_SLIPS (such as "
             f"{', '.join(map(repr, LOOP_SLIPS[:3]))}), but got {shown(slip)}")
    matrices = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    if slip == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, betas=BETAS)
    if slip == "adam_l2":            # Adam's weight_decay: added to the gradient (an L2 penalty), not AdamW's
        return torch.optim.Adam([dict(params=matrices, weight_decay=weight_decay),
                                 dict(params=vectors, weight_decay=0.0)], lr=lr, betas=BETAS)
    if slip == "adam_l2_everything":
        return torch.optim.Adam(model.parameters(), lr=lr, betas=BETAS, weight_decay=weight_decay)
    if slip == "decay_everything":
        return torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, weight_decay=weight_decay)
    betas = (0.9, 0.999) if slip == "adam_betas" else BETAS     # the slip: torch's default betas
    return torch.optim.AdamW([dict(params=matrices, weight_decay=weight_decay),
                              dict(params=vectors, weight_decay=0.0)], lr=lr, betas=betas)


@course_modes(name="train_loop")   # (under no_grad too: it takes gradients)
def train_loop(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
               eval_batches=4, seed=0, callback=None, slip=None):
    """Train ``model`` in place; return (losses, val_losses): the training loss of every step (a
    list of floats) and {step: validation loss} after 0, eval_every, ... and ``steps`` updates.
    At most MAX_STEPS = 100,000 steps and MAX_EVAL_BATCHES = 1,000 evaluation batches; lr finite
    and > 0, 0 <= min_lr <= lr, 0 <= warmup < steps, clip finite and > 0, context at most the
    model's n_max; every argument is checked before the first step.

    The course's own loop, the same steps as ``helpers.gpt.train.train``: draw a batch of random
    windows, the mean cross-entropy of the next-token logits, clear the old gradients,
    backpropagate, clip their joint norm to ``clip``, set the learning rate of this step (warm-up
    then cosine), one AdamW step. The validation loss is the mean over ``eval_batches`` fixed
    windows (next_seed(seed): seed + 1), in eval mode, without gradients. ``callback(losses, val_losses)`` after
    every step. ``slip``: one known mistake (``LOOP_SLIPS``), for the check.
    """
    # every argument checked before any work: a refused call leaves the model as it was
    config_of(model)                                                  # a model with a Config
    train_ids, val_ids = check_ids(train_ids, "train_ids"), check_ids(val_ids, "val_ids")
    steps, batch = course_train.check_steps(steps), check_positive_int(batch, "batch")
    course_train.learning_rate(0, lr, warmup, steps, min_lr)          # lr > 0, 0 <= min_lr <= lr, warmup < steps
    context = course_train.check_context(model, context, len(train_ids), len(val_ids))   # at most the model's n_max
    course_train.check_vocabulary(model, train_ids, val_ids)
    clip = check_number(clip, "clip", low=0, low_open=True)
    eval_every, seed = check_positive_int(eval_every, "eval_every"), check_seed(seed)
    eval_batches = check_positive_int(eval_batches, "eval_batches")
    if eval_batches > MAX_EVAL_BATCHES:
        fail(f"eval_batches should be at most {MAX_EVAL_BATCHES:,} (each is a pass per evaluation), "
             f"but got {count(eval_batches)}")
    if callback is not None and not callable(callback):
        fail(f"callback should be a function callback(losses, val_losses), but got {shown(callback)}")
    if slip is not None and not (isinstance(slip, str) and slip in LOOP_SLIPS):
        fail(f"slip should be None or one of the known slips ({', '.join(LOOP_SLIPS[:3])}, ...), but got {shown(slip)}")
    course_train.check_batch(model, batch, context, grad=True)      # the pass and the model's copies in training
    check_evaluation(model.cfg, eval_batches, batch, context)        # each evaluation's time
    course_train.check_trainable(model)
    optimizer = optimizer_for(model, lr, slip=slip)
    # a run stopped by an error (a callback's, say) puts the weights and the global RNG back; the live
    # run's TimeUp stops it where it is
    with course_train.put_back_on_error(model, "the run", passed=TimeUp), torch.enable_grad():
        return run_loop(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
                        eval_batches, seed, callback, slip, optimizer)


def run_loop(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
             eval_batches, seed, callback, slip, optimizer):
    """``train_loop``'s run, its arguments checked: (losses, val_losses)."""
    torch.manual_seed(seed)                                           # dropout's draws, if any
    generator = torch.Generator().manual_seed(seed)                   # the training windows
    losses, val_losses = [], {}
    val_seed = next_seed(seed)                                        # the validation windows' seed (seed + 1)
    once = torch.Generator().manual_seed(val_seed) if slip == "val_generator_once" else None   # the slip: made once
    model.train()
    for step in range(steps + 1):
        if step % eval_every == 0 or step == steps:
            val_losses[step] = evaluation_loss(model, val_ids, context, eval_batches, batch,
                                               torch.Generator().manual_seed(val_seed) if once is None else once,
                                               train_mode=slip == "eval_train_mode")
        if step == steps:
            break
        x, y = windows(train_ids, batch, context, generator)          # (batch, context) each
        logits = logits_of(model, x, finite=False, grad=True)         # (batch, context, V): a NaN one is said below
        target = {"unshifted_targets": x}.get(slip, y)
        if slip == "shifted_twice":
            logits, target = logits[:, :-1], y[:, 1:]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
        if slip != "no_zero_grad" and slip not in ZERO_GRAD_LATE:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if slip in ZERO_GRAD_LATE:    # the gradients just made are cleared before the step uses them
            optimizer.zero_grad(set_to_none=ZERO_GRAD_LATE[slip])
        if slip not in ("clip_after_step", "no_clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        at = {"lr_next_step": step + 1, "lr_previous_step": max(step - 1, 0)}.get(slip, step)
        for group in optimizer.param_groups:
            group["lr"] = lr if slip == "lr_constant" else course_train.learning_rate(at, lr, warmup, steps, min_lr)
        optimizer.step()
        if slip == "clip_after_step":
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        losses.append(loss.item())
        if callback is not None:
            callback(losses, val_losses)
    model.eval()
    return losses, val_losses


def check_evaluation(cfg, batches, batch, context):
    """Refuse up front an evaluation (``evaluate``) whose ``batches`` passes of ``batch`` windows of ``context``
    tokens would take more than about MAX_SECONDS here (``pass_seconds``)."""
    check_seconds(pass_seconds(cfg, batches * batch, context, batch, fused=False),
                  f"an evaluation of {count(batches)} batches of {count(batch)} windows of {count(context)} tokens",
                  "take fewer evaluation batches or a smaller batch")


def evaluate(model, ids, context, batches, batch, seed, train_mode=False, generator=None):
    """The mean loss over ``batches`` fixed windows (drawn with ``seed``), in eval mode, no gradients.
    ``generator``: one to draw from instead (the check's slip of a generator made once for all evaluations).
    batches: 1 .. MAX_EVAL_BATCHES, and at most about MAX_SECONDS of passes here (``check_evaluation``);
    every argument is checked before the first pass, and a model whose weights hold NaN or inf is refused
    (``check_finite_weights``: its loss would be NaN). The loops' own evaluations are ``evaluation_loss``."""
    config_of(model)
    ids = check_ids(ids)
    context = course_train.check_context(model, context, len(ids))
    batches, batch, seed = check_positive_int(batches, "batches"), check_positive_int(batch, "batch"), check_seed(seed)
    if batches > MAX_EVAL_BATCHES:
        fail(f"batches should be at most {MAX_EVAL_BATCHES:,} (each is a pass), but got {count(batches)}")
    course_train.check_vocabulary(model, ids)
    course_train.check_batch(model, batch, context)
    check_evaluation(model.cfg, batches, batch, context)
    train_mode = check_switch(train_mode, "train_mode")
    if generator is not None and not isinstance(generator, torch.Generator):
        fail(f"generator should be None or a torch.Generator, but got {shown(generator)}")
    check_finite_weights(check_module(model))
    generator = torch.Generator().manual_seed(seed) if generator is None else generator
    return evaluation_loss(model, ids, context, batches, batch, generator, train_mode, finite=True)


def evaluation_loss(model, ids, context, batches, batch, generator, train_mode=False, finite=False):
    """``evaluate``'s passes, its arguments checked: the mean loss over ``batches`` windows drawn with
    ``generator``, in eval mode (train_mode: in training mode), no gradients, the model's logits checked
    (``logits_of``; ``finite``: NaN or inf refused). The training loop's own evaluations call it as it is: a run
    that diverged records its NaN loss (which ``checked_losses`` names)."""
    with eval_mode(model, train=train_mode), torch.no_grad():
        total = 0.0
        for _ in range(batches):
            x, y = windows(ids, batch, context, generator)
            logits = logits_of(model, x, finite=finite)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    return total / batches


def course_losses(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
                  eval_batches=4, seed=0):
    """(losses, val_losses) of ``helpers.gpt.train.train`` with these settings (the reference)."""
    losses = []
    record = lambda r: losses.append(r["loss"]) if "val_loss" not in r else None
    log = course_train.train(model, train_ids, val_ids, steps=steps, batch=batch, context=context, lr=lr,
                             warmup=warmup, min_lr=min_lr, clip=clip, eval_every=eval_every,
                             eval_batches=eval_batches, seed=seed, callback=record)
    return losses, {r["step"]: r["val_loss"] for r in log}


# ------------------------------------------------------------ the live run

def unigram_loss(train_ids, val_ids):
    """The validation loss (nats per token) of a model that knows only how often each token occurs
    in the training text: -mean log p(token), p the training frequencies (add-one smoothed)."""
    train_ids, val_ids = check_ids(train_ids, "train_ids"), check_ids(val_ids, "val_ids")
    if int(val_ids.max()) > int(train_ids.max()):
        fail(f"val_ids should come from the training text's tokenizer (the training ids run 0..{int(train_ids.max())}), "
             f"but they include id {int(val_ids.max())}: were they encoded with another tokenizer?")
    size = int(max(train_ids.max(), val_ids.max())) + 1
    if size > course_train.MAX_VOCAB:
        fail(f"the ids should lie below {course_train.MAX_VOCAB:,} (a vocabulary's size), but include id {size - 1:,}")
    counts = torch.bincount(train_ids, minlength=size).double() + 1
    return float(-(counts / counts.sum()).log()[val_ids].mean())


def encoded_ids(encoded, vocab_size):
    """What a tokenizer's ``encode`` returned (a tensor, an array or a list of ids) as a list of ints,
    each an id of the vocabulary, at least one (``worlds.encoded_fault``); else one sentence."""
    ids, fault = worlds.encoded_fault(encoded, vocab_size)
    if fault or not ids:
        fail(f"tokenizer.encode should return token ids (T,) from 0 to {vocab_size - 1}, at least one, but "
             f"{fault or 'it gives none'}")
    return ids


def prompt_ids(tokenizer, prompt, vocab_size):
    """The ids of ``prompt`` as a list of ints (``tokenizer.encode``'s tensor, array or list, checked by
    ``encoded_ids``), else one sentence. Any text of at most MAX_PROMPT characters the tokenizer turns
    into at least one token is a prompt: a newline alone is one (a character model's)."""
    check_text(prompt, "the prompt", empty=True, max_chars=MAX_PROMPT)
    if not prompt:
        fail("the prompt should be a non-empty string, but got ''")
    try:
        encoded = tokenizer.encode(prompt)
    except CourseInputError as error:
        fail(f"the prompt should be text this tokenizer can encode, but encoding it said: {error}")
    except Exception as error:   # noqa: BLE001 (a learner's tokenizer may raise anything)
        worlds.tokenizer_raised(error, "encode", shown(prompt))
    return encoded_ids(encoded, vocab_size)


@torch.no_grad()
def sample_text(model, tokenizer, prompt, n_new, temperature=1.0, seed=0, context=None):
    """``prompt`` and ``n_new`` characters drawn after it, one at a time (chapter 09's
    ``next_distribution`` and ``draw``, one generator seeded once), each step reading at most the
    last ``context`` tokens (default: the model's n_max), the window the model was trained on. Its n_new
    passes are counted up front (``check_sample``)."""
    from ..sampling.compute import check_sampling

    cfg = config_of(model)
    check_tokenizer(tokenizer, cfg)
    temperature, _, _ = check_sampling(temperature, vocab_size=cfg.vocab_size)   # a float: torch's division takes it
    n_new = check_new(n_new)
    context = cfg.n_max if context is None else check_positive_int(context, "context")
    if context > cfg.n_max:
        fail(f"context should be at most the model's n_max={cfg.n_max} tokens, but got {count(context)}")
    ids = prompt_ids(tokenizer, prompt, cfg.vocab_size)   # a newline alone is a prompt
    check_sample(cfg, n_new, min(len(ids) + n_new, context))
    return tokenizer_text(tokenizer, drawn_ids(model, ids, n_new, temperature, check_seed(seed), context))


@torch.no_grad()
def drawn_ids(model, ids, n_new, temperature, seed, context):
    """``ids`` (a list of ints, a new one) and ``n_new`` ids drawn after them, one at a time (chapter 09's
    ``next_distribution`` and ``draw``, one generator seeded with ``seed``), each pass reading at most the
    last ``context`` ids: ``sample_text``'s drawing, its arguments checked by the caller. Eval mode."""
    from ..sampling.compute import draw, next_distribution

    ids, generator = list(ids), torch.Generator().manual_seed(seed)
    with eval_mode(model):
        for _ in range(n_new):
            logits = logits_of(model, torch.tensor(ids[-context:])[None], finite=False)[0, -1]   # (NaN: said below)
            ids.append(draw(next_distribution(logits, temperature), generator))
    return ids


def check_sample(cfg, n_new, window):
    """Refuse up front a ``sample_text`` whose ``n_new`` passes, each over at most ``window`` tokens, would
    take more than about MAX_SECONDS here (``pass_seconds``)."""
    check_seconds(n_new * pass_seconds(cfg, 1, window, 1, fused=False),
                  f"sampling {count(n_new)} tokens, each a pass over up to {count(window)} tokens",
                  "draw fewer tokens or read a shorter context")


def tokenizer_text(tokenizer, ids):
    """``tokenizer.text(ids)``, the text of the ids (a learner's tokenizer checked: one str), else one sentence."""
    text = worlds.tokenizer_call(tokenizer, "text", ids, f"{count(len(ids))} ids")
    if type(text) is not str:
        fail(f"the tokenizer's text({count(len(ids))} ids) should give one string, but gave {shown(text)}")
    return text


MAX_TRIALS = 100   # the most timed passes step_seconds takes


class TimeUp(Exception):
    """Raised by the live run's callback inside a loop once its time is up."""


class LoopLate(Stop):
    """Raised by the live run's watchdog inside a loop that ran past its time without stopping at its
    callback (not an Exception, so a loop's own ``except Exception`` does not keep it going)."""


class PassesLate(Stop):
    """Raised by ``step_seconds``' watchdog inside timed passes that ran past the time they were given."""


class LearnerLate(Stop):
    """Raised by the live run's watchdog in a learner's code it calls outside the loop (the tokenizer before and
    after the run, the losses the loop returned read as numbers) that ran past the time it was given."""


LIVE_COPIES = 6   # the model's copies a live run holds while the course's loop trains (live_run)
LATE_SECONDS = 5.0   # how long past its time a loop that does not stop at its callback may run before it is stopped
# (also: the time the tokenizer's calls before the run get together, and how far past its ``seconds`` a live run
# lets the learner's code after the loop run)
LEAST_SECONDS = 1.0   # the least time a learner's call outside the loop is given (``learner_call``)


def stopped_after(seconds, exception, function, *args, **kwargs):
    """``function(*args, **kwargs)`` (a training loop) run here; once ``seconds`` have passed, ``exception``
    is raised in it from a watchdog thread until it ends (states.Stoppable: again every 0.1 s, then at every
    line, so a loop that catches everything is stopped too): a loop that never calls its callback, which
    stops it on time, is stopped all the same. Nothing is raised once it has ended. Once stopped, whatever
    else it raises on its way out (a RecursionError of a recursion that catches the stop at every level) is
    raised as ``exception``, without the chain of what it caught, its ``code`` the learner's function it was stopped
    in (``states.learners_function``: named in the sentence). torch's gradient mode is put back (a
    ``with torch.no_grad():`` stopped at every line may not have left it). The watchdog is a thread of the
    course's own (``exercises.own_thread``): ``threads_stopped`` does not take it for one the loop left.
    In the main thread, a wait in C that lets other threads run (time.sleep, a lock's acquire) is ended too
    (``sleeps_ended``): an exception set from another thread waits for the next line of Python."""
    stoppable, grad = Stoppable(exception), torch.is_grad_enabled()
    stoppable.stop(every=0.1, after=seconds, start=own_thread)
    try:
        if not kicks_here():   # (another thread: nothing to add between the stop and the learner's code)
            return stoppable.call(function, *args, **kwargs)
        with sleeps_ended(stoppable, seconds):
            return stoppable.call(function, *args, **kwargs)
    except BaseException as raised:
        if not stoppable.poked:
            raise
        late = raised if isinstance(raised, exception) else exception()
        late.code = learners_function(raised.__traceback__)   # (before the traceback goes)
        raise late.with_traceback(None) from None   # (what it caught on its way out: not shown)
    finally:
        torch.set_grad_enabled(grad)


KICK_SIGNAL = getattr(signal, "SIGURG", None)   # ignored by default: one sent after the handler is gone does nothing


def kicks_here():
    """Whether ``sleeps_ended`` can kick this thread: the main thread (the only one a Python handler runs in), on a
    system with KICK_SIGNAL and pthread_kill."""
    return KICK_SIGNAL is not None and hasattr(signal, "pthread_kill") and \
        threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def sleeps_ended(stoppable, seconds):
    """Within the block (``stopped_after``'s call, in the main thread), once ``seconds`` have passed and the
    watchdog has poked ``stoppable``, KICK_SIGNAL is sent to this thread every 0.1 s until the call ends: a
    wait in C (time.sleep) ends at the signal, and the handler raises the stoppable's exception (a Python
    handler runs only in the main thread, so elsewhere, or where the signal is missing, nothing is done). A
    handler of an outer block is called too (nested calls: the live run's plan times passes of its own). The
    handler before is put back after the sender has ended; a learner's code that replaces it is not kicked."""
    if not kicks_here():
        yield
        return
    before, ended, target = signal.getsignal(KICK_SIGNAL), threading.Event(), threading.get_ident()

    def kicked(signum, frame):
        if stoppable.poked and not stoppable.done:
            raise stoppable.exception()
        if getattr(before, "kicks", False):
            before(signum, frame)
    kicked.kicks = True

    def send():
        if ended.wait(seconds):
            return
        while not ended.wait(0.1):
            if stoppable.poked and not stoppable.done:
                signal.pthread_kill(target, KICK_SIGNAL)

    signal.signal(KICK_SIGNAL, kicked)
    sender = own_thread(send, "the live run's kicker")
    try:
        yield
    finally:
        ended.set()
        sender.join()
        signal.signal(KICK_SIGNAL, signal.SIG_DFL if before is None else before)   # (None: not set from Python)


@course_modes(name="step_seconds")   # (under no_grad too: it takes gradients)
def step_seconds(model, train_ids, batch, context, trials=3, within=None):
    """(seconds of one training pass, seconds of one sampling pass) of ``model`` here: a few forward
    and backward passes on a copy (the model itself is not changed), the fastest counted.
    trials: 1 to MAX_TRIALS (each is one training pass and one sampling pass). Counted up front: the copy
    (``train.check_batch`` counts the model's copies in training, more than the copy and its gradients
    held here) and the passes' time (at most about MAX_SECONDS, ``pass_seconds``, from the sizes alone).
    within (seconds, or None): the passes are stopped once they have run that long (a model slower than
    its sizes say, a learner's forward with a Python loop in it), and the call refused in one sentence. The
    model's logits are checked (``logits_of``: a model whose logits carry no gradient cannot learn); torch's random
    state is left as it was (a model with dropout draws from it)."""
    import copy

    trials = check_positive_int(trials, "trials")
    if within is not None:
        within = check_number(within, "within", low=0, high=MAX_LIVE_SECONDS, low_open=True)
    if trials > MAX_TRIALS:
        fail(f"trials should be at most {MAX_TRIALS} (each is a training pass), but got {count(trials)}")
    check_module(model)
    config_of(model)
    train_ids = check_ids(train_ids, "train_ids")
    batch = check_positive_int(batch, "batch")
    context = course_train.check_context(model, context, len(train_ids))
    course_train.check_batch(model, batch, context, grad=True)   # the copy, its gradients, its pass: before any
    course_train.check_trainable(model)
    cfg = model.cfg                                              # a training pass: about three forward passes
    check_seconds((trials + 1) * (3 * pass_seconds(cfg, batch, context, batch, fused=False)
                                  + pass_seconds(cfg, 1, context, 1, fused=False)),
                  f"step_seconds' {trials + 1} timed training passes of {count(batch)} windows of {count(context)} tokens",
                  "take fewer trials, a smaller batch or a shorter context")

    probe = copy.deepcopy(model).train()
    x, y = windows(train_ids, batch, context, torch.Generator().manual_seed(0))
    with torch.enable_grad(), torch.random.fork_rng(devices=[]):
        if within is None:
            return timed_passes(probe, x, y, trials)
        try:
            return stopped_after(within, PassesLate, timed_passes, probe, x, y, trials)
        except PassesLate:
            pass   # (the sentence below, raised outside this handler: no stop in its traceback)
    fail(f"the model's {trials + 1} timed passes on {count(batch)} windows of {count(context)} tokens should end "
         f"within {within:.1f} s here, but they ran longer: this model is too slow for a live run of that length "
         f"(give it more seconds, a smaller batch or a faster model)")


def timed_passes(probe, x, y, trials):
    """``step_seconds``'s timing on its copy ``probe`` and a batch x, y (batch, context): its logits checked
    (``logits_of``), an error of its backward pass said in one sentence (``model_raised``)."""
    passes, samples = [], []
    for _ in range(trials + 1):                        # the first pass warms up and is not counted
        tick = time.perf_counter()
        logits = logits_of(probe, x, grad=True)
        try:
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
        except Exception as error:   # noqa: BLE001 (a learner's autograd Function or hook may raise anything)
            model_raised(error, "backward pass (from the mean cross-entropy of its logits)")
        passes.append(time.perf_counter() - tick)
        tick = time.perf_counter()
        with torch.no_grad():
            logits_of(probe, x[:1])
        samples.append(time.perf_counter() - tick)
    return min(passes[1:]), min(samples[1:])


def plan_live_run(model, train_ids, batch, context, seconds, eval_every, eval_batches, sample_chars):
    """(steps, training seconds): how many steps fit here in ``seconds`` once the sample's time is
    set aside, evaluations and the optimizer's update included, with a fifth kept in reserve. An evaluation
    or the sample that would take more than about MAX_SECONDS is refused before the timed passes."""
    seconds = check_number(seconds, "seconds", low=0, high=MAX_LIVE_SECONDS, low_open=True)
    eval_every = check_positive_int(eval_every, "eval_every")
    eval_batches = check_positive_int(eval_batches, "eval_batches")
    if eval_batches > MAX_EVAL_BATCHES:
        fail(f"eval_batches should be at most {MAX_EVAL_BATCHES:,}, but got {count(eval_batches)}")
    sample_chars = check_new(sample_chars, "sample_chars")
    cfg = config_of(model)
    batch, context = check_positive_int(batch, "batch"), course_train.check_context(model, context)
    course_train.check_batch(model, batch, context, grad=True)   # before its time is counted (2**1100 is no float)
    check_evaluation(cfg, eval_batches, batch, context)
    check_sample(cfg, sample_chars, context)     # the sample after the run: before it trains
    train_pass, sample_pass = step_seconds(model, train_ids, batch, context, within=seconds / 2)   # half: to time
    training = seconds - 3.0 * sample_chars * sample_pass - 3.0
    if training <= 0:
        fail(f"seconds should leave time to train once the sample is drawn (more than about {seconds - training:.0f} s here), "
             f"but got {seconds:g}")
    # a run takes at most MAX_STEPS steps: any eval_every from there on evaluates at the start and the end alone
    evaluations = eval_batches / min(eval_every, course_train.MAX_STEPS)   # batches a step (2**1100 is no float)
    step = 1.15 * train_pass + evaluations * train_pass / 3   # the update; an evaluation's forward pass is ~1/3
    return min(course_train.MAX_STEPS, max(1, int(0.8 * training / step))), training


class LiveRun:
    """A progress bar and a loss curve redrawn in place while a loop trains (``callback``), and
    below the curve, once it is done, a sample of the trained model.

    Use: ``run = LiveRun(steps, seconds=60)``; pass ``run.callback`` to the loop as its callback;
    the callback stops the loop (TimeUp) once ``seconds`` have passed. ``run.finish(sample)``
    draws the last picture with the sample and closes the bar.
    """

    def __init__(self, steps, seconds=MAX_SECONDS, ln_v=None, unigram=None, every=2.0):
        import matplotlib.pyplot as plt
        from IPython.display import display
        from tqdm import tqdm

        self.steps = course_train.check_steps(steps)
        self.seconds = check_number(seconds, "seconds", low=0, high=MAX_LIVE_SECONDS, low_open=True)
        for value, name in ((ln_v, "ln_v"), (unigram, "unigram")):   # reference lines on the curve, if given
            if value is not None:
                check_number(value, name, low=0)
        check_number(every, "every", low=0, high=MAX_LIVE_SECONDS, low_open=True)
        self.every, self.ln_v, self.unigram = every, ln_v, unigram   # every: seconds between redraws
        self.start = self.drawn = time.perf_counter()
        self.fig, (self.ax, self.text_ax) = plt.subplots(2, 1, figsize=(7.5, 6.2), height_ratios=(3, 2),
                                                         gridspec_kw=dict(hspace=0.45))
        plt.close(self.fig)   # shown through the handle only, not again at the end of the cell
        self.losses, self.val, self.sample, self.finished = [], {}, None, False
        self.draw()
        self.handle = display(self.fig, display_id=True)
        self.bar = tqdm(total=self.steps, desc="live run", unit="step", mininterval=1.0)

    @property
    def elapsed(self):
        return time.perf_counter() - self.start

    def callback(self, losses, val_losses):
        """Called by the loop after every step with the losses so far (a list of at most ``steps`` finite numbers,
        one per step, and a dict {step from 0 to steps: finite number}; checked: the ones checked at the last call
        are not read again)."""
        self.losses, self.val = checked_losses(losses, val_losses, "callback should be given", self.steps, self.losses)
        self.bar.update(len(self.losses) - self.bar.n)
        if time.perf_counter() - self.drawn > self.every:
            self.show()
        if self.elapsed > self.seconds:
            raise TimeUp(f"stopped after {len(self.losses)} steps: the live run's {self.seconds:g} s were up")

    def draw(self):
        ax = self.ax
        ax.clear()
        if self.losses:
            ax.plot(range(1, len(self.losses) + 1), self.losses, color="C0", lw=0.8, alpha=0.6,
                    label="training batch")
        if self.val:
            ax.plot(list(self.val), list(self.val.values()), "o-", color="C1", ms=4, label="validation")
        if self.ln_v is not None:
            ax.axhline(self.ln_v, color="grey", ls=":", lw=1, label=f"ln V = {self.ln_v:.2f} (a uniform guess)")
        if self.unigram is not None:
            ax.axhline(self.unigram, color="C2", ls="--", lw=1,
                       label=f"{self.unigram:.2f}: only how often each character occurs")
        ax.set_xlim(0, self.steps)
        ax.set_ylim(1.0, (self.ln_v or 4.5) + 0.6)
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats per character)")
        ax.set_title(f"the live run: {len(self.losses)} of {self.steps} steps")
        if ax.get_legend_handles_labels()[0]:   # (before the first step nothing is drawn yet)
            ax.legend(loc="upper right", fontsize=8)
        self.text_ax.clear()
        self.text_ax.axis("off")
        if self.sample is not None:
            from ..plots import literal   # the sample as the model wrote it: a "$$" or "$x$" in it is not math

            self.text_ax.set_title("a sample of the model after the run (temperature 0.8)", fontsize=9, loc="left")
            self.text_ax.text(0, 1, literal(self.sample), family="monospace", fontsize=7.5, va="top", ha="left",
                              transform=self.text_ax.transAxes, wrap=True)

    def show(self):
        """Redraw the picture in place (outside a notebook, where there is no display to update, only draw)."""
        self.draw()
        if self.handle is not None:
            self.handle.update(self.fig)
        self.drawn = time.perf_counter()

    def finish(self, sample=None):
        """The last picture, with ``sample`` (text, or None for none) below the curve; the bar closed."""
        self.sample = None if sample is None else check_text(sample, "sample", empty=True)   # checked before it is kept
        self.show()
        self.bar.update(len(self.losses) - self.bar.n)
        self.bar.total = self.bar.n or 1   # the bar ends full whether the plan or the clock stopped the run
        self.bar.refresh()
        self.bar.close()
        self.finished = True


def _loss_value(v):
    """A loss as a float (a Python or NumPy number, or a one-element float tensor), else None (also a
    whole number too large for a float, or a number of the learner's whose __float__ raises)."""
    if isinstance(v, torch.Tensor) and v.numel() == 1 and v.is_floating_point() and v.device.type != "meta":
        return float(v.detach())
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        return None
    try:
        return float(v)
    except Exception:   # noqa: BLE001 (OverflowError for 2**1100; a subclass's __float__ may raise anything)
        return None


def builtin_kind(values, kinds):
    """The built-in class of ``kinds`` (such as list, tuple) that ``values`` is, a subclass too, else None.
    Its own methods read ``values`` then (``kind.__len__(values)``): a learner's subclass may lie or raise."""
    return next((kind for kind in kinds if isinstance(values, kind)), None)


def refuse_losses(losses, val_losses, head):
    """The sentence for losses that are no list of numbers, or validation losses that are no dict {step: number}."""
    fail(f"{head} (losses, val_losses), a list of numbers (loss.item() each) and a dict {{step: number}}, "
         f"but got losses={shown(losses)}, val_losses={shown(val_losses)}")   # (a value cut short ends in ...)


def checked_losses(losses, val_losses, head, steps, kept=()):
    """(losses, val_losses) as a list of floats and a dict {int step: float}, else one sentence beginning
    with ``head`` ("loop should return", "callback should be given"); a loss that is not finite is said
    (the run diverged), not drawn. ``steps``: the run's planned steps; losses (at most steps, one per step)
    and val_losses (at most steps + 1, at steps 0 to steps) are counted before any entry is read.
    ``kept``: the floats of the first losses, checked already (the callback's earlier calls): those entries
    are not read again, and the floats are kept, never the loop's own objects."""
    kind = builtin_kind(losses, (list, tuple))
    if kind is None or not isinstance(val_losses, dict):
        refuse_losses(losses, val_losses, head)
    size, evaluations = kind.__len__(losses), dict.__len__(val_losses)   # the built-ins' own lengths
    if size > steps:
        fail(f"{head} at most {count(steps)} losses, one per step, but got {count(size)}")
    if evaluations > steps + 1:
        fail(f"{head} at most {count(steps + 1)} validation losses, one per evaluation at steps 0 to {count(steps)}, "
             f"but got {count(evaluations)}")
    kept = kept if size >= len(kept) else ()   # a list shorter than the last call's: read from its start
    start = len(kept)
    new = [_loss_value(v) for v in kind.__getitem__(losses, slice(start, None))]
    val = {step: _loss_value(v) for step, v in dict.items(val_losses)}
    if None in new or None in val.values() or \
            any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) for k in val):
        refuse_losses(losses, val_losses, head)
    outside = next((k for k in val if not 0 <= k <= steps), None)
    if outside is not None:
        fail(f"{head} validation losses at steps 0 to {count(steps)} (the run's steps), but got one at step "
             f"{count(int(outside))}")
    for name, values in (("loss", dict(enumerate(new, start + 1))), ("validation loss", val)):
        step, bad = next(((k, v) for k, v in values.items() if not math.isfinite(v)), (None, None))
        if step is not None:
            fail(f"{head} finite losses, but the {name} at step {step} is {bad}: the run diverged "
                 f"(a smaller lr, or clipping the gradients, may help)")
    return list(kept) + new, {int(k): v for k, v in val.items()}


def loop_result(out, run, steps=course_train.MAX_STEPS):
    """(losses, val_losses) as plain floats from what a training loop returned, else one sentence
    (the live run's picture closed first): a list of 1 to ``steps`` finite numbers (the run's planned steps,
    one loss each) and a dict {step from 0 to steps: number}."""
    try:
        kind = builtin_kind(out, (tuple, list))
        if kind is None or kind.__len__(out) != 2:
            fail(f"loop should return (losses, val_losses), a list of numbers (loss.item() each) and a dict "
                 f"{{step: number}}, but returned {shown(out)}")
        losses, val = checked_losses(kind.__getitem__(out, 0), kind.__getitem__(out, 1), "loop should return", steps)
        if not losses:
            fail(f"loop should make training steps and return their losses, but it made no steps (it returned "
                 f"{shown(out)}): write the loop's body first, or use the course's gpt.train_loop")
    except CourseInputError:
        run.finish("(no sample: the loop did not return its losses)")
        raise
    return losses, val


def said(text, put_back=True):
    """The CourseInputError of the sentence ``text`` that ``put_back_on_error`` passes on as it is (it puts the
    model back and adds nothing); ``put_back``: the sentence ends saying that the model was put back."""
    if put_back:
        text = text[:-1] if text.endswith(".") and not text.endswith("...") else text   # (a value cut short: ...)
        text = f"{text}; the model was put back as it was before the call"
    error = CourseInputError(text)
    error.put_back = True
    return error


def said_put_back(function, *args, **kwargs):
    """``function(*args, **kwargs)`` inside ``put_back_on_error``: a refusal passes on as one sentence that
    says the model was put back (``said``); one that says what became of the model already passes as it is."""
    try:
        return function(*args, **kwargs)
    except CourseInputError as error:
        if getattr(error, "put_back", False):   # (a thread that could not be stopped: ``threads_left``)
            raise
        raise said(message_of(error)) from None


@contextlib.contextmanager
def threads_stopped(what, passed=(), put_back=True):
    """Run the block (learner code: ``what`` names it, "the training loop"); then stop every Python thread it
    started and left running (``exercises.stop_threads``, as a check stops a learner's function's), whether it
    ended, raised or was stopped, before anyone puts the model back or says what became of it. The block's error
    passes on once they are stopped. One sentence instead (``threads_left``; ``put_back``: it says the model was
    put back): a thread that could not be stopped, or threads left by a block that ended (or raised one of
    ``passed``, a normal end). A thread started with ``_thread`` alone is not seen (threading does not list it)."""
    before = threads_now()
    try:
        yield
    except passed:
        threads_left(before, what, put_back)
        raise
    except BaseException:
        threads_left(before, what, put_back, failed=True)
        raise
    threads_left(before, what, put_back)


def threads_left(before, what, put_back, failed=False):
    """Stop the threads ``what`` left running (all but those of ``before``, ``exercises.threads_now()`` when it
    began: told apart by thread object, since a thread that ended meanwhile, one of the course's watchdogs, hands
    its ident on to the next one started) and say so in one sentence: always when one could not be stopped (a long C call, an
    ``except:`` around a loop; it may still change the model, so the sentence never says the model is as before),
    and when any was left unless ``what`` ``failed`` (its own error is the sentence then, and the model is put back
    after this)."""
    left, running = stop_threads(before, [])
    threads = f"{left} thread{'s' if left > 1 else ''} of its own running"
    if running:
        raise said(f"{what} should end and leave nothing running, but it left {threads}, and {running} could not be "
                   f"stopped (a long C call, or an except: that catches everything?): it may still change the model, "
                   f"so build the model again once it has stopped (restart the kernel if the notebook slows down)",
                   put_back=False) from None
    if left and not failed:
        raise said(f"{what} should end and leave nothing running, but it left {threads} (now stopped)",
                   put_back) from None


def learner_call(seconds, what, function, *args, put_back=True, then=""):
    """``function(*args)``, which runs a learner's code outside the live run's loop (``what`` names it:
    "tokenizer.text of the sample"), bounded: stopped after ``seconds`` (at least LEAST_SECONDS;
    ``stopped_after``) and refused then in one sentence naming the learner's function it was stopped in (the
    model's ``parameters``, say) and ending with ``then``, and every thread it leaves stopped (``threads_stopped``,
    with ``put_back``). Returns what it returns; raises what it raises."""
    seconds = max(seconds, LEAST_SECONDS)
    with threads_stopped(what, put_back=put_back):
        try:
            return stopped_after(seconds, LearnerLate, function, *args)
        except LearnerLate as late:
            code = late.code   # (the sentence below, raised outside this handler: no stop in its traceback)
        fail(f"{what} should end within {seconds:.1f} s here (what the live run had left for it), but "
             f"{f'your {code}' if code else 'it'} ran longer and was stopped{then}")


@contextlib.contextmanager
def kept_to_put_back(model, until, passed=()):
    """``train.put_back_on_error(model, "the training loop", passed)`` with the learner's code it runs bounded
    (``learner_call``, until ``until``, a time.perf_counter()): the model's state_dict(), parameters() and modules()
    read to keep it before the block, and again to put it back after an error. Stopped while it puts the model
    back, the sentence says the model could not be put back."""
    keeper = course_train.put_back_on_error(model, "the training loop", passed=passed)
    learner_call(until - time.perf_counter(), "keeping the model to put it back on an error (its state_dict(), "
                 "parameters() and modules())", keeper.__enter__, put_back=False)
    try:
        yield
    except BaseException:
        learner_call(until - time.perf_counter(), "putting the model back after the training loop stopped (its "
                     "state_dict(), parameters() and modules())", keeper.__exit__, *sys.exc_info(), put_back=False,
                     then=": the model could not be put back as it was, so build it again before you go on")
        raise   # (put_back_on_error passes it on, or raises its own sentence above)
    keeper.__exit__(None, None, None)


def trained(loop, run, left, model, *arguments):
    """(losses, val_losses): what ``loop(model, *arguments, run.callback)`` returned, run for at most ``left``
    seconds and LATE_SECONDS more (``stopped_after``, LoopLate) with the threads it leaves stopped
    (``threads_stopped``); when the callback stopped it (TimeUp) or the watchdog did, the callback's losses
    so far (floats, checked already). A loop stopped before it ever called the callback is refused."""
    try:
        with threads_stopped("the training loop", passed=(TimeUp, LoopLate)):
            return stopped_after(left + LATE_SECONDS, LoopLate, loop, model, *arguments, run.callback)
    except TimeUp:
        return run.losses, run.val
    except LoopLate:   # stopped by the watchdog: the loop ran on past its time
        if not run.losses:
            raise said(f"loop should call callback(losses, val_losses) after every step (the live run stops it there "
                       f"when its {left:.0f} s are up), but it ran {run.elapsed:.0f} s without calling it") from None
        return run.losses, run.val


def sampled_ids(model, ids, n_new, seed, context):
    """The live run's sample as ids: ``n_new`` drawn after the prompt's ``ids`` at temperature 0.8
    (``drawn_ids``) by the course's Transformer holding the model's weights (``as_transformer``)."""
    return drawn_ids(as_transformer(model), ids, n_new, 0.8, seed, context)


@contextlib.contextmanager
def switches_kept():
    """Within the block a learner's code runs (the live run's loop); after it, ended or refused, what that code may
    have changed for every later cell is put back as a check puts it back (``putback.torch_globals``): the course's
    and torch's functions (``gpt.logits_of = ...``, ``F.cross_entropy = ...``: every later run would call them),
    torch's switches and float32 precisions (torch.set_float32_matmul_precision), default dtype, deterministic and
    anomaly modes (torch.autograd.set_detect_anomaly) and the process's state (its streams, folder, environment,
    thread count); and the random states of Python and NumPy (``states.random_states``), NumPy's error state
    (np.seterr, np.seterrcall: the loop runs in the caller's thread, whose state it is), its print options, and
    whether the thread flushes denormal numbers (``denormals_flushed``: torch.set_flush_denormal). Inside a check's
    fence the fence puts back torch_globals' share (saved here, it would hold the fence's stand-ins).
    torch's own random state is put back when the block raises; one that ends leaves it as the loop left it (a
    training loop seeds it: torch.manual_seed(seed), dropout's draws)."""
    put_back_random = random_states()
    put_back_globals = torch_globals_outside_fence()
    errors, error_call, printing = np.geterr(), np.geterrcall(), np.get_printoptions()
    flushed = denormals_flushed()
    ended = False
    try:
        yield
        ended = True
    finally:
        put_back_globals()   # first: the rest calls the functions it puts back
        if denormals_flushed() != flushed:
            torch.set_flush_denormal(flushed)
        np.seterr(**errors)
        np.seterrcall(error_call)
        np.set_printoptions(**printing)
        loops = torch.get_rng_state()
        put_back_random()
        if ended:
            torch.set_rng_state(loops)


def denormals_flushed():
    """Whether this thread's CPU flushes float32 numbers below about 1.2e-38 to zero (torch.set_flush_denormal(True):
    a switch of the thread's CPU state that torch cannot read back, so it is read off a product). A check runs a
    learner's function in a thread of its own; a live run's loop runs in the notebook's, which keeps the switch."""
    return (torch.tensor([1e-39]) * 1.0).item() == 0.0


@course_modes(name="live_run")   # (under no_grad too: it takes gradients)
@switches_kept()
def live_run(loop, model, train_ids, val_ids, tokenizer, batch, context, lr, warmup, min_lr, clip, eval_every,
             eval_batches, seconds=MAX_SECONDS, prompt="ROMEO:", sample_chars=300, seed=0):
    """Train ``model`` with ``loop`` (the learner's train_loop or the course's) for as many steps as
    fit here (``plan_live_run``), with a bar and a live curve, stopped in any case when the time set
    aside for training is up; then draw ``sample_chars`` characters after ``prompt`` (temperature
    0.8) into the picture. The whole call takes about ``seconds``, and at most about ``seconds`` +
    LATE_SECONDS: every call of the learner's code is bounded (``stopped_after``: the loop, and
    ``learner_call``: the tokenizer's and the model's (its cfg, parameters()) before the run, LATE_SECONDS
    together; the plan's (its copy, and timed passes stopped after ``seconds`` / 2 on their own), the model kept
    before the loop and put back after an error, what the loop returned read as numbers, the sample and
    tokenizer.text, until ``seconds`` + LATE_SECONDS), and the threads each leaves running are stopped (``threads_stopped``) before the model is put
    back. A model whose LIVE_COPIES copies in training would hold more than MAX_BYTES is refused before anything
    runs. What the learner's code may change for every later cell (the course's and torch's functions, torch's
    switches, anomaly mode, the random states of Python and NumPy) is put back after the call, ended or refused
    (``switches_kept``); every call of the model the course makes is checked (``logits_of``).
    Returns dict(steps, done, seconds (the whole call), losses, val_losses, sample)."""
    importlib.import_module("torch._dynamo")   # (the first torch.optim.AdamW of a process imports it, for seconds: a
    start = time.perf_counter()                # loop stopped inside that import would leave it half-made for good)
    if not callable(loop):
        fail(f"loop should be a training loop function (your train_loop or gpt.train_loop), but got {shown(loop)}")
    seconds = check_number(seconds, "seconds", low=0, high=MAX_LIVE_SECONDS, low_open=True)   # (its bounds below)
    checks_end, end = start + LATE_SECONDS, start + seconds + LATE_SECONDS   # (end: the learner's code runs until then)
    cfg = learner_call(checks_end - time.perf_counter(), "reading model.cfg", config_of, check_module(model),
                       put_back=False)
    learner_call(checks_end - time.perf_counter(), "reading the tokenizer's vocab, encode and text", check_tokenizer,
                 tokenizer, cfg, put_back=False)   # the sample at the end needs these: checked before training
    check_new(sample_chars, "sample_chars")
    ids = learner_call(checks_end - time.perf_counter(), "tokenizer.encode of the prompt", prompt_ids, tokenizer,
                       prompt, cfg.vocab_size, put_back=False)
    seed = check_seed(seed)
    check_ids(val_ids, "val_ids")
    lr = check_number(lr, "lr", low=0, low_open=True)
    check_number(min_lr, "min_lr", low=0, high=lr)
    check_number(clip, "clip", low=0, low_open=True)
    check_positive_int(warmup, "warmup", minimum=0)
    learner_call(checks_end - time.perf_counter(), "counting the model's copies (its parameters())",
                 course_train.check_copies, model, LIVE_COPIES, "live_run (the weights, their gradients, AdamW's "
                 "two moments and two copies kept to put the model back on an error)", put_back=False)   # before the plan's
    steps, training = learner_call(end - time.perf_counter(),   # (its timed passes: seconds / 2 of it, their own bound)
                                   "planning the run (the model's cfg, parameters() and state_dict() read, a copy of it "
                                   "timed)", plan_live_run, model, train_ids, batch, context, seconds, eval_every,
                                   eval_batches, sample_chars, put_back=False)
    course_train.learning_rate(0, lr, warmup, steps, min_lr)   # a warm-up as long as the planned run: refused now
    unigram, left = unigram_loss(train_ids, val_ids), training - (time.perf_counter() - start)
    if left <= 0:   # a busy machine: the checks and the timed passes took all the time set aside for training
        fail(f"seconds should leave time to train once the run is planned (planning took {training - left:.1f} s "
             f"here, all of the {training:.1f} s set aside for training), but got {seconds:g}")
    run = LiveRun(steps, seconds=left, ln_v=math.log(cfg.vocab_size), unigram=unigram)
    try:   # a loop stopped by an error, or a refused return value or sample, puts the model back and says one sentence
        with kept_to_put_back(model, end, passed=TimeUp):
            out = trained(loop, run, left, model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip,
                          eval_every, eval_batches, seed)
            losses, val = said_put_back(learner_call, end - time.perf_counter(),   # refused: the picture closed
                                        "float() of the losses the loop returned", loop_result, out, run, steps)
            drawn = said_put_back(learner_call, end - time.perf_counter(), "the sample after the run (its passes)",
                                  sampled_ids, model, ids, sample_chars, seed, context)
            sample = said_put_back(learner_call, end - time.perf_counter(), "tokenizer.text of the sample",
                                   tokenizer_text, tokenizer, drawn)
    except BaseException:
        if not run.finished:
            run.finish("(no sample: the training loop stopped with an error)")
        raise
    run.losses, run.val = list(losses), dict(val)   # the loop's last evaluation comes after its last callback
    run.finish(sample)
    return dict(steps=steps, done=len(losses), seconds=time.perf_counter() - start, losses=list(losses),
                val_losses=dict(val), sample=sample)


# ------------------------------------------------------------ the shipped model

# The time of a pass, counted from the sizes before it starts (measured on this course's 2-core machine,
# shared and loaded: the shipped character model reads a window of 256 at 50 to 300 µs a token by the load;
# counted here at about 155 µs, so that what is accepted ends in about MAX_SECONDS at a middling load).
SECONDS_PER_MAC = 1e-10        # each multiply-add of a token's pass (``token_macs``)
SECONDS_PER_TOKEN = 5e-5       # each token's share of the rest (norms, activations, softmax, the loss)
SECONDS_PER_PASS = 0.02        # each call of the model (one batch of windows)
MAX_WINDOWS = 10**12           # the most windows pass_seconds counts (far past what MAX_SECONDS allows)
SECONDS_PER_RULE_STEP = 2e-6   # each (position, k) step of copy_rule's Python loop
SECONDS_PER_SCORE = 3e-8       # each attention score of a pass not fused (a watched pass: replace=, ablations,
                               # a trace; a training pass): the scores, mask and softmax made one by one


def token_macs(cfg, context):
    """Multiply-adds of one token's pass in a window of ``context`` tokens, every key counted: a pass over
    the window (``sampling.forward_macs``, from the Config's own choices) shared among its tokens."""
    return forward_macs(cfg, context) // context


def pass_seconds(cfg, windows, context, batch, fused=True):
    """About how many seconds here the passes over ``windows`` windows of ``context`` tokens take,
    ``batch`` windows a call (the SECONDS_PER_* above). ``fused=False``: passes whose attention is
    not torch's fused kind (every layer's heads x context x context scores made one by one). windows: 1 to
    MAX_WINDOWS (a float cannot hold 2**1100 of them; each caller bounds its own count first, by its own name)."""
    windows = check_size(windows, "windows", MAX_WINDOWS)
    tokens, calls = windows * context, -(-windows // batch)
    scores = 0 if fused else windows * cfg.n_layers * cfg.n_heads * context * context
    return tokens * (token_macs(cfg, context) * SECONDS_PER_MAC + SECONDS_PER_TOKEN) + calls * SECONDS_PER_PASS \
        + scores * SECONDS_PER_SCORE


def cached_seconds(cfg, rows, prompt, n_new):
    """About how many seconds here ``samples_at`` takes: the pass over ``rows`` copies of a ``prompt`` of that
    many tokens, then ``n_new`` passes of one new token per row, each reading its keys from the cache (up to
    prompt + n_new of them, counted at that many for every pass)."""
    keys = prompt + n_new
    step = rows * (token_macs(cfg, keys) * SECONDS_PER_MAC + SECONDS_PER_TOKEN
                   + cfg.n_layers * cfg.n_heads * keys * SECONDS_PER_SCORE) + SECONDS_PER_PASS
    return pass_seconds(cfg, rows, prompt, rows, fused=False) + n_new * step


def check_seconds(seconds, what, advice):
    """Refuse up front a call counted (``pass_seconds``) to take more than MAX_SECONDS here. The estimate is
    said rounded up, so that it never reads as the limit itself (60.4 s is "about 61 s", not "about 60 s")."""
    if seconds > MAX_SECONDS:
        fail(f"{what} should take at most about {MAX_SECONDS:.0f} s here (this course's limit for one call), "
             f"but would take about {math.ceil(seconds):,} s: {advice}")


def spread_windows(model, ids, context, every, lengths=()):
    """``ids`` cut into consecutive windows of ``context`` tokens (the last, shorter piece left out)
    and every ``every``-th of them kept, the first always: (x, y, n), x and y (kept, context), y the
    next tokens, n the text's windows. Checks the arguments, each with its own sentence, and refuses a model
    whose weights hold NaN or inf (``check_finite_weights``)."""
    config_of(model)
    ids = check_ids(ids)
    check_positive_int(context, "context")
    every = check_positive_int(every, "every")         # each argument's own sentence before the context's fit
    context = course_train.check_context(model, context, len(ids))
    course_train.check_vocabulary(model, ids)          # before any pass: a refusal leaves the model's mode alone
    if not isinstance(lengths, (list, tuple)) or len(lengths) > MAX_MATCH or \
            any(isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1 for k in lengths):
        fail(f"lengths should be a list of at most {MAX_MATCH} whole numbers of at least 1, but got {shown(lengths)}")
    if lengths and max(lengths) > context:
        fail(f"lengths should be at most context={count(context)} (a match of k tokens needs a window of at least k), "
             f"but got lengths up to {count(max(lengths))}")
    check_finite_weights(check_module(model))          # a NaN weight: every loss NaN, every argmax a guess
    n = (len(ids) - 1) // context
    keep = min(every, n)                                # a step past the last window keeps the first alone
    x, y = ids[:n * context].view(n, context)[::keep], ids[1:n * context + 1].view(n, context)[::keep]
    return x.clone(), y.clone(), n                     # copies: writing into them leaves the caller's ids alone


@torch.no_grad()
def spread_loss(model, ids, context=256, every=8):
    """The loss over evenly spread windows of a whole text: ``ids`` cut into consecutive windows of
    ``context`` tokens as ``shipped.whole_text_loss`` cuts it (the last, shorter piece left out), and
    every ``every``-th of them kept (the first, the every+1-th, ...); every token of a kept window
    predicted from the ones before it in the window. ``every=1`` is the whole text's loss. Eval mode,
    torch's fused attention (``train.fused_attention``: the same sums, faster); the mode is restored.
    Returns dict(loss, windows (kept), of (all the text's windows), predictions, window_losses (each
    kept window's mean loss, (windows,): how far one window's loss strays from another's))."""
    x, y, n = spread_windows(model, ids, context, every)
    check_seconds(pass_seconds(model.cfg, len(x), x.shape[1], 16),
                  f"spread_loss of {len(x):,} windows of {x.shape[1]} tokens (every {count(every)}-th of {n:,})",
                  "take a larger every (every=8 reads an eighth of the text) or a shorter text")
    with eval_mode(model), course_train.fused_attention(model), torch.no_grad():
        per_window = torch.cat([F.cross_entropy(logits_of(model, x[i:i + 16]).transpose(1, 2), y[i:i + 16], reduction="none")
                                .double().mean(1) for i in range(0, len(x), 16)])
    return dict(loss=float(per_window.mean()), windows=len(x), of=n, predictions=y.numel(), window_losses=per_window)


# ------------------------------------------------------------ looking for a circuit

MAX_RECORDS = 10_000   # the most induction records induction_history reads (the shipped logs hold about 50)


def induction_history(log):
    """From a training log's induction records (``helpers.gpt.shipped``): dict(steps (N,),
    scores (N, layers, heads) every head's induction score, first and second (N,) the loss on the
    first and on the second copy of the repeated random characters)."""
    records = log.get("induction") if isinstance(log, dict) else None
    if isinstance(records, list) and list.__len__(records) > MAX_RECORDS:   # counted before any is read
        fail(f"the log should hold at most {MAX_RECORDS:,} induction records, but holds {list.__len__(records):,}")
    if not records or not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        fail(f"expected a training log with induction records (a dict whose 'induction' is a list of dicts), "
             f"but got {shown(log)}")
    keys = ("step", "induction_score", "loss_first_copy", "loss_second_copy")
    lacking = [k for k in keys if any(k not in r for r in records)]
    if lacking:
        fail(f"each induction record should hold {', '.join(keys)}, but one lacks {lacking[0]!r}")
    try:
        history = dict(steps=np.array([operator.index(r["step"]) for r in records]),
                       scores=np.array([r["induction_score"] for r in records], dtype=float),
                       first=np.array([r["loss_first_copy"] for r in records], dtype=float),
                       second=np.array([r["loss_second_copy"] for r in records], dtype=float))
    except (TypeError, ValueError):
        fail("each induction record should hold a whole-number step, a (layers, heads) table of scores and two "
             "losses, but one does not")
    check_history(history)
    return history


def check_history(history):
    """(steps, scores, first, second) of a recorded run (``induction_history``), else one sentence:
    at least 2 records at rising steps (whole numbers from 0), scores (records, layers, heads), every number finite."""
    if not isinstance(history, dict) or not {"steps", "scores", "first", "second"} <= set(history):
        fail(f"history should be the dict of steps, scores, first and second a recorded run gives, but got {shown(history)}")
    steps, first, second = (to_numpy(history[name], f"history[{name!r}]") for name in ("steps", "first", "second"))
    scores = to_numpy(history["scores"], "history['scores']")
    if steps.ndim != 1 or len(steps) < 2 or first.shape != steps.shape or second.shape != steps.shape \
            or scores.ndim != 3 or len(scores) != len(steps) or 0 in scores.shape or np.any(np.diff(steps) <= 0):
        fail(f"history should hold at least 2 records at rising steps, with scores (records, layers, heads) and "
             f"first and second (records,), but holds steps {steps.shape}, scores {scores.shape} and second {second.shape}")
    if not all(np.isfinite(a).all() for a in (steps, scores, first, second)):
        fail("history's steps, scores and losses should all be finite numbers, but some are NaN or infinite")
    odd = np.flatnonzero((steps != np.floor(steps)) | (steps < 0))
    if odd.size:
        fail(f"history's steps should be whole numbers of updates from 0, but got {steps[odd[0]]:g}")
    return steps, scores, first, second


def circuit_birth(history, share=0.5):
    """The induction head and when it appeared: dict(head (layer, head) with the highest final score,
    step: the first record at which its score reaches ``share`` of its final score, drop_step: the
    record ending the steepest fall of the second-copy loss between two records (the phase change),
    and the scores and losses just before and after it."""
    steps, scores, _, second = check_history(history)
    share = check_number(share, "share", low=0, high=1, low_open=True)   # of the final score
    layer, head = np.unravel_index(int(np.argmax(scores[-1])), scores[-1].shape)
    own = scores[:, layer, head]
    reached = int(np.argmax(own >= share * own[-1]))
    fall = np.diff(second) / np.diff(steps)
    i = int(np.argmin(fall)) + 1
    return dict(head=(int(layer), int(head)), formed=bool(own[-1] >= FORMED), step=int(steps[reached]), drop_step=int(steps[i]),
                before=dict(step=int(steps[i - 1]), score=float(own[i - 1]), second=float(second[i - 1])),
                after=dict(step=int(steps[i]), score=float(own[i]), second=float(second[i])))


def check_birth(history, birth):
    """``birth`` as ``circuit_birth(history, share)`` returns it (any share: only its step depends on
    it), else one sentence."""
    expected = circuit_birth(history)
    if not isinstance(birth, dict) or set(birth) != set(expected) \
            or any(repr(birth[k]) != repr(expected[k]) for k in expected if k != "step"):   # repr: arrays compare too
        fail(f"birth should be what circuit_birth(history) returns for this history, but got {shown(birth)}")
    return birth


FORMED = 0.3   # an induction score above this, on sequences of 48 characters, is a head that copies


def history_arrays(history):
    """``check_history``'s arrays by name: dict(steps, scores, first, second), float NumPy arrays read by
    errors.to_numpy (a tensor with grad is detached)."""
    return dict(zip(("steps", "scores", "first", "second"), check_history(history)))


def circuit_lines(history, birth):
    """What the log shows, in sentences, decided from the log: the best head and, if a head passed
    FORMED, where the second copy's loss fell fastest; else that no head did, with the highest
    score any head reached and where both copies' losses went."""
    check_birth(history, birth)                         # the history's checks too
    history = history_arrays(history)
    layer, head = birth["head"]
    final = float(history["scores"][-1, layer, head])
    b, a = birth["before"], birth["after"]
    lines = [f"the best head at the end: L{layer}H{head}, induction score {final:.3f}"]
    if birth["formed"]:
        lines.append(f"its score reaches half its final value at step {birth['step']}")
        lines.append(f"steepest fall of the second copy's loss: step {b['step']} -> {a['step']}: "
                     f"{b['second']:.2f} -> {a['second']:.2f} (L{layer}H{head}'s score {b['score']:.2f} -> {a['score']:.2f})")
    else:
        lines.append(f"no head became an induction head in this run: no score rose above "
                     f"{float(history['scores'].max()):.3f} (an induction head scores above {FORMED})")
        lines.append(losses_went(history))
        at, l, h = np.unravel_index(int(np.argmax(history["scores"])), history["scores"].shape)
        lines.append(f"the highest score of any head at any record: {history['scores'][at, l, h]:.3f}, "
                     f"L{l}H{h} at step {int(history['steps'][at])}")
        scores = history["scores"]
        lines.append(f"every head's score at step {int(history['steps'][0])}: about {scores[0].mean():.3f} (the weight "
                     f"spread evenly); at step {int(history['steps'][-1])}: {scores[-1].max():.3f} at most")
    return lines


def losses_went(history):
    """One sentence on where both copies' losses went from the first record to the last: each climbs,
    falls or stays, as the numbers shown (to one decimal) say."""
    ends = [(float(history[name][0]), float(history[name][-1])) for name in ("first", "second")]
    shown_ends = [(f"{a:.1f}", f"{b:.1f}") for a, b in ends]
    verbs = ["stay" if a == b else "climb" if float(b) > float(a) else "fall" for a, b in shown_ends]
    parts = [f"at {a}" if verb == "stay" else f"from {a} to {b}" for verb, (a, b) in zip(verbs, shown_ends)]
    if verbs[0] == verbs[1]:
        return f"both copies' losses {verbs[0]}: the first copy's {parts[0]}, the second copy's {parts[1]}"
    return f"the first copy's loss {verbs[0]}s {parts[0]}, the second copy's {verbs[1]}s {parts[1]}"


def circuit_figure(history, birth):
    """Two panels against the training step: every head's induction score (the induction head
    drawn bold), and the loss on the first and the second copy; the phase change marked."""
    import matplotlib.pyplot as plt

    check_birth(history, birth)                         # the history's checks too
    history = history_arrays(history)
    steps, scores = history["steps"], history["scores"]
    layer, head = birth["head"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 6), sharex=True, gridspec_kw=dict(hspace=0.12))
    for l in range(scores.shape[1]):
        for h in range(scores.shape[2]):
            if (l, h) == (layer, head):
                continue
            top.plot(steps, scores[:, l, h], color=f"C{l}", lw=0.8, alpha=0.5)
    top.plot(steps, scores[:, layer, head], color="black", lw=2.2, label=f"L{layer}H{head} (highest at the last record)")
    if birth["formed"]:   # else the threshold lies far above every line, and the axis shows the lines instead
        top.axhline(FORMED, color="grey", ls=":", lw=1, label=f"{FORMED}: above it, a head that copies")
    for l in range(scores.shape[1]):
        top.plot([], [], color=f"C{l}", lw=0.8, label=f"layer {l}'s other heads" if l == layer else f"layer {l}'s heads")
    top.set_ylabel("induction score")
    top.set_ylim(0, 1 if birth["formed"] else max(0.05, math.floor(float(scores.max()) * 100) / 100 + 0.02))
    top.legend(fontsize=7, ncol=2, loc="upper left" if birth["formed"] else "upper right")
    # the first copy wide and pale beneath the second: where the two coincide, both stay visible
    bottom.plot(steps, history["first"], color="C7", lw=5, alpha=0.45, label="first copy (nothing to copy yet)")
    bottom.plot(steps, history["second"], color="C3", lw=1.6, label="second copy (can be copied)")
    bottom.set_ylabel("loss (nats per character)")
    bottom.set_xlabel("training step")
    bottom.legend(fontsize=8, loc="lower right")
    if birth["formed"]:                  # the band only where a head became an induction head
        for ax in (top, bottom):
            ax.axvspan(birth["before"]["step"], birth["after"]["step"], color="gold", alpha=0.35, lw=0)
        top.set_title(f"an induction head forms: L{layer}H{head}\nshaded: the second copy's steepest fall "
                      f"(steps {birth['before']['step']}-{birth['after']['step']})", fontsize=10)
    else:
        top.set_title(f"no induction head in this run: no score rose above {float(scores.max()):.3f} "
                      f"(an induction head: above {FORMED})", fontsize=10)
    plt.close(fig)
    return fig


def head_ablations(model, n, length, seed, reference_seed):
    """Mean ablation of each head alone on ``n`` repeated random sequences (``worlds.repeated_tokens``):
    dict(none=..., (layer, head)=...) of the loss on the second copy; each head's output is replaced
    by its mean, position by position, over ``n`` other sequences of the same form and length
    (``reference_seed``): the task-matched mean of chapter 10. Its L x H + 2 passes are counted up front
    (``pass_seconds``): a call that would take more than about MAX_SECONDS here is refused. n: 1 to MAX_SPANS."""
    cfg = config_of(model)
    n, length = check_positive_int(n, "n"), check_positive_int(length, "length", minimum=2)
    if n > MAX_SPANS:   # (before its passes are counted: a float cannot hold 2**1100)
        fail(f"n should be at most {MAX_SPANS:,} sequences, but got {count(n)}")
    if 2 * length + 1 > cfg.n_max:
        fail(f"length should let a newline and two copies fit this model's window of {cfg.n_max} tokens (at most "
             f"{(cfg.n_max - 1) // 2}), but got {count(length)}, which makes {count(2 * length + 1)}")
    passes = cfg.n_layers * cfg.n_heads + 2        # the reference means, nothing ablated, then each head alone
    check_seconds(passes * pass_seconds(cfg, n, 2 * length, n, fused=False),
                  f"head_ablations' {passes} passes over {count(n)} sequences of {count(2 * length)} tokens",
                  "take fewer sequences (n) or a shorter length")
    ids = worlds.repeated_tokens(n, length, cfg.vocab_size, seed)
    reference = worlds.repeated_tokens(n, length, cfg.vocab_size, check_seed(reference_seed, "reference_seed"))
    model = model if isinstance(model, Transformer) else as_transformer(model)   # replace= is the Transformer's
    with eval_mode(model):
        means = mean_head_outputs(model, reference[:, :-1])                  # {layer: (H, T, d_k)}, once
        out = {"none": copy_losses(model, ids, length)["second"]}
        for layer in range(cfg.n_layers):
            for head in range(cfg.n_heads):
                swap = ablation_replace([(layer, head)], "mean", means)
                out[layer, head] = copy_losses(model, ids, length, replace=swap)["second"]
    return out


def text_repeats(ids, n, length, seed):
    """(repeated, control), each (n, 2 * length + 1): ``n`` spans of ``length`` tokens of ``ids`` taken
    at seeded random places, each after id 0 (the newline) and then repeated once; and the matched
    control: id 0, another span of ``length`` tokens taken at another seeded random place (never
    overlapping the span), then the same span. The second half of both rows is the same tokens, so
    both predict the same targets after the same amount of context; only the repeat has something
    to copy."""
    ids = check_ids(ids)
    n, length = check_positive_int(n, "n"), check_positive_int(length, "length", minimum=2)
    if n > MAX_SPANS:
        fail(f"n should be at most {MAX_SPANS:,} spans (each is drawn one at a time), but got {count(n)}")
    if len(ids) < 3 * length:
        fail(f"a span of {count(length)} tokens and another span of {count(length)} that does not overlap it need a "
             f"text of at least {count(3 * length)} tokens, but got {count(len(ids))}")
    check_bytes(8 * n * (6 * length + 2), f"{count(n)} spans of {count(length)} tokens", "ask for fewer or shorter spans")
    g = torch.Generator().manual_seed(check_seed(seed))
    last = len(ids) - length                                          # the last start a span can have
    starts = torch.randint(0, last + 1, (n,), generator=g).tolist()
    others = []
    for s in starts:                      # another start whose span does not overlap s's: skip s - length + 1 .. s + length - 1
        lo, hi = max(s - length + 1, 0), min(s + length, last + 1)
        u = int(torch.randint(0, last + 1 - (hi - lo), (1,), generator=g))
        others.append(u if u < lo else u + hi - lo)
    span = torch.stack([ids[s:s + length] for s in starts])              # (n, length)
    other = torch.stack([ids[o:o + length] for o in others])
    start = torch.zeros(n, 1, dtype=torch.long)
    return torch.cat([start, span, span], dim=1), torch.cat([start, other, span], dim=1)


def _course_code_only(model):
    """Whether a pass of ``model`` runs only the course's and torch's code: the course's Transformer itself, every
    module of a class of helpers' or torch's, no module hook (its own or torch's global ones), and no torch mode in
    force (a counting mode such as chapter 09's ``op_count`` is the calling thread's own: it would not see the other
    thread's ops), and float32 torch's default dtype (another one is set for each pass and put back after it:
    passes side by side would set it for each other). Only such a pass is shared between threads (``_in_two_threads``): a learner's forward, hook or
    mode runs in the calling thread alone."""
    from torch.nn.modules import module as torch_module

    modes = getattr(torch._C, "_len_torch_function_stack", lambda: 1)() + \
        getattr(torch._C, "_len_torch_dispatch_stack", lambda: 1)()
    if modes or torch.get_default_dtype() is not torch.float32 or type(model) is not Transformer or any(getattr(torch_module, name, None) for name in (
            "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
            "_global_backward_pre_hooks")):   # (registration hooks run at ``module.x = ...``, not in a pass)
        return False
    for module in model.modules():
        if not str(getattr(type(module), "__module__", "")).startswith(("helpers.", "torch.")) or any(
                getattr(module, name, None) for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                                         "_backward_pre_hooks")):
            return False
    return True


def _in_two_threads(function, items):
    """[function(item) for item in items], the items shared between this thread and one other when the process may
    use 2 CPUs or more and torch runs each op on one thread (``helpers.setup_notebook``): each result is the very
    value one thread gives, about twice as fast. The other thread has finished when this returns; an error in it is
    raised here, and once this thread stops (an error, a stop) the other takes no new item."""
    import threading

    from ..states import usable_cpus

    items = list(items)
    if len(items) < 2 or usable_cpus() < 2 or torch.get_num_threads() != 1:
        return [function(item) for item in items]
    results, errors, taken, lock = [None] * len(items), [], [0], threading.Lock()

    def work():
        while not errors:
            with lock:
                index = taken[0]
                taken[0] += 1
            if index >= len(items):
                return
            try:
                results[index] = function(items[index])
            except BaseException as error:   # noqa: BLE001 (raised in the calling thread)
                errors.append(error)
    other = threading.Thread(target=work, name="helpers.gpt.shipped: the second half of the passes", daemon=True)
    other.start()
    try:
        work()
    except BaseException as error:
        errors.append(error)
        raise
    finally:
        other.join()
    if errors:
        raise errors[0]
    return results


def repeat_test(model, ids, n, length, seed):
    """The induction test on text the model knows (``text_repeats`` of ``ids``): dict(first, second:
    the mean loss on the first and the second copy, as ``heads.copy_losses`` counts them (a_1..a_L;
    a_2..a_L again); control: the mean loss on the same targets a_2..a_L of the second half when
    another span stands before them (the same context length, nothing to copy); second_spans,
    control_spans: those two per span, (n,); induction: every head's induction score (layers,
    heads) on the repeated spans, as ``heads.head_scores``). One batched pass per kind of sequence; a call
    whose passes would take more than about MAX_SECONDS here (``pass_seconds``) is refused up front."""
    from ..heads.compute import induction_score

    cfg = config_of(model)
    length = check_positive_int(length, "length", minimum=2)
    if 2 * length + 1 > cfg.n_max:
        fail(f"length should let a newline and two spans fit this model's window of {cfg.n_max} tokens (at most "
             f"{(cfg.n_max - 1) // 2}), but got {count(length)}, which makes {count(2 * length + 1)}")
    n = check_positive_int(n, "n")
    course_train.check_batch(model, n, 2 * length + 1)   # before the spans are built
    check_seconds(2 * pass_seconds(cfg, n, 2 * length + 1, n, fused=False),
                  f"repeat_test's 2 passes over {count(n)} pairs of spans of {count(length)} tokens",
                  "take fewer spans (n) or a shorter length")
    repeated, control = text_repeats(ids, n, length, seed)
    model = model if isinstance(model, Transformer) else as_transformer(model)
    names = [f"L{layer}.weights" for layer in range(model.cfg.n_layers)]

    def per_span(logits, ids):                                                # (n, 2 * length): target t + 1
        return F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")

    means = {}   # each layer's attention weights (H, T, T), averaged over the spans as the pass makes them

    def mean_of(name):
        def keep(weights):                                                   # (n, H, T, T), handed on unchanged
            means[name] = weights.mean(0)
            return weights
        return keep


    def run(which):   # (the two passes side by side on two threads, for the course's model alone: the same numbers)
        with torch.no_grad():   # (grad mode is each thread's own)
            return model(repeated, replace={name: mean_of(name) for name in names}) if which else model(control)
    with eval_mode(model), torch.no_grad():   # (no graph, no layer's (n, H, T, T) kept: the peak is one layer's)
        logits, plain = _in_two_threads(run, (1, 0)) if _course_code_only(model) else list(map(run, (1, 0)))
        matched = per_span(plain, control)
    induction = torch.stack([induction_score(means[name], length) for name in names])
    loss = per_span(logits, repeated)
    second_spans, control_spans = loss[:, length + 1:].mean(1), matched[:, length + 1:].mean(1)
    return dict(first=float(loss[:, :length].mean()), second=float(second_spans.mean()),
                control=float(control_spans.mean()), second_spans=second_spans, control_spans=control_spans,
                induction=induction)


MAX_MATCH = 32   # the longest match copy_rule looks for (a whole line of verse)
MAX_RULE_STEPS = 3_000_000   # the most (position, k) steps copy_rule's loop takes: a few seconds (its pass: check_seconds)


@torch.no_grad()
def copy_rule(model, ids, lengths, context=256, every=4):
    """What copying could win on a text: the rule "find the latest earlier place in the window where
    the last k tokens stood, and predict what followed them" (roughly what an induction head does,
    which spreads its weight over every earlier match), set beside the model's own top choice at
    the same positions. The text is cut into windows as ``spread_loss`` cuts it (every ``every``-th
    window kept). For each k of ``lengths`` (different whole numbers): dict(k, matched: the share of
    positions (from the k-th of a window on) that have such an earlier place; rule: how often the
    rule's token is the next token there; model: how often the model's most probable token is;
    rescued: the share of all positions where the rule is right and the model's top choice wrong).
    Eval mode; the mode is restored."""
    config_of(model)
    kind = builtin_kind(lengths, (list, tuple))   # at most MAX_MATCH different lengths: counted before any is read
    values = kind.__getitem__(lengths, slice(None)) if kind and kind.__len__(lengths) <= MAX_MATCH else None
    try:
        given = [operator.index(k) for k in values] if values is not None else None
    except Exception:   # noqa: BLE001 (no whole number; a learner's __index__ may raise anything)
        given = None
    if not given or len(set(given)) < len(given) or any(isinstance(k, bool) or not 1 <= k <= MAX_MATCH for k in values):
        fail(f"lengths should be a list of different match lengths, whole numbers from 1 to {MAX_MATCH} "
             f"(such as [1, 2, 4]), but got {shown(lengths)}")
    x, y, _ = spread_windows(model, ids, context, every, given)
    context = x.shape[1]
    if x.numel() * len(given) > MAX_RULE_STEPS:   # the rule is a Python loop over every kept position and k
        fail(f"copy_rule should look at most {MAX_RULE_STEPS:,} positions (kept positions x lengths; a few seconds), "
             f"but these would be {x.numel() * len(given):,}: take a larger every or fewer lengths")
    check_seconds(pass_seconds(model.cfg, len(x), context, 16) + x.numel() * len(given) * SECONDS_PER_RULE_STEP,
                  f"copy_rule's pass over {x.numel():,} kept positions and its rule at {len(given)} lengths",
                  "take a larger every, fewer lengths or a shorter text")

    def right_at(i):   # (the course's model alone: its passes shared between two threads, the same numbers)
        with torch.no_grad():   # (grad mode is each thread's own)
            return logits_of(model, x[i:i + 16]).argmax(-1) == y[i:i + 16]
    with eval_mode(model), course_train.fused_attention(model):
        starts = range(0, len(x), 16)
        model_right = torch.cat(_in_two_threads(right_at, starts) if _course_code_only(model) else list(map(right_at, starts)))
    rows = []
    for k in given:
        positions = matched = rule = model_ok = rescued = 0
        for window, following, right in zip(x.tolist(), y.tolist(), model_right.tolist()):
            last = {}                                         # the k tokens ending at t -> the latest such t
            for t in range(k - 1, context):
                key = tuple(window[t - k + 1:t + 1])
                if key in last:
                    copied = following[last[key]] == following[t]
                    matched, rule, model_ok = matched + 1, rule + copied, model_ok + right[t]
                    rescued += copied and not right[t]
                positions += 1
                last[key] = t
        rows.append(dict(k=k, matched=matched / positions, rule=rule / max(matched, 1), model=model_ok / max(matched, 1),
                         rescued=rescued / positions))
    return rows


def check_rows(logits):
    """Logits (rows, V) to draw from, each row as chapter 09's ``check_logits`` takes it (finite or -inf,
    one finite at least), else the sentence ``sample_text`` gives (a model whose weights hold a NaN)."""
    from ..sampling.compute import check_logits

    bad = torch.isnan(logits).any(-1) | (logits == math.inf).any(-1) | ~torch.isfinite(logits).any(-1)
    if bad.any():
        check_logits(logits[int(bad.nonzero()[0, 0])])


@torch.no_grad()
def samples_at(model, tokenizer, prompt, n_new, temperatures, seed=0):
    """One continuation of ``prompt`` per temperature, ``n_new`` tokens each, drawn side by side (one
    batch, one KV cache): row i draws from chapter 09's ``next_distribution(logits, temperatures[i])``
    with its own generator seeded with ``seed``. Returns a list of texts (prompt included). A temperature so
    small that logits / temperature overflows is refused as chapter 09 refuses it (``with_temperature``)."""
    from ..model import KVCache
    from ..sampling.compute import _tempered, check_sampling

    cfg = config_of(model)
    check_tokenizer(tokenizer, cfg)
    n_new = check_new(n_new)
    if not isinstance(temperatures, (list, tuple)) or not 1 <= len(temperatures) <= MAX_ROWS:
        fail(f"temperatures should be a list of 1 to {MAX_ROWS} temperatures, one per continuation (e.g. [0.8]), "
             f"but got {shown(temperatures)}")
    temperatures = [check_sampling(t, vocab_size=cfg.vocab_size)[0] for t in temperatures]   # floats
    for t in temperatures:
        if t <= 0:
            fail(f"each temperature should be above 0 (samples_at draws at random; temperature 0, the greedy choice, "
                 f"is gpt.sample_text(model, tokenizer, prompt, n_new, temperature=0)), but got {shown(t)}")
    seed = check_seed(seed)
    rows = len(temperatures)
    start = torch.tensor(prompt_ids(tokenizer, prompt, cfg.vocab_size))   # (T,): encode may give a list or an array
    check_seconds(cached_seconds(cfg, rows, len(start), n_new),
                  f"sampling {count(n_new)} tokens for each of {rows} temperatures after a prompt of "
                  f"{count(len(start))} tokens", "draw fewer tokens, at fewer temperatures")
    model = model if isinstance(model, Transformer) else as_transformer(model)   # the cache is the Transformer's
    # the cache holds the prompt and every drawn token: learned positions stop at n_max, the others at MAX_TOKENS
    limit, why = (cfg.n_max, f"the model's n_max={cfg.n_max}") if cfg.positions == "learned" else \
        (MAX_TOKENS, f"the course's limit of {MAX_TOKENS:,}")
    if len(start) + n_new > limit:
        fail(f"n_new should be at most {max(limit - len(start), 0):,}, {why} tokens less the prompt's "
             f"{len(start):,}, but got {count(n_new)}")
    ids = start[None].repeat(rows, 1)
    generators = [torch.Generator().manual_seed(seed) for _ in range(rows)]
    cache = KVCache(cfg.n_layers)
    drawn = []
    with eval_mode(model):
        logits = model(ids, cache=cache)[:, -1]
        for _ in range(n_new):
            check_rows(logits)
            # chapter 09's softmax(logits / temperature), in float64, refusing a temperature so small that it overflows
            probs = torch.stack([_tempered(row, t) for row, t in zip(logits, temperatures)])
            new = torch.stack([torch.multinomial(p, 1, generator=g) for p, g in zip(probs, generators)])
            drawn.append(new)
            logits = model(new, cache=cache)[:, -1]
    out = torch.cat([ids] + drawn, dim=1)
    return [tokenizer_text(tokenizer, row) for row in out]
