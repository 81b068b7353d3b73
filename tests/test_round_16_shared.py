"""Red team round 16 (the shared worlds module and chapter 12's live run): sentence lists of a million
sentences of a thousand words each were copied (3.5 GiB) before any size check, and decisions copied
every prefix of every sentence (n(n-1)/2 words a sentence) unbounded; a learner's tokenizer that raises
reached the learner as its own raw traceback through the views that call it; a training loop that never
calls its callback ran on past the live run's time."""
import time

import matplotlib
import pytest
import torch

from helpers import worlds
from helpers.gpt import compute as gc
from helpers.gpt import corpus
from learner_loops import same_weights, small_gpt, weights_of

matplotlib.use("Agg")


class Lazy(list):
    """A list that says it is long without holding the words: len() is all check_sentences may read first."""

    def __init__(self, n, length):
        super().__init__()
        self.n, self.length = n, length

    def __len__(self):
        return self.n

    def __iter__(self):
        return (LongSentence(self.length) for _ in range(self.n))

    def __getitem__(self, i):
        return LongSentence(self.length)


class LongSentence(list):
    def __init__(self, length):
        super().__init__()
        self.length = length

    def __len__(self):
        return self.length

    def __iter__(self):
        raise AssertionError("a word was read before the sizes were checked")


def test_round_16_sentence_lists_are_sized_before_a_word_is_read(refused):
    sentences = [["the"] * 1000] * 10_001   # 10,001,000 words: one sentence past the limit
    refused(lambda: worlds.check_sentences(sentences), "at most 10,000,000 words in all", "10,001,000")
    refused(lambda: worlds.entropy_floor(sentences), "at most 10,000,000 words in all")
    # (since round 28 a list is read by the built-in's own length and iterator: this one holds nothing)
    refused(lambda: worlds.check_sentences(Lazy(1_000_000, 1_000)), "non-empty list of sentences", "but got []")


def test_round_16_decisions_bounds_the_prefixes_it_copies(refused):
    sentences = [["<BOS>"] + ["the"] * 999] * 41   # 41 x 499,500 = 20,479,500 prefix words
    refused(lambda: worlds.decisions(sentences), "at most 20,000,000 words of prefixes", "20,479,500")
    assert len(worlds.decisions([["<BOS>", "the", "cat"]])) == 2
    assert worlds.entropy_floor(worlds.cat_world().sentences) > 0


class Raising:
    """A learner's tokenizer whose encode and decode raise errors of their own."""
    vocab = corpus.CharTokenizer().vocab

    def encode(self, text):
        raise ValueError("my encode is not written yet")

    def decode(self, ids):
        raise KeyError(7)

    def text(self, ids):
        raise RuntimeError("no")


def test_round_16_a_learners_tokenizer_that_raises_gets_one_sentence(refused):
    refused(lambda: worlds.tokenizer_encode(Raising(), "hi", 65), "encode('hi')", "raised ValueError",
            "my encode is not written yet")
    refused(lambda: worlds.tokenizer_decode(Raising(), [1, 2]), "decode(2 ids)", "raised KeyError")
    refused(lambda: gc.prompt_ids(Raising(), "hi", 65), "encode('hi')", "raised ValueError")


LIVE = dict(batch=2, context=8, lr=1e-3, warmup=1, min_lr=1e-4, clip=1.0, eval_every=5, eval_batches=1, seconds=6,
            sample_chars=5)


def test_round_16_a_loop_that_never_calls_its_callback_is_stopped_and_the_model_put_back(refused, monkeypatch):
    monkeypatch.setattr(gc, "LATE_SECONDS", 1.0)
    ids = corpus.CharTokenizer().encode(corpus.load_text()[:5000])
    model = small_gpt()
    before = weights_of(model)

    def endless(model, *args):   # trains for ever and never calls its callback; catches Exception (TimeUp is one)
        while True:
            try:
                with torch.no_grad():
                    model.E.add_(1e-6)
            except Exception:   # noqa: BLE001
                pass

    start = time.perf_counter()
    refused(lambda: gc.live_run(endless, model, ids, ids, corpus.CharTokenizer(), **LIVE),
            "loop should call callback(losses, val_losses) after every step", "the model was put back")
    assert time.perf_counter() - start < LIVE["seconds"] + 10
    assert same_weights(model, before)


def test_round_16_the_watchdog_raises_nothing_once_its_block_has_ended():
    gc.stopped_after(0.2, gc.LoopLate, lambda: None)
    time.sleep(0.5)   # past its time: nothing may arrive now

    def loop():
        while True:
            try:
                pass
            except Exception:   # noqa: BLE001 (LoopLate is no Exception)
                pass
    with pytest.raises(gc.LoopLate):
        gc.stopped_after(0.2, gc.LoopLate, loop)


def test_round_16_a_learners_tokenizer_text_that_raises_or_gives_no_string_gets_one_sentence(refused):
    refused(lambda: gc.tokenizer_text(Raising(), [1, 2]), "text(2 ids)", "raised RuntimeError")

    class Numbers(Raising):
        def text(self, ids):
            return list(ids)
    refused(lambda: gc.tokenizer_text(Numbers(), [1, 2]), "should give one string", "[1, 2]")
    assert gc.tokenizer_text(corpus.CharTokenizer(), corpus.CharTokenizer().encode("hi")) == "hi"
