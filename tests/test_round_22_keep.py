"""Round 22 (issue 31): keeping a right piece imports the learner's whole cell, and now does so inside the same
fence as a call of their function (a thread or process the cell starts is stopped and the piece not kept, an
exit function dropped); a whole-number answer is read exactly, not through float64 (2**60 + 1 is not 2**60);
and more process state is put back after a check (sockets' default timeout, the dlopen flags, the collector's
debug flags) or refused (os.setsid, which no one can undo)."""
import atexit
import gc
import linecache
import os
import socket
import sys
import time

import numpy as np
import pytest
import torch

from helpers import exercises, states
from helpers.exercises import Wrong
from helpers.geometry import checks as geometry_checks
from helpers.qkv import checks as qkv_checks
from helpers.sampling import checks as sampling_checks
from test_round_22_state import cosine_doing


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    return tmp_path / "my_gpt"


HEAD = '''import math, os, time, threading, subprocess, atexit, torch

def attention_head(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
    q, k, v = x @ W_Q + b_Q, x @ W_K + b_K, x @ W_V + b_V
    s = q @ k.T / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.triu(torch.ones(len(s), len(s), dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(s, -1) @ v
'''


def cell(source, folder):
    """Run ``source`` as a notebook cell would (its lines in linecache); return its attention_head."""
    filename = str(folder / f"cell_{abs(hash(source))}.py")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": "cell"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["attention_head"]


def checked(piece, capsys):
    """What qkv's attention_head check prints for ``piece`` (its ✓ line says whether it was kept)."""
    qkv_checks.attention_head(piece)
    return capsys.readouterr().out


def running(name):
    """The threads named ``name`` still alive (waited for up to 10 s: a stopped thread ends at its next line)."""
    for _ in range(200):
        alive = [thread for thread in __import__("threading").enumerate() if thread.name == name and thread.is_alive()]
        if not alive:
            return []
        time.sleep(0.05)
    return alive


# 1. the kept cell is imported inside the fence

def test_a_kept_cell_that_starts_a_thread_is_not_kept_and_its_thread_is_stopped(store, tmp_path, capsys):
    source = HEAD + ("STOP = threading.Event()\n"
                     "threading.Thread(target=lambda: [time.sleep(0.01) for _ in range(3000)], daemon=True, "
                     "name='started-by-the-kept-cell').start()\n")
    piece = cell(source, tmp_path)
    out = checked(piece, capsys)
    assert "✓" in out and "not kept" in out and "thread" in out and "leave nothing running" in out, out
    assert not (store / "attention_head.py").exists()
    assert len(running("started-by-the-kept-cell")) <= 1   # the learner's own run's thread may still be alive
    assert "\n" not in out.strip()


def test_a_kept_cell_that_starts_a_process_is_not_kept_and_starts_none(store, tmp_path, capsys):
    pids = tmp_path / "pids"
    source = HEAD + (f"CHILD = subprocess.Popen(['sleep', '30'])\n"
                     f"open({str(pids)!r}, 'a').write(str(CHILD.pid) + '\\n')\n")
    piece = cell(source, tmp_path)
    try:
        out = checked(piece, capsys)
        assert "✓" in out and "not kept" in out and "another program" in out, out
        assert not (store / "attention_head.py").exists()
        assert len(pids.read_text().split()) == 1   # the cell's own run's; the keep's import started none (round 31)
    finally:
        for pid in pids.read_text().split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass


def test_a_kept_cell_that_registers_an_exit_function_is_kept_without_it(store, tmp_path, capsys):
    piece = cell(HEAD + "atexit.register(len, 'bye')\n", tmp_path)
    exits = atexit._ncallbacks()
    out = checked(piece, capsys)
    assert "kept in" in out, out
    assert (store / "attention_head.py").exists()
    assert atexit._ncallbacks() == exits


