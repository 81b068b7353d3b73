"""Round 31 (issue 31), reader A, checks: a learner's function that starts another program (a new Python running the
course's own attention) while a check runs it, a class that raises the grad_of text to skip the gradient test, and
a function that reads a check's right outputs from its @sealed case store."""
import functools
import math
import os
import subprocess
import sys
import types

import pytest
import torch
from torch import nn
import torch.nn.functional as F
from test_round_13_machinery import _tensors  # noqa: E402  (every tensor in a dict, list or tuple)

from helpers import exercises, grading, weights
from helpers.exercises import Wrong, call
from helpers.heads import checks as heads_checks
from helpers.masking import checks as masking_checks
from helpers.mlp import checks as mlp_checks
from helpers.qkv import checks as qkv_checks
from helpers.scaling import checks as scaling_checks

REFUSED = "a check does not allow starting another program while it runs your function"


# ------------------------------------------------------------ 1. another program started while a check runs

def courses_attention_in_a_new_python(Q, K, V, causal=False):
    import pickle
    code = ("import sys, pickle; from helpers.reference import attention as a; "
            "Q, K, V, c = pickle.load(sys.stdin.buffer); o, w = a(Q, K, V, causal=c); "
            "sys.stdout.buffer.write(pickle.dumps((o, w)))")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps((Q, K, V, causal)), capture_output=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.getcwd()}).stdout
    return pickle.loads(out)


def test_a_function_that_runs_the_courses_attention_in_a_new_python_is_refused():
    found = qkv_checks.attention_function.feedback(courses_attention_in_a_new_python)
    assert len(found) == 1 and REFUSED in found[0] and "subprocess.Popen" in found[0], found


def _multiprocessing_spawn():
    import multiprocessing
    process = multiprocessing.get_context("spawn").Process(target=print, args=("hi",))
    process.start()
    process.join()


STARTS = {"subprocess.check_output": lambda: subprocess.check_output(["true"]),
          "os.system": lambda: os.system("true"),
          "os.popen": lambda: os.popen("true").read(),
          "os.spawnlp": lambda: os.spawnlp(os.P_WAIT, "true", "true"),
          "os.posix_spawnp": lambda: os.waitpid(os.posix_spawnp("true", ["true"], os.environ), 0),
          "os.execv": lambda: os.execv("/bin/true", ["true"]),   # (in the kernel's own process: it would end it)
          "pty.spawn": lambda: __import__("pty").spawn(["true"]),
          "multiprocessing's spawn": _multiprocessing_spawn}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the ways to start a program of Linux")
@pytest.mark.parametrize("way", list(STARTS))
def test_each_way_to_start_a_program_is_refused_and_put_back_after(way):
    import _posixsubprocess

    before = _posixsubprocess.fork_exec, os._spawnvef, subprocess.Popen, os.system

    def starts(x):
        STARTS[way]()
        return x
    with pytest.raises(Wrong, match=REFUSED):
        call(starts, 3)
    assert (_posixsubprocess.fork_exec, os._spawnvef, subprocess.Popen, os.system) == before
    assert subprocess.run(["echo", "after"], capture_output=True, text=True).stdout == "after\n"   # (outside: as ever)
    assert os.spawnlp(os.P_WAIT, "true", "true") == 0


def test_a_refused_program_the_function_catches_is_still_said():
    def catches(x):
        try:
            subprocess.run(["true"])
        except RuntimeError:
            pass
        return x
    with pytest.raises(Wrong, match=r"your function tried to start another program \(subprocess.Popen\)"):
        call(catches, 3)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forking")
def test_forking_without_exec_still_goes_through_and_a_child_s_exec_is_refused():
    def forks(x):
        pid = os.fork()
        if pid == 0:
            os._exit(5)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    assert call(forks, 3) == 5

    def execs_in_its_child(x):
        pid = os.fork()
        if pid == 0:
            try:
                os.execv("/bin/true", ["true"])   # (true would exit 0)
            finally:
                os._exit(7)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    assert call(execs_in_its_child, 3) == 7


# ------------------------------------------------------------ 2. the gradient test decided by the signature

class DodgingMLP(nn.Module):
    """Detaches its weights (it cannot learn), and raises the text of a run function without grad_of in grad mode."""
    def __init__(self, d_model, d_ff, bias=True):
        super().__init__()
        self.W_1, self.W_2 = nn.Parameter(torch.zeros(d_model, d_ff)), nn.Parameter(torch.zeros(d_ff, d_model))
        self.b_1 = nn.Parameter(torch.zeros(d_ff)) if bias else None
        self.b_2 = nn.Parameter(torch.zeros(d_model)) if bias else None

    def forward(self, x):
        if torch.is_grad_enabled():
            raise TypeError("run() got an unexpected keyword argument 'grad_of'")
        h = x @ self.W_1.detach() + (0 if self.b_1 is None else self.b_1.detach())
        return F.gelu(h) @ self.W_2.detach() + (0 if self.b_2 is None else self.b_2.detach())


