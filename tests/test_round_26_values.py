"""Round 26 (values): nested tensors refused where check_model and check_batch first read them; tsne_fit checks its
points; one rule for the rotary base; float8 counts named as rounded; embedding_survival without dropout; one helper
for "shape before the copy"; sample_sentences on errors.check_seeds."""
import copy
import inspect
import random
import warnings

import numpy as np
import pytest
import torch

from helpers import errors, reference as ref
from helpers import model as M
from helpers.errors import CourseInputError
from helpers.exercises import Wrong, count_answer, rounded_by_dtype
from helpers.geometry import compute as geometry
from helpers.masking import compute as masking
from helpers.normalization import compute as nz
from helpers.positions import compute as positions
from helpers.training import check_batch

NESTED = "but got a nested tensor (rows of different lengths)"


def nested(layout, dtype=torch.long):
    with warnings.catch_warnings():   # torch's prototype warning for the strided layout
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.zeros(2, dtype=dtype), torch.zeros(3, dtype=dtype)], layout=layout)


LAYOUTS = pytest.mark.parametrize("layout", [torch.strided, torch.jagged], ids=["strided", "jagged"])


# ------------------------------------------------------------------ 1: nested tensors

@LAYOUTS
def test_a_nested_tensor_where_a_model_is_expected_is_named(refused, layout):
    for call in (lambda: M.check_model(nested(layout, torch.float32)), lambda: positions.row_moves(nested(layout), 0),
                 lambda: positions.rows_unchanged(nested(layout), 0)):
        refused(call, "the model should be a helpers.model.Transformer", NESTED)


@LAYOUTS
def test_a_nested_tensor_in_a_batch_is_named(refused, layout, cat):
    ids = torch.zeros(2, 3, dtype=torch.long)
    refused(lambda: check_batch((nested(layout), ids), 5), "the batch's inputs should be a (B, T) tensor", NESTED)
    refused(lambda: check_batch((ids, nested(layout)), 5), "the batch's targets should be a (B, T) tensor", NESTED)
    refused(lambda: positions.shifted_loss(cat, nested(layout), nested(layout), 0), "the batch's inputs", NESTED)
    refused(lambda: positions.shifted_loss(cat, ids, nested(layout), 0), "the batch's targets", NESTED)


def test_check_tensor_keeps_its_sentence_and_other_tensors_are_still_read(refused):
    refused(lambda: errors.check_tensor(nested(torch.jagged), "x"), "x should be a dense tensor of real numbers", NESTED)
    assert errors.tensor_refusal(torch.zeros(2)) is None
    assert "meta device" in errors.tensor_refusal(torch.zeros(2, device="meta"))
    refused(lambda: M.check_model(torch.zeros(2, 3)), "but got a tensor of shape (2, 3)")
    inputs, targets = check_batch((np.zeros((1, 2), dtype=np.int64), torch.ones(1, 2, dtype=torch.int32)), 5)
    assert inputs.dtype == targets.dtype == torch.long and targets.tolist() == [[1, 1]]


# ------------------------------------------------------------------ 2: tsne_fit

POINTS = np.random.RandomState(0).rand(12, 3)


@pytest.mark.parametrize("points, words", [
    (torch.zeros(12, 3, dtype=torch.uint16), "are all the same point"),   # crashed scikit-learn's compiled code
    (np.ones((12, 3), dtype=np.int8), "are all the same point"),
    (torch.rand(12, 3) > 0.5, "True/False"),
    (POINTS > 0.5, "True/False"),
    (np.full((12, 3), np.nan), "finite"),
    (POINTS[:2], "3 to 5,000 rows, but has 2"),
    (POINTS[0], "2-D, but it has shape (3,)"),
    ("points", "text"),
    (nested(torch.jagged, torch.float32), NESTED),
], ids=["uint16 equal", "int8 equal", "bool tensor", "bool array", "nan", "two rows", "1-D", "text", "nested"])
def test_tsne_fit_checks_its_points_before_scikit_learn_sees_them(refused, points, words):
    refused(lambda: geometry.tsne_fit(points, 0), "points should", words)


def test_tsne_fit_checks_its_seed_and_maps_whole_numbers_as_tsne_2d_does(refused):
    with pytest.raises(CourseInputError, match=r"^seed should be at least 0, but got -1$"):
        geometry.tsne_fit(POINTS, -1)
    refused(lambda: geometry.tsne_fit(POINTS, True), "seed should be a whole number")
    ints = (POINTS * 100).astype(np.uint16)
    state = random.getstate()
    mapped = geometry.tsne_fit(torch.from_numpy(ints.astype(np.int32)).to(torch.uint16), 0)
    assert random.getstate() == state   # scikit-learn's import drew nothing the learner sees
    assert mapped.shape == (12, 2) and np.array_equal(mapped, geometry.tsne_2d(ints.astype(float), 0))


# ------------------------------------------------------------------ 3: the rotary base, one rule

@pytest.mark.parametrize("base, words", [(1, "should be > 1, but got 1"), (1.0, "should be > 1, but got 1"),
                                         (0.5, "should be > 1, but got 0.5"),
                                         (1e13, "should be at most 1e+12, but got 1e+13")])
