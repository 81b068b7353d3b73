"""Round 31 (issue 31), reader A, entries 4-6: a learner's number is read by int's or float's own method before it is
compared (a subclass's comparisons may lie), a Config keeps its dropout as a Python float (a NumPy one cannot be
saved as JSON), and the model's parts refuse a nested, sparse or meta tensor before reading its shape."""
import numpy as np
import pytest
import torch

from helpers import reference as ref
from helpers import weights
from helpers.errors import CourseInputError
from helpers.heads import compute as heads
from helpers.mlp import compute as mlp
from helpers.model import MLP, Attention, Config, Transformer
from helpers.qkv import compute as qkv
from helpers.tour import compute as tour

SIZES = dict(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=16)


class LyingInt(int):
    """An int whose comparisons all say yes."""
    def __lt__(self, other):
        return True

    __le__ = __gt__ = __ge__ = __lt__
    __hash__ = int.__hash__


class LyingFloat(float):
    """A float that says it is >= 0 and < 1 whatever it holds."""
    def __lt__(self, other):
        return True

    def __le__(self, other):
        return False

    __gt__ = __le__
    __ge__ = __lt__
    __hash__ = float.__hash__


class AnyKey(int):
    """An int equal to everything, hashed as 0: found in any dict that has the key 0."""
    def __eq__(self, other):
        return True

    def __hash__(self):
        return 0


def refused(call, *words):
    with pytest.raises(CourseInputError) as caught:
        call()
    for word in words:
        assert word in str(caught.value), caught.value


def test_softmax_reads_the_axis_by_ints_own_method():
    refused(lambda: ref.softmax(np.ones(3), axis=LyingInt(10**9)), "axis should be an axis of x", "1000000000")
    assert np.allclose(ref.softmax(np.ones((2, 3)), axis=LyingInt(0)), 0.5)   # (its value, 0, is used)


def test_query_step_reads_visible_by_ints_own_method():
    q, K, V = np.ones(4), np.ones((3, 4)), np.arange(12.0).reshape(3, 4)
    refused(lambda: qkv.query_step(q, K, V, True, LyingInt(10**9)), "visible should be", "from 1 to 3")
    step = qkv.query_step(q, K, V, True, LyingInt(1))
    assert type(step["visible"]) is int and np.allclose(step["weights"], [1, 0, 0])


@pytest.mark.parametrize("make", [lambda p: Config(**SIZES, dropout=p), lambda p: Attention(8, 2, dropout=p),
                                  lambda p: MLP(8, 16, dropout=p)], ids=["Config", "Attention", "MLP"])
def test_dropout_is_compared_as_a_plain_float(make):
    refused(lambda: make(LyingFloat(5.0)), "0 <= dropout < 1", "5.0")
    refused(lambda: make(LyingFloat(-1.0)), "0 <= dropout < 1")


def test_config_keeps_its_numbers_as_pythons_own():
    cfg = Config(**SIZES, dropout=np.float32(0.5), norm_eps=LyingFloat(1e-5))
    assert type(cfg.dropout) is float and cfg.dropout == 0.5
    assert type(cfg.norm_eps) is float and cfg.norm_eps == 1e-5


def test_a_model_of_numpy_dropout_is_saved(tmp_path):
    model = Transformer(Config(**SIZES, dropout=np.float32(0.25)))
    weights.save(model, str(tmp_path / "mine"))
    assert weights.load(str(tmp_path / "mine")).cfg.dropout == 0.25


def test_ablate_heads_reads_a_head_by_ints_own_method():
    cat = weights.load_cat()
    ids = torch.tensor([[1, 2, 3]])
    refused(lambda: cat(ids, ablate_heads=[(LyingInt(10**9), 0)]), "out of range", "layer=1000000000")
    refused(lambda: cat(ids, ablate_heads=[(0.5, 0)]), "whole number", "0.5")
    assert torch.equal(cat(ids, ablate_heads=[(LyingInt(0), 1)]), cat(ids, ablate_heads=[(0, 1)]))


def test_read_through_losses_reads_the_head_by_ints_own_method():
    induction = weights.load_induction()
    ids = torch.zeros(1, 5, dtype=torch.long)
    refused(lambda: heads.read_through_losses(induction, ids, 2, (LyingInt(1), 0), {}, reader=1),
            "the ablated head should be", "before the reading layer 1")


def test_an_mlp_layer_is_looked_up_by_its_own_value(cat, cat_world):
    collected = mlp.collect_activations(cat, cat_world)
    assert 7 not in collected["act"] and AnyKey(7) in collected["act"]
    refused(lambda: mlp.unit_profile(collected, AnyKey(7), 0, ["the"]), "layer should be one of", "7")


def nested():
    return torch.nested.nested_tensor([torch.randn(3, 6), torch.randn(2, 6)])


@pytest.mark.parametrize("make", [lambda: heads.MultiHeadAttention(6, 2), lambda: Attention(6, 2), lambda: MLP(6, 8),
                                  lambda: mlp.MLP(6, 8), lambda: weights.load_cat().blocks[0]],
                         ids=["MultiHeadAttention", "Attention", "MLP", "course MLP", "Block"])
def test_the_parts_refuse_a_nested_tensor_before_its_shape(make):
    refused(lambda: make()(nested()), "should be a dense tensor", "nested")


@pytest.mark.parametrize("x", [torch.randn(1, 3, 6).to_sparse(), torch.randn(1, 3, 6, device="meta")],
                         ids=["sparse", "meta"])
def test_the_course_mlp_refuses_a_sparse_or_meta_tensor(x):
    refused(lambda: mlp.MLP(6, 8)(x), "MLP's input x should be a dense tensor")


def test_step_rows_refuses_a_nested_step(cat, cat_world):
    trace = cat(cat_world.tokenizer.encode("<BOS> the cat"), trace=True)
    assert set(tour.step_rows(trace, 0, 0, ["q"])) == {"q"}
    trace["L0.q"] = nested()
    refused(lambda: tour.step_rows(trace, 0, 0, ["q"]), "trace['L0.q'] should be a dense tensor", "nested")
