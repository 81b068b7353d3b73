"""Red team round 15 (reader A, entries 9, 10, 12, 14 and 24; reader B, entry 1): the exercise fence.

A9: a learner's function that registered a torch dispatcher kernel in a check (torch.library) changed
torch.softmax for every later cell; A10: one that called atexit.register left a callback per call;
A12: a check called with its answer by name, or without it, raised a raw TypeError; A14: a check of
chapters 00-06 could keep its cell busy 120 s; A24: the pyplot figures a learner's function opened
stayed open; B1: model_kept did not keep a model's non-persistent buffers (a sinusoidal model's PE)
nor a tensor it holds as a plain attribute."""
import atexit
import contextlib
import copy
import io
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import exercises
from helpers import reference as ref
from helpers.exercises import Function, call, exercise, model_kept
from helpers.geometry import checks as geometry_checks
from helpers.positions import checks as positions_checks
from helpers.positions import compute as positions
from helpers.sampling import checks as sampling_checks
from helpers.sampling import compute as sampling
from helpers.tour import checks as tour_checks

ROOT = Path(__file__).resolve().parents[1]


def said(check, *args, **kwargs):
    """What ``check(*args, **kwargs)`` printed."""
    with contextlib.redirect_stdout(io.StringIO()) as out:
        check(*args, **kwargs)
    return out.getvalue().strip()


def cosine(A, b):
    return A @ b / (np.linalg.norm(A, axis=-1) * np.linalg.norm(b))


def softmax_now():
    return torch.softmax(torch.tensor([0.0, 10.0]), -1)


def from_file(source, filename, name):
    """The function ``name`` defined by ``source``, compiled as if written in ``filename``."""
    space = {"torch": torch, "atexit": atexit, "np": np}
    exec(compile(textwrap.dedent(source), filename, "exec"), space)
    return space[name]


def exit_functions():
    """The functions atexit holds now, in order (read by atexit.unregister's comparisons)."""
    seen = []

    class Spy:
        def __eq__(self, other):
            seen.append(other)
            return False
        __hash__ = None
    atexit.unregister(Spy())
    return seen


# ---- A9: torch's dispatcher -----------------------------------------------------------------------------


def test_a_kernel_registered_in_a_check_is_refused_and_torch_is_unchanged():
    before = softmax_now()
    kept = []

    def registers(A, b):
        lib = torch.library.Library("aten", "IMPL")
        kept.append(lib)   # kept alive in the notebook, as the red team's did
        lib.impl("_softmax", lambda x, dim, half: torch.zeros_like(x) + 0.5, "CPU")
        return cosine(A, b)
    with pytest.raises(exercises.Wrong, match="torch.library"):
        call(registers, np.ones((2, 3)), np.ones(3))
    assert torch.equal(softmax_now(), before)
    text = said(geometry_checks.cosine_function, registers)
    assert text.startswith("✗") and "torch.library" in text and "\n" not in text, text
    assert torch.equal(softmax_now(), before)


def test_a_refused_registration_the_function_catches_is_named_after_the_call():
    before = softmax_now()

    def catches(A, b):
        with contextlib.suppress(RuntimeError):
            torch.library.Library("aten", "IMPL").impl("_softmax", lambda x, dim, half: x * 0, "CPU")
        return cosine(A, b)
    with pytest.raises(exercises.Wrong, match="registered a kernel with torch's dispatcher"):
        call(catches, np.ones((2, 3)), np.ones(3))
    assert torch.equal(softmax_now(), before)


def test_a_custom_op_defined_in_a_check_is_refused():
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def defines(x):
        return torch.library.custom_op("course_round15::twice", mutates_args=())(twice)(x)
    with pytest.raises(exercises.Wrong, match="torch.library"):
        call(defines, torch.ones(2))
    assert not hasattr(torch.ops.course_round15, "twice")


def test_a_registration_a_package_makes_itself_goes_through():
    """torch registers some kernels itself on first use (torch.func.vmap's batching rules): made from
    torch's own files, they are not the learner's."""
    package = os.path.join(os.path.dirname(torch.__file__), "_course_round15_fake.py")
    registers = from_file("""
        def registers(x):
            lib = torch.library.Library("course_round15_pkg", "FRAGMENT")
            lib.define("thrice(Tensor x) -> Tensor")
            lib.impl("thrice", lambda x: x * 3, "CPU")
            registers.lib = lib
            return torch.ops.course_round15_pkg.thrice(x)
    """, package, "registers")
    assert torch.equal(call(registers, torch.ones(2)), torch.full((2,), 3.0))


