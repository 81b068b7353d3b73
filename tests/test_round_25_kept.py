"""Round 25 (readers A 2, 3, 14, 15 and B 4): what a check puts back after a learner's function ran. The course's
caches changed by the function stayed changed (``model._ROTARY_TABLES``: an entry replaced; the array
``geometry.compute.glove_arrays()`` returns, turned writeable again; ``scaling.compute._pool``; an lru_cache's
dict); torch's sparse-invariants check and JIT fuser switches stayed on, and torch.set_num_interop_threads (once a
process) went through unsaid; a model reached through a list of dicts (chapter 04's ``runs``) or held by a course
object was not kept; hooks and attributes put on a model's parameters (``register_hook``,
``register_post_accumulate_grad_hook``, ``cat.E.foo = 1``) stayed on it."""
import contextlib
import io

import numpy as np
import pytest
import torch

from helpers import exercises
from helpers.exercises import Function, call, exercise
from helpers.model import Config, Transformer

from doubling import doubling_check


def tiny(positions="sinusoidal"):
    torch.manual_seed(0)
    return Transformer(Config(vocab_size=5, d_model=8, n_heads=2, n_layers=1, d_ff=16, n_max=8, positions=positions))


def given_model_check():
    """A check that hands ``model`` to the learner's function (as chapter 10's lens_ranks does)."""
    @exercise("a function of a model", answer=Function("a function of a model"))
    def uses(answer, model):
        if call(answer, model, what="on the model") != 4:
            yield "not 4"
    return uses


def run(check, *args):
    """The check's problem sentences, what it prints kept quiet."""
    with contextlib.redirect_stdout(io.StringIO()):
        return check.feedback(*args)


# --- the course's caches ------------------------------------------------------------------------


