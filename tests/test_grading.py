"""helpers.grading: answers become data and come back the same; a record the judge cannot use is
refused, never run; a replayed function answers only the inputs it was recorded on."""
import array

import numpy as np
import pytest
import torch

from helpers import grading


@pytest.mark.parametrize("answer, back", [
    (0.25, 0.25), (302, 302), ("floor", "floor"), (None, None), (True, True),
    ((2, 5, 5), (2, 5, 5)), ([1, [2, 3]], [1, [2, 3]]), ({3, 1}, {1, 3}),
    (frozenset([frozenset()]), {frozenset()}), ({(1, 2): "a"}, {(1, 2): "a"}),
    (range(2, 5), [2, 3, 4]), (array.array("d", [1.0, 2.0]), np.array([1.0, 2.0])),
    (np.matrix([[1.0, 2.0]]), np.array([[1.0, 2.0]])), (float("nan"), float("nan")),
])
def test_answers_come_back_as_they_went(answer, back):
    again = grading.decode(grading.encode(answer))
    if isinstance(back, np.ndarray):
        assert np.array_equal(again, back)
    elif isinstance(back, float) and back != back:
        assert again != again
    else:
        assert again == back


def test_tensors_of_any_dtype_come_back_as_tensors():
    for tensor in (torch.tensor([1.5, 2.0], requires_grad=True), torch.ones(2, dtype=torch.bfloat16)):
        again = grading.decode(grading.encode(tensor))
        assert torch.is_tensor(again) and torch.equal(again.float(), tensor.detach().float())


def test_what_is_not_data_is_recorded_as_unknown():
    assert isinstance(grading.decode(grading.encode(object())), grading.Unknown)
    deep = []
    for _ in range(50):
        deep = [deep]
    assert "nested too deeply" in str(grading.encode(deep))


def test_a_replayed_function_answers_only_its_recorded_inputs():
    recorder = grading.Recorder(lambda x: x * 2)
    recorder(np.array([1.0, 2.0]))
    replay = grading.decode({"function": recorder.calls})
    assert np.array_equal(replay(np.array([1.0, 2.0])), [2.0, 4.0])
    with pytest.raises(grading.ReplayError, match="not recorded"):
        replay(np.array([1.0, 2.0]))
    other = grading.decode({"function": recorder.calls})
    with pytest.raises(grading.ReplayError, match="other inputs"):
        other(np.array([9.0, 9.0]))


def test_a_module_class_is_recorded_through_its_run_function_and_judged_from_the_record():
    from torch import nn

    from helpers.exercises import Module, exercise

    class Affine(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.W = nn.Parameter(torch.empty(d, d))

        def forward(self, x):
            return x @ self.W

    class Renamed(Affine):
        def __init__(self, d):
            super().__init__(d)
            self.V = self.W
            del self.W

    @exercise("an affine module", answer=Module())
    def check(run):
        from helpers.exercises import call
        state = {"W": 2 * torch.eye(3)}
        if not torch.equal(call(run, (3,), state, torch.ones(1, 3)), torch.full((1, 3), 2.0)):
            yield "it does not multiply by W"

    assert check.feedback(Affine) == []
    assert "named ['W']" in check.feedback(Renamed)[0] and "['V'] are extra" in check.feedback(Renamed)[0]
    assert "does not inherit from nn.Module" in check.feedback(type("Plain", (), {}))[0]
    recorded = grading.record_answer(check, Affine, (), {})
    assert check.feedback(grading.decode(recorded)) == []   # the judge replays data, never the class


def test_a_call_recorded_without_its_end_replays_as_out_of_time():
    """The check stopped waiting while the learner's function still ran (helpers.exercises.call):
    its record has inputs but neither output nor raised."""
    from helpers.grading import Replay, ReplayError, fingerprint
    replay = Replay([{"inputs": fingerprint(((2,), {}))}])
    with pytest.raises(ReplayError, match="longer than the time limit"):
        replay(2)


def test_round_9_the_grader_judges_the_course_s_own_piece_as_the_live_check_does(cat, dragon):
    """mlp.MLP handed in as the answer was refused by the check cell but recorded through its run
    function, and the judge gave full marks; a callable object too."""
    from helpers.geometry import checks as geometry_checks
    from helpers.mlp import checks, compute as mlp

    recorded = grading.record_answer(checks.mlp_module, mlp.MLP, (cat, dragon), {})
    said = checks.mlp_module.feedback(grading.decode(recorded), cat, dragon)
    assert len(said) == 1 and "the course's own helpers.mlp.compute.MLP" in said[0], said

    class Cosine:
        def __call__(self, a, b):
            return 0.0

    said = geometry_checks.cosine_function.feedback(grading.decode(grading.record_answer(
        geometry_checks.cosine_function, Cosine(), (), {})))
    assert len(said) == 1 and "object that can be called" in said[0], said
