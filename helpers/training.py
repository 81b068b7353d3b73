"""Deterministic CPU training: seeded, one thread, full batch, Adam with cosine decay."""
import contextlib
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .states import Stop, course_modes, parts_of, put_back_parts, torch_modes_kept
from .errors import CourseInputError, check_number, check_positive_int, check_seed, check_switch, count, fail, items_of, length, \
    message_of, shown, tensor_refusal, type_name

MAX_STEPS = 10_000   # the most steps one training call takes (the course's runs take 300 to 4,000)
MAX_LR = 10.0   # the largest learning rate a run takes: Adam moves every weight by about lr a step (the course: <= 0.03)


def check_batch(batch, vocab_size):
    """A training batch (inputs (B, T), targets (B, T)): whole-number tensors or arrays of the same
    2-D shape, inputs in 0..vocab_size-1, targets the same or -100 (nothing to predict). Returns
    (inputs, targets) as LongTensors, else one sentence."""
    if not isinstance(batch, (tuple, list)) or length(batch) != 2:   # (a subclass's __len__ or __iter__ may lie or raise)
        fail(f"batch should be (inputs, targets), two (B, T) tables of token ids, but got {shown(batch)}")
    tables = []
    for name, table in zip(("inputs", "targets"), items_of(batch)):
        # a tensor whose numbers cannot be read as one table (nested: no one shape; sparse, meta) first
        refused = isinstance(table, torch.Tensor) and tensor_refusal(table, float8=True)
        whole = (isinstance(table, torch.Tensor) and not table.dtype.is_floating_point and not table.is_complex()
                 and table.dtype != torch.bool or isinstance(table, np.ndarray) and table.dtype.kind in "iu")
        if refused or not whole or table.ndim != 2:
            got = refused or (f"a {type(table).__name__} of {table.dtype} and shape {tuple(table.shape)}"
                              if isinstance(table, (torch.Tensor, np.ndarray)) else shown(table))
            fail(f"the batch's {name} should be a (B, T) tensor of token ids, but got {got}")
        tables.append(torch.as_tensor(table, dtype=torch.long))
    inputs, targets = tables
    if inputs.shape != targets.shape or inputs.numel() == 0:
        fail(f"the batch's inputs and targets should have the same (B, T) shape, not empty, but have "
             f"{tuple(inputs.shape)} and {tuple(targets.shape)}")
    if inputs.min() < 0 or inputs.max() >= vocab_size or ((targets < 0) & (targets != -100)).any() \
            or targets.max() >= vocab_size:
        fail(f"the batch should hold token ids 0..{vocab_size - 1} (targets also -100), but holds "
             f"{int(min(inputs.min(), targets.min()))}..{int(max(inputs.max(), targets.max()))}")
    if (targets == -100).all():   # a loss over nothing is NaN
        fail("the batch's targets should hold at least one token id to predict, but every one is -100 (ignored)")
    return inputs, targets


def check_seeds(seeds, most):
    """Seeds for as many runs: a list, tuple or range of 1 to ``most`` seeds, each a valid seed
    (``errors.check_seed``); return them as a list of ints."""
    if not isinstance(seeds, (list, tuple, range)) or not 1 <= length(seeds) <= most:
        fail(f"seeds should be a list of 1 to {most} seeds, but got {shown(seeds)}")
    return [check_seed(s, "each seed") for s in (seeds if isinstance(seeds, range) else items_of(seeds))]


def check_steps(steps, most=MAX_STEPS):
    """How many training steps: a whole number from 1 to ``most`` (a longer run would not end in a
    lesson's time); return it as int."""
    steps = check_positive_int(steps, "steps")
    if steps > most:
        fail(f"steps should be at most {most:,} (this course's limit), but got {count(steps)}")
    return steps


def check_work(work, most, what, advice):
    """Refuse, before anything runs, a call whose ``work`` passes ``most``, its budget of about a minute:
    ``work`` is counted from the sizes alone (multiply-adds and the like: the same count on any machine),
    ``what`` names what would run and ``advice`` says how to ask for less. A silent call (no progress
    shown) ends within about a minute; a longer one is refused up front, never left running."""
    if work > most:
        fail(f"{what} should need at most {most:.2g} units of work (this course's limit for one call: about a "
             f"minute, counted before it starts), but would need about {work:.2g}: {advice}")


