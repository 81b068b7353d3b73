"""Round 31 (issue 31), reader C's entry 5: the two-case function checks of round 30 (chapter 10's lens_ranks,
patch_grid and direct_attribution, chapter 11's head_scan) called the learner's function for both cases before
judging either, so a function that refills and returns one object on every call (a grid allocated once) was
judged on the second case's contents twice: ✗ live, ✓ graded (the grader records each answer as it returns)."""
import json

import numpy as np
import torch

from helpers import grading
from helpers.ablation import checks as ablation_checks, compute as ablation
from helpers.ablation.checks import as_returned
from helpers.exercises import MAX_ANSWER_ENTRIES
from helpers.model import Config, Transformer
from helpers.real import checks as real_checks
from test_ablation import _attribution_case, _lens, _lens_case, attribution_function, grid_function
from test_real import head_scan


def refilled(function):
    """``function``, but returning one object it keeps and refills on every call (allocated at the first): a
    dict cleared and filled again, a tensor (or each tensor of a pair) overwritten in place."""
    kept = []

    def fill(old, new):
        if isinstance(old, dict):
            old.clear()
            old.update(new)
        else:
            old.resize_as_(new).copy_(new)

    def shared(*args):
        out = function(*args)
        if not kept:
            kept.append(out)
        elif isinstance(out, tuple):
            for old, new in zip(kept[0], out):
                fill(old, new)
        else:
            fill(kept[0], out)
        return kept[0]
    return shared


def _grid_args(cat, cat_world):
    tok = cat_world.tokenizer
    return cat, tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was"), ablation.logit_difference(cat_world)


def test_patch_grid_judges_a_grid_refilled_at_every_call_as_each_call_returned_it(cat, cat_world):
    args = _grid_args(cat, cat_world)
    assert ablation_checks.patch_grid.feedback(refilled(grid_function()), *args) == []


def test_patch_grid_names_the_second_case_of_a_refilled_grid_wrong_there_only(cat, cat_world):
    args = _grid_args(cat, cat_world)
    right, noise = grid_function(), grid_function("noise")
    calls = []

    def right_first(*a):
        calls.append(1)
        return (right if len(calls) == 1 else noise)(*a)
    said = ablation_checks.patch_grid.feedback(refilled(right_first), *args)
    assert len(said) == 1 and said[0].startswith("on the same two prompts swapped"), said


def test_direct_attribution_judges_a_dict_refilled_at_every_call(cat, cat_world):
    args = (cat, *_attribution_case(cat, cat_world))
    assert ablation_checks.direct_attribution.feedback(refilled(attribution_function()), *args) == []


def test_lens_ranks_judges_a_pair_of_tensors_refilled_at_every_call(cat, cat_world):
    trace, points, targets = _lens_case(cat, cat_world)
    assert ablation_checks.lens_ranks.feedback(refilled(_lens()), cat, trace, points, targets) == []


def test_head_scan_judges_tables_refilled_at_every_call():
    small = Transformer(Config(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=64), seed=0)
    ids = torch.tensor([0, *range(5, 13), *range(5, 13)])
    assert real_checks.head_scan.feedback(refilled(head_scan), small, ids, 8) == []


def test_the_grade_of_a_refilled_answer_is_the_live_checks(cat, cat_world):
    args = _grid_args(cat, cat_world)
    record, live = grading._recording(ablation_checks.patch_grid, refilled(grid_function()), args, {})
    assert live == [] and grading.judged(ablation_checks.patch_grid, json.loads(json.dumps(record)), args, {}) == []


def test_as_returned_copies_containers_arrays_and_tensors_with_a_history():
    w = torch.ones(3, requires_grad=True)
    grid, table, row = w * 2, np.zeros((2, 2)), [1.0, 2.0]
    got = {"grid": grid, "table": table, "rows": [row, row], "pair": (np.float64(1.5), len)}
    taken = as_returned(got)
    with torch.no_grad():
        grid.zero_()
    table[:] = 7
    row.append(3.0)
    got["grid"] = None
    assert torch.equal(taken["grid"], torch.full((3,), 2.0)) and taken["grid"].dtype == torch.float32
    assert (taken["table"] == 0).all() and taken["rows"] == [[1.0, 2.0], [1.0, 2.0]]
    assert taken["rows"][0] is taken["rows"][1] and taken["pair"][1] is len   # (shared as returned; a function kept)


def test_as_returned_counts_before_it_copies():
    """An expanded tensor or a broadcast view stands for more numbers than it stores: past the limit it is kept as it
    is (the check refuses it by its shape or size), never copied out in full; a meta tensor (no data) is kept too."""
    wide = torch.zeros(1).expand(MAX_ANSWER_ENTRIES + 1)
    view = np.broadcast_to(0.0, (MAX_ANSWER_ENTRIES + 1,))
    meta = torch.empty(3, device="meta")
    small = torch.zeros(2)
    taken = as_returned([wide, view, meta, small])
    assert taken[0] is wide and taken[1] is view and taken[2] is meta and taken[3] is not small
    half, other = torch.zeros(1).expand(MAX_ANSWER_ENTRIES // 2 + 1), torch.zeros(MAX_ANSWER_ENTRIES // 2 + 1)
    first, second = as_returned((half, other))   # together past the limit: the first copied, the second kept
    assert first is not half and torch.equal(first, half) and second is other


def test_as_returned_copies_an_object_arrays_entries():
    inner = torch.zeros(2)
    box = np.empty(1, dtype=object)
    box[0] = inner
    taken = as_returned(box)
    inner += 1
    assert torch.equal(taken[0], torch.zeros(2))


def test_the_attribution_grade_agrees_on_a_refilled_dict(cat, cat_world):
    args = (cat, *_attribution_case(cat, cat_world))
    shared = refilled(attribution_function())
    record, live = grading._recording(ablation_checks.direct_attribution, shared, args, {})
    judged = grading.judged(ablation_checks.direct_attribution, json.loads(json.dumps(record)), args, {})
    assert live == [] == judged
