"""Red team round 13 (report B), entries 3, 4, 5 and 16: chapter 10's patch_grid check ran the check cell's
metric (a notebook function) outside any time limit; chapter 07's corpus_words and probe took what they were
given without a look (raw errors; the dragon with the cat's activations answered); a model whose weights
hold NaN got answers from generate at temperature 0, the lenses and residual_norms."""
import copy
import threading
import time

import numpy as np
import pytest
import torch

import helpers.exercises as ex
from helpers import patching
from helpers.ablation import checks as ablation_checks, compute as ablation
from helpers.errors import CourseInputError
from helpers.mlp import compute as mlp
from helpers.normalization import compute as nz
from helpers.sampling import compute as sampling

CANNOT = "the check cannot use what the check cell gives it"


def grid_args(cat, cat_world, metric):
    tok = cat_world.tokenizer
    return cat, tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was"), metric


def feedback_within(seconds, *args):
    """checks.patch_grid.feedback(*args) in a thread of its own: what it said, or None if it has not
    answered within ``seconds`` (the old check never did, with a metric that never returns)."""
    said = []
    thread = threading.Thread(target=lambda: said.append(ablation_checks.patch_grid.feedback(*args)), daemon=True)
    thread.start()
    thread.join(seconds)
    return said[0] if said else None


# ----------------------------------------------------------------- entry 3: the check cell's metric, bounded

def test_the_patch_grid_check_calls_the_metric_only_inside_a_bounded_call(cat, cat_world):
    """Every call of the check cell's metric, the check's own and the learner's, runs in call()'s thread."""
    good, threads = ablation.logit_difference(cat_world), []

    def metric(out):
        threads.append(threading.current_thread())
        return good(out)
    def grid(model, clean_ids, corrupt_ids, metric):
        return patching.patch_heads(model, clean_ids, corrupt_ids, metric, per_position=True)
    assert ablation_checks.patch_grid.feedback(grid, *grid_args(cat, cat_world, metric)) == []
    assert threads and threading.main_thread() not in threads


def test_a_metric_that_never_returns_is_stopped_within_the_checks_limit(cat, cat_world, monkeypatch):
    monkeypatch.setattr(ex, "CHECK_TIME_LIMIT", 3)
    good, calls = ablation.logit_difference(cat_world), []

    def metric(out):
        calls.append(1)
        while len(calls) > 2:   # the two ends are fine; then it never returns
            time.sleep(0.01)
        return good(out)
    started = time.monotonic()
    said = feedback_within(30, lambda *a: None, *grid_args(cat, cat_world, metric))
    assert said is not None, "the check did not answer: the metric it calls is not bounded"
    assert time.monotonic() - started < 15
    assert len(said) == 1 and said[0].startswith(CANNOT) and "metric" in said[0] and "ran for more than" in said[0]


def test_a_metric_that_raises_or_exits_is_one_sentence_about_the_check_cell(cat, cat_world):
    def raises(out):
        raise KeyError("logits")

    def exits(out):
        raise SystemExit
    for metric, words in ((raises, "KeyError"), (exits, "exit()")):
        said = ablation_checks.patch_grid.feedback(lambda *a: None, *grid_args(cat, cat_world, metric))
        assert len(said) == 1 and said[0].startswith(CANNOT) and words in said[0], said


def test_a_metric_object_is_refused_without_running_its_code(cat, cat_world):
    ran = []

    class Metric:
        def __call__(self, out):
            ran.append("call")

        def __deepcopy__(self, memo):
            ran.append("copy")
            return self
    said = ablation_checks.patch_grid.feedback(lambda *a: None, *grid_args(cat, cat_world, Metric()))
    assert len(said) == 1 and said[0].startswith(CANNOT) and "Metric" in said[0] and not ran, said


def test_copying_the_metric_for_the_learner_is_bounded_too(cat, cat_world, monkeypatch):
    """The copy handed to the learner's function deep-copies what the metric's closure holds: a
    __deepcopy__ of the notebook's that never returns is stopped like the metric itself."""
    monkeypatch.setattr(ex, "CHECK_TIME_LIMIT", 3)
    good = ablation.logit_difference(cat_world)

    class Stuck:
        def __deepcopy__(self, memo):
            while True:
                time.sleep(0.01)
    held = Stuck()

    def metric(out):
        assert held is not None
        return good(out)
    said = feedback_within(30, lambda *a: None, *grid_args(cat, cat_world, metric))
    assert said is not None and said[0].startswith(CANNOT) and "ran for more than" in said[0], said


# ----------------------------------------------------------------- entry 4: corpus_words

@pytest.fixture(scope="module")
def collected(cat, cat_world):
    return mlp.collect_activations(cat, cat_world)


@pytest.mark.parametrize("vocab", [None, 5, "the cat", [1, 2]])
def test_corpus_words_refuses_a_vocab_that_is_not_a_list_of_words(refused, collected, vocab):
    refused(lambda: mlp.corpus_words(collected, vocab), "vocab should be a list of words")


@pytest.mark.parametrize("given", [{}, {"tokens": 5}, None])
def test_corpus_words_refuses_what_collect_activations_did_not_make(refused, cat_world, given):
    refused(lambda: mlp.corpus_words(given, cat_world.tokenizer.vocab), "collected should be the dict returned by")


