"""Round 25 (issue 31): values the shared validators misread. A whole number past float range was said to be inf;
-0.0 passed a bound of 0 and broke NumPy; a float subclass whose __float__ raised came out raw; a base below 1 was
blamed on the positions; weights that require grad made torch warn; float8, packed-bit and nested tensors reached torch
operations that do not take them; chapter 00's printers printed without bound; samples added a NumPy seed to n
before reading it (the sum wrapped)."""
import io
import contextlib
import warnings

import numpy as np
import pytest
import torch

from helpers import reference as ref
from helpers import weights, worlds
from helpers.errors import check_finite, check_number, to_numpy
from helpers.heads import compute as heads
from helpers.normalization import compute as nz
from helpers.positions import compute as positions
from helpers.readout import format_matrix, format_step, print_top, print_trace
from helpers.sampling import compute as sampling


class Loss(float):
    """A float subclass of the learner's whose __float__ raises."""

    def __float__(self):
        raise RuntimeError("not ready")


def test_a_whole_number_past_float_range_is_named_not_said_to_be_inf(refused):
    message = refused(lambda: positions.offset_rotation(1, 4, base=2**1100), "base should be a number > 1",
                      "a float can hold", "an integer of 1,101 bits")
    assert "inf" not in message
    refused(lambda: check_number(-2**1100, "x", low=0, high=1), "x should be a number >= 0 and at most 1",
            "an integer of 1,101 bits")
    refused(lambda: check_number(np.longdouble(10) ** 400, "x"), "a float can hold", "1e+400")


def test_minus_zero_is_zero_and_a_failing_float_is_one_sentence(refused):
    value = check_number(-0.0, "half_width", low=0)
    assert value == 0 and np.copysign(1, value) == 1
    spread = nz.rounding_spread(np.array([1., 2., 3.]), np.ones(3), np.zeros(3), half_width=-0.0)
    assert np.all(spread == 0)
    refused(lambda: nz.significant(Loss(0.5)), "value should be a number", "Loss that cannot be read")
    refused(lambda: check_number(Loss(0.5), "t", low=0), "t should be a number >= 0", "Loss")
    refused(lambda: nz.significant(10**400), "a float can hold")


def test_a_base_of_1_or_less_is_refused_before_the_positions(refused):
    refused(lambda: positions.offset_rotation(1, 4, base=1e-300), "base should be > 1", "1e-300")
    refused(lambda: ref.rotate_pairs(np.ones((2, 4)), [0, 1], base=1e-300), "base should be > 1")
    refused(lambda: ref.rotate_pairs(np.ones((2, 4)), [0, 2**60], base=0.5), "base should be > 1")
    assert np.allclose(positions.offset_rotation(0, 4), np.eye(4))


def test_weights_that_require_grad_are_read_without_torch_warning():
    scores = torch.randn(9, 9, requires_grad=True)
    w = torch.softmax(scores.masked_fill(torch.triu(torch.ones(9, 9, dtype=torch.bool), 1), float("-inf")), -1)
    ids = torch.tensor([1, 2, 3, 4, 1, 2, 3, 4, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores_read = [heads.previous_token_score(w), heads.induction_score(w, 4), heads.attention_profile(w)["bos"],
                       torch.tensor(heads.repeat_score(w, ids))]
    assert not any(t.requires_grad for t in scores_read)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz])
def test_float8_weights_are_refused_in_one_sentence(refused, dtype):
    w = (torch.tril(torch.ones(9, 9)) / torch.arange(1, 10)[:, None]).to(dtype)
    for call in (lambda: heads.previous_token_score(w), lambda: heads.induction_score(w, 4),
                 lambda: heads.attention_profile(w), lambda: check_finite(w, "weights")):
        refused(call, "weights should be a dense tensor of real numbers", str(dtype), "x.float()")
    assert to_numpy(w[:2, :2]).tolist() == [[1.0, 0.0], [0.5, 0.5]]   # a converter still reads float8 as float32
    assert "1.000" in format_matrix(w[:2, :2])


@pytest.mark.parametrize("dtype", [torch.uint4, torch.int3, torch.bits8])
def test_packed_bit_tensors_are_refused_in_one_sentence(refused, dtype):
    x = torch.empty(4, dtype=dtype)
    refused(lambda: to_numpy(x, "x"), "x should be a dense tensor", str(dtype), "packed bits")
    refused(lambda: check_finite(x, "x"), "x should be a dense tensor", "packed bits")


def test_nested_tensors_reach_no_readout_unchecked(refused):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([torch.ones(2, 2), torch.ones(3, 2)])
    refused(lambda: format_matrix(nested), "x should be a dense tensor", "nested")
    refused(lambda: format_step("x", nested), "x should be a dense tensor", "nested")
    refused(lambda: format_matrix(np.ones((2, 2)), row_labels=nested), "row_labels should be a dense tensor")


@pytest.fixture(scope="module")
def cat_trace():
    cat, world = weights.load_cat(), worlds.cat_world()
    with torch.no_grad():
        trace = cat(world.tokenizer.encode("<BOS> the cat sat"), trace=True)
    return cat, trace


def printed(call):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        call()
    return out.getvalue()


def test_the_printers_refuse_unbounded_text_before_printing(refused, cat_trace):
    cat, trace = cat_trace
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        refused(lambda: print_trace(trace, names=["L0.q"] * 100_000), "at most once", "100,000 names")
        refused(lambda: print_trace(trace, names=["L0.q", "L0.k", "L0.q"]), "'L0.q' is named 2 times")
        refused(lambda: print_trace({"a": torch.zeros(1000, 1000), "b": torch.zeros(2, 2)}),
                "at most 1,000,000 numbers", "1,000,004")
        refused(lambda: print_trace({"a": torch.zeros(2, 2), "b": "not a tensor"}), "x should be a traced tensor")
        refused(lambda: format_step("x", torch.zeros(2, 1000, 1000)), "at most 1,000,000 numbers")
        probs = torch.softmax(trace["logits"][-1], -1)
        refused(lambda: print_top(probs, ["a" * 10**6] * cat.cfg.vocab_size), "each token printed",
                "at most 100 characters")
        refused(lambda: print_top(probs, list("x" * cat.cfg.vocab_size), k=1001), "k should be at most 1,000")
    assert out.getvalue() == ""   # nothing half-printed
    assert "L0.q" in printed(lambda: print_trace(trace, names=["L0.q", "L0.k"]))
    assert "rank" in printed(lambda: print_top(probs, [f"t{i}" for i in range(cat.cfg.vocab_size)], k=3))


def test_samples_reads_a_numpy_seed_before_adding_n(refused):
    cat = weights.load_cat()
    ids = worlds.cat_world().tokenizer.encode("<BOS> the")
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # NumPy's overflow warning for np.int8(127) + 4
        refused(lambda: sampling.samples(cat, ids, 4, 3, seed=np.uint32(2**32 - 1)), "seed + n - 1",
                "4294967297")
        refused(lambda: sampling.samples(cat, ids, 4, 3, seed=2**32 - 1), "seed + n - 1", "4294967297")
        rows = sampling.samples(cat, ids, 4, 5, seed=np.int8(127))
        again = sampling.samples(cat, ids, 4, 1, seed=131)
    assert torch.equal(rows[4], again[0])