def check_stop_after(stop_after, steps):
    """How many of a ``steps``-long schedule's steps to run: None (all of them) or a whole number from 1
    to ``steps`` (more would silently run only ``steps``); return it as int (``steps`` for None)."""
    if stop_after is None:
        return steps
    stop_after = check_positive_int(stop_after, "stop_after")
    if stop_after > steps:
        fail(f"stop_after should be None or a whole number of steps from 1 to steps={steps:,}, "
             f"but got {count(stop_after)}")
    return stop_after


def check_lr(lr, name="lr"):
    """A learning rate: a finite number above 0 and at most MAX_LR (Adam moves each weight by about lr a
    step, so a larger one only makes inf and NaN); return it as float."""
    lr = check_number(lr, name, low=0, low_open=True)
    if lr > MAX_LR:
        fail(f"{name} should be at most {MAX_LR:g} (Adam moves every weight by about lr a step, and the course trains "
             f"with 0.03 or less), but got {lr:g}")
    return lr


class Snapshot:
    """What a training run changes in a model and in torch, kept before the run so that a run that stops
    on an error can put it all back: the weights and buffers, the gradients, train/eval mode of every
    module, and the global torch random state. (Its values only: the model's structure, parameters and
    submodules swapped, deleted or added, is kept by ``structure_of``; its ``put_back`` uses both.)"""

    def __init__(self, model):
        self.model = model
        self.state = {name: t.detach().clone() for name, t in model.state_dict(keep_vars=True).items()
                      if isinstance(t, torch.Tensor)}
        self.grads = [(p, p.grad) for p in model.parameters()]
        self.modes = [(m, m.training) for m in model.modules()]
        self.rng = torch.get_rng_state()

    def restore(self):
        with torch.no_grad():
            for name, t in self.model.state_dict(keep_vars=True).items():
                if name in self.state and isinstance(t, torch.Tensor):
                    t.copy_(self.state[name])
        for p, grad in self.grads:
            p.grad = grad
        for m, mode in self.modes:
            m.training = mode
        torch.set_rng_state(self.rng)


def stopped(error, where):
    """The sentence for a run stopped by ``error`` at ``where`` (the model already restored)."""
    cause = message_of(error, 300) if isinstance(error, CourseInputError) \
        else f"{type_name(error)}: {message_of(error, 200)}"
    fail(f"every training step should run to its end, but {where} stopped with {cause.rstrip('.')}; "
         "the model was left as it was before the call")


@contextlib.contextmanager
def put_back_on_error(model, where, passed=()):
    """Run the block; if it stops on an error, put back what a training run (or a learner's loop) changes
    (``put_back``: the model's modules, parameters, buffers and submodules, swapped, deleted or added; their
    values, gradients and train/eval mode; torch's global random state) and say one sentence naming
    ``where`` and the error (``training.stopped``; also for a BaseException of the learner's code, such as
    SystemExit from ``exit()``); on an interrupt (the stop button) or a stop (states.Stop) put it back and pass
    it on. Errors of the types ``passed`` (the live run's TimeUp) pass untouched. torch's default dtype,
    deterministic and anomaly modes, which a loop may set for every later cell, are put back with the model."""
    structure, snapshot, put_back_modes = structure_of(model), Snapshot(model), torch_modes_kept()
    try:
        yield
    except passed:
        raise
    except (KeyboardInterrupt, Stop):   # an interrupt or a stop: the model put back, the interrupt passed on
        put_back_modes()
        put_back(model, structure, snapshot, where)
        raise
    except BaseException as error:   # noqa: BLE001 (the learner's callback, a model or a loop of the learner's)
        put_back_modes()
        put_back(model, structure, snapshot, where)
        if getattr(error, "put_back", False):   # an inner run has put the model back and said so already
            raise
        try:
            stopped(error, where)
        except CourseInputError as sentence:
            sentence.put_back = True
            raise


