"""Round 22 (issue 31), errors.py and model.py: tensors with the negative bit (and other tensors the one
converter is handed), and a course model whose modules no longer match its Config."""
import contextlib
import io

import numpy as np
import pytest
import torch
from torch import nn

from helpers import weights, worlds
from helpers.errors import CourseInputError, shape_of, shown, to_numpy
from helpers.model import KVCache, Transformer


def negative_bit():
    """A float tensor read negated through a view (public API: the imaginary part of a conjugate)."""
    x = torch.tensor([[1.0 + 1j, 2 - 1j], [0.5 + 2j, 1 + 0j]]).conj().imag
    assert x.is_neg()
    return x


# ------------------------------------------------------------ 1. the one converter


def test_a_tensor_with_the_negative_bit_is_read_with_its_numbers():
    x = negative_bit()
    assert to_numpy(x).tolist() == [[-1.0, 1.0], [-2.0, -0.0]]
    assert to_numpy(x.T).tolist() == [[-1.0, -2.0], [1.0, -0.0]]
    assert to_numpy(torch._neg_view(torch.tensor([1.0, 2.0], dtype=torch.float16))).tolist() == [-1.0, -2.0]


def test_a_list_of_tensors_with_grad_or_the_negative_bit_is_read_not_called_no_numbers():
    x = negative_bit()
    assert to_numpy([x[0], x[1]]).tolist() == [[-1.0, 1.0], [-2.0, -0.0]]
    assert to_numpy([torch.tensor(1.0, requires_grad=True), torch.tensor(2.0)]).tolist() == [1.0, 2.0]


def test_compute_functions_and_a_check_read_a_tensor_with_the_negative_bit():
    import helpers.geometry.compute as geometry
    from helpers.positions import checks

    x = negative_bit()
    assert geometry.cosine(x[0], x[1]) == pytest.approx(float(np.dot([-1, 1], [-2, 0]) / (np.sqrt(2) * 2)))
    Y = np.random.RandomState(0).randn(6, 4)
    perm = [2, 0, 1, 5, 4, 3]
    right = (-torch.tensor(Y[np.argsort(perm)] * 1j)).conj().imag
    with contextlib.redirect_stdout(io.StringIO()) as out:
        checks.unscrambled(right, Y, perm)
    assert "check itself failed" not in out.getvalue() and "✓" in out.getvalue()


