"""Round 22 (issue 31), the checks of chapters 07-12: a learner's value is quoted only through errors.shown
(an int of 5,000 digits, a 10 MB text, keys that cannot be sorted never make the check itself fail), and a
check's own reading of what a learner's function returned (or handed the model) is never told as the
learner's function stopping."""
import tracemalloc

import numpy as np
import pytest
import torch

from helpers import patching
from helpers.ablation import checks as ablation_checks
from helpers.gpt import checks as gpt_checks
from helpers.gpt import corpus
from helpers.model import Config, Transformer
from helpers.normalization import checks as nz_checks
from helpers.normalization import compute as nz
from helpers.sampling import checks as sampling_checks

HUGE = 10 ** 5000   # str() and repr() of it raise ValueError (more than 4,300 digits)
CHECK_FAILED = "the check itself failed"


@pytest.fixture(scope="module")
def text():
    return corpus.load_text()[:30_000]


def said(check, *args):
    """The one sentence ``check`` gives (it must give one, and not the check's own failure)."""
    found = check.feedback(*args)
    assert len(found) == 1 and CHECK_FAILED not in found[0], found
    assert len(found[0]) < 600, found[0][:600]   # quoted, not written out in full
    return found[0]


# ------------------------------------------------------------ chapter 12: merge_step and train_loop quote through shown

@pytest.mark.parametrize("answer, words", [
    (lambda words: HUGE, "should return two things, (pair, merged_words), but it returned an integer of"),
    (lambda words: [HUGE, HUGE], "the pair should be a tuple of two strings"),
    (lambda words: ((HUGE, "a"), words), "the pair should be a tuple of two strings"),
    (lambda words: (("a", "a"), HUGE), "the merged words should be a list of"),
    (lambda words: (("a", "a"), [[HUGE]] * len(words)), "the merged words should be a list of"),
    (lambda words: ("a" * 10 ** 7, words), "not the merged string a str of length 10000000"),
    (lambda words: (("a" * 10 ** 7, "b"), words), "is not the most frequent pair"),
])
def test_merge_step_quotes_a_huge_answer_in_a_sentence(text, answer, words):
    assert words in said(gpt_checks.merge_step, answer, text)


@pytest.mark.parametrize("returned, words", [
    (HUGE, "should return two things, (losses, val_losses), but it returned an integer of"),
    (([2.0] * 12, {HUGE: 1.0}), "val_losses should be a dict {step: validation loss} with the steps [0, 4, 8, 12]"),
    (([2.0] * 12, {"a": 1.0, 0: 2.0}), "but got {'a': 1.0, 0: 2.0}"),                 # keys that cannot be sorted
    (([2.0] * 12, {False: 1.0, 4: 1.0, 8: 1.0, 12: 1.0}), "but got {False: 1.0"),    # a bool is no step
    (([], np.zeros(3)), "losses should hold one number per step"),                   # no array read as true or false
], ids=["huge", "huge-key", "mixed-keys", "bool-key", "array-val"])
def test_train_loop_quotes_what_the_loop_returned(returned, words):
    assert words in said(gpt_checks.train_loop, lambda *args, **kwargs: returned)


def test_train_loop_lets_the_model_refuse_ids_it_cannot_read():
    def loop(model, *args, **kwargs):
        model(torch.zeros(2, 3, dtype=torch.long, device="meta"))
    sentence = said(gpt_checks.train_loop, loop)
    assert "the token ids should be a dense tensor of real numbers in memory, but got a tensor on the meta device" \
        in sentence and "Cannot copy out of meta" not in sentence


def test_train_loop_callback_refuses_what_is_no_list_of_losses():
    def loop(model, *args, callback=None, **kwargs):
        callback(5, {})
    sentence = said(gpt_checks.train_loop, loop)
    assert "callback should be given losses, the list of the losses so far, but got 5" in sentence
    assert "has no len()" not in sentence


