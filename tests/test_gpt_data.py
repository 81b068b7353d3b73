"""Chapter 12's data and loop: the Tiny Shakespeare copy, its split and characters, the schedule, the
course's training loop, the induction recording, the shipped run's log, and every refusal."""
import copy
import math

import pytest
import torch

from helpers.gpt import corpus, shipped
from helpers.gpt import train as loop
from helpers.model import Config, Transformer


@pytest.fixture(scope="module")
def text():
    return corpus.load_text()


@pytest.fixture(scope="module")
def tokenizer(text):
    return corpus.CharTokenizer(text)


@pytest.fixture(scope="module")
def ids(text, tokenizer):
    train_text, val_text = corpus.split(text)
    return tokenizer.encode(train_text), tokenizer.encode(val_text)


def tiny(dropout=0.0, positions="rotary", n_max=32):
    return Transformer(Config(vocab_size=65, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=n_max,
                              positions=positions, dropout=dropout), seed=0)


SHORT = dict(steps=40, batch=4, context=16, lr=3e-3, warmup=4, min_lr=3e-4, weight_decay=0.1, clip=1.0,
             eval_every=10, eval_batches=2, seed=0)


def parameters(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def unchanged(model, before):
    return all(torch.equal(p, before[name]) for name, p in model.named_parameters())


# ------------------------------------------------------------- the corpus

def test_the_copy_is_tiny_shakespeare_and_splits_as_nanogpt(text, tokenizer):
    assert len(text) == corpus.CHARACTERS == 1_115_394
    train_text, val_text = corpus.split(text)
    assert (len(train_text), len(val_text)) == (1_003_854, 111_540)
    assert train_text + val_text == text and train_text.startswith("First Citizen:")
    assert len(tokenizer) == len(tokenizer.vocab) == 65 and tokenizer.vocab == sorted(set(text))
    assert tokenizer.vocab[:2] == ["\n", " "] and corpus.CharTokenizer().vocab == tokenizer.vocab


def test_a_wrong_file_is_refused_in_one_sentence(refused, tmp_path):
    wrong = tmp_path / "input.txt"
    wrong.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n")
    refused(lambda: corpus.load_text(wrong), "sha256", corpus.SHA256[:12], str(wrong))
    refused(lambda: corpus.load_text(tmp_path / "missing.txt"), "Tiny Shakespeare", "missing.txt")


def test_the_tokenizer_round_trips_and_encodes_romeo_as_six_ids(text, tokenizer):
    ids = tokenizer.encode("ROMEO:")
    assert ids.dtype == torch.long and ids.shape == (6,)
    assert tokenizer.decode(ids) == ["R", "O", "M", "E", "O", ":"]
    sample = text[:5000]
    assert tokenizer.text(tokenizer.encode(sample)) == sample
    assert tokenizer.text([0, 1]) == "\n "


@pytest.mark.parametrize("call, words", [
    (lambda t: t.encode("café"), ["65 characters", "'é'"]),
    (lambda t: t.encode(None), ["string", "NoneType"]),
    (lambda t: t.decode([0, 65]), ["[0, 65)", "65"]),
    (lambda t: t.decode([1.5]), ["whole numbers", "float"]),
    (lambda t: corpus.CharTokenizer(""), ["non-empty string", "empty string"]),
    (lambda t: corpus.split(""), ["at least 2 characters", "0"]),
])
def test_the_tokenizer_refuses_in_one_sentence(refused, tokenizer, call, words):
    refused(lambda: call(tokenizer), *words)


def test_windows_are_seeded_and_shifted_by_one(ids):
    train_ids, _ = ids
    x, y = corpus.windows(train_ids, 3, 8, torch.Generator().manual_seed(5))
    again, _ = corpus.windows(train_ids, 3, 8, torch.Generator().manual_seed(5))
    assert x.shape == y.shape == (3, 8) and torch.equal(x, again) and torch.equal(x[:, 1:], y[:, :-1])


# ------------------------------------------------------------- the schedule

def test_the_schedule_warms_up_peaks_and_ends_at_min_lr():
    lr = dict(lr=1e-3, warmup=10, steps=110, min_lr=1e-4)
    rates = [loop.learning_rate(step, **lr) for step in range(111)]
    assert rates[0] == pytest.approx(1e-4) and rates[4] == pytest.approx(5e-4)
    assert all(a < b for a, b in zip(rates[:9], rates[1:10]))              # a straight climb
    assert rates[9] == rates[10] == max(rates) == pytest.approx(1e-3)     # the peak
    assert all(a >= b for a, b in zip(rates[10:], rates[11:]))             # then only down
    assert rates[60] == pytest.approx(5.5e-4) and rates[110] == pytest.approx(1e-4)
    assert loop.learning_rate(500, **lr) == pytest.approx(1e-4)


# ------------------------------------------------------------- the loop

def test_the_loss_starts_near_ln_65_and_falls_in_a_few_steps(ids):
    model = tiny()
    log = loop.train(model, *ids, **SHORT)
    assert [r["step"] for r in log] == [0, 10, 20, 30, 40]
    assert abs(log[0]["val_loss"] - math.log(65)) < 0.1 * math.log(65)
    assert log[-1]["train_loss"] < log[0]["train_loss"] - 0.5
    assert {"lr", "train_loss", "val_loss", "loss", "seconds", "tokens_per_second"} <= set(log[-1])
    assert not model.training and not any(getattr(m, "fused", False) for m in model.modules())


def test_the_same_call_gives_the_same_log_and_stop_after_is_its_start(ids):
    clock = ("seconds", "tokens_per_second")
    first = [{k: v for k, v in r.items() if k not in clock} for r in loop.train(tiny(0.1), *ids, **SHORT)]
    again = [{k: v for k, v in r.items() if k not in clock} for r in loop.train(tiny(0.1), *ids, **SHORT)]
    start = [{k: v for k, v in r.items() if k not in clock}
             for r in loop.train(tiny(0.1), *ids, **SHORT, stop_after=20)]
    assert first == again and start == first[:3]


def test_the_callback_sees_every_step_and_every_evaluation(ids):
    seen = []
    loop.train(tiny(), *ids, **{**SHORT, "steps": 12, "eval_every": 5}, callback=seen.append)
    updates = [r["step"] for r in seen if "val_loss" not in r]
    evaluations = [r["step"] for r in seen if "val_loss" in r]
    assert updates == list(range(1, 13)) and evaluations == [0, 5, 10, 12]


def test_a_time_limit_stops_early_and_says_so(ids):
    log = loop.train(tiny(), *ids, **{**SHORT, "steps": 10_000}, time_limit=1e-9)
    assert log[-1]["stopped_early"] and log[-1]["step"] <= 1


def test_clipping_bounds_the_gradient_norm(ids, monkeypatch):
    norms = []
    clip_grad_norm = torch.nn.utils.clip_grad_norm_

    def clip_and_measure(parameters, max_norm):
        parameters = list(parameters)
        total = clip_grad_norm(parameters, max_norm)
        norms.append((float(total), float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(p.grad) for p in parameters])))))
        return total

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_and_measure)
    loop.train(tiny(), *ids, **{**SHORT, "steps": 5, "lr": 1.0, "warmup": 1, "clip": 0.01})
    assert len(norms) == 5 and all(before > 0.01 for before, _ in norms)
    assert all(after <= 0.01 * (1 + 1e-5) for _, after in norms)


