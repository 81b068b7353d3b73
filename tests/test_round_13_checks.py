"""Named at stop 45 and mended at stop 46: what a learner's function writes to file descriptors 1 and
2 itself (``os.write(1, ...)``) passed by the check's cap on printing (35 MB reached the cell); a
thread of the learner's named like the check's own watchdog was taken for it."""
import os
import threading
import time

import pytest

from helpers.exercises import MAX_PRINTED, Wrong, call


def test_a_flood_written_to_the_descriptors_is_cut_as_printing_is(capfd):
    def floods(x):
        for _ in range(20):
            os.write(1, b"x" * 1_000_000)
        os.write(2, b"y" * 1_000_000)
        return x

    assert call(floods, 3) == 3
    out, err = capfd.readouterr()
    assert len(out) + len(err) < 2 * MAX_PRINTED + 1000 and "x" * 100 in out
    assert "went past the 20,000 characters" in out


def test_a_little_written_to_a_descriptor_still_shows_and_the_descriptors_come_back(capfd):
    def says(x):
        os.write(1, "héllo from C\n".encode())
        return x

    before = [os.fstat(fd).st_ino for fd in (1, 2)]
    assert call(says, 4) == 4
    assert "héllo from C" in capfd.readouterr().out and "went past" not in capfd.readouterr().out
    assert [os.fstat(fd).st_ino for fd in (1, 2)] == before
    os.write(1, b"after\n")
    assert capfd.readouterr().out == "after\n"


def test_a_thread_named_like_the_checks_watchdog_is_stopped_as_any_other():
    def leaves(x):
        threading.Thread(target=lambda: time.sleep(0.5), name="stops a learner's function", daemon=True).start()
        return x

    with pytest.raises(Wrong, match="left 1 thread of its own running"):
        call(leaves, 3)


def test_a_del_that_never_ends_in_a_learners_garbage_is_stopped_by_the_time_limit(monkeypatch):
    """Red team round 13: a __del__ that loops, left in a reference cycle, ran in the check's own thread at
    its closing collection, outside every time limit: the check never answered."""
    from helpers import exercises

    monkeypatch.setattr(exercises, "TIME_LIMIT", 1)

    class Trap:
        def __del__(self):
            while True:
                time.sleep(0.01)

    def leaves_a_trap(x):
        trap = Trap()
        trap.me = trap
        return x

    start = time.monotonic()
    with pytest.raises(Wrong, match="ran for more than"):
        call(leaves_a_trap, 3, seconds=1)
    exercises._collected()
    assert time.monotonic() - start < 8