def test_a_replaced_rotary_table_is_put_back():
    import helpers.model as model_module

    model = tiny("rotary")
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        before = model(ids).clone()
    d = model.cfg.d_model // model.cfg.n_heads
    key = next(key for key in model_module._ROTARY_TABLES if key[0] == d)
    entry = model_module._ROTARY_TABLES[key]

    def doubles(x):
        cos, sin = torch.ones(model_module.MAX_TOKENS, d // 2), torch.zeros(model_module.MAX_TOKENS, d // 2)
        model_module._ROTARY_TABLES[key] = (cos, sin, (cos._version, sin._version))
        model_module._ROTARY_TABLES[(999, 1.0)] = (cos, sin, (0, 0))
        entry[0].mul_(0)   # the table's own cos too
        return 2 * x

    assert run(doubling_check(5), doubles) == []
    assert model_module._ROTARY_TABLES[key] is entry and (999, 1.0) not in model_module._ROTARY_TABLES
    with torch.no_grad():
        assert torch.equal(model(ids), before)


def test_the_cached_glove_vectors_are_put_back_and_read_only_again():
    from helpers.geometry import compute as geometry

    vectors = geometry.glove_arrays()[1]
    before = vectors[:3].copy()

    def doubles(x):
        held = geometry.glove_arrays()[1]
        held.flags.writeable = True
        held[:100] = 1.0
        return 2 * x

    assert run(doubling_check(5), doubles) == []
    assert geometry.glove_arrays()[1] is vectors and not vectors.flags.writeable
    assert np.array_equal(vectors[:3], before)
    assert np.array_equal(geometry.load_glove(3).vectors, before)


def test_a_module_dict_cache_changed_in_place_is_put_back():
    from helpers.scaling import compute as scaling

    pool = scaling.pool()
    q, before = pool["q"], pool["q"][:2].copy()

    def doubles(x):
        scaling.pool()["q"][:] = 0
        scaling.pool()["query"] = np.zeros(3)
        return 2 * x

    assert run(doubling_check(5), doubles) == []
    assert scaling.pool() is pool and pool["q"] is q and np.array_equal(q[:2], before)
    assert pool["query"].shape == (scaling.POOL_D,)


def test_an_lru_cached_dict_is_put_back_and_one_filled_meanwhile_is_emptied():
    from helpers.gpt import tokenize

    table = tokenize.byte_table()
    space = table[32]

    def doubles(x):
        tokenize.byte_table()[32] = "?"
        return 2 * x

    assert run(doubling_check(5), doubles) == []
    assert tokenize.byte_table() is table and table[32] == space

    tokenize.byte_table.cache_clear()

    def fills(x):
        tokenize.byte_table()[32] = "?"   # filled inside the function: never seen by the check
        return 2 * x

    assert run(doubling_check(5), fills) == []
    assert tokenize.byte_table()[32] == space


# --- torch's process-wide switches -------------------------------------------------------------


def test_torchs_sparse_invariants_check_and_a_jit_switch_are_put_back():
    before = torch._C._check_sparse_tensor_invariants(), torch._C._jit_texpr_fuser_enabled()

    def doubles(x):
        torch.sparse.check_sparse_tensor_invariants.enable()
        torch._C._jit_set_texpr_fuser_enabled(not before[1])
        return 2 * x

    try:
        assert run(doubling_check(5), doubles) == []
        assert (torch._C._check_sparse_tensor_invariants(), torch._C._jit_texpr_fuser_enabled()) == before
    finally:
        torch._C._set_check_sparse_tensor_invariants(before[0])
        torch._C._jit_set_texpr_fuser_enabled(before[1])


@pytest.mark.parametrize("where", ["torch", "torch._C"])
def test_set_num_interop_threads_is_refused_and_said(where):
    threads, setter = torch.get_num_interop_threads(), torch.set_num_interop_threads
    owner = torch if where == "torch" else torch._C

    def doubles(x):
        try:
            owner.set_num_interop_threads(threads + 1)
        except RuntimeError:
            pass
        return 2 * x

    found = run(doubling_check(5), doubles)
    assert len(found) == 1 and "called torch.set_num_interop_threads" in found[0] and "does not allow it" in found[0]
    assert torch.get_num_interop_threads() == threads
    assert torch.set_num_interop_threads is setter and torch._C.set_num_interop_threads is setter


# --- models reached through containers ----------------------------------------------------------


RUNS = []   # a notebook's list of dicts of models (chapter 04's ``runs``), read by name by the functions below


def test_a_model_reached_two_containers_deep_is_put_back():
    RUNS[:] = [{"name": "a", "model": tiny()}, {"name": "b", "model": tiny()}]
    before = RUNS[1]["model"].E.detach().clone()

    def doubles(x):
        RUNS[1]["model"].E.data.zero_()
        return 2 * x

    assert run(doubling_check(5), doubles) == []
    assert torch.equal(RUNS[1]["model"].E.detach(), before)


def test_a_model_held_by_a_course_object_is_put_back():
    holder = exercises.Verdict(True)   # any of the course's objects (an explorer holding its models)
    holder.models = [tiny()]
    RUNS[:] = [holder]
    before = holder.models[0].E.detach().clone()

    def doubles(x):
        RUNS[0].models[0].E.data.zero_()
        return 2 * x

    assert run(doubling_check(5), doubles) == []
    assert torch.equal(holder.models[0].E.detach(), before)


def test_reaching_is_bounded():
    deep = tiny()
    nested = [deep]
    for _ in range(exercises.MAX_REACH_DEPTH + 1):
        nested = [nested]
    assert deep not in exercises._small_models([nested], strict=True)
    assert deep in exercises._small_models([nested[0][0]], strict=True)
    many = [0] * exercises.MAX_REACH_ENTRIES + [deep]
    assert deep not in exercises._small_models([many], strict=True)


# --- a parameter's hooks and attributes ---------------------------------------------------------


def backward_gradient(model):
    model.zero_grad()
    model(torch.tensor([[1, 2, 3]])).pow(2).sum().backward()
    return model.E.grad.clone()


def test_hooks_and_attributes_put_on_a_reached_models_parameters_are_put_back():
    model = tiny()
    RUNS[:] = [model]
    mine = model.E.register_hook(lambda grad: grad)   # the notebook's own hook stays
    expected = backward_gradient(model)
    called = []

    def doubles(x):
        RUNS[0].E.register_hook(lambda grad: grad * 0)
        RUNS[0].E.register_post_accumulate_grad_hook(lambda p: called.append(p))
        RUNS[0].E.foo = 1
        return 2 * x

    try:
        assert run(doubling_check(5), doubles) == []
        assert list(model.E._backward_hooks) == [mine.id] and not model.E._post_accumulate_grad_hooks
        assert not hasattr(model.E, "foo")
        assert torch.equal(backward_gradient(model), expected) and called == []
    finally:
        mine.remove()


def test_hooks_put_on_a_given_models_parameters_are_put_back():
    model = tiny()
    expected = backward_gradient(model)
    called = []

    def fn(m):
        m.final_ln.weight.register_hook(lambda grad: grad * 0)
        m.E.register_hook(lambda grad: grad * 0)
        m.E.register_post_accumulate_grad_hook(lambda p: called.append(p))
        m.E._backward_hooks = {7: lambda grad: grad * 0}   # a dict of its own, put in the tensor's place
        return 4

    assert run(given_model_check(), fn, model) == []
    assert model.E._backward_hooks is None and model.final_ln.weight._backward_hooks is None
    assert model.E._post_accumulate_grad_hooks is None
    assert torch.equal(backward_gradient(model), expected) and called == []
    assert model.final_ln.weight.grad.abs().sum() > 0


def test_a_parameters_class_changed_is_put_back():
    model = tiny()
    kind = type(model.E)

    class Mine(torch.nn.Parameter):
        pass

    def fn(m):
        m.E.__class__ = Mine
        return 4

    assert run(given_model_check(), fn, model) == []
    assert type(model.E) is kind
