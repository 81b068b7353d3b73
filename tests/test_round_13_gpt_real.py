"""Red team round 13 (chapters 11 and 12): BPE training on a text of very long words, the course's
training loop and the live run stopped by an error or given a frozen model, samples of a model with
a NaN weight, and chapter 11's timings counted before they start."""
import random

import pytest
import torch

from helpers.gpt import compute as gc
from helpers.gpt import corpus
from helpers.gpt import tokenize as tk
from helpers.gpt import train as course_train
from helpers.real import compute as real
from learner_loops import same_weights, small_gpt, weights_of


@pytest.fixture(scope="module")
def ids():
    return corpus.CharTokenizer().encode(corpus.load_text()[:5000])


# ------------------------------------------------------------ entry 12: train_bpe's work counted up front

def test_round_13_train_bpe_refuses_words_too_long_to_train_on_in_a_minute(refused):
    random.seed(0)
    letters = "".join(random.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(100_001))
    refused(lambda: tk.train_bpe(letters, 4096), "training text's words", "100,001 bytes", "spaces or newlines")
    # the work is the words' squared lengths summed: four words of 60,000 letters are too many as well
    refused(lambda: tk.train_bpe(" ".join(letters[:60_000] for _ in range(4)), 300), "training text's words")
    refused(lambda: tk.train_bpe("é" * 50_001, 300), "100,002 bytes")   # bytes, not characters
    refused(lambda: tk.train_bpe(" " * 100_001, 300), "100,001 bytes")   # a run of spaces is one word too
    assert tk.train_bpe(letters[:20_000], 300).get_vocab_size() == 300


def test_round_13_word_work_bounds_the_libraries_words():
    from tokenizers import pre_tokenizers

    split = pre_tokenizers.ByteLevel(add_prefix_space=False)
    texts = ["1²" * 500, "Hello, world!\n\n  It's   ok\u3000\u3000x\x1c\x1c!!", "a\u2003\u2003b \t\nc" * 50,
             "ROMEO:\nWhat say'st thou?  " * 20, "\u00a0\u00a0 x" * 30, "ⅫⅫ12ab__--" * 40]
    for text in texts:
        words = sum(len(w) ** 2 for w, _ in split.pre_tokenize_str(text))
        assert tk.word_work(text)[0] >= words, text[:30]
    assert tk.word_work(corpus.load_text())[0] < tk.MAX_WORD_WORK / 50   # Tiny Shakespeare: far below the limit


# ------------------------------------------------------------ entry 13: a run stopped by an error puts it all back

def test_round_13_train_loop_stopped_by_its_callback_puts_the_model_and_the_rng_back(ids, refused):
    model = small_gpt().eval()
    before = weights_of(model)
    torch.manual_seed(1234)
    rng = torch.get_rng_state()

    def callback(losses, val_losses):
        if len(losses) == 2:
            raise KeyError("stop")
    refused(lambda: gc.train_loop(model, ids, ids, 5, 2, 8, 1e-3, 1, 1e-4, 1.0, 1, 1, 0, callback),
            "the run stopped with KeyError", "left as it was")
    assert same_weights(model, before) and torch.equal(rng, torch.get_rng_state())
    assert not model.training and all(p.grad is None for p in model.parameters())

    def interrupt(losses, val_losses):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        gc.train_loop(model, ids, ids, 5, 2, 8, 1e-3, 1, 1e-4, 1.0, 1, 1, 0, interrupt)
    assert same_weights(model, before) and torch.equal(rng, torch.get_rng_state())


def test_round_13_the_live_runs_time_up_stops_train_loop_where_it_is(ids):
    model = small_gpt()
    before = weights_of(model)

    def time_up(losses, val_losses):
        if len(losses) == 2:
            raise gc.TimeUp("time is up")
    with pytest.raises(gc.TimeUp):
        gc.train_loop(model, ids, ids, 5, 2, 8, 1e-3, 1, 1e-4, 1.0, 1, 1, 0, time_up)
    assert not same_weights(model, before)   # two steps taken and kept: the live run shows them


def test_round_13_live_run_with_a_loop_that_raises_puts_the_model_back_and_closes_its_bar(ids, refused, monkeypatch):
    finished = []
    monkeypatch.setattr(gc.LiveRun, "finish", lambda self, sample=None: finished.append(sample) or self.bar.close())
    model = small_gpt()
    before = weights_of(model)
    rng = torch.get_rng_state()

    def loop(model, *args):
        with torch.no_grad():
            model.E.add_(1.0)
        raise ValueError("my loop broke")
    refused(lambda: gc.live_run(loop, model, ids, ids, corpus.CharTokenizer(), batch=2, context=8, lr=1e-3, warmup=1,
                                min_lr=1e-4, clip=1.0, eval_every=5, eval_batches=1, seconds=5, sample_chars=5),
            "the training loop stopped with ValueError", "my loop broke")
    assert finished and same_weights(model, before) and torch.equal(rng, torch.get_rng_state())

    def callback_error(losses, val_losses):   # the course's loop, stopped by an error: its sentence, once
        raise KeyError("stop")
    course = lambda *args: gc.train_loop(*args[:-1], callback_error)
    message = refused(lambda: gc.live_run(course, model, ids, ids, corpus.CharTokenizer(), batch=2, context=8,
                                          lr=1e-3, warmup=1, min_lr=1e-4, clip=1.0, eval_every=5, eval_batches=1,
                                          seconds=5, sample_chars=5), "KeyError")
    assert message.count("should run to its end") == 1 and len(finished) == 2 and same_weights(model, before)


