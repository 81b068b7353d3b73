"""The course's training loop for a GPT on real text (chapter 12), written to be read top to bottom.

* ``learning_rate(step, lr, warmup, steps, min_lr)``: a linear warm-up, then half a cosine down to
  ``min_lr``.
* ``estimate_loss(model, ids, context, batches, batch, seed)``: the mean loss (cross-entropy in nats
  per token) on a fixed, seeded set of windows of ``ids``: the same subset at every evaluation.
* ``train(model, train_ids, val_ids, ...)``: AdamW (weight decay on the matrices only, as nanoGPT),
  gradient clipping, the schedule above, the training and validation loss every ``eval_every``
  steps. Returns the log: one dict per evaluation.
"""
import contextlib
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import check_bytes, count, check_number, check_positive_int, check_seed, fail, gib, next_seed, shown, type_name
from ..model import Attention, check_finite_weights, eval_mode
from ..training import check_lr, check_stop_after, put_back_on_error
from .corpus import check_ids, windows
from ..states import course_modes

MAX_STEPS = 100_000     # the most updates one call trains (the shipped model took 5,400; a live run about 1,000)
MAX_EVAL_BATCHES = 1_000   # the most batches one estimate of the loss draws (the course's evaluations take 20)
MAX_VOCAB = 1_000_000   # a larger vocabulary is a mistake here (its embedding alone would not fit in memory)
BETAS = (0.9, 0.99)     # AdamW's betas; β2 = 0.99 as nanoGPT's Shakespeare example (few tokens per step)


def learning_rate(step, lr, warmup, steps, min_lr):
    """The learning rate at ``step`` (counted from 0) of a ``steps``-long run.

    Steps 0 .. warmup-1 climb in a straight line towards ``lr`` (step 0 already takes lr/warmup);
    from ``warmup`` the rate falls along half a cosine, from ``lr`` at step ``warmup`` to ``min_lr``
    at step ``steps`` (and stays there after).
    """
    step, steps = check_positive_int(step, "step", minimum=0), check_steps(steps)
    warmup = check_positive_int(warmup, "warmup", minimum=0)
    lr = check_lr(lr)
    min_lr = check_number(min_lr, "min_lr", low=0, high=lr)
    if warmup >= steps:
        fail(f"the warm-up should end before the run does, but got warmup={count(warmup)} and steps={count(steps)}")
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= steps:       # the end of the cosine, and after it: any step count, however large, is min_lr
        return min_lr
    progress = (step - warmup) / (steps - warmup)                 # 0 at the peak, below 1 before the end
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def check_steps(steps):
    """How many updates a run takes: a whole number from 1 to MAX_STEPS (each one is a pass and a step)."""
    steps = check_positive_int(steps, "steps")
    if steps > MAX_STEPS:
        fail(f"steps should be at most {MAX_STEPS:,} (this course's limit for one run), but got {count(steps)}")
    return steps


def check_batches(batches, name="batches"):
    """How many batches an estimate of the loss draws: a whole number from 1 to MAX_EVAL_BATCHES (each is a pass)."""
    batches = check_positive_int(batches, name)
    if batches > MAX_EVAL_BATCHES:
        fail(f"{name} should be at most {MAX_EVAL_BATCHES:,} (each is a pass), but got {count(batches)}")
    return batches


def check_settings(steps, batch, context, lr, warmup, min_lr, weight_decay, clip, eval_every, eval_batches, seed,
                   time_limit=None):
    """``train``'s settings, each on its own in this order (before any work; how they fit the model
    and the texts is checked after): returned as checked, in the same order."""
    steps, batch = check_steps(steps), check_positive_int(batch, "batch")
    context = check_positive_int(context, "context")
    warmup = check_positive_int(warmup, "warmup", minimum=0)
    lr = check_lr(lr)
    min_lr = check_number(min_lr, "min_lr", low=0, high=lr)
    weight_decay = check_number(weight_decay, "weight_decay", low=0)
    clip = check_number(clip, "clip", low=0, low_open=True)
    eval_every, eval_batches = check_positive_int(eval_every, "eval_every"), check_batches(eval_batches, "eval_batches")
    seed = check_seed(seed)
    if time_limit is not None:
        time_limit = check_number(time_limit, "time_limit", low=0, low_open=True)
    return steps, batch, context, lr, warmup, min_lr, weight_decay, clip, eval_every, eval_batches, seed, time_limit


