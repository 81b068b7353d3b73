"""Round 30 (issue 31), readers' findings mended at once: a live run puts back the notebook thread's denormal
switch its loop set (torch.set_flush_denormal, a switch of the thread's CPU state torch cannot read back; a check runs
a learner's function in a thread of its own, so only the live run, whose loop runs in the notebook's thread, kept
it); chapter 09's tempered check refuses an answer that calls the course's greedy_limit."""
import numpy as np
import pytest
import torch

from helpers.gpt import compute as gc
from helpers.sampling import checks as sampling_checks
from helpers.sampling.compute import greedy_limit


def test_a_live_runs_switches_put_back_the_denormal_switch():
    assert not gc.denormals_flushed()
    try:
        with pytest.raises(RuntimeError), gc.switches_kept():
            assert torch.set_flush_denormal(True)   # (False where the CPU cannot: nothing to put back then)
            assert gc.denormals_flushed()
            raise RuntimeError("the loop stopped")
        assert not gc.denormals_flushed()
    finally:
        torch.set_flush_denormal(False)


def test_tempered_refuses_the_courses_greedy_limit(capsys):
    def tempered(logits, T):
        logits = np.asarray(logits, dtype=float)
        if T == 0:
            return greedy_limit(logits)
        z = logits / T - (logits / T).max()
        return np.exp(z) / np.exp(z).sum()

    sampling_checks.tempered_function(tempered)
    out = capsys.readouterr().out
    assert "✗" in out and "greedy_limit" in out


def test_a_copied_cache_is_read_no_more_than_its_source():
    """The rehearsal's forced CPU path: chapter 09's timed cached step (on a copy, ``sampling.copied``) checked every
    number of a copy's entries at every step (its cached / one-token ratio at T = 512 went from 1.6 to 2.9); a copy
    keeps knowing the passes' entries, so checking it reads none of them (no torch call)."""
    from helpers.model import Config, Transformer
    from helpers.sampling import compute as sampling

    torch.manual_seed(0)
    model = Transformer(Config(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=64)).eval()
    ids = torch.randint(0, 50, (20,))
    from torch.overrides import TorchFunctionMode

    class Counter(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Counter.calls += 1
            return func(*args, **(kwargs or {}))

    copy = sampling.copied(sampling.prefilled(model, ids[:-1]))
    with torch.no_grad(), Counter():
        copy.check_entries(model)
    assert Counter.calls == 0
    assert torch.allclose(model(ids[-1:], cache=copy), model(ids)[-1:], atol=1e-5)