def test_collected_with_arrays_of_the_wrong_kind_or_length_is_refused(refused, collected, cat_world):
    vocab = cat_world.tokenizer.vocab
    for bad in (dict(collected, tokens=5), dict(collected, tokens=np.array("cat")), dict(collected, tokens=collected["tokens"][:3]),
                dict(collected, tokens=collected["tokens"].tolist()), dict(collected, act={}),
                dict(collected, act={0: collected["act"][0][:5]}), dict(collected, act={0: "x"}),
                dict(collected, act={0: collected["act"][0], 1: collected["act"][1][:, :3]})):
        refused(lambda: mlp.corpus_words(bad, vocab), "collected should be the dict returned by")
    assert mlp.corpus_words(collected, vocab) == [w for w in vocab if w in set(collected["tokens"].tolist())]


# ----------------------------------------------------------------- entry 5: probe's model, world and activations

def test_probe_refuses_a_model_a_world_and_activations_that_do_not_belong_together(refused, cat, cat_world, dragon,
                                                                                  dragon_world, collected):
    refused(lambda: mlp.probe(dragon, cat_world, collected, 0, 0), "belong together")
    refused(lambda: mlp.probe(dragon, dragon_world, collected, 0, 0), "of this model", "3 layers of 24 units")
    dragons = mlp.collect_activations(dragon, dragon_world, [["<BOS>", "dragon", "drinks", "fire"]])
    refused(lambda: mlp.probe(cat, cat_world, dragons, 0, 0), "of this model", "2 layers of 8 units")
    other = copy.deepcopy(cat)                              # the same sizes, other weights
    with torch.no_grad():
        other.blocks[0].mlp.W_1.mul_(1.5)
    refused(lambda: mlp.probe(other, cat_world, collected, 0, 0), "activations at the first position differ")
    foreign = dict(collected, tokens=np.where(collected["tokens"] == "cat", "wizard", collected["tokens"]))
    refused(lambda: mlp.probe(cat, cat_world, foreign, 0, 0), "words the world does not have", "wizard")


def test_probe_still_answers_for_its_own_model_world_and_activations(cat, cat_world, collected):
    result = mlp.probe(cat, cat_world, collected, 1, 4)
    words = mlp.corpus_words(collected, cat_world.tokenizer.vocab)
    profile = mlp.unit_profile(collected, 1, 4, words)
    assert result["words"] == words and np.array_equal(result["means"], profile["means"])
    assert result["promotes"] == [cat_world.tokenizer.vocab[i] for i, _ in mlp.value_readout(cat, 1, 4)]


# ----------------------------------------------------------------- entry 16: a model whose weights hold NaN

@pytest.fixture(scope="module")
def nan_dragon(dragon):
    broken = copy.deepcopy(dragon)
    with torch.no_grad():
        broken.E.view(-1)[0] = float("nan")
    return broken


@pytest.fixture(scope="module")
def dragon_ids(dragon_world):
    return dragon_world.tokenizer.encode("<BOS> dragon drinks")


@pytest.mark.parametrize("cache", [True, False])
@pytest.mark.parametrize("temperature", [0, 1.0])
def test_generate_refuses_a_model_whose_logits_are_not_finite(refused, nan_dragon, dragon_ids, temperature, cache):
    refused(lambda: sampling.generate(nan_dragon, dragon_ids, 3, temperature=temperature, cache=cache),
            "logits should be finite", "NaN or inf", "new token 1")


def test_generate_at_temperature_0_is_still_the_greedy_argmax(dragon, dragon_ids):
    ids = dragon_ids
    with torch.no_grad():
        for _ in range(4):
            ids = torch.cat([ids, dragon(ids)[-1].argmax()[None]])
    assert torch.equal(sampling.generate(dragon, dragon_ids, 4, temperature=0), ids)


def test_the_lenses_and_residual_norms_refuse_a_stream_that_is_not_finite(refused, nan_dragon, dragon_ids):
    refused(lambda: patching.token_lens(nan_dragon, dragon_ids, 3), "residual stream should hold finite", "at h0")
    refused(lambda: patching.logit_lens(nan_dragon, dragon_ids), "residual stream should hold finite", "at h0")
    refused(lambda: nz.residual_norms(nan_dragon, dragon_ids), "residual stream should hold finite", "at h0")


def test_the_lens_refuses_logits_that_are_not_finite_from_a_finite_stream(refused, dragon, dragon_ids):
    """NaN in a row of E the prompt never reads: the stream is finite, the read-out is not."""
    broken = copy.deepcopy(dragon)
    with torch.no_grad():
        broken.E[9, 0] = float("nan")
    ids = dragon_ids[1:]                                  # no token 9 in the prompt
    for call in (lambda: patching.token_lens(broken, ids, 3), lambda: patching.logit_lens(broken, ids)):
        refused(call, "finite", "NaN or inf")
    assert np.isfinite(nz.residual_norms(broken, ids)[1]).all()   # the stream's norms are right as they are
    with pytest.raises(CourseInputError, match="logits should be finite"):
        patching.check_finite_logits(torch.tensor([0.0, float("nan")]))


def test_the_lenses_and_norms_still_answer_for_a_finite_model(dragon, dragon_ids):
    lens = patching.token_lens(dragon, dragon_ids, 3)
    assert np.isfinite(lens["p"]).all() and len(lens["p"]) == dragon.cfg.n_layers + 1
    names, logits = patching.logit_lens(dragon, dragon_ids)
    with torch.no_grad():
        assert torch.allclose(logits[-1], dragon(dragon_ids), atol=1e-5)
    assert np.isfinite(nz.residual_norms(dragon, dragon_ids)[1]).all()
