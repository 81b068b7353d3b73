"""Red team round 15, reader B (chapters 10 and 12): samples_at with a tokenizer whose encode gives a
list or an array, induction_pairs whose corrupted copy could equal the clean one, a newline as the
sampling and ablation explorers' prompt, circuit_lines' verb decided from the losses, live_run put
back on a refused return value, and merge_step's tie rule set beside the library's."""
import matplotlib
import numpy as np
import pytest
import torch

from helpers import worlds
from helpers.ablation import compute as ab
from helpers.gpt import checks as gpt_checks
from helpers.gpt import compute as gc
from helpers.gpt import corpus, shipped
from helpers.gpt import tokenize as tk
from helpers.sampling import compute as sampling
from learner_loops import same_weights, small_gpt, weights_of

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def ids():
    return corpus.CharTokenizer().encode(corpus.load_text()[:5000])


class Encoded:
    """A learner's tokenizer: the character tokenizer whose encode gives ``kind`` (a list or an array)."""

    def __init__(self, kind):
        self.chars, self.kind = corpus.CharTokenizer(), kind
        self.vocab = self.chars.vocab

    def encode(self, text):
        return self.kind(self.chars.encode(text).tolist())

    def decode(self, ids):
        return self.chars.decode(ids)

    def text(self, ids):
        return self.chars.text(ids)


# ------------------------------------------------------------ entry 3: samples_at takes the ids sample_text takes

@pytest.mark.parametrize("kind", [list, np.array, tuple])
def test_round_15_samples_at_takes_a_tokenizer_whose_encode_gives_a_list_or_an_array(kind):
    model, chars = small_gpt(), corpus.CharTokenizer()
    expected = gc.samples_at(model, chars, "ROMEO:", 6, (0.8, 1.2), seed=3)
    assert gc.samples_at(model, Encoded(kind), "ROMEO:", 6, (0.8, 1.2), seed=3) == expected


def test_round_15_samples_at_takes_a_newline_and_refuses_what_encode_cannot_give_in_one_sentence(refused):
    model, chars = small_gpt(), corpus.CharTokenizer()
    texts = gc.samples_at(model, chars, "\n", 4, (0.8,))
    assert texts[0].startswith("\n") and len(texts[0]) == 5          # a newline alone is a prompt, as in sample_text

    class Floats(Encoded):
        def encode(self, text):
            return [0.5] * len(text)
    said = refused(lambda: gc.samples_at(model, Floats(list), "AB", 4, (0.8,)), "tokenizer.encode should return token ids")
    assert refused(lambda: gc.sample_text(model, Floats(list), "AB", 4), "tokenizer.encode") == said
    refused(lambda: gc.samples_at(model, chars, "", 4, (0.8,)), "non-empty")
    refused(lambda: gc.samples_at(model, chars, "™", 4, (0.8,)), "™")


# ------------------------------------------------------------ entry 4: a corrupted first copy is never the clean one

def test_round_15_induction_pairs_never_corrupt_a_row_into_its_clean_self(refused):
    for n, length, vocab_size, seed in ((200, 1, 3, 0), (300, 2, 3, 5), (500, 1, 4, 1), (50, 3, 3, 2**32 - 1)):
        clean, corrupt = ab.induction_pairs(n, length, vocab_size, seed)
        assert torch.equal(clean[:, length + 1:], corrupt[:, length + 1:])          # the second copy kept
        assert not (clean[:, 1:length + 1] == corrupt[:, 1:length + 1]).all(1).any()
        assert corrupt.min() >= 0 and corrupt[:, 1:].min() >= 1 and corrupt.max() < vocab_size
    refused(lambda: ab.induction_pairs(4, 6, 2, 0), "vocab_size should be at least 3", "got 2")