def test_weight_decay_shrinks_matrices_and_embeddings_only(ids):
    model = tiny()
    before = parameters(model)
    for p in model.parameters():   # zero gradients: AdamW's step is then its weight decay alone
        p.register_hook(torch.zeros_like)
    loop.train(model, *ids, **{**SHORT, "steps": 3, "lr": 0.1, "min_lr": 0.1, "warmup": 0, "weight_decay": 0.5})
    for name, p in model.named_parameters():
        factor = 0.95 ** 3 if p.dim() >= 2 else 1.0
        assert torch.allclose(p, before[name] * factor, rtol=1e-6, atol=0), name


def test_estimate_loss_is_a_fixed_subset_and_keeps_the_mode(ids):
    model = tiny(0.2)
    model.train()
    a = loop.estimate_loss(model, ids[1], context=16, batches=3, batch=4, seed=7)
    b = loop.estimate_loss(model, ids[1], context=16, batches=3, batch=4, seed=7)
    assert a == b and model.training


def test_fused_attention_gives_the_same_training_pass():
    model = tiny(positions="sinusoidal")
    x = torch.randint(65, (3, 20), generator=torch.Generator().manual_seed(0))
    plain = model(x)
    with loop.fused_attention(model):
        fused = model(x)
        traced = model(x[0], trace=True)
    assert torch.allclose(plain, fused, atol=1e-5) and torch.equal(traced["logits"], plain[0])
    assert not any(getattr(m, "fused", False) for m in model.modules())


