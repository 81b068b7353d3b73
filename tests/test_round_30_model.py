"""Round 30 (issue 31), reader A of round 29: a World checks its fields when it is built (entry 2), a model's pass
checks each entry of its KVCache before any work (entry 8), and reference.attention names an empty Q or K
(entry 4)."""
import numpy as np
import pytest
import torch

from helpers import reference as ref
from helpers import worlds
from helpers.model import KVCache
from helpers.tour import compute as tour

CAT_TOKENIZER = worlds.Tokenizer(worlds.CAT_VOCAB)


# ----------------------------------------------------------------- entry 2: a World checks its fields

@pytest.mark.parametrize("fields, words", [
    (("mine", None, [["<BOS>", "the", "cat"]]), ("tokenizer", "helpers.worlds.Tokenizer", "None")),
    (("mine", "tok", [["<BOS>", "the", "cat"]]), ("tokenizer", "'tok'")),
    (("mine", CAT_TOKENIZER, None), ("sentences", "non-empty list", "None")),
    (("mine", CAT_TOKENIZER, "abc"), ("sentences", "'abc'")),
    (("mine", CAT_TOKENIZER, []), ("sentences", "non-empty list")),
    (("mine", CAT_TOKENIZER, ["<BOS> the cat"]), ("sentences", "lists of words", "sentence 0")),
    (("mine", CAT_TOKENIZER, [["<BOS>", "the", "unicorn"]]), ("sentences", "vocabulary", "'unicorn'")),
    (("mine", CAT_TOKENIZER, [["<BOS>", "the", "cat"]], None), ("held_out", "list of sentences", "None")),
    (("mine", CAT_TOKENIZER, [["<BOS>", "the", "cat"]], "abc"), ("held_out", "'abc'")),
    (("mine", CAT_TOKENIZER, [["<BOS>", "the", "cat"]], [["<BOS>", "an", "owl"]]), ("held_out", "'an'")),
    ((None, CAT_TOKENIZER, [["<BOS>", "the", "cat"]]), ("name", "string", "None")),
    (("  ", CAT_TOKENIZER, [["<BOS>", "the", "cat"]]), ("name", "non-empty")),
])
def test_a_world_refuses_fields_the_course_cannot_read(refused, fields, words):
    refused(lambda: worlds.World(*fields), "the world's", *words)


def test_a_world_of_a_learners_lists_still_builds_and_functions_taking_it_get_sentences(refused, cat):
    world = worlds.World("mine", CAT_TOKENIZER, (("<BOS>", "the", "cat", "sat"),), [])
    assert world.sentences == [["<BOS>", "the", "cat", "sat"]] and world.held_out == [] and world.train == world.sentences
    assert worlds.cat_world().held_out and worlds.dragon_world(n=5).sentences
    refused(lambda: tour.mean_loss(cat, worlds.World("mine", None, worlds.cat_sentences())), "tokenizer", "None")


def test_a_dragon_world_counts_its_sentences_before_drawing_them(refused):
    refused(lambda: worlds.dragon_world(n=2_000_000, length=2), "n should be at most 1,000,000")


# ----------------------------------------------------------------- entry 8: each entry of a KVCache is checked

def filled(cat):
    cache = KVCache(2)
    cat(torch.tensor([1, 4, 5]), cache=cache)
    return cache


@pytest.mark.parametrize("tamper, words", [
    (lambda c: c.k.__setitem__(0, "x"), ("cache.k[0]", "tensor", "'x'")),
    (lambda c: c.v.__setitem__(0, None), ("cache.k[0] and cache.v[0]", "cache.v[0] is None")),
    (lambda c: [c.k.__setitem__(i, torch.zeros(1, 2, 3, 1)) for i in range(2)], ("cache.k[0]", "(B, 2, T, 3)",
                                                                                 "(1, 2, 3, 1)")),
    (lambda c: c.v.__setitem__(1, c.v[1][:, :, :2]), ("cache.v[1]", "shape (1, 2, 3, 3)", "(1, 2, 2, 3)")),
    (lambda c: c.k.__setitem__(1, torch.zeros(2, 2, 3, 3)), ("cache.k[1]", "as many sequences", "holds 2")),
    (lambda c: c.k.__setitem__(0, c.k[0].double()), ("cache.k[0]", "torch.float32", "torch.float64")),
    (lambda c: c.k.__setitem__(0, c.k[0][0]), ("cache.k[0]", "(B, H_kv, T, d_k)", "(2, 3, 3)")),
    (lambda c: c.k.__setitem__(0, c.k[0].to_sparse()), ("cache.k[0]", "dense tensor", "layout")),
    (lambda c: c.v.__setitem__(0, torch.empty(1, 2, 3, 3, device="meta")), ("cache.v[0]", "meta")),
    (lambda c: c.v.__setitem__(0, torch.full_like(c.v[0], float("nan"))), ("cache.v[0]", "finite", "NaN")),
    (lambda c: c.k.__setitem__(1, c.k[1].clone().index_put_((torch.tensor(0),) * 4, torch.tensor(float("inf")))),
     ("cache.k[1]", "finite", "1 of its 18")),
    (lambda c: setattr(c, "ids", "x"), ("cache.ids", "LongTensor of shape (1, 3)", "'x'")),
    (lambda c: setattr(c, "ids", torch.zeros(1, 2, dtype=torch.long)), ("cache.ids", "shape (1, 2)")),
    (lambda c: setattr(c, "k", "ab"), ("cache.k", "a list", "'ab'")),
    (lambda c: c.v.append(None), ("cache.k and cache.v", "2 and 3")),
    (lambda c: setattr(c, "switches", "x"), ("cache.switches", "dict", "'x'")),
])
def test_a_pass_refuses_a_cache_whose_entries_were_set_by_hand_and_leaves_it_as_it_was(refused, cat, tamper, words):
    cache = filled(cat)
    tamper(cache)
    held = (list(cache.k) if isinstance(cache.k, list) else cache.k, cache.ids)
    refused(lambda: cat(torch.tensor([7]), cache=cache), *words)
    assert (list(cache.k) if isinstance(cache.k, list) else cache.k, cache.ids) == held


def test_a_copied_cache_is_checked_too_and_another_models_is_still_named_so(refused, cat, dragon):
    from helpers.sampling.compute import copied

    cache = filled(cat)
    refused(lambda: dragon(torch.tensor([0, 5]), cache=cache), "another model")
    copy = copied(cache)   # (no owner, no ids: the chapter's timed step)
    copy.v[1] = torch.full_like(cache.v[1], float("nan"))
    refused(lambda: cat(torch.tensor([7]), cache=copy), "cache.v[1]", "finite")
    copy = copied(cache)
    assert torch.allclose(cat(torch.tensor([7]), cache=copy), cat(torch.tensor([1, 4, 5, 7]))[-1:], atol=1e-5)
    assert len(copy) == 4 and len(cache) == 3


# ----------------------------------------------------------------- entry 4: attention names an empty Q or K

@pytest.mark.parametrize("Q, K, words", [
    (np.ones((2, 3)), np.ones((0, 3)), ("K should have at least one row", "(0, 3)")),
    (np.ones((0, 3)), np.ones((2, 3)), ("Q should have at least one row", "(0, 3)")),
])
def test_attention_names_an_empty_q_or_k(refused, Q, K, words):
    with pytest.raises(Exception) as caught:
        ref.attention(Q, K, np.ones((K.shape[0], 3)))
    assert "mask" not in str(caught.value) and "softmax" not in str(caught.value)
    refused(lambda: ref.attention(Q, K, np.ones((K.shape[0], 3))), *words)
