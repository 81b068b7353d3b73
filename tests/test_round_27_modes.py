"""Round 27, fixer "modes": the compute functions of chapters 00-06 run in the course's torch modes (the CPU, no
autocast, float32 as the default dtype) whatever cell wraps the call, and give a plain cell's results."""
import numpy as np
import pytest
import torch

from helpers import states, weights, worlds
from helpers.heads import compute as heads
from helpers.masking import compute as masking
from helpers.positions import compute as positions
from helpers.qkv import compute as qkv
from helpers.scaling import compute as scaling
from helpers.tour import compute as tour


@pytest.fixture(scope="module")
def cat_and_world():
    return weights.load_cat(), worlds.cat_world()


def numbers(result):
    """Every number of a result (tensors, arrays, floats, in dicts and lists), flat, with the tensors' dtypes."""
    out, dtypes = [], []

    def walk(x):
        if isinstance(x, torch.Tensor):
            assert x.device.type == "cpu", f"a tensor on {x.device}"
            dtypes.append(x.dtype)
            out.append(x.detach().double().numpy().ravel())
        elif isinstance(x, np.ndarray) and x.dtype.kind in "fiub":
            out.append(x.astype(float).ravel())
        elif isinstance(x, (float, int)) and not isinstance(x, bool):
            out.append(np.array([float(x)]))
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
    walk(result)
    return np.concatenate(out), dtypes


def calls(cat, world):
    ids = world.tokenizer.encode("<BOS> the cat sat on the mat")
    return {
        "positions.shifted_loss": lambda: positions.shifted_loss(cat, ids[None, :-1], ids[None, 1:], 2),
        "positions.sinusoidal_positions": lambda: positions.sinusoidal_positions(8, 8),
        "positions.position_task": lambda: positions.position_task(4),
        "masking.dropout_demo": lambda: masking.dropout_demo(),
        "masking.three_words": lambda: masking.three_words(),
        "masking.leak": lambda: masking.leak(),
        "masking.book_one_head": lambda: masking.book_one_head()[1],
        "masking.causal_mask": lambda: masking.causal_mask(4),
        "heads.head_view": lambda: heads.head_view(),
        "heads.even_weights": lambda: heads.even_weights(4),
        "scaling.six_keys": lambda: scaling.six_keys(),
        "scaling.dot_spread": lambda: scaling.dot_spread(dims=(2, 4), n=1000),
        "scaling.gradient_by_dim": lambda: scaling.gradient_by_dim(dims=(2, 4), n_queries=20),
        "tour.mean_loss": lambda: tour.mean_loss(cat, world),
        "tour.logit_spread": lambda: tour.logit_spread(cat, world),
        "qkv.cat_head_cases": lambda: qkv.cat_head_cases(),
    }


def default_dtype(dtype):
    class Kept:
        def __enter__(self):
            self.before = states.default_dtype(dtype)

        def __exit__(self, *exc):
            states.default_dtype(self.before)
    return Kept()


MODES = {
    "meta device": lambda: torch.device("meta"),
    "autocast bfloat16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "default float64": lambda: default_dtype(torch.float64),
    "default float16": lambda: default_dtype(torch.float16),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_compute_functions_give_a_plain_cells_results_in_any_mode(cat_and_world, mode):
    for name, call in calls(*cat_and_world).items():
        torch.manual_seed(0)
        plain, plain_dtypes = numbers(call())
        torch.manual_seed(0)
        with MODES[mode]():
            got, dtypes = numbers(call())
            if mode.startswith("default"):   # the learner's default dtype is theirs again after the call
                assert torch.get_default_dtype() == (torch.float64 if "64" in mode else torch.float16)
        assert dtypes == plain_dtypes, f"{name} under {mode}: dtypes {dtypes} instead of {plain_dtypes}"
        np.testing.assert_allclose(got, plain, rtol=0, atol=0, err_msg=f"{name} under {mode}")
    assert torch.get_default_dtype() == torch.float32


def test_six_keys_and_leak_give_the_books_numbers_after_set_default_dtype():
    plain_keys, plain_leak = np.asarray(scaling.six_keys()), masking.leak()["with_mask"]
    with default_dtype(torch.float64):
        keys, leak = np.asarray(scaling.six_keys()), masking.leak()["with_mask"]
    assert np.array_equal(keys, plain_keys)
    assert leak.dtype == torch.float32 and torch.equal(leak, plain_leak)


def test_on_the_cpu_puts_the_default_dtype_back_after_an_error():
    @states.on_the_cpu
    def broken():
        assert torch.get_default_dtype() == torch.float32
        assert not torch.is_autocast_enabled("cpu")
        raise ValueError("boom")

    with default_dtype(torch.float16), torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(ValueError, match="boom"):
            broken()
        assert torch.get_default_dtype() == torch.float16 and torch.is_autocast_enabled("cpu")
    assert torch.get_default_dtype() == torch.float32


def test_a_refusal_still_names_the_learners_own_meta_tensor():
    from helpers.errors import CourseInputError
    scores = torch.zeros(3, 3, device="meta")
    with pytest.raises(CourseInputError, match=r"^scores should be a dense tensor .*meta device"):
        masking.apply_mask(scores)


def test_the_scaling_pool_is_drawn_in_float32_whatever_the_default_dtype():
    scaling._pool.clear()   # (drawn again here, under float64: the explorer's numbers must not change)
    with default_dtype(torch.float64):
        drawn = {k: v.copy() for k, v in scaling.pool().items()}
    scaling._pool.clear()
    for key, value in scaling.pool().items():
        assert value.dtype == np.float32 and np.array_equal(value, drawn[key]), key


def test_book_one_head_gives_the_books_numbers_and_a_module_in_the_cells_dtype():
    plain_module, plain = masking.book_one_head()
    x = torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(0))
    with default_dtype(torch.float64):
        module, ex = masking.book_one_head()
        out = module(x.double())   # (a learner's torch.randn here is float64: the module takes it)
    assert ex["out"].dtype == torch.float32 and torch.equal(ex["out"], plain["out"])
    assert module.W_q.weight.dtype == torch.float64
    torch.testing.assert_close(out.float(), plain_module(x))
    with torch.device("meta"):
        module, ex = masking.book_one_head()
    assert module.W_q.weight.device.type == "cpu" and torch.equal(ex["out"], plain["out"])