def structure_of(model):
    """([(owner, its class, its attributes)] for every module of ``model`` and its cfg, [(parameter, its
    requires_grad)]): the dicts among the attributes (parameters, buffers, submodules, hooks) copied, so that
    a parameter or submodule swapped, deleted or added later, or a parameter frozen, can be put back
    (``states.parts_of``, as ``exercises.model_kept`` keeps a model)."""
    return parts_of(model), [(p, p.requires_grad) for p in model.parameters()]


def put_back(model, structure, snapshot, where):
    """Put ``model`` back as ``structure_of`` and ``Snapshot`` found it: its modules' classes and
    attributes first (the original parameters and submodules back in place), then their values (a tensor
    resized or moved in place, ``p.data = ...``, gets its kept copy whole); else one sentence saying the
    model could not be put back (never a claim that it was)."""
    parts, flags = structure
    try:
        put_back_parts(parts)
        for p, requires_grad in flags:
            p.requires_grad_(requires_grad)
        with torch.no_grad():
            for name, t in model.state_dict(keep_vars=True).items():
                kept = snapshot.state.get(name)
                if kept is not None and (t.shape != kept.shape or t.dtype != kept.dtype or t.device != kept.device):
                    t.data = kept.clone()
        snapshot.restore()
    except Exception as error:   # noqa: BLE001 (a model the learner's code changed beyond what is kept)
        fail(f"the model should be put back as it was once {where} stopped, but putting it back failed with "
             f"{type_name(error)}: {message_of(error, 200).rstrip('.')}; build the model again before you go on")


def cosine_lr(step, steps, lr):
    """Learning rate at ``step`` (0 to steps): ``lr`` decayed to 0 along half a cosine over ``steps``."""
    steps = check_positive_int(steps, "steps")
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or not 0 <= step <= steps:
        fail(f"step should be a whole number from 0 to steps={steps:,}, but got {shown(step)}")
    return check_number(lr, "lr", low=0) * 0.5 * (1.0 + math.cos(math.pi * step / steps))


class Adam:
    """Adam (Kingma and Ba, 2015) written out: torch.optim.Adam's update with its default betas and
    eps and no weight decay, amsgrad or maximize; the same operations in the same order, so the
    same floats as torch's optimizer on the CPU (its foreach and single-tensor paths alike).

    For each parameter w with gradient g, at its step t = 1, 2, ...:
        m = β1·m + (1 − β1)·g          v = β2·v + (1 − β2)·g²
        w = w − lr/(1 − β1^t) · m / (√v / √(1 − β2^t) + ε)
    A parameter without a gradient on a step is skipped and keeps its own t. ``lr`` may be
    changed between steps (``train`` sets it from the schedule). (torch's optimizers import
    torch._dynamo on first use, about 1.6 s; this one imports nothing.)
    """

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.params = list(params) if hasattr(params, "__iter__") else []
        if not self.params or not all(isinstance(w, torch.Tensor) for w in self.params):
            fail(f"params should be the tensors to train (e.g. model.parameters()), but got {str(params)[:60]}")
        self.lr = check_number(lr, "lr", low=0, low_open=True)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            fail(f"betas should be two numbers (beta1, beta2), but got {betas!r}")
        self.beta1, self.beta2 = (check_number(b, name, low=0, high=1) for b, name in zip(betas, ("beta1", "beta2")))
        if self.beta1 == 1 or self.beta2 == 1:
            fail(f"betas should each be below 1, but got {betas!r}")
        self.eps = check_number(eps, "eps", low=0)
        self.state = {}   # id(w) -> [t, m, v]

    def zero_grad(self):
        for w in self.params:
            w.grad = None

    @torch.no_grad()
    def step(self):
        """One update of every parameter that has a gradient. Parameters at the same t are
        updated together, each operation applied to all of them in one call (torch's
        ``_foreach`` operations, which on the CPU run the same per-tensor operation on each:
        the same floats, a fraction of the Python calls)."""
        groups = {}   # t -> ([w], [g], [m], [v]) of the parameters at their step t
        for w in self.params:
            if w.grad is None:
                continue
            state = self.state.get(id(w))
            if state is None:   # first step of w: its t, m and v
                state = self.state[id(w)] = [0, torch.zeros_like(w), torch.zeros_like(w)]
            state[0] += 1
            ws, gs, ms, vs = groups.setdefault(state[0], ([], [], [], []))
            ws.append(w)
            gs.append(w.grad)
            ms.append(state[1])
            vs.append(state[2])
        # torch._foreach_* are the operations torch.optim.Adam's own foreach path calls
        for t, (ws, gs, ms, vs) in groups.items():
            torch._foreach_lerp_(ms, gs, 1 - self.beta1)            # m = lerp(m, g, 1 − β1) = β1·m + (1 − β1)·g
            torch._foreach_mul_(vs, self.beta2)                     # v = β2·v + (1 − β2)·g²
            torch._foreach_addcmul_(vs, gs, gs, value=1 - self.beta2)
            denom = torch._foreach_sqrt(vs)                         # √v / √(1 − β2^t) + ε
            torch._foreach_div_(denom, (1 - self.beta2 ** t) ** 0.5)
            torch._foreach_add_(denom, self.eps)
            torch._foreach_addcdiv_(ws, ms, denom, value=-(self.lr / (1 - self.beta1 ** t)))   # w −= lr/(1 − β1^t)·m/denom