def test_round_15_induction_pairs_leave_the_chapters_pairs_as_they_were():
    for n, length, vocab_size, seed in ((40, 8, 16, 2024), (6, 4, 16, 1)):   # the notebook's call, test_ablation's
        clean, corrupt = ab.induction_pairs(n, length, vocab_size, seed)
        fresh = worlds.repeated_tokens(n, length, vocab_size, seed + 1)
        assert torch.equal(clean, worlds.repeated_tokens(n, length, vocab_size, seed))
        assert torch.equal(corrupt[:, 1:length + 1], fresh[:, 1:length + 1])


# ------------------------------------------------------------ entry 5: a newline is a prompt for the explorers

def test_round_15_the_sampling_and_ablation_explorers_take_a_newline_as_a_prompt(refused):
    from helpers.ablation import explorer as ablation_explorer
    from helpers.sampling import explorer as sampling_explorer

    yours, chars = gc.as_transformer(small_gpt()), corpus.CharTokenizer()
    assert sampling.prompt_state(yours, chars, "\n")["ids"].tolist() == [0]
    assert sampling.prompt_state(yours, chars, "  ")["ids"].tolist() == [1, 1]
    sampling_explorer.explorer(yours, chars, prompts=["\n", "ROMEO:"], length=4)
    ablation_explorer.explorer(yours, chars, prompts=["\n", "ROMEO:"])
    refused(lambda: sampling.prompt_state(yours, chars, ""), "at least one token", "gives none")
    refused(lambda: sampling.prompt_state(yours, chars, 5), "the prompt should be a string")


# ------------------------------------------------------------ entry 12: climb, fall or stay, from the numbers

def history_of(first, second):
    steps = np.array([0, 100, 200, 300])
    scores = np.full((4, 2, 2), 0.05) + np.arange(4)[:, None, None] * 0.01   # no head near FORMED
    return dict(steps=steps, scores=scores, first=np.array(first, float), second=np.array(second, float))


@pytest.mark.parametrize("first, second, sentence", [
    ([4.2, 3.5, 2.8, 2.1], [4.2, 3.4, 2.7, 2.0],
     "both copies' losses fall: the first copy's from 4.2 to 2.1, the second copy's from 4.2 to 2.0"),
    ([4.2, 5.0, 6.0, 9.4], [4.2, 5.0, 6.0, 9.4],
     "both copies' losses climb: the first copy's from 4.2 to 9.4, the second copy's from 4.2 to 9.4"),
    ([4.21, 3.0, 3.0, 4.19], [4.2, 3.0, 3.0, 2.0],
     "the first copy's loss stays at 4.2, the second copy's falls from 4.2 to 2.0"),
    ([4.2, 3.0, 3.0, 4.9], [4.2, 4.2, 4.2, 4.2], "the first copy's loss climbs from 4.2 to 4.9, the second copy's stays at 4.2"),
])
def test_round_15_circuit_lines_say_where_the_losses_went(first, second, sentence):
    history = history_of(first, second)
    assert gc.circuit_lines(history, gc.circuit_birth(history))[2] == sentence


def test_round_15_circuit_lines_of_the_shipped_run_are_as_the_notebook_prints_them():
    history = gc.induction_history(shipped.load_log())
    lines = gc.circuit_lines(history, gc.circuit_birth(history))
    assert lines[2] == "both copies' losses climb: the first copy's from 4.2 to 9.4, the second copy's from 4.2 to 9.4"


# ------------------------------------------------------------ entry 13: a refused return value puts the model back

LIVE = dict(batch=2, context=8, lr=1e-3, warmup=1, min_lr=1e-4, clip=1.0, eval_every=5, eval_batches=1, seconds=30,
            sample_chars=5)


