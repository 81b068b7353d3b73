"""Round 21 of the red team (issue 31), mended by hand: what the fixers' files did not cover."""
import pytest

from helpers.masking import compute as masking


@pytest.mark.parametrize("value", [1e-46, 5e-324, -1e-40])
def test_dropout_demo_refuses_a_value_float32_rounds_to_nothing(refused, value):
    refused(lambda: masking.dropout_demo(p=0.5, n=8, value=value), "value should be 0 or at least", "float32")


@pytest.mark.parametrize("value", [0.0, 1e-37, 0.125])
def test_dropout_demo_keeps_a_value_float32_holds(value):
    out = masking.dropout_demo(p=0.5, n=8, value=value)
    assert float(out["eval"][0]) == pytest.approx(value, rel=1e-6)
    kept = out["train"][out["train"] != 0]
    assert all(float(x) == pytest.approx(value / 0.5, rel=1e-6) for x in kept)