def loss_on(model, x, y):
    """The mean cross-entropy (nats per token) of the model's next-token logits on windows x against y."""
    logits = model(x)                                             # (B, T, V)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def estimate_loss(model, ids, context, batches=20, batch=32, seed=0):
    """The mean loss of ``model`` on ``batches`` x ``batch`` windows of ``context`` tokens of ``ids``,
    drawn with ``seed``: the same windows every call, a stated subset of the text (with the default
    20 x 32 windows of 256 characters, 163,840 predictions). Runs in eval mode (no dropout) and puts
    the model back in the mode it was in. A model whose weights hold NaN or inf is refused (its loss would be
    NaN); the run's own evaluations are ``mean_loss``."""
    check_model(model, "estimate_loss")
    ids = check_ids(ids)
    context = check_context(model, context)
    batches, batch, seed = check_batches(batches), check_positive_int(batch, "batch"), check_seed(seed)
    check_vocabulary(model, ids)
    check_batch(model, batch, context)
    check_finite_weights(model)
    return mean_loss(model, ids, context, batches, batch, seed)


@torch.no_grad()
def mean_loss(model, ids, context, batches, batch, seed):
    """``estimate_loss``'s passes, its arguments checked. ``train`` evaluates with it as it is: a run that
    diverged records its NaN loss in the log rather than stopping there."""
    generator = torch.Generator().manual_seed(seed)
    with eval_mode(model):
        losses = [float(loss_on(model, *windows(ids, batch, context, generator))) for _ in range(batches)]
    return sum(losses) / len(losses)


@course_modes(name="train")   # (under no_grad too: it takes gradients)
def train(model, train_ids, val_ids, steps=5000, batch=64, context=256, lr=1e-3, warmup=100, min_lr=1e-4,
          weight_decay=0.1, clip=1.0, eval_every=250, eval_batches=20, seed=0, callback=None, time_limit=None,
          stop_after=None):
    """Train ``model`` in place on random windows of ``train_ids`` and return the log (at most
    MAX_STEPS = 100,000 steps).

    Each step: draw ``batch`` windows of ``context`` tokens (seeded by ``seed``), compute the loss,
    backpropagate, clip the gradients' joint norm to ``clip``, set the learning rate from
    ``learning_rate`` and take one AdamW step (weight decay on matrices and embeddings only, none on
    biases and norm scales). Every ``eval_every`` steps, and after the last, ``estimate_loss`` on
    both texts (``eval_batches`` x ``batch`` fixed windows each, seeded apart from training).

    Returns the log: a list of dicts, one per evaluation, with step (updates done so far), lr (of
    the last update), train_loss, val_loss, loss (the mean training-batch loss since the last
    evaluation; not at step 0), seconds (wall time so far), tokens_per_second (training tokens over
    the seconds spent on training steps, evaluations left out). ``callback(record)``, if given, is
    called after every update with dict(step, lr, loss, seconds, tokens_per_second) and with every
    evaluation's record (the one that has val_loss), e.g. to draw a live curve and a progress bar.
    ``time_limit`` (seconds): stop once that much wall time has passed, evaluate, and mark that
    last record ``stopped_early``. ``stop_after``: run only the first updates of the ``steps``-long
    schedule (the start of the same run, e.g. to check a log). The model is left in eval mode.
    A run stopped by an error (a callback that raises, say) or an interrupt puts the model's weights,
    its train/eval mode and torch's global random state back as they were before the call.
    """
    # check everything first, each argument on its own in the order given, then how they fit
    # together: a refused call changes nothing, and names the argument the learner gave
    check_model(model, "train")
    train_ids, val_ids = check_ids(train_ids, "train_ids"), check_ids(val_ids, "val_ids")
    steps, batch, _, lr, warmup, min_lr, weight_decay, clip, eval_every, eval_batches, seed, time_limit = \
        check_settings(steps, batch, context, lr, warmup, min_lr, weight_decay, clip, eval_every, eval_batches, seed,
                       time_limit)
    if callback is not None and not callable(callback):
        fail(f"callback should be a function of one record (a dict), but got {type(callback).__name__}")
    last = check_stop_after(stop_after, steps)
    check_vocabulary(model, train_ids, val_ids)
    context = check_context(model, context, len(train_ids), len(val_ids))
    learning_rate(0, lr, warmup, steps, min_lr)                   # refuses a warm-up as long as the run
    check_batch(model, batch, context, grad=True)
    check_trainable(model)

    with put_back_on_error(model, "the run"):   # a run stopped by an error (a callback's, say) puts it all back
        return run(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, weight_decay, clip,
                   eval_every, eval_batches, seed, callback, time_limit, last)


