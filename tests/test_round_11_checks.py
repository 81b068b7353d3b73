"""Round 11 of the red team, the exercise framework, grading and the explorers' page: a top-p that
puts a dropped token below 0 is no distribution; the grader's judge sees an input changed in place
as the live check did; what a learner's function changes for the whole process (every resource
limit, faulthandler's watchdog, the collector's thresholds and freeze, threading's stack size, the
root logger, torch's warn-always) is put back; a page message may change only a control's value."""
import faulthandler
import gc
import json
import logging
import resource
import threading

import pytest
import torch

from helpers import grading, reference as ref
from helpers.explorer import PAGE_KEYS
from helpers.normalization import checks as norm_checks
from helpers.sampling import checks as sampling_checks, compute as sampling


def right_top_p(probs, p):
    return sampling.top_p_filter(torch.tensor(probs), p).numpy().copy()


def test_round_11_a_top_p_that_puts_dropped_tokens_below_0_is_not_a_distribution():
    def below_zero(probs, p):
        out = right_top_p(probs, p)
        out[out == 0] = -5.0
        return out

    said = sampling_checks.top_p_function.feedback(below_zero)
    assert len(said) == 1 and "below 0" in said[0], said
    assert sampling_checks.top_p_function.feedback(right_top_p) == []


def judged(exercise, function):
    """What the grader's judge says of ``function``: recorded as the student's kernel records it,
    through JSON, then judged from the record."""
    record = json.loads(json.dumps(grading.record_answer(exercise, function, (), {})))
    return exercise.feedback(grading.decode(record))


def test_round_11_the_judge_sees_an_input_changed_in_place_as_the_live_check_does():
    def layer_norm(x, g, b):
        out = ref.layer_norm(x, g, b)
        if x.shape == (4,):   # only on the check's last case
            x[:] = 0.0
        return out

    def top_p(probs, p):
        out = right_top_p(probs, p)
        if p == 0.98:         # only on the check's last case
            probs[:] = 0.0
        return out

    for exercise, function in ((norm_checks.layer_norm_function, layer_norm), (sampling_checks.top_p_function, top_p)):
        live, judge = exercise.feedback(function), judged(exercise, function)
        assert len(live) == 1 and "in place" in live[0], live
        assert len(judge) == 1 and "in place" in judge[0], judge
    assert judged(sampling_checks.top_p_function, right_top_p) == []


def test_round_11_a_record_whose_changed_inputs_are_not_places_is_refused():
    record = json.loads(json.dumps(grading.record_answer(sampling_checks.top_p_function, right_top_p, (), {})))
    record["function"][0]["changed"] = ["nowhere"]
    said = sampling_checks.top_p_function.feedback(grading.decode(record))
    assert len(said) == 1 and "the inputs a call changed" in said[0], said


def spoiling(action):
    """A right top-p that also does ``action()`` (to the whole process) on its first call."""
    done = []

    def top_p(probs, p):
        if not done:
            done.append(action())
        return right_top_p(probs, p)
    return top_p


def test_round_11_every_resource_limit_a_learners_function_sets_is_put_back():
    before = {which: resource.getrlimit(which) for which in (resource.RLIMIT_AS, resource.RLIMIT_FSIZE,
                                                             resource.RLIMIT_CPU)}

    def lower():
        resource.setrlimit(resource.RLIMIT_AS, (2**34, before[resource.RLIMIT_AS][1]))
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, before[resource.RLIMIT_FSIZE][1]))
        resource.setrlimit(resource.RLIMIT_CPU, (10**6, before[resource.RLIMIT_CPU][1]))

    assert sampling_checks.top_p_function.feedback(spoiling(lower)) == []
    assert {which: resource.getrlimit(which) for which in before} == before


def test_round_11_faulthandlers_watchdog_a_learners_function_arms_is_cancelled(tmp_path):
    with open(tmp_path / "dump", "w") as file:
        assert sampling_checks.top_p_function.feedback(
            spoiling(lambda: faulthandler.dump_traceback_later(0.5, exit=True, file=file))) == []
        import time
        time.sleep(1.0)   # the kernel would have ended here
    assert (tmp_path / "dump").read_text() == ""


def test_round_11_the_collector_and_threads_stack_size_are_put_back():
    thresholds, stack = gc.get_threshold(), threading.stack_size()

    def spoil():
        gc.set_threshold(0)
        gc.freeze()
        threading.stack_size(2**18)

    assert sampling_checks.top_p_function.feedback(spoiling(spoil)) == []
    assert gc.get_threshold() == thresholds and gc.get_freeze_count() == 0 and threading.stack_size() == stack


def test_round_11_the_root_logger_and_torchs_warn_always_are_put_back():
    level, handlers, warn = logging.root.level, list(logging.root.handlers), torch.is_warn_always_enabled()

    def spoil():
        logging.basicConfig(level=logging.DEBUG, force=True)
        torch.set_warn_always(not warn)

    assert sampling_checks.top_p_function.feedback(spoiling(spoil)) == []
    assert (logging.root.level, logging.root.handlers, torch.is_warn_always_enabled()) == (level, handlers, warn)


def page_update(control, state):
    """The message a page sends when a control moves (ipywidgets' comm protocol)."""
    control._handle_msg({"content": {"data": {"method": "update", "state": state, "buffer_paths": []}}, "buffers": []})


@pytest.mark.parametrize("control, state", [
    ("n_layers", {"index": 999}), ("n_layers", {"index": True}), ("lr", {"index": -1}),
    ("n_layers", {"description": 5}), ("n_layers", {"disabled": "x"}), ("lr", {"index": 0, "options": []}),
])
def test_round_11_a_page_message_changes_only_a_controls_value_and_a_menus_index(control, state, capsys):
    from helpers.normalization import compute as nz, explorer

    said = []
    ex = explorer.explorer(nz.load_curves())
    widget = ex.controls[control]
    widget.refused = staticmethod(said.append)
    before = {key: getattr(widget, key) for key in ("value", "index", "description", "disabled", "options")}
    page_update(widget, state)
    assert {key: getattr(widget, key) for key in before} == before
    assert len(said) == 1 and "\n" not in str(said[0]), said
    assert "Traceback" not in capsys.readouterr().err
    assert set(state) - PAGE_KEYS or "index" in str(said[0])


def test_round_11_tqdm_and_ipywidgets_replaced_by_a_learners_function_are_put_back():
    import ipywidgets
    import tqdm.auto

    before = ipywidgets.Dropdown, tqdm.auto.tqdm

    def spoil():
        ipywidgets.Dropdown, tqdm.auto.tqdm = None, None   # every later explorer and training bar would break

    assert sampling_checks.top_p_function.feedback(spoiling(spoil)) == []
    assert (ipywidgets.Dropdown, tqdm.auto.tqdm) == before