class Raising(torch.Tensor):
    """A tensor subclass of the learner's whose every torch call raises."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise ValueError("no")


@pytest.mark.parametrize("make, words", [
    (lambda: torch.tensor([1.0, 2.0]).as_subclass(Raising), ("Raising that raised ValueError",)),
    (lambda: torch.masked.masked_tensor(torch.tensor([1.0, 2.0]), torch.tensor([True, False])),
     ("MaskedTensor", "which NumPy cannot read")),
    (lambda: torch._efficientzerotensor(3), ("which NumPy cannot read",)),
    (lambda: torch.zeros(2, dtype=torch.float4_e2m1fn_x2), ("float4_e2m1fn_x2", "which NumPy cannot read")),
])
def test_tensors_numpy_cannot_read_are_refused_in_a_sentence(refused, make, words):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = make()
        refused(lambda: to_numpy(x, "x"), "x should be", *words)


def test_a_nested_tensor_is_refused_by_shape_of_and_shown_without_its_shape(refused):
    x = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    refused(lambda: shape_of(x, "x"), "x should be a dense tensor", "nested")
    assert "Tensor" in shown(x)


# ------------------------------------------------------------ 2. a model changed in place


@pytest.fixture
def cat_and_ids():
    world = worlds.cat_world()
    return weights.load_cat(), world.tokenizer.encode("<BOS> the cat sat".split())


def cut(m):
    m.blocks = m.blocks[:1]


@pytest.mark.parametrize("edit, words", [
    (cut, ("2 blocks its Config says (n_layers=2), but it has 1",)),
    (lambda m: m.blocks.__delitem__(1), ("but it has 1",)),   # sets nothing: no hook sees it
    (lambda m: m.blocks.__setitem__(1, nn.Identity()), ("blocks.1 should be of class Block", "Identity")),
    (lambda m: setattr(m, "E", nn.Parameter(torch.zeros(3, 6))), ("E should be a tensor of shape (20, 6)", "(3, 6)")),
    (lambda m: setattr(m.E, "data", torch.zeros(3, 6)), ("E should be a tensor of shape (20, 6)", "(3, 6)")),
    (lambda m: m.to("meta"), ("meta device",)),
    (lambda m: setattr(m.blocks[0], "mlp", None), ("blocks.0.mlp should be of class MLP", "None")),
    (lambda m: delattr(m.blocks[0], "mlp"), ("blocks.0.mlp", "missing")),
    (lambda m: setattr(m.blocks[1].attn.W_Q, "data", torch.zeros(6, 4)), ("blocks.1.attn.W_Q", "(6, 4)")),
    (lambda m: m.blocks[0].half(), ("share one device and dtype",)),
])
def test_a_model_whose_modules_no_longer_match_its_config_is_refused_in_a_sentence(refused, cat_and_ids, edit, words):
    m, ids = cat_and_ids
    m(ids)   # checked once, before the edit
    edit(m)
    refused(lambda: m(ids, trace=True), *words)
    refused(lambda: m(ids), *words)


def test_the_chapter_views_and_explorers_show_the_sentence_not_a_key_error(refused, cat_and_ids):
    import helpers.heads.compute as heads
    import helpers.masking.compute as masking
    import helpers.tour.compute as tour
    from helpers.tour import explorer

    m, ids = cat_and_ids
    world = worlds.cat_world()
    with contextlib.redirect_stdout(io.StringIO()):
        ex = explorer.explorer(m, world)
    cut(m)
    words = "2 blocks its Config says"
    refused(lambda: tour.prompt_view(m, world, "<BOS> the cat"), words)
    refused(lambda: masking.attention_maps(m, world, "<BOS> the cat"), words)
    refused(lambda: heads.layer_weights(m, ids), words)   # not "replace should name ..."
    refused(ex.picture, words)


def test_an_explorer_of_a_model_moved_to_meta_shows_the_sentence(refused, cat_and_ids):
    from helpers.tour import explorer

    m, _ = cat_and_ids
    with contextlib.redirect_stdout(io.StringIO()):
        ex = explorer.explorer(m, worlds.cat_world())
    m.to("meta")
    ex.update()   # its version (weights_state) is read outside its catch: no error there
    refused(ex.picture, "meta device")


def test_a_failed_pass_on_a_changed_model_leaves_its_cache_as_it_was(refused, cat_and_ids):
    m, ids = cat_and_ids
    cache = KVCache(2)
    m(ids[:2], cache=cache)
    m.blocks[1].attn.W_Q.data = torch.zeros(6, 4)   # seen only when the pass fails: the sentence, the cache kept
    refused(lambda: m(ids[2:], cache=cache), "blocks.1.attn.W_Q")
    assert len(cache) == 2 and cache.rows(1) == 2


def test_a_bias_set_to_none_runs_and_a_plain_block_subclass_is_a_block(cat_and_ids):
    from helpers.normalization.compute import plain_stack

    m, ids = cat_and_ids
    m.blocks[1].attn.b_O = None   # a part runs without its bias, as with bias=False
    assert m(ids).shape == (4, 20)
    plain = plain_stack(2)
    assert plain(torch.tensor([1, 2, 3])).shape[0] == 3


def test_the_unchanged_model_checks_its_structure_once_per_edit(cat_and_ids, monkeypatch):
    import helpers.model as model

    m, ids = cat_and_ids
    m(ids)
    calls = []
    real = model.structure_problem
    monkeypatch.setattr(model, "structure_problem", lambda net: calls.append(1) or real(net))
    for _ in range(5):
        m(ids)
    assert calls == []
    m.blocks[0].attn.W_O = nn.Parameter(m.blocks[0].attn.W_O.detach().clone())   # an edit: checked again, once
    m(ids)
    m(ids)
    assert calls == [1]


def test_embed_unembed_and_parameter_count_refuse_a_changed_model(refused, cat_and_ids):
    m, ids = cat_and_ids
    m.E = nn.Parameter(torch.zeros(3, 6))
    refused(lambda: m.embed(ids[None]), "E should be a tensor of shape (20, 6)")
    refused(lambda: m.unembed(torch.zeros(1, 6)), "E should be a tensor of shape (20, 6)")
    refused(m.parameter_count, "E should be a tensor of shape (20, 6)")
    assert isinstance(m, Transformer)
    with pytest.raises(CourseInputError):
        from helpers.model import check_model
        check_model(m)


def test_a_replacement_read_negated_is_made_plain_in_the_trace(cat_and_ids):
    m, ids = cat_and_ids
    flipped = lambda x: (x * 1j).conj().imag   # -x, as a view with the negative bit   # noqa: E731
    assert flipped(torch.ones(2)).is_neg()
    trace = m(ids, trace=True, replace={"L0.q": flipped})
    assert not trace["L0.q"].is_neg()
    assert np.array_equal(trace["L0.q"].numpy(), -m(ids, trace=True)["L0.q"].numpy())


def test_the_cached_structure_check_makes_no_torch_call(cat_and_ids):
    from torch.overrides import TorchFunctionMode

    class Counter(TorchFunctionMode):   # as chapter 09's op_count counts a pass's operations
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Counter.calls += 1
            return func(*args, **(kwargs or {}))

    m, _ = cat_and_ids
    m.check_structure()
    with Counter():
        m.check_structure()
    assert Counter.calls == 0
