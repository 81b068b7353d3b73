"""Red team round 28 (reader B, entries 2, 3, 4, 6, 7, 9): the live run's stops and put-backs, the timed work of a
deep model, slide's state, plot_steps' input and patch_grid's memory."""
import signal
import time

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

from helpers.errors import CourseInputError   # noqa: E402
from helpers.gpt import compute as gc   # noqa: E402
from helpers.model import Config, Transformer   # noqa: E402
from helpers.normalization import compute as nz   # noqa: E402
from helpers.sampling import compute as sampling   # noqa: E402

KICK = getattr(signal, "SIGURG", None)


@pytest.mark.skipif(KICK is None, reason="no SIGURG on this system")
def test_stopped_after_ends_a_sleep_in_the_main_thread():
    """2: time.sleep in the caller's thread took no stop from the watchdog (the live run's loop, learner_call,
    gpt.step_seconds(within=...)); the signal handler before is put back."""
    before = signal.getsignal(KICK)
    tick = time.perf_counter()
    with pytest.raises(gc.LoopLate):
        gc.stopped_after(0.3, gc.LoopLate, time.sleep, 60)
    assert time.perf_counter() - tick < 15   # (generous: a busy machine)
    assert signal.getsignal(KICK) is before
    tick = time.perf_counter()
    with pytest.raises(CourseInputError, match="should end within 1.0 s here"):
        gc.learner_call(0.5, "tokenizer.encode of the prompt", time.sleep, 60, put_back=False)
    assert time.perf_counter() - tick < 15
    assert gc.stopped_after(0.3, gc.LoopLate, lambda: 7) == 7
    assert signal.getsignal(KICK) is before


@pytest.mark.skipif(KICK is None, reason="no SIGURG on this system")
def test_stopped_after_nested_sleeps_end_each_at_its_own_time():
    """2: the live run's plan times passes inside a learner_call: the inner stop ends its sleep, the outer goes on."""
    def inner():
        with pytest.raises(gc.PassesLate):
            gc.stopped_after(0.3, gc.PassesLate, time.sleep, 60)
        return "after"

    assert gc.stopped_after(30, gc.LoopLate, inner) == "after"
    with pytest.raises(gc.LoopLate):   # the outer one's time up while the inner one sleeps
        gc.stopped_after(0.3, gc.LoopLate, gc.stopped_after, 30, gc.PassesLate, time.sleep, 60)


def test_switches_kept_puts_back_numpys_error_state_and_print_options():
    """3: a loop's np.seterr(all="raise") outlived the live run (a later cell's raw FloatingPointError)."""
    errors, printing = np.geterr(), np.get_printoptions()
    with gc.switches_kept():
        np.seterr(all="raise")
        np.set_printoptions(precision=1)
    assert np.geterr() == errors and np.get_printoptions() == printing
    with pytest.raises(RuntimeError), gc.switches_kept():
        np.seterr(all="raise")
        raise RuntimeError("the loop stopped")
    assert np.geterr() == errors


def test_step_seconds_counts_each_layers_fixed_cost():
    """4: a deep, narrow model's passes were counted at 10^8 each (982 passes of 1.3 s accepted)."""
    deep = Transformer(Config(vocab_size=10, d_model=4, n_heads=1, n_layers=300, d_ff=4, n_max=64))
    with pytest.raises(CourseInputError, match="20,000,000 a layer"):
        sampling.step_seconds(deep, [2] * 20, repeats=24)
    with pytest.raises(CourseInputError, match="prefill_and_decode_seconds should time at most"):
        sampling.prefill_and_decode_seconds(deep, 16, repeats=3)


class Counted(Exception):
    """Raised by the test's check_timed_work once it has counted (nothing is timed)."""


