"""Round 11 of the red team (files, seeds and time): a saved model keeps its whole name and is written
whole or not at all, and never with NaN; load's expect is a Config; a Tokenizer's vocabulary is checked;
offset_rotation's refusal names d; the sinusoidal check reads its reference from the shipped file; the
Book's seeded experiments put torch's global generator back; the position probe and the unmasked runs
count their training before they start; learner.use bounds a kept file's import; setup_notebook checks
its seed."""
import os

import numpy as np
import pytest
import torch

import helpers
from helpers import learner, training, weights, worlds
from helpers.masking import compute as masking
from helpers.model import Config, Transformer
from helpers.positions import checks as positions_checks, compute as positions

SMALL = Config(vocab_size=20, d_model=6, n_heads=2, n_layers=1, d_ff=8)


def small(seed=0):
    return Transformer(SMALL, seed=seed)


def test_round_11_a_dotted_stem_keeps_its_whole_name(tmp_path):
    first, second = small(0), small(1)
    weights.save(first, tmp_path / "run.1")
    weights.save(second, tmp_path / "run.2")
    assert sorted(os.listdir(tmp_path)) == ["run.1.json", "run.1.safetensors", "run.2.json", "run.2.safetensors"]
    again = weights.load(tmp_path / "run.1")
    assert all(torch.equal(again.state_dict()[k], first.state_dict()[k]) for k in first.state_dict())
    assert weights.card(tmp_path / "run.2") == {}
    weights.save(first, tmp_path / "model")   # a stem without a dot: the files it always had
    assert (tmp_path / "model.json").is_file() and (tmp_path / "model.safetensors").is_file()


def test_round_11_save_checks_both_files_before_writing_either(tmp_path, refused):
    (tmp_path / "m.json").mkdir()
    refused(lambda: weights.save(small(), tmp_path / "m"), "m.json", "folder")
    assert sorted(os.listdir(tmp_path)) == ["m.json"]   # no .safetensors left behind, no temporary
    (tmp_path / "w.safetensors").mkdir()
    refused(lambda: weights.save(small(), tmp_path / "w"), "w.safetensors", "folder")
    assert sorted(os.listdir(tmp_path)) == ["m.json", "w.safetensors"]


def test_round_11_save_refuses_a_model_with_nan(tmp_path, refused):
    model = small()
    with torch.no_grad():
        model.E[0, 0] = float("nan")
    refused(lambda: weights.save(model, tmp_path / "nan"), "the model's E", "finite", "NaN")
    refused(lambda: weights.save(small().double(), tmp_path / "double"), "should be float32", "torch.float64")
    assert os.listdir(tmp_path) == []


def test_round_11_load_expect_should_be_a_config(tmp_path, refused):
    weights.save(small(), tmp_path / "m")
    refused(lambda: weights.load(tmp_path / "m", expect="cat"), "expect should be a Config", "'cat'")
    assert weights.load(tmp_path / "m", expect=SMALL).cfg == SMALL


TOKENIZER_REFUSALS = [
    (None, ("vocab should be a list", "None")),
    ("abc", ("vocab should be a list", "'abc'")),
    ([], ("empty list",)),
    (["a", "a", "b"], ("each word once", "'a'", "2 times")),
    ([1, 2], ("vocab[0] should be a string", "1")),
    (["", "a"], ("vocab[0] should be a non-empty string",)),
    (["a b", "c"], ("vocab[0] should be one word without spaces", "'a b'")),
    (["a", "b\tc"], ("vocab[1] should be one word without spaces",)),
]


def test_round_11_tokenizer_checks_its_vocabulary(refused):
    for vocab, words in TOKENIZER_REFUSALS:
        refused(lambda: worlds.Tokenizer(vocab), *words)
    for vocab in (worlds.CAT_VOCAB, worlds.DRAGON_VOCAB, worlds.induction_vocab(37), tuple(worlds.CAT_VOCAB)):
        tokenizer = worlds.Tokenizer(vocab)   # the course's vocabularies, as before
        assert tokenizer.vocab == list(vocab) and tokenizer.decode(tokenizer.encode(list(vocab))) == list(vocab)


def test_round_11_offset_rotation_refusal_names_d(refused):
    message = refused(lambda: positions.offset_rotation(1, 100_000), "d should be at most 14,188")
    assert "n should" not in message
    refused(lambda: positions.rope_scores(np.ones(2), np.ones(2), 100_000), "n should be at most 14,188")


def sinusoidal_positions(n, d):
    p = torch.arange(n, dtype=torch.float32)[:, None]
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    out = torch.empty(n, d)
    out[:, 0::2], out[:, 1::2] = torch.sin(p * w), torch.cos(p * w)
    return out


