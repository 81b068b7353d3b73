"""Round 20 (issue 31): the course's own pieces disarmed while a check runs a learner's function (any thread,
pool worker or forked child), complete ``own`` lists, a learner's returned or raised objects dropped inside the
time limit, a stopped thread ending silently, and a changed weight found by comparing with its copy."""
import concurrent.futures
import contextlib
import gc
import io
import os
import pickle
import sys
import threading
import time
import types

import numpy as np
import torch

from helpers import exercises, model as course_model, reference
from helpers.geometry import checks as geometry_checks
from helpers.geometry import compute as geo
from helpers.masking import checks as masking_checks
from helpers.positions import checks as positions_checks


def kept_in(out, compute):
    """A thread's target: append compute() to ``out`` (the disarmed piece's refusal: nothing)."""
    def target():
        with contextlib.suppress(exercises.CoursesOwnCalled):
            out.append(compute())
    return target


def stacked(cosine):
    """A learner's cosine(A, b) made of the one-vector ``cosine``: row by row for a stack."""
    def answer(a, b):
        a = np.asarray(a)
        return np.array([cosine(row, b) for row in a]) if a.ndim == 2 else cosine(a, b)
    return answer


def said(check, *args):
    """The sentences ``check`` gives ``args``, and what it printed meanwhile (stdout and stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        sentences = check.feedback(*args)
    return sentences, out.getvalue()


def refused_as_courses(sentences, name):
    """The check refused the answer in one sentence as running the course's own ``name``."""
    assert len(sentences) == 1 and f"ran the course's own {name}" in sentences[0], sentences


# --- 1. the course's own pieces, disarmed while the learner's function runs ------------------------------------

def test_turning_the_tripwire_off_does_not_let_the_courses_piece_run():
    def untraced(a, b):
        sys.settrace(None)
        return stacked(geo.cosine)(a, b)
    refused_as_courses(said(geometry_checks.cosine_function, untraced)[0], "helpers.geometry.compute.cosine")


def test_the_courses_piece_called_in_a_thread_of_the_learners_is_refused():
    def in_thread(a, b):
        out = []
        thread = threading.Thread(target=kept_in(out, lambda: stacked(geo.cosine)(a, b)))
        thread.start()
        thread.join()
        return out[0] if out else None
    refused_as_courses(said(geometry_checks.cosine_function, in_thread)[0], "helpers.geometry.compute.cosine")


def test_the_courses_piece_called_by_a_pool_made_in_an_earlier_cell_is_refused():
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(int).result()   # its worker started before the check

        def pooled(a, b):
            return pool.submit(stacked(geo.cosine), a, b).result()
        sentences = said(geometry_checks.cosine_function, pooled)[0]   # (round 26: an older pool takes no work)
        assert len(sentences) == 1 and "does not allow work handed to a thread pool made before it" in sentences[0]


def test_the_courses_piece_called_in_a_forked_child_computes_nothing():
    def in_child(a, b):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                data = pickle.dumps(stacked(geo.cosine)(a, b))
            except BaseException:   # noqa: BLE001 (the disarmed piece: the child sends nothing)
                data = b""
            os.write(write, data)
            os._exit(0)
        os.close(write)
        data = b""
        while chunk := os.read(read, 65536):
            data += chunk
        os.close(read)
        os.waitpid(pid, 0)
        return pickle.loads(data) if data else None
    sentences = said(geometry_checks.cosine_function, in_child)[0]
    assert sentences and not any("correct" in s for s in sentences), sentences


def test_a_copy_made_while_the_check_runs_copies_the_disarmed_code():
    def copied(a, b):
        copy = types.FunctionType(geo.cosine.__code__.replace(co_name="mine", co_qualname="mine"), geo.cosine.__globals__)
        out = []
        thread = threading.Thread(target=kept_in(out, lambda: stacked(copy)(a, b)))
        thread.start()
        thread.join()
        return out[0] if out else None
    refused_as_courses(said(geometry_checks.cosine_function, copied)[0], "helpers.geometry.compute.cosine")


def test_the_courses_piece_is_put_back_after_the_check_and_works_as_ever():
    code = geo.cosine.__code__
    said(geometry_checks.cosine_function, lambda a, b: sys.exit())
    assert geo.cosine.__code__ is code
    assert abs(geo.cosine(np.array([1.0, 0.0]), np.array([1.0, 0.0])) - 1.0) < 1e-12


def test_a_function_that_changes_its_trace_function_is_refused_in_one_sentence():
    def untraced_own(a, b):   # its own sums: only the trace function changed
        sys.settrace(None)
        a, b = np.asarray(a, float), np.asarray(b, float)
        return a @ b / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b))
    sentences = said(geometry_checks.cosine_function, untraced_own)[0]
    assert len(sentences) == 1 and "sys.settrace" in sentences[0] and ". " not in sentences[0], sentences


# --- 2. own lists that name every course implementation of the same thing -------------------------------------

