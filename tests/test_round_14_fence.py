"""Red team round 14 (reader A, entries 1, 2, 9, 13 and 14): the exercise fence.

1: a learner's function that replaced the code of a torch function in place (F.layer_norm.__code__ = ...)
   changed every later model; 2: one that rebound a name in a torch submodule outside PATCHABLE
   (torch.nn.modules.normalization.F = ...) did too; 9: the course's own function wrapped in
   functools.partial (or a bound method) was taken as the learner's; 13: a notebook model the learner's
   function reached through its globals and changed stayed changed; 14: a learner's object with a
   __del__ that reached gc's oldest generation ran its __del__ in a later cell, outside every fence."""
import contextlib
import copy
import functools
import gc
import io
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers import exercises
from helpers.exercises import call
from helpers.geometry import checks as geometry_checks
from helpers.masking import checks as masking_checks
from helpers.masking import compute as masking


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    return tmp_path / "my_gpt"


def said(check, *args):
    """What ``check(*args)`` printed."""
    with contextlib.redirect_stdout(io.StringIO()) as out:
        check(*args)
    return out.getvalue().strip()


def cosine(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _zeros(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return input * 0.0


# ---- 1 and 2: torch's functions and submodules -----------------------------------------------------------


def test_torch_function_code_replaced_in_place_is_put_back(cat):
    code, kwdefaults = F.layer_norm.__code__, F.softmax.__kwdefaults__
    forward = torch.nn.LayerNorm.forward.__code__
    ids = torch.tensor([[1, 2, 3]])
    before = cat(ids).detach().clone()

    def meddles(x):
        F.layer_norm.__code__ = _zeros.__code__
        F.softmax.__kwdefaults__ = {"_stacklevel": 5, "dtype": torch.float16}
        torch.nn.LayerNorm.forward.__code__ = (lambda self, input: input * 0).__code__
        return x

    assert call(meddles, 3) == 3
    assert F.layer_norm.__code__ is code and F.softmax.__kwdefaults__ is kwdefaults
    assert torch.nn.LayerNorm.forward.__code__ is forward
    assert torch.equal(cat(ids), before)


def test_a_checked_function_that_replaces_torch_code_changes_no_later_cell(cat):
    ids = torch.tensor([[1, 2, 3]])
    before = cat(ids).detach().clone()
    code = F.layer_norm.__code__

    def sly_cosine(a, b):
        F.layer_norm.__code__ = _zeros.__code__
        return cosine(a, b)

    assert said(geometry_checks.cosine_function, sly_cosine).startswith("✓")
    assert F.layer_norm.__code__ is code and torch.equal(cat(ids), before)


@pytest.mark.parametrize("module", ["torch.nn.modules.normalization", "torch.nn.modules.activation",
                                    "torch.nn.modules.linear", "torch.optim.adam"])
def test_a_name_rebound_in_a_torch_submodule_is_put_back(module):
    import importlib

    target = importlib.import_module(module)
    names = dict(vars(target))

    def meddles(x):
        target.F = types.SimpleNamespace(layer_norm=_zeros)
        target.torch = None
        target.added_by_the_learner = 1
        return x

    assert call(meddles, 3) == 3
    assert all(vars(target).get(name) is value for name, value in names.items())


def test_layer_norm_works_after_its_module_was_rebound_in_a_check(cat):
    ids = torch.tensor([[1, 2, 3]])
    before = cat(ids).detach().clone()

    def sly_cosine(a, b):
        import torch.nn.modules.normalization as norm
        norm.F = types.SimpleNamespace(layer_norm=_zeros)
        return cosine(a, b)

    assert said(geometry_checks.cosine_function, sly_cosine).startswith("✓")
    assert torch.equal(cat(ids), before)


# ---- 9: a partial or a bound method of the course's own function -------------------------------------------


@pytest.mark.parametrize("wrap", [functools.partial, lambda f: functools.partial(functools.partial(f)),
                                  lambda f: types.MethodType(f, object())])
def test_the_courses_function_wrapped_is_still_the_courses(store, wrap):
    out = said(masking_checks.causal_attention, wrap(masking.causal_attention))
    assert out.startswith("✗") and "the course's own" in out and "write your own" in out, out
    assert not store.exists() or not list(store.iterdir())


def test_a_partial_of_the_learners_own_function_is_judged_and_not_kept_with_a_sentence(store):
    def causal_attention(q, k, v, scale=None):
        return masking.causal_attention(q, k, v)

    out = said(masking_checks.causal_attention, functools.partial(causal_attention, scale=1.0))
    assert out.startswith("✓"), out
    assert "not kept" in out and "functools.partial" in out and "None" not in out, out


def test_the_courses_class_in_a_partial_is_the_courses():
    from helpers.model import Transformer

    with pytest.raises(exercises.Wrong, match="the course's own"):
        exercises.not_the_courses(functools.partial(Transformer), "a class")


# ---- 13: a model the learner's function reaches by name ----------------------------------------------------


def _cell(source, **names):
    """The functions a notebook cell ``source`` defines, with ``names`` among its globals."""
    space = dict(names, np=np, torch=torch)
    exec(source, space)
    return space


CHANGES_MODEL = '''
def cosine(a, b):
    model.blocks[0].attn.W_Q.data.mul_(0.5)
    model.forward = lambda *args, **kwargs: None
    model.train()
    a, b = np.asarray(a, float), np.asarray(b, float)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
'''


def test_a_notebook_model_changed_through_the_functions_globals_is_put_back(cat):
    model = copy.deepcopy(cat).eval()
    ids = torch.tensor([[1, 2, 3]])
    before = model(ids).detach().clone()
    space = _cell(CHANGES_MODEL, model=model)
    assert said(geometry_checks.cosine_function, space["cosine"]).startswith("✓")
    assert "forward" not in vars(model) and not model.training
    assert torch.equal(model(ids), before)


def test_models_in_a_notebook_list_and_in_a_closure_are_put_back(cat):
    models = [copy.deepcopy(cat) for _ in range(3)]
    hidden = copy.deepcopy(cat)
    weights = [m.blocks[0].attn.W_Q.detach().clone() for m in models + [hidden]]

    def made():
        def cosine(a, b):
            for m in models + [hidden]:
                m.blocks[0].attn.W_Q.data.zero_()
            a, b = np.asarray(a, float), np.asarray(b, float)
            return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
        return cosine

    assert said(geometry_checks.cosine_function, made()).startswith("✓")
    assert all(torch.equal(m.blocks[0].attn.W_Q, w) for m, w in zip(models + [hidden], weights))


def test_a_model_bound_in_a_partial_is_put_back(cat):
    model = copy.deepcopy(cat)
    weight = model.blocks[0].attn.W_Q.detach().clone()

    def changes(a, b, model=None):
        model.blocks[0].attn.W_Q.data.zero_()
        return cosine(a, b)

    assert said(geometry_checks.cosine_function, functools.partial(changes, model=model)).startswith("✓")
    assert torch.equal(model.blocks[0].attn.W_Q, weight)


def test_a_half_built_module_or_a_bfloat16_one_in_the_globals_does_not_fail_the_check(cat):
    class HalfBuilt(torch.nn.Module):
        def __init__(self):
            pass   # no super().__init__(): its state_dict raises

    odd = cat.__class__.__new__(cat.__class__)   # (not even built)
    space = _cell(CHANGES_MODEL.replace("model.", "kept."), kept=copy.deepcopy(cat).bfloat16(),
                  half=HalfBuilt(), odd=odd)
    before = {name: t.clone() for name, t in space["kept"].state_dict().items()}
    assert said(geometry_checks.cosine_function, space["cosine"]).startswith("✓")
    assert all(torch.equal(t, before[name]) for name, t in space["kept"].state_dict().items())


# ---- 14: garbage that reached gc's oldest generation --------------------------------------------------------


class _Trap:
    def __del__(self):
        np.random.seed(12345)   # anything: a patch, a print, a reseed ...
        torch.nn.functional.gelu = None


def _old_trap_cosine(a, b):
    trap = _Trap()
    trap.me = trap           # a reference cycle
    keep = [trap]
    gc.collect()             # survives a full collection: now in the oldest generation
    del keep, trap
    return cosine(a, b)


def _frozen_trap_cosine(a, b):
    trap = _Trap()
    trap.me = trap
    gc.freeze()              # frozen: no collection would see it, until gc.unfreeze()
    del trap
    return cosine(a, b)


@pytest.mark.parametrize("function", [_old_trap_cosine, _frozen_trap_cosine])
def test_a_del_in_the_oldest_generation_runs_inside_the_check(function):
    gelu = F.gelu
    np.random.seed(0)
    state = np.random.get_state()[1].copy()
    assert said(geometry_checks.cosine_function, function).startswith("✓")
    assert np.array_equal(np.random.get_state()[1], state) and F.gelu is gelu
    assert gc.get_freeze_count() == 0   # nothing left frozen
    gc.collect()                        # a later cell's full collection: nothing of the learner's left to run
    assert np.array_equal(np.random.get_state()[1], state) and F.gelu is gelu


def test_objects_made_before_a_check_are_collected_again_after_it():
    class Old:
        pass

    old = Old()
    old.me = old
    collected = []
    alive = __import__("weakref").ref(old, lambda ref: collected.append(True))
    del old
    assert said(geometry_checks.cosine_function, cosine).startswith("✓")
    assert gc.get_freeze_count() == 0 and not exercises._FROZEN
    gc.collect()
    assert collected and alive() is None


LAYER_NORM_CLASS = '''
from torch import nn
import torch.nn.functional as F

class LayerNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d)), eps

    def forward(self, x):
        other.blocks[0].attn.W_Q.data.zero_()   # "what if the queries were zero?", tried on the notebook's model
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
'''


def test_a_model_a_learners_class_reaches_by_name_is_put_back(cat, store):
    from helpers.normalization import checks as normalization_checks

    other = copy.deepcopy(cat)
    weight = other.blocks[0].attn.W_Q.detach().clone()
    space = _cell(LAYER_NORM_CLASS, other=other)
    assert said(normalization_checks.layer_norm_module, space["LayerNorm"], cat).startswith("✓")
    assert torch.equal(other.blocks[0].attn.W_Q, weight)
