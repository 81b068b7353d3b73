"""Round 22 (issue 31): the process state a learner's function changes during a check. A change no put-back can
undo (a resource limit, os.putenv) is refused with one sentence; torch's per-backend switches (fp32_precision,
fill_uninitialized_memory, the attention fast path ...), the CPU affinity and priority and the C library's time
zone are put back; and a put-back that fails is said, never passed over."""
import contextlib
import ctypes
import os
import resource
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from helpers.geometry import checks as geometry_checks
from helpers.positions import checks as positions_checks


def cosine_doing(change):
    """A right answer to geometry's cosine_function that first runs ``change()``."""
    def cosine(a, b):
        change()
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        return a @ b / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b))
    return cosine


def one_sentence(found):
    """The check's one sentence (it found one problem), checked to be one."""
    assert len(found) == 1, found
    assert "\n" not in found[0] and ". " not in found[0], found[0]
    return found[0]


# 1. a resource limit: a hard limit lowered can never be raised again by an unprivileged process

@pytest.mark.parametrize("lower", [
    lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)),
    lambda: resource.prlimit(0, resource.RLIMIT_CORE, (0, 0)),
], ids=["setrlimit", "prlimit"])
def test_a_resource_limit_changed_in_a_check_is_refused(lower):
    before = resource.getrlimit(resource.RLIMIT_CORE)
    try:
        said = one_sentence(geometry_checks.cosine_function.feedback(cosine_doing(lower)))
        assert resource.getrlimit(resource.RLIMIT_CORE) == before
    finally:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CORE, before)
    assert "resource." in said and "limit" in said and "a check does not allow" in said


def test_a_resource_limit_caught_and_ignored_is_still_refused():
    def swallowed():
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        except RuntimeError:
            pass

    before = resource.getrlimit(resource.RLIMIT_CORE)
    try:
        said = one_sentence(geometry_checks.cosine_function.feedback(cosine_doing(swallowed)))
    finally:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CORE, before)
    assert "called resource.setrlimit" in said and "it was refused" in said
    assert resource.getrlimit(resource.RLIMIT_CORE) == before


def test_resource_s_own_setrlimit_kept_from_an_earlier_cell_is_refused_too():
    """resource.setrlimit taken before the check (``from resource import setrlimit`` in a cell) is not the check's
    guarded one: its audit event refuses it, as the check cannot see whether it lowers a hard limit."""
    from resource import setrlimit

    before = resource.getrlimit(resource.RLIMIT_CORE)
    try:
        said = one_sentence(geometry_checks.cosine_function.feedback(
            cosine_doing(lambda: setrlimit(resource.RLIMIT_CORE, (0, 0)))))
        assert resource.getrlimit(resource.RLIMIT_CORE) == before
    finally:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CORE, before)
    assert "resource.setrlimit" in said and "out of the check's sight" in said


class _Limit(ctypes.Structure):
    _fields_ = [("soft", ctypes.c_ulong), ("hard", ctypes.c_ulong)]


def test_a_put_back_that_fails_is_said(monkeypatch):
    """The C library's setrlimit (through ctypes, out of an audit hook's reach) changes a limit; the check's
    put-back is made to fail as an unprivileged process's would: the check says so instead of ✓."""
    libc = ctypes.CDLL(None, use_errno=True)
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    real_setrlimit = resource.setrlimit

    def refusing(which, limits):
        raise PermissionError(1, "Operation not permitted")

    def lowered():   # (the soft limit, one file fewer)
        libc.setrlimit(resource.RLIMIT_NOFILE, ctypes.byref(_Limit(before[0] - 1, before[1])))

    try:
        monkeypatch.setattr(resource, "setrlimit", refusing)
        said = one_sentence(geometry_checks.cosine_function.feedback(cosine_doing(lowered)))
    finally:
        real_setrlimit(resource.RLIMIT_NOFILE, before)
    assert "RLIMIT_NOFILE" in said and "could not put back" in said


# 2. torch's per-backend switches

def _fp32(name):
    """(read, write) of the fp32_precision of torch.backends.<name> ("" for torch.backends itself)."""
    owner = torch.backends
    for part in filter(None, name.split(".")):
        owner = getattr(owner, part)
    return (lambda: owner.fp32_precision), (lambda value: setattr(owner, "fp32_precision", value))


SWITCHES = {
    "fp32_precision": (*_fp32(""), "tf32"),
    "mkldnn.matmul": (*_fp32("mkldnn.matmul"), "bf16"),
    "mkldnn.conv": (*_fp32("mkldnn.conv"), "tf32"),
    "cuda.matmul": (*_fp32("cuda.matmul"), "tf32"),
    "cudnn.conv": (*_fp32("cudnn.conv"), "ieee"),
    "fill_uninitialized_memory": (lambda: torch.utils.deterministic.fill_uninitialized_memory,
                                  lambda value: setattr(torch.utils.deterministic, "fill_uninitialized_memory", value),
                                  False),
    "mha fastpath": (torch.backends.mha.get_fastpath_enabled, torch.backends.mha.set_fastpath_enabled, False),
    "nnpack": (torch._C._get_nnpack_enabled, torch.backends.nnpack.set_flags, False),
    "math sdp": (torch.backends.cuda.math_sdp_enabled, torch.backends.cuda.enable_math_sdp, False),
    "cudnn benchmark": (lambda: torch.backends.cudnn.benchmark,
                        lambda value: setattr(torch.backends.cudnn, "benchmark", value), True),
}


