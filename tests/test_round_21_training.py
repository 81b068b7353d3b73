"""Round 21, fixer G (issue 31): training.train's put-back of a stopped run.

A run stopped by an error put back the weights' values only: an on_step (or a batches function) that swapped a
parameter for one of another shape got a raw RuntimeError and the model stayed changed; one that deleted a
submodule, added one, changed a module's class or froze a parameter got "the model was left as it was" though
it was not. train now puts the model's structure back too (training.structure_of and put_back).
"""
import copy

import pytest
import torch
from torch import nn

from helpers import worlds
from helpers.model import Config, Transformer
from helpers.training import train


def small():
    world = worlds.cat_world()
    return Transformer(Config(vocab_size=20, d_model=6, n_heads=2, n_layers=1, d_ff=8, n_max=16)), \
        world.batch(world.train)


def same_model(model, copy_of_it):
    """model is as copy_of_it (a deep copy taken before the run): the same modules of the same classes, the
    same parameters and buffers (names, shapes, values, requires_grad), the same attributes."""
    if [(n, type(m)) for n, m in model.named_modules()] != [(n, type(m)) for n, m in copy_of_it.named_modules()]:
        return False
    if [(n, p.requires_grad) for n, p in model.named_parameters()] != \
            [(n, p.requires_grad) for n, p in copy_of_it.named_parameters()]:
        return False
    after, before = model.state_dict(), copy_of_it.state_dict()
    return set(after) == set(before) and set(vars(model)) == set(vars(copy_of_it)) and \
        all(after[k].shape == before[k].shape and torch.equal(after[k], before[k]) for k in before)


def swap_embedding(model):
    model.E = nn.Parameter(torch.randn(21, 6))   # "one more token": another shape


def delete_final_norm(model):
    del model.final_ln


def add_a_module(model):
    model.extra = nn.Linear(3, 3)


def change_a_class(model):
    model.final_ln.__class__ = nn.Identity


def freeze_a_parameter(model):
    model.E.requires_grad_(False)


CHANGES = [swap_embedding, delete_final_norm, add_a_module, change_a_class, freeze_a_parameter]


@pytest.mark.parametrize("change", CHANGES)
def test_an_on_step_that_changes_the_model_and_fails_leaves_it_as_it_was(change, refused):
    model, batch = small()
    kept, E = copy.deepcopy(model), model.E

    def on_step(step, m, loss):
        if step == 2:
            change(m)
            raise RuntimeError("my callback")

    refused(lambda: train(model, batch, steps=10, progress=False, on_step=on_step),
            "step 2 stopped with RuntimeError", "my callback", "left as it was")
    assert same_model(model, kept) and model.E is E


@pytest.mark.parametrize("change", CHANGES)
def test_a_batches_function_that_changes_the_model_and_fails_leaves_it_as_it_was(change, refused):
    model, batch = small()
    kept = copy.deepcopy(model)

    def batches(step):
        if step == 3:
            change(model)
            raise ValueError("my batches")
        return batch

    refused(lambda: train(model, batches, steps=10, progress=False), "step 3 stopped with ValueError", "my batches",
            "left as it was")
    assert same_model(model, kept)


@pytest.mark.parametrize("change", CHANGES)
def test_a_first_batch_that_changes_the_model_and_fails_leaves_it_as_it_was(change, refused):
    model, batch = small()
    kept = copy.deepcopy(model)

    def batches(step):
        change(model)
        raise ValueError("my first batch")

    refused(lambda: train(model, batches, steps=10, progress=False), "batches(0) stopped with ValueError",
            "my first batch", "left as it was")
    assert same_model(model, kept)


def test_after_a_put_back_a_right_run_still_trains_as_a_fresh_model_does():
    model, batch = small()
    fresh = copy.deepcopy(model)

    def on_step(step, m, loss):
        swap_embedding(m)
        raise RuntimeError("my callback")

    with pytest.raises(Exception):
        train(model, batch, steps=10, progress=False, on_step=on_step)
    losses = train(model, batch, steps=30, progress=False)
    assert losses == train(fresh, batch, steps=30, progress=False)
    assert losses[-1] < losses[0] and same_model(model, fresh)


@pytest.mark.parametrize("where", ["batches(0)", "on_step"])
def test_an_interrupt_after_a_change_puts_the_model_back_and_passes_on(where):
    model, batch = small()
    kept = copy.deepcopy(model)

    def interrupted(*args):
        swap_embedding(model)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        if where == "batches(0)":
            train(model, interrupted, steps=10, progress=False)
        else:
            train(model, batch, steps=10, progress=False, on_step=interrupted)
    assert same_model(model, kept)
