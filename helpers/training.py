"""Deterministic CPU training: seeded, one thread, full batch, Adam with cosine decay."""
import math
import time

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .errors import check_number, check_positive_int, check_seed


def cosine_lr(step, steps, lr):
    """Learning rate at ``step``: ``lr`` decayed to 0 along half a cosine over ``steps``."""
    return lr * 0.5 * (1.0 + math.cos(math.pi * step / steps))


def train(model, batches, steps=1000, lr=3e-2, seed=0, progress=True, on_step=None, stop_after=None,
          **switches):
    """Train ``model`` in place and return the loss of every step.

    batches: (inputs (B, T), targets (B, T)) used every step (full batch), or a
    function step -> (inputs, targets) for data drawn afresh each step. Targets of
    -100 are ignored. switches go to the model (e.g. causal=False).
    on_step(step, model, loss): called after each backward pass, before the update
    (the gradients are there to measure). stop_after: run only the first steps of
    the ``steps``-long schedule.
    The model's weights are redrawn from ``seed`` first, so the same call gives
    the same model, bit for bit, on the same machine.
    """
    steps, seed = check_positive_int(steps, "steps"), check_seed(seed)
    lr = check_number(lr, "lr", low=0, low_open=True)
    stop_after = steps if stop_after is None else check_positive_int(stop_after, "stop_after")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.reset_parameters(seed)
        torch.manual_seed(seed)
        opt = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
        losses = []
        for step in tqdm(range(min(steps, stop_after)), disable=not progress, desc="training", mininterval=0.5):
            inputs, targets = batches(step) if callable(batches) else batches
            for group in opt.param_groups:
                group["lr"] = cosine_lr(step, steps, lr)
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
    finally:
        torch.set_num_threads(threads)


def timed(fn, *args, **kwargs):
    """Run fn and return (result, seconds)."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0