def test_round_11_sinusoidal_check_ignores_an_earlier_change_to_cat():
    cat = weights.load_cat()
    with torch.no_grad():
        cat.PE.mul_(2)   # an experiment in an earlier cell
        cat.E.add_(1)
    assert positions_checks.sinusoidal_positions.feedback(sinusoidal_positions, cat) == []


def test_round_11_seeded_experiments_put_the_global_generator_back():
    calls = {"leak": lambda: masking.leak(seed=123, d_model=4, n_heads=1, T=3),
             "dropout_demo": lambda: masking.dropout_demo(p=0.5, n=8, value=0.125, seed=123),
             "position_probe": lambda: positions.position_probe(0, steps=2)}
    out = {}
    for name, call in calls.items():
        torch.manual_seed(7)
        expected = torch.rand(3)
        torch.manual_seed(7)
        out[name] = call()
        assert torch.equal(torch.rand(3), expected), name
    moves = out["leak"]   # the same numbers as before: the Book's
    assert torch.allclose(moves["with_mask"], torch.tensor([0.000, 0.000, 0.299]), atol=5e-4)
    assert torch.allclose(moves["without_mask"], torch.tensor([0.334, 0.171, 0.299]), atol=5e-4)
    assert torch.equal(out["dropout_demo"]["train"], torch.tensor([0.25, 0.25, 0, 0.25, 0.25, 0, 0, 0]))


def test_round_11_training_is_counted_before_it_starts(refused, monkeypatch):
    never = lambda *a, **k: pytest.fail("trained before refusing")   # noqa: E731 (the old code trained for hours)
    monkeypatch.setattr(masking, "train_without_mask", never)
    monkeypatch.setattr(training, "train", never)
    refused(lambda: positions.position_probe(0, steps=10_000, n=100_000), "should be at most 1,000,000,000",
            "n=100,000", "steps=10,000")
    world = worlds.cat_world()
    refused(lambda: masking.no_mask_runs(world, seeds=range(20), steps=1_000), "at most 8,000", "20 seeds")
    refused(lambda: masking.no_mask_runs(world, seeds=[0, "1"]), "seeds[1]", "'1'")
    refused(lambda: masking.no_mask_runs(world, seeds=None), "seeds should be a non-empty list")
    refused(lambda: masking.no_mask_runs(world, n_samples=10**6), "n_samples should be at most")
    monkeypatch.undo()
    assert 0 <= positions.position_probe(0, steps=2) <= 1   # the notebook's sizes stay far within


@pytest.fixture
def my_gpt(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path))
    return lambda text: (tmp_path / "attention_head.py").write_text(text)


def course_head(*args):
    return "the course's"


@pytest.mark.parametrize("text, words", [
    ("exit()\ndef attention_head(*a):\n    return None\n", ("does not run (SystemExit",)),
    ("import sys\nsys.exit(3)\n", ("does not run (SystemExit: 3)",)),
    ("attention_head = 5\n", ("defines attention_head as int 5, not as a function or a class",)),
    ("raise GeneratorExit\n", ("does not run (RuntimeError: GeneratorExit",)),
])
def test_round_11_use_reports_a_kept_file_that_exits_or_is_no_function(text, words, my_gpt, capsys):
    my_gpt(text)
    assert learner.use("attention_head", course=course_head) is course_head
    said = capsys.readouterr().out
    assert said.startswith("attention_head: the course's own, because my_gpt/attention_head.py")
    for word in words:
        assert word in said, said


def test_round_11_use_bounds_a_kept_file_that_never_ends(my_gpt, capsys, monkeypatch):
    monkeypatch.setattr(learner, "LOAD_TIME_LIMIT", 1)   # (the old code has none: this fails, never hangs)
    my_gpt("while True:\n    pass\n")
    assert learner.use("attention_head", course=course_head) is course_head
    assert "did not end within 1 s" in capsys.readouterr().out
    my_gpt("def attention_head(*a):\n    return 'yours'\n")   # a file that runs is still the learner's
    assert learner.use("attention_head", course=course_head)() == "yours"


@pytest.mark.parametrize("seed, words", [
    (None, ("seed", "None")), ("x", ("seed", "'x'")), (float("nan"), ("seed", "nan")),
    (2**70, ("seed", "2**64 - 1")), (1.5, ("seed", "1.5")), (True, ("seed", "True")), (-1, ("seed", "-1")),
])
def test_round_11_setup_notebook_checks_its_seed(seed, words, refused):
    torch.manual_seed(11)
    expected = torch.rand(2)
    torch.manual_seed(11)
    refused(lambda: helpers.setup_notebook(seed), *words)
    assert torch.equal(torch.rand(2), expected)   # nothing was set
    helpers.setup_notebook(np.int64(3))
    first = torch.rand(2)
    helpers.setup_notebook(3)
    assert torch.equal(torch.rand(2), first)
