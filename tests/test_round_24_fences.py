"""Round 24 (issue 31), beside the stop's recursion headroom (test_round_24_stops): faulthandler switched on or off
by a learner's function stayed so after its check; a live run whose loop raised SystemExit or GeneratorExit let it
out raw, and one whose loop failed left torch's default dtype and deterministic mode as the loop set them; a shipped
model's name with a tokenizer (which it ignored) was accepted."""
import faulthandler

import pytest
import torch

from helpers import training
from helpers.errors import CourseInputError
from helpers.heads import compute as heads
from helpers.heads import explorer as heads_explorer
from helpers.model import Config, Transformer

from doubling import doubling_check


@pytest.mark.parametrize("switch", ["enable", "disable"])
def test_faulthandler_is_put_back_after_a_check(switch):
    before = faulthandler.is_enabled()
    (faulthandler.disable if switch == "enable" else faulthandler.enable)()   # the other way first
    kept = faulthandler.is_enabled()
    try:
        def doubles(x):
            getattr(faulthandler, switch)()
            return 2 * x

        assert doubling_check(5).feedback(doubles) == []
        assert faulthandler.is_enabled() == kept
    finally:
        (faulthandler.enable if before else faulthandler.disable)()


def tiny():
    torch.manual_seed(0)
    return Transformer(Config(vocab_size=5, d_model=8, n_heads=2, n_layers=1, d_ff=16, n_max=8))


@pytest.mark.parametrize("raised", [SystemExit(3), GeneratorExit(), type("Mine", (BaseException,), {})()])
def test_a_loop_that_raises_a_base_exception_of_its_own_gets_one_sentence(raised):
    model = tiny()
    before = {name: t.clone() for name, t in model.state_dict().items()}
    with pytest.raises(CourseInputError, match="the training loop stopped with") as said:
        with training.put_back_on_error(model, "the training loop"):
            with torch.no_grad():
                model.E.mul_(2)
            raise raised
    assert "the model was left as it was before the call" in str(said.value)
    assert all(torch.equal(before[name], t) for name, t in model.state_dict().items())


def test_an_interrupt_is_passed_on_after_the_model_is_put_back():
    model = tiny()
    with pytest.raises(KeyboardInterrupt):
        with training.put_back_on_error(model, "the training loop"):
            raise KeyboardInterrupt


def test_a_failed_loop_leaves_torchs_default_dtype_and_deterministic_mode_as_they_were():
    model = tiny()
    assert torch.get_default_dtype() == torch.float32 and not torch.are_deterministic_algorithms_enabled()
    try:
        with pytest.raises(CourseInputError, match="a slip in my loop"):
            with training.put_back_on_error(model, "the training loop"):
                torch.set_default_dtype(torch.float64)
                torch.use_deterministic_algorithms(True, warn_only=True)
                raise ValueError("a slip in my loop")
        assert torch.get_default_dtype() == torch.float32
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.set_default_dtype(torch.float32)
        torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("call", [lambda: heads_explorer.explorer(model="induction", tokenizer=5),
                                  lambda: heads.head_view("cat", 0, 0, "the cat", tokenizer="x")])
def test_a_shipped_models_name_with_a_tokenizer_is_refused(call):
    with pytest.raises(CourseInputError, match="tokenizer goes with a model of your own"):
        call()