def test_a_right_cell_is_still_kept_and_used(store, tmp_path, capsys):
    out = checked(cell(HEAD, tmp_path), capsys)
    assert "kept in" in out, out
    from helpers import learner
    assert learner.use("attention_head", course=None, quiet=True).__name__ == "attention_head"


# 2. whole numbers read exactly

SIZES = (2**10, 2**20, 2**9, 2**10, 2**10)   # 2 * L * T * h * d_k * b = 2**60


@pytest.mark.parametrize("wrong", [2**60 + 1, 2**60 + 64, 2**60 - 1, np.int64(2**60 + 1),
                                   torch.tensor(2**60 + 1), np.array([2**60 + 1])],
                         ids=["plus1", "plus64", "minus1", "np.int64", "tensor", "array"])
def test_a_count_past_2_53_is_compared_exactly(wrong):
    assert sampling_checks.kv_bytes.feedback(wrong, *SIZES)
    assert not sampling_checks.kv_bytes.feedback(2**60, *SIZES)
    assert not sampling_checks.kv_bytes.feedback(torch.tensor(2**60), *SIZES)


def test_a_returned_count_is_quoted_exactly():
    found = sampling_checks.kv_cache_bytes_function.feedback(lambda cfg, T, b: 2**60 + 1)
    assert found and "1,152,921,504,606,846,977" in found[0], found


def test_whole_numbers_are_read_exactly_and_fractions_still_refused():
    assert exercises.as_whole(np.int64(2**62 + 1), "n") == 2**62 + 1
    assert exercises.as_whole(torch.tensor([2**62 + 1]), "n") == 2**62 + 1
    assert exercises.as_whole(2**70 + 1, "n") == 2**70 + 1
    assert exercises.as_wholes([2**60 + 1, 3], "shape") == (2**60 + 1, 3)
    assert exercises.as_wholes(torch.tensor([2**60 + 1, 3]), "shape") == (2**60 + 1, 3)
    assert exercises.as_whole(5.0, "n") == 5 and exercises.as_wholes((2.0, 3), "shape") == (2, 3)
    with pytest.raises(Wrong, match="whole number"):
        exercises.as_whole(302.9, "n")
    with pytest.raises(Wrong, match="truth value"):
        exercises.as_whole(True, "n")


# 3. more process state


def test_sockets_default_timeout_is_put_back():
    before = socket.getdefaulttimeout()
    try:
        assert not geometry_checks.cosine_function.feedback(cosine_doing(lambda: socket.setdefaulttimeout(0.0001)))
        assert socket.getdefaulttimeout() == before
    finally:
        socket.setdefaulttimeout(before)


def test_the_dlopen_flags_are_put_back():
    before = sys.getdlopenflags()
    try:
        assert not geometry_checks.cosine_function.feedback(cosine_doing(lambda: sys.setdlopenflags(0)))
        assert sys.getdlopenflags() == before
    finally:
        sys.setdlopenflags(before)


def test_the_collectors_debug_flags_are_put_back_and_its_kept_garbage_let_go():
    before, garbage = gc.get_debug(), len(gc.garbage)

    def save_all():
        gc.set_debug(gc.DEBUG_SAVEALL)
        cycle = []
        cycle.append(cycle)
        del cycle
        gc.collect()
    try:
        assert not geometry_checks.cosine_function.feedback(cosine_doing(save_all))
        assert gc.get_debug() == before and len(gc.garbage) == garbage
    finally:
        gc.set_debug(before)


def test_os_setsid_is_refused_in_one_sentence():
    session = os.getsid(0)
    found = geometry_checks.cosine_function.feedback(cosine_doing(lambda: os.setsid()))
    assert len(found) == 1 and "os.setsid" in found[0] and "\n" not in found[0] and ". " not in found[0], found
    assert "does not allow" in found[0] and os.getsid(0) == session and os.setsid is not states.no_setsid


def test_a_new_process_group_is_put_back():
    group = os.getpgrp()
    assert not geometry_checks.cosine_function.feedback(cosine_doing(os.setpgrp))
    assert os.getpgrp() == group
