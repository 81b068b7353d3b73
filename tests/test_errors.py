"""helpers.errors: the one converter, and the one-sentence checks every public helper uses."""
import warnings

import numpy as np
import pytest
import torch

from helpers.errors import as_array, check_number, check_positive_int, check_seed, to_numpy


def test_to_numpy_takes_tensors_with_grad_lists_and_numbers():
    assert to_numpy(torch.ones(2, requires_grad=True)).tolist() == [1.0, 1.0]
    assert to_numpy([1, 2]).dtype == np.float64 and to_numpy(np.float32(3)).shape == ()


@pytest.mark.parametrize("call, words", [
    (lambda: to_numpy(None, "Q"), ["Q is None"]),
    (lambda: to_numpy(np.array([1j]), "x"), ["x", "real numbers", "complex"]),
    (lambda: to_numpy("abc", "x"), ["x", "array of numbers", "text"]),
    (lambda: as_array(np.ones(3), "K", 2), ["K", "2-D", "(3,)"]),
    (lambda: check_positive_int(True, "T"), ["T", "whole number", "True"]),
    (lambda: check_positive_int(0, "T"), ["T", "at least 1", "0"]),
    (lambda: check_seed(-1), ["seed", "at least 0", "-1"]),
    (lambda: check_seed(1.0), ["seed", "whole number", "1.0"]),
    (lambda: check_number(float("inf"), "lr"), ["lr", "finite", "inf"]),
    (lambda: check_number(2.0, "p", high=1), ["p", "at most 1", "2"]),
])
def test_bad_input_is_refused_in_one_sentence(refused, call, words):
    refused(call, *words)


def test_numpy_integers_are_whole_numbers():
    assert check_positive_int(np.int64(3), "T") == 3 and type(check_seed(np.int32(5))) is int


def test_a_value_is_shown_on_one_line():
    import torch
    from helpers.errors import shown
    assert shown(torch.zeros(3, 4)) == "a tensor of shape (3, 4)"

    class Tall:
        def __repr__(self):
            return "first\nsecond"
    assert "\n" not in shown(Tall()) and shown(Tall()) == "first second"


@pytest.mark.parametrize("make, words", [
    (lambda: torch.zeros(3, device="meta"), ["meta device", "holds no data"]),
    (lambda: torch.tensor([0.0, 1.0]).to_sparse(), ["layout torch.sparse_coo"]),
    (lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), ["nested tensor"]),
    (lambda: torch.zeros(3, dtype=torch.complex32), ["complex", "torch.complex32"]),
    (lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8), ["quantized", "torch.quint8"]),
])
def test_odd_tensor_kinds_are_refused_before_their_data_is_read(refused, make, words):
    """Red team round 6: each stopped in a raw NotImplementedError, RuntimeError or TypeError."""
    from helpers.exercises import Wrong, as_array as answer_array
    with warnings.catch_warnings():   # torch warns that some of these kinds are experimental
        warnings.simplefilter("ignore")
        tensor = make()
    refused(lambda: to_numpy(tensor, "x"), "x should be a dense tensor of real numbers", *words)
    with pytest.raises(Wrong, match="answer should be a dense tensor"):
        answer_array(tensor, "answer")


def test_floats_numpy_has_no_type_for_are_read_as_float32():
    assert to_numpy(torch.ones(2, dtype=torch.float8_e4m3fnuz)).tolist() == [1.0, 1.0]
    assert to_numpy(torch.tensor([0.5], dtype=torch.bfloat16)).tolist() == [0.5]


def test_check_finite_names_the_entries_and_takes_minus_inf_where_allowed(refused):
    from helpers.errors import check_finite
    refused(lambda: check_finite(np.array([1.0, np.nan, np.inf]), "S"), "S should hold finite numbers", "2 of its 3")
    refused(lambda: check_finite(torch.tensor([0.0, np.inf]), "S", minus_inf=True), "(or -inf)", "+inf", "1 of its 2")
    masked = np.array([-np.inf, 1.0])
    assert check_finite(masked, "S", minus_inf=True) is masked


def test_round_8_a_view_is_measured_and_a_learners_object_cannot_break_the_converter(refused):
    """Red team round 8: a broadcast view holds one number and stands for 10**9 (converting it
    filled 7.5 GB); an object whose __float__ or __array__ raises its own error got through raw."""
    import numpy as np

    from helpers.errors import to_numpy

    class BadFloat:
        def __float__(self):
            raise RuntimeError("boom")

    class BadArray:
        def __array__(self, *args, **kwargs):
            raise KeyError("boom")

    refused(lambda: to_numpy(np.broadcast_to(0.0, 10**9), "x"), "x (an array of 1,000,000,000 numbers)", "1.5 GiB")
    for thing in (BadFloat(), [BadFloat(), 1.0], BadArray()):
        refused(lambda: to_numpy(thing, "x"), "x should be an array of numbers")
    assert to_numpy(np.broadcast_to(2.0, (3, 4)), "x").shape == (3, 4)

    class OddFloat(float):
        def __float__(self):
            raise RuntimeError("boom")

        def __repr__(self):
            raise RuntimeError("boom")

    from helpers.errors import check_number
    refused(lambda: check_number(OddFloat(2.0), "t"), "t should be a number", "OddFloat")
    assert to_numpy(-2**1023, "x") == -float(2**1023)   # a float holds it (the review's case)
    refused(lambda: to_numpy(-2**1024, "x"), "a float can hold")


# ---- red team round 9: values whose own methods lie or raise -------------------------------------


class LyingInt(int):
    def __index__(self):
        raise RuntimeError("boom index")

    def __int__(self):
        raise RuntimeError("boom int")

    def __lt__(self, other):
        return False


class LenRaises(list):
    def __len__(self):
        raise RuntimeError("boom len")


def test_round_9_an_int_subclass_is_read_by_int_s_own_method(refused):
    """An int subclass whose __int__ raised gave a raw traceback in every function taking a count;
    one whose < lied passed a negative count."""
    from helpers.errors import check_index

    assert check_positive_int(LyingInt(3), "n") == 3 and type(check_positive_int(LyingInt(3), "n")) is int
    refused(lambda: check_positive_int(LyingInt(-3), "n"), "n should be at least 1")
    assert check_index(LyingInt(2), "i", 3) == 2
    refused(lambda: check_index(LyingInt(5), "i", 3), "i should be a whole number from 0 to 2")


def test_round_9_a_sentence_shows_a_list_whose_len_raises():
    from helpers.errors import check_switch

    with pytest.raises(ValueError, match="is a switch and should be True or False, but got"):
        check_switch(LenRaises([1.0]), "causal")


def test_round_9_text_is_read_as_a_plain_str():
    from helpers.errors import check_text

    class Odd(str):
        def strip(self, *args):
            raise RuntimeError("boom strip")

    assert type(check_text(Odd("the cat"))) is str


def test_round_9_none_among_numbers_is_no_nan(refused):
    refused(lambda: to_numpy([1.0, None], "scores"), "scores should hold numbers, but it holds None")
    refused(lambda: as_array([[1.0, 2.0], [None, 3.0]], "x"), "holds None")


def test_round_9_an_expanded_tensor_is_counted_before_any_op(refused):
    from helpers.errors import check_tensor_size

    refused(lambda: check_tensor_size(torch.zeros(1).expand(10**9), "x"), "x (a tensor of 1,000,000,000 numbers)",
            "1.5 GiB")
    small = torch.zeros(3)
    assert check_tensor_size(small, "x") is small