def test_round_15_live_run_refusing_the_loops_return_value_puts_the_model_back(ids, refused, monkeypatch):
    finished = []
    finish = gc.LiveRun.finish
    monkeypatch.setattr(gc.LiveRun, "finish", lambda self, sample=None: finished.append(sample) or finish(self, sample))
    model = small_gpt()
    before = weights_of(model)
    torch.manual_seed(11)
    rng = torch.get_rng_state()

    def forgot_val_losses(model, train_ids, val_ids, steps, *rest):   # trains (no callback: no time limit), then
        losses, _ = gc.train_loop(model, train_ids, val_ids, 3, *rest[:-1], None)   # returns its losses alone
        return losses
    refused(lambda: gc.live_run(forgot_val_losses, model, ids, ids, corpus.CharTokenizer(), **LIVE),
            "loop should return (losses, val_losses)", "the model was put back as it was before the call")
    assert same_weights(model, before) and torch.equal(rng, torch.get_rng_state()) and len(finished) == 1

    def nan_weights(model, *args):   # returns its losses right, but leaves a model that cannot be sampled
        with torch.no_grad():
            model.E[0, 0] = float("nan")
        return [3.0], {0: 3.0, 1: 2.9}
    refused(lambda: gc.live_run(nan_weights, model, ids, ids, corpus.CharTokenizer(), **LIVE),
            "logits should be finite", "put back")
    assert same_weights(model, before) and len(finished) == 2


def test_round_15_live_run_with_no_time_left_after_planning_says_so(ids, refused, monkeypatch):
    model = small_gpt()
    before = weights_of(model)
    monkeypatch.setattr(gc, "plan_live_run", lambda *args: (5, 1e-9))   # the planning took all the time
    refused(lambda: gc.live_run(gc.train_loop, model, ids, ids, corpus.CharTokenizer(), **LIVE),
            "seconds should leave time to train once the run is planned")
    assert same_weights(model, before)


def test_round_15_live_run_takes_a_newline_as_its_prompt(ids):
    model = small_gpt()
    out = gc.live_run(gc.train_loop, model, ids, ids, corpus.CharTokenizer(), prompt="\n", **LIVE)
    assert out["sample"].startswith("\n") and len(out["sample"]) == 6


# ------------------------------------------------------------ entry 14: merge_step's tie rule and the library's

def library_merges(text, n):
    """The library's rule written out: the most frequent pair, a tie to the smallest (id, id), the bytes'
    ids in the order of their characters, each merged symbol the next id as it is made."""
    ids = {c: i for i, c in enumerate(sorted(tk.byte_table().values()))}
    words, out = tk.pretokenize(text), []
    for _ in range(n):
        counts = tk.pair_counts(words)
        best = max(counts.values())
        pair = min((p for p, c in counts.items() if c == best), key=lambda p: (ids[p[0]], ids[p[1]]))
        ids.setdefault(pair[0] + pair[1], len(ids))
        out.append(pair)
        words = [merged(w, pair) for w in words]
    return out


def merged(word, pair):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out, i = out + [word[i] + word[i + 1]], i + 2
        else:
            out, i = out + [word[i]], i + 1
    return out


def test_round_15_merge_step_says_how_its_ties_differ_from_the_librarys():
    text = "az zab zbcbb"
    library = [tuple(p) for p in tk.merges(tk.train_bpe(text, tk.BYTES + 6))]
    assert library_merges(text, 6) == library                                 # the docstring's rule is the library's
    words, mine = tk.pretokenize(text), []
    for _ in range(6):
        pair, words = tk.merge_step(words)
        mine.append(pair)
    assert mine[:5] == library[:5] and mine[5] == ("bc", "bb") != library[5] == ("Ġz", "ab")
    doc = " ".join(tk.merge_step.__doc__.split())
    assert "(as the library does)" not in doc and "by token id" in doc and "'Ġz' made earlier has the smaller id" in doc


def test_round_15_the_merge_checks_tie_hint_claims_the_library_only_between_single_characters():
    words = [list("zy"), list("ba")]
    hints = [hint for (pair, merged_words), hint in gpt_checks.merge_slips(words) if "on a tie" in hint]
    assert len(hints) == 2 and all(hint.endswith("as the library does between single characters") for hint in hints)