def test_a_wrapper_of_the_reference_attention_is_refused_by_chapter_04s_check():
    def causal_attention(q, k, v):
        T_q, T_k = q.shape[-2], k.shape[-2]
        hidden = np.arange(T_k)[None, :] > (np.arange(T_q)[:, None] + T_k - T_q)
        out, w = reference.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), mask=hidden)
        return torch.tensor(out, dtype=q.dtype), torch.tensor(w, dtype=q.dtype)
    refused_as_courses(said(masking_checks.causal_attention, causal_attention)[0], "helpers.reference.attention")


def test_wrappers_of_the_models_rotation_and_table_are_refused_by_chapter_06s_checks(induction, cat):
    refused_as_courses(said(positions_checks.rotate, lambda x, start=0: course_model.rotate_pairs(x, start),
                            induction)[0], "helpers.model.rotate_pairs")
    refused_as_courses(said(positions_checks.sinusoidal_positions,
                            lambda n, d: course_model.sinusoidal_table(n, d), cat)[0], "helpers.model.sinusoidal_table")


def test_every_own_name_of_every_check_is_a_piece_the_watch_can_find():
    import importlib
    for chapter in ("ablation", "geometry", "gpt", "heads", "masking", "mlp", "normalization", "positions", "qkv",
                    "real", "sampling", "scaling"):
        module = importlib.import_module(f"helpers.{chapter}.checks")
        for value in vars(module).values():
            own = getattr(getattr(value, "answer", None), "own", ())
            if isinstance(value, exercises.Exercise) and own:
                assert len(exercises._own_functions(own)) >= len(own), (chapter, own)


# --- 3. a learner's returned or raised objects die inside the check's time limit and fence ----------------------

def test_an_object_in_a_learners_exception_is_dropped_inside_the_check():
    ran = []

    class Late:
        def __del__(self):
            ran.append(threading.current_thread().name)
            np.random.seed(1234)

    def raises(a, b):
        raise ValueError(Late())
    np.random.seed(0)
    expected = np.random.random()
    np.random.seed(0)
    sentences = said(geometry_checks.cosine_function, raises)[0]
    gc.collect()
    assert ran and "MainThread" not in ran, ran          # dropped in the learner's function's own thread
    assert np.random.random() == expected                 # and what its __del__ changed is put back
    assert sentences and "ValueError" in sentences[0]


def test_a_refused_value_whose_del_never_ends_is_stopped_by_the_time_limit():
    class Late:
        def __del__(self):
            while True:
                pass

    started = time.monotonic()
    sentences, printed = said(geometry_checks.cosine_function, lambda a, b: Late())
    assert time.monotonic() - started < 30   # (generous: the limit is 10 s, not forever)
    assert len(sentences) == 1 and "more than" in sentences[0], sentences
    time.sleep(0.5)
    assert "Traceback" not in printed


# --- 4. a thread the learner left, stopped silently --------------------------------------------------------------

def test_a_thread_the_learner_left_is_stopped_without_a_traceback():
    def spin():
        while True:
            pass

    def leaves_a_thread(a, b):
        threading.Thread(target=spin, daemon=True).start()
        a, b = np.asarray(a, float), np.asarray(b, float)
        return a @ b / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        sentences, printed = said(geometry_checks.cosine_function, leaves_a_thread)
        time.sleep(1.5)
    assert len(sentences) == 1 and "(now stopped)" in sentences[0], sentences
    assert "Traceback" not in printed + err.getvalue()


def test_a_thread_left_by_a_function_that_raises_is_stopped_too():
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass

    def leaves_and_raises(a, b):
        threading.Thread(target=spin, daemon=True, name="left by a raise").start()
        raise ValueError("no answer")
    said(geometry_checks.cosine_function, leaves_and_raises)
    alive = [t for t in threading.enumerate() if t.name == "left by a raise"]
    stop.set()
    assert not alive


# --- 6. a weight compared with its copy -------------------------------------------------------------------------

def test_same_compares_a_tensor_with_its_copy_nan_equal_to_nan():
    t = torch.tensor([1.0, float("nan"), 3.0])
    assert exercises._same(t, t.clone())
    assert not exercises._same(t, torch.tensor([1.0, float("nan"), 4.0]))
    assert not exercises._same(t, t.double())


def test_a_large_model_kept_with_pristine_keeps_a_change_made_between_checks():
    model = torch.nn.Linear(8, 8)
    original = {name: t.detach().clone() for name, t in model.state_dict().items()}
    with exercises.model_kept(model, pristine=lambda: original):
        pass
    model.weight.data[0, 0] += 1.0   # the learner's own cell, between two checks (.data moves no version counter)
    mine = model.weight.detach().clone()
    with exercises.model_kept(model, pristine=lambda: original):
        pass
    assert torch.equal(model.weight, mine)   # not put back to the original: the change was no check's
    with exercises.model_kept(model, pristine=lambda: original):
        with torch.no_grad():
            model.weight[1, 1] += 1.0   # changed inside the check: found, and put back
    assert torch.equal(model.weight[1], original["weight"][1])
