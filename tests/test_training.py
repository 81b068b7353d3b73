"""Deterministic training: the same call gives the same losses; the start of a run is the start of it."""
import numpy as np
import pytest

from helpers import worlds
from helpers.model import Config, Transformer
from helpers.training import cosine_lr, train


def small():
    world = worlds.cat_world()
    return Transformer(Config(vocab_size=20, d_model=6, n_heads=2, n_layers=1, d_ff=8, n_max=16)), \
        world.batch(world.train)


def test_stop_after_is_the_start_of_the_same_run_and_on_step_sees_gradients():
    model, batch = small()
    full = train(model, batch, steps=30, progress=False)
    seen = []
    start = train(model, batch, steps=30, progress=False, stop_after=10,
                  on_step=lambda step, m, loss: seen.append((step, m.E.grad is not None, loss)))
    assert start == full[:10]
    assert [s for s, _, _ in seen] == list(range(10)) and all(g for _, g, _ in seen)
    assert [loss for _, _, loss in seen] == start


def test_cosine_schedule_starts_at_lr_and_ends_near_zero():
    assert cosine_lr(0, 100, 0.03) == 0.03 and cosine_lr(100, 100, 0.03) < 1e-12


@pytest.mark.parametrize("kwargs, words", [
    (dict(seed=0.5), ["seed", "whole number", "0.5"]),
    (dict(seed="1"), ["seed", "'1'"]),
    (dict(steps=0), ["steps", "at least 1"]),
    (dict(lr=float("nan")), ["lr", "finite"]),
    (dict(lr=-1.0), ["lr", "> 0"]),
])
def test_bad_settings_are_refused_in_one_sentence(refused, kwargs, words):
    model, batch = small()
    refused(lambda: train(model, batch, progress=False, **kwargs), *words)


def test_a_numpy_integer_seed_is_a_whole_number():
    model, batch = small()
    assert train(model, batch, steps=2, seed=np.int64(0), progress=False) == \
        train(model, batch, steps=2, seed=0, progress=False)