# ------------------------------------------------------------ entry 14: samples of a model with a NaN weight

def test_round_13_samples_at_a_nan_model_says_what_sample_text_says(refused):
    model, chars = small_gpt(), corpus.CharTokenizer()
    with torch.no_grad():
        model.E[0, 0] = float("nan")
    said = refused(lambda: gc.sample_text(model, chars, "AB", 5), "logits should be finite", "NaN")
    assert refused(lambda: gc.samples_at(model, chars, "AB", 5, (0.8, 1.2)), "logits should be finite") == said


# ------------------------------------------------------------ entry 15: a frozen model refused up front

def test_round_13_a_frozen_model_is_refused_before_any_training(ids, refused):
    model = small_gpt().requires_grad_(False)
    before = weights_of(model)
    torch.manual_seed(7)
    rng = torch.get_rng_state()
    for call in (lambda: gc.train_loop(model, ids, ids, 2, 2, 8, 1e-3, 1, 1e-4, 1.0, 1, 1, 0, None),
                 lambda: gc.step_seconds(model, ids, 2, 8),
                 lambda: gc.plan_live_run(model, ids, 2, 8, 30, 5, 1, 10),
                 lambda: gc.live_run(gc.train_loop, model, ids, ids, corpus.CharTokenizer(), batch=2, context=8,
                                     lr=1e-3, warmup=1, min_lr=1e-4, clip=1.0, eval_every=5, eval_batches=1),
                 lambda: course_train.train(gc.as_transformer(model).requires_grad_(False), ids, ids, steps=2, batch=2, context=8,
                                            warmup=1, eval_every=1, eval_batches=1)):
        refused(call, "should require grad", "requires_grad_(True)")
    assert same_weights(model, before) and torch.equal(rng, torch.get_rng_state())
    model.E.requires_grad_(True)   # one parameter trainable is not enough: the rest would silently stay
    refused(lambda: gc.train_loop(model, ids, ids, 2, 2, 8, 1e-3, 1, 1e-4, 1.0, 1, 1, 0, None), "nor")


def test_round_13_train_loop_trains_inside_no_grad(ids):
    model = small_gpt()
    with torch.no_grad():
        losses, val = gc.train_loop(model, ids, ids, 2, 2, 8, 1e-3, 1, 1e-4, 1.0, 1, 1, 0, None)
    assert len(losses) == 2 and set(val) == {0, 1, 2}


# ------------------------------------------------------------ entry 17: chapter 11's timings counted up front

@pytest.fixture(scope="module")
def smol():
    torch.set_num_threads(1)
    return real.load()


@pytest.fixture
def passes(smol, monkeypatch):
    """The real model with a stand-in forward (zero logits, each pass counted): the timings' bookkeeping only."""
    model, _ = smol
    seen = []

    def forward(ids, cache=None, **kwargs):
        seen.append(ids.shape[-1])
        assert len(seen) <= 50, "a timing that should have been refused ran"
        return torch.zeros(ids.shape[-1], model.cfg.vocab_size)
    monkeypatch.setattr(model, "forward", forward)
    return model, seen


def test_round_13_real_timings_refuse_what_cannot_finish_in_a_minute(passes, refused):
    model, seen = passes
    prompt = torch.arange(100, 107)
    refused(lambda: real.kv_timing(model, prompt, new_tokens=1000, repeats=100), "kv_timing should time at most",
            "fewer new_tokens")
    refused(lambda: real.kv_timing(model, prompt, new_tokens=16, repeats=3), "kv_timing should time at most")
    refused(lambda: real.forward_seconds(model, T=1024, repeats=100), "forward_seconds should time at most")
    refused(lambda: real.forward_seconds(model, T=1024, repeats=1), "a smaller T")
    assert seen == []   # refused before the first pass


def test_round_13_the_chapters_timings_still_run(passes):
    model, seen = passes
    timing = real.kv_timing(model, torch.arange(100, 132), new_tokens=2, repeats=1, warm_up=False)   # chapter 11's
    assert len(seen) == 5 and len(timing["ids"]) == 34
    seen.clear()
    real.kv_timing(model, torch.arange(100, 107))   # the defaults
    real.forward_seconds(model, 32)                 # scripts/benchmark.py's
    assert len(seen) > 5