def test_the_chapters_timings_stay_well_under_the_budget(monkeypatch, dragon):
    """4: chapter 09's calls, counted with the layers' cost, still fit with room to spare."""
    wide = Transformer(Config(vocab_size=1000, d_model=256, n_heads=4, n_layers=4, d_ff=1024, n_max=1024,
                              positions="learned"))
    works, original = [], sampling.check_timed_work

    def counted(model, runs, what, advice, **kwargs):
        original(model, runs, what, advice, **kwargs)   # accepted
        works.append(sum(t * (sampling.forward_macs(model.cfg, a, b) + sampling.PASS_WORK
                              + sampling.LAYER_WORK * model.cfg.n_layers) for t, a, b in runs))
        raise Counted

    monkeypatch.setattr(sampling, "check_timed_work", counted)
    for call in (lambda: sampling.step_seconds(dragon, [8, 32, 128], 3),
                 lambda: sampling.step_seconds(wide, [16, 64, 128, 256, 512], 3),
                 lambda: sampling.prefill_and_decode_seconds(wide, 16, 3)):
        with pytest.raises(Counted):
            call()
    assert len(works) == 3 and 2 * sum(works) < sampling.MAX_TIMED_WORK


def test_slide_refuses_another_prompts_state(dragon, dragon_world):
    """6: slide showed troll's distribution under the prompt "<BOS> dragon drinks"."""
    troll = sampling.prompt_state(dragon, dragon_world, "<BOS> troll", room=4)
    with pytest.raises(CourseInputError, match=r"state should be the prompt's own \(prompt_state of '<BOS> dragon "
                                               r"drinks', 3 tokens\), but it holds another prompt of 2 tokens"):
        sampling.slide(dragon, dragon_world, "<BOS> dragon drinks", state=troll)
    own = sampling.slide(dragon, dragon_world, "<BOS> troll", state=troll)
    assert own["order"] == sampling.slide(dragon, dragon_world, "<BOS> troll")["order"]


def test_plot_steps_refuses_non_finite_numbers_and_another_xs_steps():
    """7: NaN in x, inf in out and the steps of another x of the same length were drawn."""
    nan, inf = float("nan"), float("inf")
    with pytest.raises(CourseInputError, match="^x should hold finite numbers"):
        nz.plot_steps([nan, 0.0], dict(mean=0.0, std=0.0, z=[0.0, 0.0], out=[0.0, 0.0]))
    with pytest.raises(CourseInputError, match=r"^steps\['out'\] should hold finite numbers"):
        nz.plot_steps([1.0, 0.0], dict(mean=0.5, std=0.5, z=[1.0, -1.0], out=[inf, 0.0]))
    with pytest.raises(CourseInputError, match=r"steps should be nz.layer_norm_steps\(x\) for this x \(mean 2, std "
                                               r"0.8165\), but its mean is 2.167"):
        nz.plot_steps([1.0, 2.0, 3.0], nz.layer_norm_steps([10.0, -4.0, 0.5]))
    x = np.array([1.0, 2.0, 4.0])
    with pytest.raises(CourseInputError, match="its z not"):   # the right mean and std, z of another order
        nz.plot_steps(x, dict(nz.layer_norm_steps(x), z=nz.layer_norm_steps(x)["z"][::-1]))
    h = np.array([0.054, 0.193, 0.865, 0.679, 0.475, 0.864])   # the chapter's, with its gamma and beta; eps 0 too
    gamma, beta = np.linspace(2, 3, 6), np.linspace(-0.5, 0.5, 6)
    for eps in (1e-5, 0.0, 10.0):
        fig = nz.plot_steps(h, nz.layer_norm_steps(h, gamma, beta, eps=eps))
        assert len(fig.axes) == 3
        matplotlib.pyplot.close(fig)


def test_patch_grid_counts_its_batch_before_the_streams(monkeypatch):
    """9: each layer's patched batch (N·P·T·d_model floats, 2.3 GB) was made before anything counted it."""
    from helpers.real import circuit, compute as real

    model, _ = real.load()
    monkeypatch.setattr(circuit, "streams", lambda *a: pytest.fail("streams ran before the count"))
    clean = torch.randint(100, 1000, (2, 700), generator=torch.Generator().manual_seed(0))
    corrupt = clean.clone()
    corrupt[:, -3] = 5
    with pytest.raises(CourseInputError, match=r"^patch_grid \(the streams of both runs at every layer, then a pass of "
                                               r"2 prompts × 700 positions of 700 tokens for each of the layers asked "
                                               r"for, 1 in all\) should need at most 0.5 GiB.*patch fewer positions"):
        circuit.patch_grid(model, clean, corrupt, torch.tensor([[11, 12], [13, 14]]), layers=[0])