# ------------------------------------------------------------- refusals: one sentence, nothing changed

@pytest.mark.parametrize("change, words", [
    (lambda m, a: dict(a, train_ids=torch.tensor([], dtype=torch.long)), ["train_ids", "empty"]),
    (lambda m, a: dict(a, val_ids="To be or not"), ["val_ids", "tensor", "str"]),
    (lambda m, a: dict(a, context=33), ["n_max=32", "context=33"]),
    (lambda m, a: dict(a, lr=float("nan")), ["lr", "finite", "nan"]),
    (lambda m, a: dict(a, lr=-1e-3), ["lr", "> 0", "-0.001"]),
    (lambda m, a: dict(a, steps=0), ["steps", "at least 1", "0"]),
    (lambda m, a: dict(a, warmup=40), ["warm-up", "warmup=40", "steps=40"]),
    (lambda m, a: dict(a, min_lr=1.0), ["min_lr", "at most", "1"]),
    (lambda m, a: dict(a, clip=0), ["clip", "> 0", "0"]),
    (lambda m, a: dict(a, callback="plot"), ["callback", "function", "str"]),
    (lambda m, a: dict(a, train_ids=torch.tensor([0, 70, 3] * 20)), ["0..64", "id 70"]),
])
def test_bad_input_to_train_is_refused_and_changes_nothing(refused, ids, change, words):
    model = tiny()
    before = parameters(model)
    settings = change(model, dict(SHORT, train_ids=ids[0], val_ids=ids[1]))
    refused(lambda: loop.train(model, **settings), *words)
    assert unchanged(model, before) and model.training


@pytest.mark.parametrize("vocab_size", [0, 10 ** 9])
def test_a_vocabulary_of_0_or_a_billion_is_refused(refused, ids, vocab_size):
    refused(lambda: Config(vocab_size=0, d_model=16, n_heads=2, n_layers=2, d_ff=32), "vocab_size", "at least 1")
    model = tiny()
    before = parameters(model)
    cfg = copy.copy(model.cfg)   # a config the loop must refuse, made past Config's own checks
    object.__setattr__(cfg, "vocab_size", vocab_size)
    model.cfg = cfg
    refused(lambda: loop.train(model, *ids, **SHORT), "2 to 1,000,000 tokens", f"vocab_size={vocab_size:,}")
    assert unchanged(model, before)


def test_windows_refuse_in_one_sentence(refused, ids):
    refused(lambda: corpus.windows(ids[1][:10], 2, 10, torch.Generator()), "context=10", "at least 11", "10")
    refused(lambda: corpus.windows(ids[1], 2, 8, 0), "torch.Generator", "int")
    refused(lambda: corpus.windows(ids[1].float(), 2, 8, torch.Generator()), "whole numbers", "float32")


# ------------------------------------------------------------- the induction recording and the shipped run