@course_modes(name="train")   # (under no_grad too: it takes gradients)
def train(model, batches, steps=1000, lr=3e-2, seed=0, progress=True, on_step=None, stop_after=None,
          **switches):
    """Train ``model`` in place and return the loss of every step.

    batches: (inputs (B, T), targets (B, T)) used every step (full batch), or a
    function step -> (inputs, targets) for data drawn afresh each step. Targets of
    -100 are ignored. switches go to the model (e.g. causal=False).
    on_step(step, model, loss): called after each backward pass, before the update
    (the gradients are there to measure). stop_after: run only the first steps of
    the ``steps``-long schedule (None, or 1 to steps).
    The model's weights are redrawn from ``seed`` first, so the same call gives
    the same model, bit for bit, on the same machine.
    """
    from .model import SWITCHES, check_model

    check_model(model)
    steps, seed = check_steps(steps), check_seed(seed)
    lr = check_lr(lr)
    switches = model.check_switches(switches, tuple(name for name in SWITCHES if name not in ("trace", "cache")))
    vocab_size = model.cfg.vocab_size
    if on_step is not None and not callable(on_step):
        fail(f"on_step should be None or a function on_step(step, model, loss), but got {shown(on_step)}")
    stop_after = check_stop_after(stop_after, steps)
    progress = check_switch(progress, "progress")
    structure, snapshot = structure_of(model), Snapshot(model)   # put back (``put_back``) if the run stops on an error
    step = 0
    try:
        fixed = check_batch(batches(0) if callable(batches) else batches, vocab_size)   # the first batch, before any update
    except BaseException as error:   # noqa: BLE001 (the batch refused, the learner's batches raising, an interrupt)
        put_back(model, structure, snapshot, "batches(0)")
        if isinstance(error, CourseInputError) or not isinstance(error, Exception):
            raise   # a sentence already (the batch refused), or an interrupt passed on
        stopped(error, "batches(0)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.reset_parameters(seed)
        torch.manual_seed(seed)
        opt = Adam(model.parameters(), lr=lr)
        losses = []
        for step in tqdm(range(stop_after), disable=not progress, desc="training", mininterval=0.5):
            inputs, targets = check_batch(batches(step), vocab_size) if callable(batches) else fixed
            opt.lr = cosine_lr(step, steps, lr)
            logits = model(inputs, **switches)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                   ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            if on_step is not None:
                on_step(step, model, loss.item())
            opt.step()
            losses.append(loss.item())
        return losses
    except Exception as error:   # noqa: BLE001 (a batch refused, the learner's batches or on_step raising)
        put_back(model, structure, snapshot, f"step {step}")
        stopped(error, f"step {step}")
    except BaseException:   # an interrupt (the stop button): the model put back, the interrupt passed on
        put_back(model, structure, snapshot, f"step {step}")
        raise
    finally:
        torch.set_num_threads(threads)


def timed(fn, *args, **kwargs):
    """Run fn and return (result, seconds)."""
    if not callable(fn):
        fail(f"fn should be a function to run, but got {shown(fn)}")
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0
