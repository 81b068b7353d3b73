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