class DodgingMultiHead(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.h = n_heads
        for n in "QKVO":
            setattr(self, f"W_{n}", nn.Parameter(torch.zeros(d_model, d_model)))
            setattr(self, f"b_{n}", nn.Parameter(torch.zeros(d_model)) if bias else None)

    def lin(self, x, W, b):
        return x @ W.detach() + (0 if b is None else b.detach())

    def forward(self, x):
        if torch.is_grad_enabled():
            raise TypeError("run() got an unexpected keyword argument 'grad_of'")
        B, T, d = x.shape
        H, d_k = self.h, d // self.h
        q, k, v = (self.lin(x, getattr(self, f"W_{n}"), getattr(self, f"b_{n}")).view(B, T, H, d_k).transpose(1, 2)
                   for n in "QKV")
        scores = (q @ k.transpose(-2, -1) / math.sqrt(d_k)).masked_fill(
            torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        return self.lin((torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(B, T, d), self.W_O, self.b_O)


@pytest.fixture(scope="module")
def cat_and_dragon():
    return weights.load_cat(), weights.load_dragon()


def test_an_mlp_that_raises_the_grad_of_text_itself_is_judged_on_its_gradients(cat_and_dragon):
    found = mlp_checks.mlp_module.feedback(DodgingMLP, *cat_and_dragon)
    assert len(found) == 1 and "in a backward pass through its output" in found[0], found


def test_a_multi_head_that_raises_the_grad_of_text_itself_is_judged_on_its_gradients():
    found = heads_checks.multi_head.feedback(DodgingMultiHead)
    assert len(found) == 1 and "in a backward pass through its output" in found[0], found


def test_the_judge_says_what_the_live_check_says_of_a_class_that_raises_the_grad_of_text(cat_and_dragon):
    check = mlp_checks.mlp_module
    recorded = grading.record_answer(check, DodgingMLP, cat_and_dragon, {})
    live = check.feedback(DodgingMLP, *cat_and_dragon)
    assert live and check.feedback(grading.decode(recorded), *cat_and_dragon) == live


def test_whether_a_run_takes_grad_of_is_read_from_its_signature():
    def plain(args, state, x):
        return x

    def named(args, state, x, grad_of=None):
        return x

    def keywords(args, state, x, **kwargs):
        return x

    @functools.wraps(plain)
    def wrapper(*args, **kwargs):   # (a decorator's: the function it wraps says)
        return plain(*args, **kwargs)

    def only_positional(args, state, x, grad_of=None, /):
        return x
    takes = exercises._takes_grad_of
    assert [takes(f) for f in (plain, named, keywords, wrapper, only_positional)] == [False, True, True, False, False]
    assert takes(functools.partial(named, ())) and not takes(functools.partial(plain, ()))
    assert takes(exercises.module_runner(DodgingMLP))   # a class's run takes it: what the class raises is its own
    assert not takes(DodgingMLP(2, 3))   # (a module built from the class: its slip is named by the check)


def test_a_run_function_that_takes_grad_of_and_raises_its_text_is_judged_alike_live_and_by_the_judge(cat_and_dragon):
    def run(args, state, x, **kwargs):   # (it takes grad_of: **kwargs)
        module = DodgingMLP(*args)
        module.load_state_dict(state)
        if kwargs:
            raise TypeError("run() got an unexpected keyword argument 'grad_of'")
        with torch.no_grad():
            return module(x)
    check = mlp_checks.mlp_module
    live = check.feedback(run, *cat_and_dragon)
    recorded = grading.record_answer(check, run, cat_and_dragon, {})
    assert len(live) == 1 and "in a backward pass through its output" in live[0], live
    assert check.feedback(grading.decode(recorded), *cat_and_dragon) == live


# ------------------------------------------------------------ 3. no right output kept where a learner's code reads it

def _sealed_stores(module):
    """The contents of the @sealed case stores of a checks ``module``: what a learner's code reads from their
    closures by plain attribute reads."""
    return [cell.cell_contents for value in vars(module).values() if isinstance(value, types.FunctionType)
            and value.__code__ is exercises._SEALED_READER for cell in value.__closure__
            if isinstance(cell.cell_contents, dict)]




@pytest.mark.parametrize("module, outputs", [
    (masking_checks, lambda: [case[name] for case in masking_checks.attention_cases().values()
                              for name in ("out", "weights")]),
    (scaling_checks, lambda: [reference for _, _, reference in scaling_checks.cat_cases()])])
def test_a_checks_sealed_case_store_holds_no_right_output(module, outputs):
    outputs()   # (the stores built)
    kept = [t for box in _sealed_stores(module) for t in _tensors(box.get("live"))]
    assert kept and _sealed_stores(module)
    for right in outputs():
        seen = torch.isfinite(right)
        assert not any(t.shape == right.shape and torch.equal(t[seen], right[seen]) for t in kept)


def closure_peek(q, k, v):
    """Looks its q up in every @sealed store of the check's module, and returns that case's outputs."""
    import helpers.masking.checks as checks
    for box in _sealed_stores(checks):
        for case in box["live"].values():
            if torch.equal(case["q"], q) and torch.equal(case["k"], k):
                return case["out"].clone(), case["weights"].clone()
    return None, None


def test_a_function_that_reads_the_checks_outputs_from_a_sealed_closure_is_refused():
    assert masking_checks.attention_cases()   # (built before: the store holds its cases)
    found = masking_checks.causal_attention.feedback(closure_peek)
    assert len(found) == 1 and "'out'" in found[0], found   # (no case holds one)