def check_trainable(model):
    """Refuse up front a model that backward cannot train: every parameter must require grad (a model
    left frozen by an experiment, ``model.requires_grad_(False)``, has no gradient to step with)."""
    frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
    if frozen:
        fail(f"every parameter of the model should require grad to be trained, but {frozen[0]} does not"
             f"{f' (nor {len(frozen) - 1} more)' if len(frozen) > 1 else ''}: call model.requires_grad_(True) first")
    return model


def run(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, weight_decay, clip, eval_every,
        eval_batches, seed, callback, time_limit, last):
    """``train``'s run, its arguments checked."""
    # AdamW; matrices and embeddings decay towards 0, biases and LayerNorm scales do not
    matrices = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    optimizer = torch.optim.AdamW([dict(params=matrices, weight_decay=weight_decay),
                                   dict(params=vectors, weight_decay=0.0)], lr=lr, betas=BETAS)
    torch.manual_seed(seed)                                       # dropout's draws
    generator = torch.Generator().manual_seed(seed)               # the training windows
    evaluate = dict(context=context, batches=eval_batches, batch=batch, seed=next_seed(seed))   # apart from training

    with fused_attention(model):  # torch's fused attention in the unwatched passes: the same sums, faster
        log, losses = [], []
        start = time.perf_counter()
        train_seconds, tokens = 0.0, 0
        model.train()
        for step in range(last + 1):
            out_of_time = time_limit is not None and time.perf_counter() - start > time_limit
            if step % eval_every == 0 or step == last or out_of_time:   # the model after `step` updates
                record = dict(step=step, lr=learning_rate(max(step - 1, 0), lr, warmup, steps, min_lr),
                              train_loss=mean_loss(model, train_ids, **evaluate),
                              val_loss=mean_loss(model, val_ids, **evaluate))
                if losses:
                    record["loss"] = sum(losses) / len(losses)
                losses = []
                record.update(seconds=time.perf_counter() - start, tokens_per_second=tokens / max(train_seconds, 1e-9))
                if out_of_time:
                    record["stopped_early"] = True
                log.append(record)
                if callback is not None:
                    callback(record)
            if step == last or out_of_time:
                break

            tick = time.perf_counter()
            step_lr = learning_rate(step, lr, warmup, steps, min_lr)
            x, y = windows(train_ids, batch, context, generator)     # (batch, context) each
            loss = loss_on(model, x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for group in optimizer.param_groups:
                group["lr"] = step_lr
            optimizer.step()
            train_seconds += time.perf_counter() - tick
            tokens += batch * context
            losses.append(loss.item())
            if callback is not None:
                callback(dict(step=step + 1, lr=step_lr, loss=losses[-1], seconds=time.perf_counter() - start,
                              tokens_per_second=tokens / train_seconds))
    model.eval()
    return log


CFG_SIZES = ("vocab_size", "d_model", "n_heads", "n_layers", "n_max")   # what a model's .cfg must give, each >= 1


def check_model(model, what):
    """A model with a .cfg (a helpers.model.Transformer, or a GPT that sets one) giving its sizes as whole
    numbers: d_model, n_heads, n_layers, n_max (each at least 1), d_ff (0 for none) and vocab_size (its
    range is check_vocabulary's to say)."""
    if not isinstance(model, nn.Module) or not hasattr(model, "cfg"):
        fail(f"{what} expected a model with a .cfg (a helpers.model.Transformer), but got {type_name(model)}")
    for name in CFG_SIZES + ("d_ff",):
        value = getattr(model.cfg, name, None)
        if isinstance(value, bool) or not isinstance(value, int) or value < (name not in ("d_ff", "vocab_size")):
            fail(f"{what} expected a model whose .cfg gives {name} as a whole number (as helpers.model.Config does), "
                 f"but its .cfg, a {type_name(model.cfg)}, gives {shown(value)}")
    return model


def check_batch(model, batch, context, grad=False):
    """Refuse up front a batch of windows whose pass would need more than helpers.errors.MAX_BYTES:
    an estimate from the sizes alone, in float32: the logits (3 copies with the loss), and per layer
    the scores, masked scores and weights (heads x context x context) and 12 d_model + 3 d_ff
    activations per token; one layer at a time without gradients, every layer kept with them.
    With ``grad`` (a training step) the model's copies count too (``training_bytes``), all before the first."""
    cfg = model.cfg
    per_layer = 3 * cfg.n_heads * context + 12 * cfg.d_model + 3 * cfg.d_ff
    need = 4 * batch * context * (3 * cfg.vocab_size + per_layer * (cfg.n_layers if grad else 1))
    batch_text = f"a batch of {count(batch)} windows of {count(context)} tokens"
    if not grad:
        check_bytes(need, batch_text, "use a smaller batch")
        return
    check_bytes(need + training_bytes(model), f"training on {batch_text}, with the model's {gib(weight_bytes(model), digits=2)} "
                "of weights held about five times (the weights, their gradients, AdamW's two moments and a copy kept to "
                "put them back on an error)", "use a smaller model (fewer or narrower layers) or a smaller batch")


def tensor_bytes(tensors):
    """The bytes the tensors hold (an iterable of them)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def weight_bytes(model):
    """The bytes of one whole copy of ``model``'s parameters (a weight two layers share counted once)."""
    return tensor_bytes(model.parameters())


def training_bytes(model):
    """What a training run (``train``, gpt.train_loop) holds of ``model`` at once, in bytes: its weights,
    their gradients and AdamW's two moments (four copies of the parameters), and put_back_on_error's
    Snapshot (a clone of every tensor of the state dict, and the gradients left by an earlier run, which
    it keeps alive)."""
    state = [t for t in model.state_dict(keep_vars=True).values() if isinstance(t, torch.Tensor)]
    left = [p.grad for p in model.parameters() if p.grad is not None]
    return 4 * weight_bytes(model) + tensor_bytes(state) + tensor_bytes(left)


def check_copies(model, copies, what, advice="use a smaller model (fewer or narrower layers)"):
    """Refuse up front (helpers.errors.check_bytes, MAX_BYTES) a call that would hold ``copies`` whole copies of
    ``model``'s parameters at once, the model's own counted among them (a fresh model beside it: 2; a deepcopy
    and its gradients: 3). ``what`` names the call, e.g. 'small_start' (one sentence, with the need and
    the limit); call it before the first copy is made."""
    size = weight_bytes(model)
    check_bytes(copies * size, f"{what}, which holds the model's {gib(size, digits=2)} of weights {copies} times", advice)


def check_vocabulary(model, *texts):
    """The model's vocabulary (2 .. MAX_VOCAB tokens) holds every id of ``texts``."""
    V = model.cfg.vocab_size
    if not 2 <= V <= MAX_VOCAB:
        fail(f"the model should have a vocabulary of 2 to {MAX_VOCAB:,} tokens, but this one has vocab_size={count(V)}")
    for ids in texts:
        if int(ids.max()) >= V:
            fail(f"the text's ids should lie in the model's vocabulary, 0..{count(V - 1)}, but it holds id "
                 f"{int(ids.max())} (was it encoded with another tokenizer?)")


def check_context(model, context, *lengths):
    """A context the model can take (at most its n_max) and each text can fill (shorter than it)."""
    context = check_positive_int(context, "context")
    if context > model.cfg.n_max:
        fail(f"context should be at most the model's n_max={count(model.cfg.n_max)} tokens, "
             f"but got context={count(context)}")
    for length in lengths:
        if context >= length:
            fail(f"the text should be at least {count(context + 1)} tokens long for context={count(context)} (one window and "
                 f"its next token), but got {count(length)}")
    return context


@contextlib.contextmanager
def fused_attention(model):
    """Within the block, each attention layer of ``model`` (helpers.model.Attention) computes its
    unwatched passes with torch's fused attention (``Attention.fused``); traced passes are as always."""
    layers = [m for m in model.modules() if isinstance(m, Attention) and not m.fused]
    for layer in layers:
        layer.fused = True
    try:
        yield
    finally:
        for layer in layers:
            del layer.fused   # back to the class's default
