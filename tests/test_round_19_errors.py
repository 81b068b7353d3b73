"""Round 19 (issue 31) on the shared errors, memory sentences and overflow warnings: a memory refusal
prints the need so that it reads larger than the limit (errors.about_gib, used by check_bytes, a
model's trace and patching's pass check); finite inputs whose range passes float64 give no NumPy
RuntimeWarning (reference.softmax, scaling, the masking and tour checks); the masking explorer's model
names are strings (a tuple was read by the menu as (label, value))."""
import io
import re
import warnings

import matplotlib
import numpy as np
import pytest
import torch

from helpers import patching
from helpers import reference as ref
from helpers.errors import MAX_BYTES, check_bytes
from helpers.masking import checks as masking_checks
from helpers.model import Config, Transformer
from helpers.scaling import checks as scaling_checks
from helpers.scaling import compute as scaling
from helpers.tour import checks as tour_checks

matplotlib.use("Agg")
BIG = 1e308


def sizes(message):
    """The limit and the need a memory sentence states, in GiB, as floats."""
    limit = re.search(r"at most ([\d.,]+) GiB", message).group(1)
    need = re.search(r"about ([\d.,]+) GiB", message).group(1)
    return float(limit.replace(",", "")), float(need.replace(",", ""))


def quiet(call):
    """call(), asserting that no warning escapes it; its result."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return call()


# ---- 1. a memory refusal just past its limit reads larger than the limit

@pytest.mark.parametrize("need, limit", [(MAX_BYTES + 1, MAX_BYTES), (MAX_BYTES + 2**20, MAX_BYTES),
                                         (2**29 + 5, 2**29), (2**31, MAX_BYTES)])
def test_check_bytes_need_reads_larger_than_limit(refused, need, limit):
    message = refused(lambda: check_bytes(need, "this call", "ask for less", limit=limit), "GiB", "ask for less")
    shown_limit, shown_need = sizes(message)
    assert shown_limit == limit / 2**30
    assert shown_need > shown_limit and shown_need >= need / 2**30   # rounded up, never down


def test_softmax_jacobian_just_past_the_limit(refused):
    message = refused(lambda: scaling.softmax_jacobian(np.full(10_034, 1 / 10_034)), "10,033")
    shown_limit, shown_need = sizes(message)
    assert shown_need > shown_limit == 1.5


def test_trace_refusal_just_past_the_limit(refused):
    torch.manual_seed(0)
    net = Transformer(Config(vocab_size=10, d_model=128, n_heads=64, n_layers=1, d_ff=0, n_max=1024)).eval()
    message = refused(lambda: net(torch.zeros(1, 1024, dtype=torch.long), trace=True), "trace=True")
    shown_limit, shown_need = sizes(message)
    assert shown_need > shown_limit == 0.5


def test_patching_pass_refusal_just_past_the_limit(refused):
    torch.manual_seed(0)
    net = Transformer(Config(vocab_size=10, d_model=16, n_heads=2, n_layers=1, d_ff=16, n_max=64)).eval()
    B = patching.MAX_PASS_BYTES // net.cfg.pass_bytes(1, 64)   # (pass_bytes grows with B: one row's bytes each)
    patching.check_memory(net, B, 64)   # the largest batch fits
    message = refused(lambda: patching.check_memory(net, B + 1, 64), "batched pass")
    shown_limit, shown_need = sizes(message)
    assert shown_need > shown_limit == 0.5


# ---- 2. finite inputs past float64's range give no RuntimeWarning

def test_reference_softmax_of_a_range_past_float64():
    weights = quiet(lambda: ref.softmax(np.array([BIG, -BIG])))
    assert weights.tolist() == [1.0, 0.0]
    table = quiet(lambda: ref.softmax(np.array([[BIG, -BIG, 0.0], [-BIG, BIG, 1.0]]), axis=0))
    assert np.array_equal(table[:, :2], [[1.0, 0.0], [0.0, 1.0]])
    assert np.allclose(table[:, 2], [1 / (1 + np.e), np.e / (1 + np.e)])


def test_weight_gradient_of_a_range_past_float64():
    sizes_ = quiet(lambda: scaling.weight_gradient([BIG, -BIG, 0.0], 0, 1.0))
    assert sizes_["wrt_input"] == 0.0 and sizes_["wrt_scores"] == 0.0   # a saturated softmax: no gradient


def test_masked_weight_check_of_a_range_past_float64():
    found = quiet(lambda: masking_checks.masked_weight.feedback(0.5, np.array([[BIG, -BIG], [BIG, -BIG]]), 1, 1))
    assert found and "check itself failed" not in found[0]
    assert quiet(lambda: masking_checks.masked_weight.feedback(0.0, np.array([[BIG, -BIG], [BIG, -BIG]]), 1, 1)) == []


def test_next_prob_check_of_a_large_logit():
    assert quiet(lambda: tour_checks.next_prob.feedback(0.5, np.array([1000.0, 0.0]), 0))


def test_sentence_loss_check_of_two_tokens():
    """One predicted position: the slip that skips the first prediction has no mean (NumPy warned)."""
    found = quiet(lambda: tour_checks.sentence_loss.feedback(0.3, [[1.0, 0.0], [0.0, 1.0]], [0, 1]))
    assert found and "check itself failed" not in found[0]


def test_softmax_weights_whose_sum_overflows(refused):
    quiet(lambda: refused(lambda: scaling.check_weights([BIG, BIG]), "sum to inf"))
    quiet(lambda: refused(lambda: scaling.jacobian_size([[BIG, BIG], [0.5, 0.5]]), "sum to inf"))


def test_jacobian_check_of_an_answer_whose_rows_overflow():
    found = quiet(lambda: scaling_checks.jacobian.feedback(np.full((3, 3), BIG), [0.5, 0.25, 0.25]))
    assert "sum to 0" in found[0]


def test_renormalised_check_of_huge_answers_and_zeroed(refused):
    found = quiet(lambda: masking_checks.renormalised.feedback(np.tril(np.full((3, 3), BIG)), np.tril(np.full((3, 3), 0.3))))
    assert "sums to inf" in found[0]
    # zeroed is softmax weights: a number above 1 is refused, its rows would overflow
    quiet(lambda: refused(lambda: masking_checks.check_zeroed(np.tril(np.full((3, 3), BIG))), "from 0 to 1"))


def test_causal_attention_check_of_float64_weights_whose_rows_overflow():
    def huge(q, k, v):
        return (torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=torch.float64),
                torch.full(q.shape[:-1] + (k.shape[-2],), -BIG, dtype=torch.float64))
    found = quiet(lambda: masking_checks.causal_attention.feedback(huge))
    assert found and "sum to" in found[0]


@pytest.mark.parametrize("value", [1e300, 5e-324, 1e201, 1e-201])
def test_gradient_figure_refuses_values_a_log_axis_cannot_hold(refused, value):
    rows = [{"d": 4, "raw": value, "scaled": 0.1, "scaled_wrt_raw": 0.1},
            {"d": 8, "raw": 0.1, "scaled": 0.1, "scaled_wrt_raw": 0.1}]
    refused(lambda: scaling.gradient_figure(rows), "log axis", "1e-200", "1e+200")


def test_gradient_figure_draws_the_widest_values_without_warning():
    rows = [{"d": 4, "raw": 1e200, "scaled": 1e-200, "scaled_wrt_raw": 1e200},
            {"d": 8, "raw": 1e-200, "scaled": 1e200, "scaled_wrt_raw": 1e-200}]
    quiet(lambda: scaling.gradient_figure(rows).savefig(io.BytesIO(), format="png"))


# ---- 3. the masking explorer's model names are strings

@pytest.mark.parametrize("name", [("cat", "v1"), 3, None])
def test_masking_explorer_refuses_a_name_that_is_not_text(refused, name):
    from helpers import weights, worlds
    from helpers.masking import explorer
    refused(lambda: explorer.explorer({name: weights.load_cat()}, worlds.cat_world()), "name", "string")
