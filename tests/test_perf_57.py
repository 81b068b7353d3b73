"""Speedups of the shared machinery (performance round 57), each checked to give what it replaced.

1. ``states.digests``: the SHA-256 digests of a model's tensors, taken on several threads when they are
   large (model_kept's before and after on the real model): the very values ``states.digest`` gives, a
   changed weight told apart, no thread left, no trace function of threading's run in its threads.
"""
import sys
import threading

import pytest
import torch

from helpers import exercises, states


def _tensors():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(64, 48, generator=g)
    return {"plain": torch.randn(300, 70, generator=g), "transposed": torch.randn(48, 64, generator=g).t(), "sliced": base[:, ::3],
            "bf16": torch.randn(33, 5, generator=g).to(torch.bfloat16), "ints": torch.arange(1000),
            "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 4), "param": torch.nn.Parameter(torch.ones(7))}


@pytest.mark.parametrize("parallel_bytes", [0, 2**60])   # on threads, and in this thread alone
def test_digests_are_the_digests_of_each_tensor(monkeypatch, parallel_bytes):
    monkeypatch.setattr(states, "PARALLEL_BYTES", parallel_bytes)
    tensors = _tensors()
    for strong in (True, False):
        assert states.digests(tensors, strong=strong) == {name: states.digest(t, strong=strong) for name, t in tensors.items()}
    assert list(states.digests(tensors, strong=True)) == list(tensors)


def test_a_changed_weight_changes_its_digest_and_only_its_own(monkeypatch):
    monkeypatch.setattr(states, "PARALLEL_BYTES", 0)
    tensors = _tensors()
    before = states.digests(tensors, strong=True)
    tensors["plain"].data[123 // 70, 123 % 70] += 1e-3   # (.data: no version counter moves)
    tensors["transposed"].numpy()[0, 0] = float(tensors["transposed"][0, 0]) + 1.0   # through a NumPy view
    after = states.digests(tensors, strong=True)
    assert [name for name in tensors if after[name] != before[name]] == ["plain", "transposed"]


def test_digests_leave_no_thread_and_run_no_trace_function_of_threading(monkeypatch):
    monkeypatch.setattr(states, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(states, "_hashing_threads", lambda: 4)
    traced = []
    threading.settrace(lambda *args: traced.append(args))
    try:
        for _ in range(5):
            states.digests(_tensors(), strong=True)
    finally:
        threading.settrace(None)
    assert traced == []
    before = set(sys._current_frames())
    states.digests(_tensors(), strong=True)
    import time
    deadline = time.monotonic() + 5
    while set(sys._current_frames()) - before and time.monotonic() < deadline:   # (a thread's state ends just after it)
        time.sleep(0.01)
    assert set(sys._current_frames()) <= before


def test_model_kept_with_pristine_on_threads_puts_back_a_change_and_keeps_one_made_between_checks(monkeypatch):
    monkeypatch.setattr(states, "PARALLEL_BYTES", 0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    original = {name: t.detach().clone() for name, t in model.state_dict().items()}
    with exercises.model_kept(model, pristine=lambda: original):
        with torch.no_grad():
            model[1].weight[2, 3] += 1.0
            model[0].bias.zero_()
    assert all(torch.equal(t, original[name]) for name, t in model.state_dict().items())
    model[0].weight.data[0, 0] += 1.0   # the learner's own cell between two checks: stays
    mine = model[0].weight.detach().clone()
    with exercises.model_kept(model, pristine=lambda: original):
        pass
    assert torch.equal(model[0].weight, mine)


# 2. ``shipped.whole_text_loss``: its batches' passes shared between two threads, the same number to the last bit.

def test_whole_text_loss_on_two_threads_is_the_one_thread_value(monkeypatch):
    from helpers.gpt import shipped
    from helpers.model import Config, Transformer

    torch.manual_seed(0)
    model = Transformer(Config(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, n_max=32, positions="rotary"))
    ids = torch.randint(0, 50, (32 * 21 + 5,), generator=torch.Generator().manual_seed(1))
    model.train()
    two = shipped.whole_text_loss(model, ids, context=32, batch=4)   # 21 windows: 6 batches, the last one shorter
    assert model.training   # (the mode put back)
    monkeypatch.setattr(shipped, "_in_two_threads", lambda function, items: [function(item) for item in items])
    assert shipped.whole_text_loss(model, ids, context=32, batch=4) == two


def test_in_two_threads_gives_each_result_in_order_and_raises_an_error_of_the_other_thread():
    from helpers.gpt import shipped

    seen = set()

    def square(i):
        seen.add(threading.get_ident())
        if i == 7:
            raise ValueError("seven")
        return i * i
    before = threading.active_count()
    assert shipped._in_two_threads(square, range(7)) == [i * i for i in range(7)]
    with pytest.raises(ValueError, match="seven"):
        shipped._in_two_threads(square, range(40))
    assert threading.active_count() == before   # (the other thread has ended)


def test_whole_text_loss_shares_only_a_pass_of_the_courses_code_alone(monkeypatch):
    from helpers.gpt import shipped
    from helpers.model import Config, Transformer

    model = Transformer(Config(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32, n_max=16))
    assert shipped._course_code_only(model), (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack())
    hook = model.blocks[0].register_forward_hook(lambda *args: None)   # a learner's hook: one thread
    assert not shipped._course_code_only(model)
    hook.remove()

    class Mine(Transformer):
        pass
    assert not shipped._course_code_only(Mine(model.cfg))
    from torch.overrides import TorchFunctionMode

    class Passing(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    with Passing():   # a mode is the calling thread's own
        assert not shipped._course_code_only(model)
    shared = []
    monkeypatch.setattr(shipped, "_in_two_threads", lambda function, items: shared.append(1) or list(map(function, items)))
    ids = torch.randint(0, 20, (16 * 9 + 1,), generator=torch.Generator().manual_seed(0))
    with Passing():
        shipped.whole_text_loss(model, ids, context=16, batch=2)
    assert shared == []
    shipped.whole_text_loss(model, ids, context=16, batch=2)
    assert shared == [1]


def test_copy_rule_on_two_threads_gives_the_one_thread_rows(monkeypatch):
    from helpers.gpt import compute
    from helpers.model import Config, Transformer

    torch.manual_seed(0)
    model = Transformer(Config(vocab_size=12, d_model=16, n_heads=2, n_layers=1, d_ff=32, n_max=32, positions="rotary"))
    ids = torch.randint(0, 12, (32 * 200,), generator=torch.Generator().manual_seed(3))
    calls = []
    real = compute._in_two_threads
    monkeypatch.setattr(compute, "_in_two_threads", lambda function, items: calls.append(1) or real(function, items))
    two = compute.copy_rule(model, ids, [1, 2, 3], context=32, every=2)
    assert calls == [1]
    monkeypatch.setattr(compute, "_in_two_threads", lambda function, items: list(map(function, items)))
    assert compute.copy_rule(model, ids, [1, 2, 3], context=32, every=2) == two


def test_repeat_test_on_two_threads_gives_the_one_thread_numbers(monkeypatch):
    from helpers.gpt import compute
    from helpers.model import Config, Transformer

    torch.manual_seed(0)
    model = Transformer(Config(vocab_size=12, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=64, positions="rotary"))
    ids = torch.randint(0, 12, (5000,), generator=torch.Generator().manual_seed(3))
    two = compute.repeat_test(model, ids, n=16, length=20, seed=2)
    monkeypatch.setattr(compute, "_in_two_threads", lambda function, items: list(map(function, items)))
    one = compute.repeat_test(model, ids, n=16, length=20, seed=2)
    assert two.keys() == one.keys()
    for key, value in one.items():
        assert torch.equal(two[key], value) if isinstance(value, torch.Tensor) else two[key] == value, key


def test_usable_cpus_is_at_least_one_and_at_most_the_cpus_this_process_may_run_on():
    import os

    assert 1 <= states.usable_cpus() <= len(os.sched_getaffinity(0))
    assert 1 <= states._hashing_threads() <= 4


# 3. ``geometry.import_umap``: UMAP's two functions compiled at its import kept in numba's disk cache.

def test_import_umap_caches_the_functions_umap_compiles_at_import_and_puts_numba_back():
    import subprocess
    import textwrap

    code = textwrap.dedent("""
        import numpy as np, numba
        njit = numba.njit
        from helpers.geometry import compute
        umap = compute.import_umap()
        from umap import utils
        assert numba.njit is njit
        state = np.array([12345, 67890, 13579], dtype=np.int64)
        for f, signature in ((utils.tau_rand_int, "i4(i8[:])"), (utils.tau_rand, "f4(i8[:])")):
            assert type(f._cache).__name__ != "NullCache", f
            plain = njit(signature)(f.py_func)   # (compiled here, without the cache)
            a, b = state.copy(), state.copy()
            assert [f(a) for _ in range(5)] == [plain(b) for _ in range(5)] and (a == b).all()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
    assert "Warning" not in out.stderr, out.stderr[-2000:]


def test_no_pass_is_shared_under_another_default_dtype():
    from helpers.gpt import shipped
    from helpers.model import Config, Transformer

    model = Transformer(Config(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32, n_max=16))
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert not shipped._course_code_only(model)
    finally:
        torch.set_default_dtype(before)
    assert shipped._course_code_only(model)