def test_the_model_and_the_reference_refuse_the_same_bases_in_the_same_sentence(refused, base, words):
    config = dict(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=8, positions="rotary")
    refused(lambda: M.Config(**config, rotary_base=base), "Config.rotary_base " + words)
    refused(lambda: M.Attention(8, 2, rotary=dict(base=base, pairs="adjacent")), "the rotary base " + words)
    refused(lambda: M.rotate_pairs(torch.ones(1, 1, 2, 4), 0, base=base), "base " + words)
    refused(lambda: ref.rotate_pairs(np.ones((2, 4)), [0, 1], base=base), "base " + words)
    refused(lambda: ref.sinusoidal_positions(4, 4, base=base), "base " + words)


def test_bases_just_inside_the_rule_build_and_turn():
    assert M.RANGES["rotary_base"] == ref.BASE_RANGE == (1.0, 1e12, True)
    for base in (1.0000001, 10000.0, 1e12):
        M.Config(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=8, positions="rotary", rotary_base=base)
        assert np.isfinite(ref.rotate_pairs(np.ones((2, 4)), [0, 1], base=base)).all()


# ------------------------------------------------------------------ 4: float8 counts

@pytest.mark.parametrize("dtype, limit", [(torch.float8_e4m3fn, "16"), (torch.float8_e5m2, "8")])
def test_a_float8_count_is_named_as_rounded(dtype, limit):
    given = torch.tensor(100.0).to(dtype)   # reads 96
    sentence = rounded_by_dtype(given, 100)
    assert sentence.startswith(f"the count is a {str(dtype)[6:]} number, which holds whole numbers exactly only "
                               f"up to {limit}, so")
    with pytest.raises(Wrong, match="exactly only up to"):
        count_answer(given, "your answer", 100)
    assert rounded_by_dtype(torch.tensor(3.0).to(dtype), 5) is None   # a small count it holds: another slip


def test_the_other_float_counts_keep_their_sentences():
    assert "up to 2,048" in rounded_by_dtype(torch.tensor(3000.0).half(), 3001)
    assert "up to 256" in rounded_by_dtype(torch.tensor(3000.0).bfloat16(), 3001)
    assert "up to 2,048" in rounded_by_dtype(np.float16(3000), 3001)
    assert "float32 number" in rounded_by_dtype(np.float32(2**25), 2**25 + 1)
    assert "float64 number" in rounded_by_dtype(2.0**60, 2**60 + 1)
    assert rounded_by_dtype(torch.tensor(5), 10**20) is None and rounded_by_dtype(5, 10**20) is None


# ------------------------------------------------------------------ 5: embedding_survival without dropout

def test_embedding_survival_measures_in_eval_mode_and_draws_nothing():
    torch.manual_seed(0)
    model = M.Transformer(M.Config(vocab_size=10, d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.5)).train()
    ids = [1, 2, 3, 4, 5]
    state = torch.get_rng_state()
    names, first = nz.embedding_survival(model, ids)
    _, second = nz.embedding_survival(model, ids)
    assert torch.equal(state, torch.get_rng_state()) and np.array_equal(first, second)
    assert all(module.training for module in model.modules())   # its mode put back
    assert np.array_equal(first, nz.embedding_survival(copy.deepcopy(model).eval(), ids)[1])


# ------------------------------------------------------------------ 6: one helper for "shape before the copy"

def test_shape_before_copy_reads_an_array_as_it_is_and_converts_a_list(refused):
    view = np.broadcast_to(np.float32(0.5), (9000, 9000))
    x, shape = errors.shape_before_copy(view, "S", 2)
    assert x is view and shape == (9000, 9000)
    x, shape = errors.shape_before_copy([[1, 2], [3, 4]], "S", 2)
    assert isinstance(x, np.ndarray) and x.dtype == float and shape == (2, 2)
    refused(lambda: errors.shape_before_copy([1, 2], "S", 2), "S should be 2-D")
    for function in (positions.diagonal_spread, masking.mask_after_softmax):
        source = inspect.getsource(function)
        assert "shape_before_copy(" in source and "shape_of(" not in source


# ------------------------------------------------------------------ 7: sample_sentences on errors.check_seeds

def test_sample_sentences_bounds_its_seeds_with_check_seeds(refused, cat, cat_world):
    assert "check_seeds(" in inspect.getsource(masking.sample_sentences)
    refused(lambda: masking.sample_sentences(cat, cat_world, 3, seed=2**32), "seed should be a whole number from 0 to "
            "2**32 - 1", "4294967296")
    refused(lambda: masking.sample_sentences(cat, cat_world, 3, seed=2**32 - 2), "seed + n - 1 (the last sentence's seed)")
    refused(lambda: masking.sample_sentences(cat, cat_world, 3, seed=-1), "seed should be at least 0")
    assert masking.sample_sentences(cat, cat_world, 2, seed=np.int64(7)) == masking.sample_sentences(cat, cat_world, 2,
                                                                                                      seed=7)
