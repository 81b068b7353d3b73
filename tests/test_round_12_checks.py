"""Round 12 of the red team, exercise checks: a right answer is judged right before any slip is
looked for, since a slip's value can equal the right one (kv_bytes with one layer or one byte a
number, tempered with equal logits, renormalised when zeroed's rows already sum to 1)."""
import numpy as np
import pytest

from helpers.masking import checks as masking_checks
from helpers.reference import softmax
from helpers.sampling import checks as sampling_checks, compute as sampling


@pytest.mark.parametrize("sizes", [(1, 1024, 12, 64, 2), (12, 1024, 12, 64, 1), (1, 8, 2, 4, 1)])
def test_round_12_kv_bytes_right_count_is_right_when_a_factor_is_1(sizes):
    n_layers, T, n_heads, d_k, bytes_per_element = sizes
    right = 2 * n_layers * T * n_heads * d_k * bytes_per_element
    assert right == sampling.kv_cache_bytes(*sizes)
    assert sampling_checks.kv_bytes.feedback(right, *sizes) == []


@pytest.mark.parametrize("logits", [np.zeros(5), np.full(4, 2.0), np.full(1, -3.0)])
def test_round_12_tempered_right_distribution_is_right_for_equal_logits(logits):
    assert sampling_checks.tempered.feedback(softmax(logits / 0.7), logits, 0.7) == []


@pytest.mark.parametrize("zeroed", [np.eye(3), np.array([[1.0, 0, 0], [0.4, 0.6, 0], [0.2, 0.3, 0.5]])])
def test_round_12_renormalised_right_is_right_when_rows_already_sum_to_1(zeroed):
    right = zeroed / zeroed.sum(axis=1, keepdims=True)
    assert masking_checks.renormalised.feedback(right, zeroed) == []
    assert masking_checks.renormalised.feedback(zeroed.copy(), zeroed) == []   # unchanged is right here


def test_round_12_real_slips_still_get_their_hints():
    sizes = (12, 1024, 12, 64, 2)
    right = sampling.kv_cache_bytes(*sizes)
    assert "one layer" in " ".join(sampling_checks.kv_bytes.feedback(right // 12, *sizes))
    one_layer = sampling.kv_cache_bytes(1, 1024, 12, 64, 2)
    said = " ".join(sampling_checks.kv_bytes.feedback(one_layer // 2, 1, 1024, 12, 64, 2))
    assert "numbers, not bytes" in said and "one layer" not in said   # with 1 layer, that slip is the right count
    assert "K or V alone" in " ".join(sampling_checks.kv_bytes.feedback(right // 2, *sizes))
    logits = np.array([2.0, 1.0, 0.5, -1.0])
    assert "temperature 1" in " ".join(sampling_checks.tempered.feedback(softmax(logits), logits, 0.7))
    assert "multiplied" in " ".join(sampling_checks.tempered.feedback(softmax(logits * 0.7), logits, 0.7))
    zeroed = np.tril(softmax(np.arange(9.0).reshape(3, 3) / 3, axis=-1))   # softmax, then the future set to 0
    said = " ".join(masking_checks.renormalised.feedback(zeroed, zeroed))
    assert "zeroed weights unchanged" in said
    said = " ".join(masking_checks.renormalised.feedback(zeroed / zeroed.sum(axis=0, keepdims=True), zeroed))
    assert "each column" in said
