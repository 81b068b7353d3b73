"""helpers.errors: the one converter, and the one-sentence checks every public helper uses."""
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