def _all_precisions():
    return [torch._C._get_fp32_precision_getter(backend, op)
            for backend in ("mkldnn", "cuda") for op in ("all", "matmul", "conv", "rnn")]


@pytest.mark.parametrize("name", list(SWITCHES))
def test_a_torch_switch_set_in_a_check_is_put_back(name):
    read, write, value = SWITCHES[name]
    before, precisions = read(), _all_precisions()
    try:
        found = geometry_checks.cosine_function.feedback(cosine_doing(lambda: write(value)))
        assert found == [], found
        assert read() == before and _all_precisions() == precisions
    finally:
        write(before)
        torch.backends.fp32_precision = "none"   # (every precision as torch starts it)
        torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.fp32_precision = "none", "none"
        torch.backends.cudnn.conv.fp32_precision = torch.backends.cudnn.rnn.fp32_precision = "tf32"


def test_a_precision_set_in_an_ordinary_cell_breaks_no_later_check():
    before = torch.backends.mkldnn.matmul.fp32_precision
    Y = np.random.RandomState(0).randn(6, 4)
    perm = [2, 0, 1, 5, 4, 3]
    try:
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"   # the learner's own choice, in a cell
        assert positions_checks.unscrambled.feedback(Y[np.argsort(perm)], Y, perm) == []
        assert geometry_checks.cosine_function.feedback(cosine_doing(lambda: None)) == []
        assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"   # (kept: the cell's, not the check's)
    finally:
        torch.backends.mkldnn.matmul.fp32_precision = before


# 3. the CPU affinity and priority, the C library's time zone, the C environment

def test_the_cpu_affinity_set_in_a_check_is_put_back():
    before = os.sched_getaffinity(0)
    if len(before) < 2:
        pytest.skip("one CPU only: nothing to pin")
    try:
        pin = cosine_doing(lambda: os.sched_setaffinity(os.getpid(), {min(before)}))
        assert geometry_checks.cosine_function.feedback(pin) == []
        assert os.sched_getaffinity(0) == before
    finally:
        os.sched_setaffinity(0, before)


def test_a_priority_lowered_in_a_check_is_put_back_or_said():
    before = os.getpriority(os.PRIO_PROCESS, 0)
    if before >= 19:
        pytest.skip("already at the lowest priority")
    found = geometry_checks.cosine_function.feedback(
        cosine_doing(lambda: os.setpriority(os.PRIO_PROCESS, os.getpid(), before + 1)))
    if found:   # (an unprivileged process cannot raise its priority again)
        assert "priority" in one_sentence(found) and "could not put back" in found[0]
    else:
        assert os.getpriority(os.PRIO_PROCESS, 0) == before


def _kolkata():
    os.environ["TZ"] = "IST-5:30"
    time.tzset()


def _kolkata_and_back():
    _kolkata()
    del os.environ["TZ"]   # (os.environ as it was: the C library's zone is not)


@pytest.mark.parametrize("change", [_kolkata, _kolkata_and_back], ids=["TZ set", "TZ set and removed"])
def test_the_time_zone_set_in_a_check_is_put_back(change):
    before, names, zone = time.localtime(0), time.tzname, os.environ.get("TZ")
    try:
        assert geometry_checks.cosine_function.feedback(cosine_doing(change)) == []
        assert time.localtime(0) == before and time.tzname == names and os.environ.get("TZ") == zone
    finally:
        if zone is None:
            os.environ.pop("TZ", None)
        time.tzset()


def _seen_by_a_subprocess(name):
    return subprocess.run([sys.executable, "-c", f"import os; print(os.environ.get({name!r}, 'unset'))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_os_putenv_in_a_check_is_refused():
    said = one_sentence(geometry_checks.cosine_function.feedback(
        cosine_doing(lambda: os.putenv("COURSE_LEAK_22", "1"))))
    assert "os.putenv" in said and "a check does not allow" in said
    assert _seen_by_a_subprocess("COURSE_LEAK_22") == "unset"


def test_os_unsetenv_in_a_check_is_refused():
    os.environ["COURSE_KEPT_22"] = "1"
    try:
        said = one_sentence(geometry_checks.cosine_function.feedback(
            cosine_doing(lambda: os.unsetenv("COURSE_KEPT_22"))))
        assert "os.unsetenv" in said
        assert _seen_by_a_subprocess("COURSE_KEPT_22") == "1"
    finally:
        del os.environ["COURSE_KEPT_22"]


def test_os_environ_stays_allowed_in_a_check_and_is_put_back():
    def set_and_remove():
        os.environ["COURSE_LEAK_22"] = "1"
        os.environ.pop("HOME", None)

    home = os.environ.get("HOME")
    assert geometry_checks.cosine_function.feedback(cosine_doing(set_and_remove)) == []
    assert "COURSE_LEAK_22" not in os.environ and os.environ.get("HOME") == home
    assert _seen_by_a_subprocess("COURSE_LEAK_22") == "unset"