def test_the_induction_recording_scores_every_head_and_both_copies():
    model = tiny(n_max=128)
    model.train()
    figures = shipped.induction_figures(model, n=3, length=12, seed=0)
    assert model.training
    assert len(figures["induction_score"]) == 2 and all(len(row) == 2 for row in figures["induction_score"])
    assert all(0 <= s <= 1 for row in figures["induction_score"] for s in row)
    # a fresh model guesses: both copies cost about ln 65
    assert abs(figures["loss_first_copy"] - math.log(65)) < 0.2 and abs(figures["loss_second_copy"] - math.log(65)) < 0.2


@pytest.mark.parametrize("tokens", ["characters", "bpe"])
def test_the_shipped_run_starts_as_its_log_says(tokens):
    """The first steps of the recipe, run here (1 thread, on whatever CPU path this is), give the
    logged batch losses within 2e-3 and the logged first evaluation and induction figures within 1e-3."""
    log = shipped.load_log(tokens)
    model, short = shipped.build(stop_after=5, threads=1, progress=None, tokens=tokens)
    assert short["recipe"] == log["recipe"] and short["config"] == log["config"]
    assert short["step_losses"] == pytest.approx(log["step_losses"][:5], abs=2e-3)
    first, logged = short["evaluations"][0], log["evaluations"][0]
    assert first["step"] == logged["step"] == 0
    assert (first["train_loss"], first["val_loss"]) == pytest.approx((logged["train_loss"], logged["val_loss"]), abs=1e-3)
    flat = lambda record: [s for row in record["induction_score"] for s in row] + \
        [record["loss_first_copy"], record["loss_second_copy"]]
    assert flat(short["induction"][0]) == pytest.approx(flat(log["induction"][0]), abs=1e-3)


@pytest.mark.parametrize("tokens", ["characters", "bpe"])
def test_the_shipped_model_loads_and_meets_its_log(tokens):
    model, log = shipped.load_model(tokens), shipped.load_log(tokens)
    assert model.cfg == (shipped.CONFIG if tokens == "characters" else shipped.BPE_CONFIG) and not model.training
    final = log["evaluations"][-1]
    assert final["step"] == log["recipe"]["steps"] or final.get("stopped_early")   # the 15-minute guard
    assert [r["step"] for r in log["induction"]] == list(range(0, final["step"] + 1, shipped.INDUCTION["every"]))
    assert log["peak_memory_mib"] < 1.5 * 1024
    text = corpus.load_text()
    tokenizer = corpus.CharTokenizer(text) if tokens == "characters" else shipped.load_tokenizer()
    val_text = corpus.split(text)[1]
    val_ids = tokenizer.encode(val_text)
    assert shipped.evaluation_loss(model, val_ids) == pytest.approx(final["val_loss"], abs=1e-3)
    whole = shipped.text_losses(model, tokenizer, val_text)
    assert whole["per_token"] == pytest.approx(log["whole_validation_loss"], abs=1e-3)
    if tokens == "characters":
        assert whole["per_character"] == pytest.approx(whole["per_token"], abs=1e-9)
    else:   # about 2.3 characters per token, so a loss per token near 2.3 times the loss per character
        assert whole["per_character"] == pytest.approx(log["whole_validation_loss_per_character"], abs=1e-3)
        assert 2 < whole["per_token"] / whole["per_character"] < 2.6


def test_the_shipped_bpe_tokenizer_is_the_one_its_recipe_trains(refused):
    shipped_one, fresh = shipped.load_tokenizer(), shipped.train_tokenizer()
    assert shipped_one.bpe.to_str() == fresh.bpe.to_str() and len(shipped_one) == shipped.BPE_VOCAB
    line = "ROMEO:\nWhat light through yonder window breaks?"
    assert shipped_one.text(shipped_one.encode(line)) == line
    assert "".join(shipped_one.decode(shipped_one.encode(line))) == line
    refused(lambda: shipped_one.text([0, 1024]), "[0, 1024)", "1024")
    refused(lambda: shipped_one.decode([True]), "whole numbers", "bool")
    refused(lambda: shipped.load_model("words"), "'characters' or 'bpe'", "words")
