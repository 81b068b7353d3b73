"""A forward pass leaves no reference cycles behind: what it recorded (a trace's intermediates, a
pass with ``replace``) is freed when the caller lets go of it, not when Python's cycle collector next
comes by. (At stop 47 the pass's ``keep`` held itself through its own attributes, and with it every
intermediate of the pass: chapter 12's repeat test kept about 190 MB alive and its peak passed 1 GB.)"""
import gc
import threading

import pytest
import torch

from helpers.model import Config, KVCache, Transformer


@pytest.fixture
def no_cycles():
    """Run ``call`` once to warm up, then again with the collector off; return the cyclic garbage it left."""
    def garbage(call):
        call()
        for thread in threading.enumerate():   # an earlier test's watchdog (states.Stoppable) ending meanwhile
            if thread.name == "stops a learner's code":   # would leave its garbage in this window
                thread.join(30)
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            call()
            gc.collect()
            return list(gc.garbage)
        finally:
            gc.garbage.clear()
            gc.set_debug(0)
            gc.enable()
    return garbage


@pytest.mark.parametrize("kind", ["plain", "trace", "replace", "replace_trace", "cache"])
def test_a_forward_pass_leaves_no_cyclic_garbage(no_cycles, kind):
    torch.manual_seed(0)
    model = Transformer(Config(vocab_size=16, d_model=32, n_heads=2, n_layers=2, d_ff=64, n_max=16))
    ids = torch.arange(8)
    calls = {
        "plain": lambda: model(ids),
        "trace": lambda: model(ids, trace=True),
        "replace": lambda: model(ids, replace={"L0.scores": lambda s: s * 1.0}),
        "replace_trace": lambda: model(ids, trace=True, replace={"L1.head_out": lambda h: h + 0}),
        "cache": lambda: model(ids[:4], cache=KVCache(2)),
    }
    left = no_cycles(calls[kind])
    assert left == [], f"{len(left)} objects left in cycles, such as {sorted({type(o).__name__ for o in left})[:5]}"