# ------------------------------------------------------------ chapter 08: the keys of the answer dict

@pytest.mark.parametrize("answer, words", [({HUGE: 1}, "but it has a tuple"),
                                           ({"x" * 10 ** 6: 1}, "but it has ('xxxx"),
                                           ({i: 1 for i in range(10 ** 5)}, "but it has a tuple of length 100000")],
                         ids=["huge-key", "long-key", "many-keys"])
def test_steps_to_threshold_quotes_the_keys(answer, words):
    assert words in said(nz_checks.steps_to_threshold, answer, nz.load_curves(), 8, 0.003, 1.0)


# ------------------------------------------------------------ chapter 09: what plain() cannot copy is no stop

def meta(*args, **kwargs):
    return torch.zeros(4, device="meta")


@pytest.mark.parametrize("name, answer, args", [
    ("tempered_function", meta, ()),
    ("top_p_function", meta, ()),
    ("kv_cache_bytes_function", lambda *a: torch.tensor(1, device="meta"), ()),
    ("kv_cache_bytes_function", lambda *a: [torch.tensor(1, device="meta")], ()),
    ("generate_loop", lambda model, ids, n_new, **k: torch.zeros(len(ids) + n_new, dtype=torch.long, device="meta"),
     "models"),
])
def test_sampling_checks_name_a_returned_meta_tensor(cat, dragon, name, answer, args):
    sentence = said(getattr(sampling_checks, name), answer, *((cat, dragon) if args else ()))
    assert "what your function returned" in sentence and "a tensor on the meta device" in sentence, sentence
    assert "stopped" not in sentence


def test_sampling_checks_count_a_returned_view_before_copying_it():
    tracemalloc.start()
    try:
        sentence = said(sampling_checks.tempered_function, lambda logits, T: np.broadcast_to(0.0, 2 * 10 ** 7))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "should be small (at most 10,000,000 numbers), but it holds 20,000,000" in sentence
    assert peak < 60 * 2 ** 20, peak   # a copy of the view would take 160 MB


@pytest.mark.parametrize("generate, words", [
    (lambda model, ids, n_new, **k: model(ids.to("meta")), "the token ids should be a dense tensor of real numbers"),
    (lambda model, ids, n_new, **k: model(ids.to_sparse()), "the token ids should be a dense tensor of real numbers"),
    (lambda model, ids, n_new, **k: model([True, False]), "the token ids should be whole numbers, but got a bool"),
    (lambda model, ids, n_new, cache=True, **k: model(ids, cache=5), "cache should be a KVCache, but got int"),
])
def test_generate_loop_lets_the_model_refuse_what_it_is_fed(cat, dragon, generate, words):
    sentence = said(sampling_checks.generate_loop, generate, cat, dragon)
    assert words in sentence, sentence
    assert not any(raw in sentence for raw in ("aten::", "reshape is not implemented", "has no len()", "ran 2 tokens"))


# ------------------------------------------------------------ chapter 10: a function's name, a part's name

@pytest.fixture(scope="module")
def attribution_case():
    model = Transformer(Config(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=16, n_max=8), seed=0)
    parts, h = patching.residual_parts(model, torch.tensor([1, 2, 3]))
    return model, parts, torch.eye(11)[4], patching.final_norm_scale(model, h)


def test_direct_attribution_names_a_function_by_a_short_name_only(attribution_case):
    def answer(model, parts, direction, scale):
        return None
    answer.__name__ = "x" * 10 ** 6
    assert said(ablation_checks.direct_attribution, answer, *attribution_case).startswith(
        "not answered yet: your function returns None")


def test_direct_attribution_quotes_the_missing_part_names(attribution_case):
    model, parts, direction, scale = attribution_case
    huge_names = {HUGE + i: part for i, part in enumerate(parts.values())}
    assert "but misses [an integer of" in said(ablation_checks.direct_attribution, lambda *a: {"x": 1.0}, model,
                                               huge_names, direction, scale)