def test_torch_func_first_used_in_a_check_works_and_stays_usable():
    """In a fresh process: vmap's first use registers torch's batching rules (inside the check's call)."""
    script = textwrap.dedent("""
        import torch
        from helpers.exercises import call
        out = call(lambda x: torch.func.vmap(torch.sin)(x), torch.ones(2, 3))
        assert torch.allclose(out, torch.sin(torch.ones(2, 3)))
        assert torch.allclose(torch.func.vmap(torch.cos)(torch.ones(2, 3)), torch.cos(torch.ones(2, 3)))
        print("fine")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert done.stdout.strip().endswith("fine"), done.stderr[-2000:]


# ---- A10: functions registered to run at exit ---------------------------------------------------------


def test_atexit_register_in_a_check_registers_nothing():
    before = exit_functions()

    def saves():
        pass

    def registers(A, b):
        assert atexit.register(saves) is saves   # (what atexit.register returns: usable as a decorator)
        atexit.register(print, "at exit")
        return cosine(A, b)
    call(registers, np.ones((2, 3)), np.ones(3))
    assert said(geometry_checks.cosine_function, registers).startswith("✓")
    assert exit_functions() == before


def test_atexit_register_saved_before_the_check_is_taken_back_alone():
    """One registered through a reference saved before the check is taken back, and only it: the same
    function registered by the notebook before stays registered."""
    register, ran = atexit.register, []

    def notebooks():
        ran.append("notebook's")
    register(notebooks)
    try:
        before = exit_functions()

        def bypasses(A, b):
            register(notebooks)
            register(ran.append, "again")
            return cosine(A, b)
        call(bypasses, np.ones((2, 3)), np.ones(3))
        assert exit_functions() == before
    finally:
        atexit.unregister(notebooks)


def test_a_package_imported_in_a_check_keeps_its_exit_function():
    package = os.path.join(sysconfig.get_paths()["purelib"], "course_round15_fake", "__init__.py")

    def packages_exit():
        pass
    registers = from_file("""
        def registers(function):
            atexit.register(function)
            return 1
    """, package, "registers")
    try:
        call(registers, packages_exit)
        assert exit_functions()[-1:] == [packages_exit]
    finally:
        atexit.unregister(packages_exit)


# ---- A12: a check called with its answer by name, or without it -----------------------------------------


def test_a_check_given_its_answer_by_name_judges_it():
    rng = np.random.default_rng(7)
    X, perm = rng.normal(size=(5, 4)), rng.permutation(5)
    Y = ref.attention(X[perm], X[perm], X[perm])[0]
    assert said(positions_checks.unscrambled, out=Y[np.argsort(perm)], Y=Y, perm=perm).startswith("✓")
    assert said(positions_checks.offset_rotation, R=positions.offset_rotation(2, 6), k=2, d=6).startswith("✓")
    assert said(tour_checks.scores_shape, answer=(2, 5, 5), n_heads=2, T=5).startswith("✓")
    assert positions_checks.offset_rotation.feedback(R=positions.offset_rotation(2, 6), k=2, d=6) == []


def test_a_check_called_without_its_answer_is_one_sentence():
    text = said(tour_checks.scores_shape, n_heads=2, T=5)
    assert text.startswith("✗") and "run the cell as it was" in text and "'answer'" in text and "\n" not in text, text
    text = said(positions_checks.unscrambled, Y=np.ones((5, 4)), perm=np.arange(5))
    assert "'out'" in text and "run the cell as it was" in text, text
    with pytest.raises(AssertionError, match="run the cell as it was"):
        tour_checks.scores_shape.grade(n_heads=2, T=5)
    assert "run the cell as it was" in said(tour_checks.scores_shape)


def test_a_check_given_its_answer_twice_is_one_sentence():
    text = said(tour_checks.scores_shape, (2, 5, 5), answer=(2, 5, 5), n_heads=2, T=5)
    assert text.startswith("✗") and "multiple values" in text and "run the cell as it was" in text, text


def test_a_grade_without_its_answer_is_recorded_as_not_answered(tmp_path, monkeypatch):
    records = tmp_path / "records.jsonl"
    monkeypatch.setenv("COURSE_GRADING", f"record:{records}")
    tour_checks.scores_shape.grade(n_heads=2, T=5)
    tour_checks.scores_shape.grade(answer=(2, 5, 5), n_heads=2, T=5)
    answers = [json.loads(line)["answer"] for line in records.read_text().splitlines()]
    assert answers[0] is None and answers[1] is not None, answers


# ---- A14: a check's whole time -----------------------------------------------------------------------------


def test_a_check_of_the_early_chapters_keeps_its_cell_at_most_a_minute():
    """ch06's rotate check calls the learner's function 8 times, each allowed TIME_LIMIT: the check's
    whole time caps what a right but slow function can take."""
    assert exercises.CHECK_TIME_LIMIT <= 60
    assert min(8 * exercises.TIME_LIMIT, exercises.CHECK_TIME_LIMIT) <= 60


def test_only_a_check_whose_calls_may_run_long_gets_the_longer_whole_time():
    """Chapter 11's real-model checks give each call 60 s (two calls a check): they get
    LONG_CHECK_TIME_LIMIT; a call with the ordinary limit gets CHECK_TIME_LIMIT."""
    token = exercises._CHECK_STARTED.set(time.monotonic() - 55)   # a check that began 55 s ago
    try:
        limit, whole = exercises.time_left(exercises.TIME_LIMIT)
        assert whole == exercises.CHECK_TIME_LIMIT and limit <= exercises.CHECK_TIME_LIMIT - 55 + 0.5
        assert exercises.time_left(60) == (60, None)   # the real model's: 65 s left of 120
        exercises._CHECK_STARTED.set(time.monotonic() - 70)
        limit, whole = exercises.time_left(60)
        assert whole == exercises.LONG_CHECK_TIME_LIMIT >= 120 and 49 <= limit <= 50.5
    finally:
        exercises._CHECK_STARTED.reset(token)
    assert exercises.time_left(60) == (60, None)   # outside a check: the call's own limit


def test_a_checks_whole_time_stops_the_calls_and_says_its_limit(monkeypatch):
    monkeypatch.setattr(exercises, "CHECK_TIME_LIMIT", 0.6)
    monkeypatch.setattr(exercises, "LONG_CHECK_TIME_LIMIT", 1.5)
    calls = []

    def slow(x):
        calls.append(x)
        time.sleep(0.2)

    def checking(seconds):
        @exercise("many calls", answer=Function())
        def many(answer):
            for i in range(100):
                call(answer, i, seconds=seconds)
            yield from ()
        return many

    found = checking(5).feedback(slow)
    short = len(calls)
    assert len(found) == 1 and "its limit of 0.6 s" in found[0], found
    calls.clear()
    found = checking(30).feedback(slow)   # calls that may each take longer than TIME_LIMIT: the longer whole time
    assert len(found) == 1 and "its limit of 1.5 s" in found[0], found
    assert short <= 4 and len(calls) > short, (short, len(calls))


# ---- A24: figures ------------------------------------------------------------------------------------------


def test_figures_a_learners_function_opens_are_closed_and_the_notebooks_stay():
    import matplotlib.pyplot as plt

    mine = plt.figure()
    try:
        before = plt.get_fignums()

        def plots(A, b):
            plt.figure()
            plt.plot([1, 2])
            return cosine(A, b)
        assert said(geometry_checks.cosine_function, plots).startswith("✓")
        assert plt.get_fignums() == before and plt.gcf() is mine
    finally:
        plt.close(mine)


# ---- B1: what the state dict leaves out ---------------------------------------------------------------------


def test_model_kept_puts_back_a_non_persistent_buffer(cat):
    model = copy.deepcopy(cat)
    assert model.PE is not None and "PE" not in model.state_dict()
    ids = torch.tensor([1, 2, 3])
    before = model(ids).detach().clone()
    with model_kept(model):
        model.PE.mul_(0.0)
    assert torch.equal(model(ids), before)
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    with model_kept(model, pristine=lambda: state):   # a large model's way: the state dict has no PE
        model.PE.add_(1.0)
        model.blocks[0].attn.W_Q.data.mul_(2.0)
    assert torch.equal(model(ids), before)


def test_model_kept_puts_back_a_tensor_held_as_a_plain_attribute():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model[0].table = torch.arange(4.0)
    model.scale = torch.ones(2)
    with model_kept(model):
        model[0].table.mul_(0.0)
        model.scale.add_(5.0)
        model.scale = torch.zeros(2)
    assert torch.equal(model[0].table, torch.arange(4.0)) and torch.equal(model.scale, torch.ones(2))


def test_a_learners_generate_that_zeroes_the_position_table_leaves_the_model_as_it_was(cat, dragon):
    model = copy.deepcopy(cat)
    ids = torch.tensor([1, 2, 3])
    before = model(ids).detach().clone()

    def generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True):
        if model.PE is not None:
            model.PE.mul_(0.0)
        return sampling.generate(model, ids, n_new, temperature, top_k, top_p, seed, cache)
    said(sampling_checks.generate_loop, generate, model, dragon)
    assert torch.equal(model(ids), before)
