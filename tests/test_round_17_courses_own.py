"""Red team round 17 (reader B, entry 3): the rule "the course's own piece is no answer" was evaded
by a one-line wrapper, ``lambda *a, **k: sampling.generate(*a, **k)``, and by a subclass of the
course's MLP whose own __init__ only calls super().__init__. Now a class that inherits from a class
of the course's is refused, and a function is judged by what runs: the course's own implementation
of the exercise (``Function(..., own=...)``, ``Module(..., own=...)``) starting in the learner's
function while a check calls it makes the answer wrong."""
import sys

import numpy as np
import torch
from torch import nn

from helpers import exercises, model as M
from helpers.exercises import Function, Wrong, call, courses_own_watched
from helpers.masking import checks as masking_checks
from helpers.masking import compute as masking
from helpers.mlp import checks as mlp_checks
from helpers.mlp import compute as mlp
from helpers.reference import softmax
from helpers.sampling import checks as sampling_checks
from helpers.sampling import compute as sampling

import pytest


def one(said, *words):
    """The one sentence in ``said``, holding every word."""
    assert len(said) == 1, said
    for word in words:
        assert word in said[0], (word, said[0])
    return said[0]


def test_a_one_line_wrapper_around_the_courses_generate_is_refused(cat, dragon):
    one(sampling_checks.generate_loop.feedback(lambda *a, **k: sampling.generate(*a, **k), cat, dragon),
        "ran the course's own helpers.sampling.compute.generate", "write your own")


def test_a_function_that_reaches_the_courses_generate_through_its_own_helper_is_refused(cat, dragon):
    def step(*args, **kwargs):
        return sampling.generate(*args, **kwargs)

    def generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True):
        return step(model, ids, n_new, temperature, top_k, top_p, seed, cache)
    one(sampling_checks.generate_loop.feedback(generate, cat, dragon), "helpers.sampling.compute.generate")


def test_a_wrong_answer_made_with_the_courses_piece_keeps_the_checks_own_sentence():
    def doubled(q, k, v):
        out, weights = masking.causal_attention(q, k, v)
        return 2 * out, weights
    said = masking_checks.causal_attention.feedback(doubled)
    assert said and not any("course's own" in sentence for sentence in said), said


def test_a_wrapper_around_the_courses_causal_attention_is_refused():
    one(masking_checks.causal_attention.feedback(lambda q, k, v: masking.causal_attention(q, k, v)),
        "ran the course's own helpers.masking.compute.causal_attention")


def test_a_subclass_of_the_courses_mlp_that_only_calls_super_is_refused(cat, dragon):
    class MLP(M.MLP):
        def __init__(self, d_model, d_ff, bias=True):
            super().__init__(d_model, d_ff, bias)
    one(mlp_checks.mlp_module.feedback(MLP, cat, dragon), "inherits from the course's own helpers.model.MLP",
        "inherit from nn.Module")
    one(mlp_checks.mlp_module.feedback(type("MLP", (mlp.MLP,), {"forward": lambda self, x: mlp.MLP.forward(self, x)}),
                                       cat, dragon), "inherits from the course's own helpers.mlp.compute.MLP")


def test_a_module_whose_forward_runs_the_courses_forward_is_refused(cat, dragon):
    class MLP(nn.Module):   # its own class, the course's sums
        def __init__(self, d_model, d_ff, bias=True):
            super().__init__()
            course = M.MLP(d_model, d_ff, bias)   # kept out of its parameters: they are the course's, shared
            object.__setattr__(self, "course", course)
            self.W_1, self.W_2, self.b_1, self.b_2 = course.W_1, course.W_2, course.b_1, course.b_2

        def forward(self, x):
            return self.course(x)
    one(mlp_checks.mlp_module.feedback(MLP, cat, dragon), "ran the course's own helpers.model.MLP")


def test_the_learners_own_function_that_uses_an_allowed_course_helper_passes():
    def causal_attention(q, k, v):   # its own sums, with the course's softmax (an earlier chapter's)
        T_q, T_k = q.shape[-2], k.shape[-2]
        scores = (q @ k.transpose(-2, -1)).numpy() / np.sqrt(q.shape[-1])
        hidden = np.triu(np.ones((T_q, T_k), dtype=bool), k=T_k - T_q + 1)
        weights = torch.tensor(softmax(np.where(hidden, -np.inf, scores), axis=-1), dtype=q.dtype)
        return weights @ v, weights
    assert masking_checks.causal_attention.feedback(causal_attention) == []


def test_the_tripwire_is_only_in_the_learners_thread_and_only_while_it_runs():
    kind = Function("a function causal_attention(q, k, v)", own=("helpers.masking.compute.causal_attention",))
    q = torch.randn(1, 1, 3, 2)
    with courses_own_watched(kind) as watch:
        masking.causal_attention(q, q, q)            # the check's own call of the course's piece: no tripwire
        assert call(lambda q: (q * 2), q).shape == q.shape   # a function that does not run it: nothing noted
        assert watch["ran"] == []
        out, _ = call(lambda q: masking.causal_attention(q, q, q), q)   # noted; it runs on, for the check to judge
        assert out.shape == q.shape and watch["ran"] == ["helpers.masking.compute.causal_attention"]
        with pytest.raises(Wrong, match="ran the course's own helpers.masking.compute.causal_attention"):
            exercises._no_courses_own(watch)
    assert sys.getprofile() is None
    out, _ = masking.causal_attention(q, q, q)       # after the check: the course's piece works as ever
    assert out.shape == q.shape


def test_the_watch_names_a_class_by_its_init_and_forward_looked_through_decorators():
    names = [name for _, name in exercises._own_codes(("helpers.model.MLP", "helpers.sampling.compute.generate")).values()]
    assert names == ["helpers.model.MLP.__init__", "helpers.model.MLP.forward", "helpers.model.MLP._forward",
                     "helpers.sampling.compute.generate"]   # (round 25: every method of the class, _forward too)


def test_a_slip_made_in_a_subclass_keeps_its_sentence_and_outside_a_check_the_subclass_is_refused(cat, dragon):
    doubled = type("MLP", (mlp.MLP,), {"forward": lambda self, x: 2 * mlp.MLP.forward(self, x)})
    said = mlp_checks.mlp_module.feedback(doubled, cat, dragon)
    assert said and not any("course's own" in sentence for sentence in said), said
    with pytest.raises(Wrong, match="inherits from the course's own helpers.mlp.compute.MLP"):
        exercises.not_the_courses(doubled, "a class")   # (as the grader's record screens it: no check around it)
