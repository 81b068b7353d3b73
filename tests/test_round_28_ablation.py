"""Round 28, fixer "ablation" (reader B's entries 1, 5, 8, 10): a mean or resample reference of one row
refused (it is the row itself), memory refusals named for the function called (with a smaller chunk as
advice), and the passes of without_attention_blocks and of a resample induction_ablation counted first."""
import pytest
import torch

from helpers import patching, worlds
from helpers.ablation import compute, explorer
from helpers.errors import CourseInputError
from helpers.model import Config, Transformer
from helpers.real import checks as real_checks, circuit


class CharTokenizer:
    vocab = list("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")

    def encode(self, text):
        return torch.tensor([self.vocab.index(c) for c in text])

    def decode(self, ids):
        return [self.vocab[int(i)] for i in ids]


@pytest.fixture(scope="module")
def chars():
    model = Transformer(Config(vocab_size=65, d_model=32, n_heads=4, n_layers=2, d_ff=64, n_max=64))
    model.reset_parameters(seed=0)
    return model, CharTokenizer()


@pytest.fixture(scope="module")
def wide():
    """A small model with a large vocabulary: a pass over one sequence of 1,023 tokens needs more than 0.5 GiB."""
    model = Transformer(Config(vocab_size=130_000, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=1024))
    model.reset_parameters(seed=0)
    return model


def no_pass(monkeypatch):
    """Make any pass through patching.capture or the model fail the test (a refusal must come first)."""
    def never(*args, **kwargs):
        raise AssertionError("a pass ran before the refusal")
    monkeypatch.setattr(patching, "capture", never)
    monkeypatch.setattr(compute, "capture", never)
    monkeypatch.setattr(compute, "head_outputs", never)
    monkeypatch.setattr(compute, "direct_effects", never)
    monkeypatch.setattr(Transformer, "forward", never)


# ------------------------------------------------------------ 1: a reference of one row

def test_anylab_refuses_a_mean_or_resample_view_whose_reference_is_the_prompt_itself(chars, refused):
    model, tok = chars
    lab = compute.AnyLab(model, tok, ["ROMEO:"])
    for kind in ("mean", "resample"):
        refused(lambda kind=kind: lab.view("ROMEO:", [(0, 0), (1, 2)], kind), "the prompts", "second row",
                f"{kind} ablation of 'ROMEO:'", "another prompt at least as long", "longest length 6")
    zero = lab.view("ROMEO:", [(0, 0)], "zero")                      # zero has no reference: drawn
    none = lab.view("ROMEO:", [], "mean")                            # nothing ablated: nothing to refuse
    assert float((zero["probs"] - none["probs"]).abs().max()) > 1e-4
    refused(lambda: lab.view("ROMEO:", [(0, 0)], "Mean"), "the ablation kind", "'Mean'")
    two = compute.AnyLab(model, tok, ["ROMEO:", "JULIET:"])
    refused(lambda: two.view("JULIET:", [(0, 0)], "mean"), "'JULIET:'", "longest length 7")
    before = two.view("ROMEO:", [], "mean")["probs"]                 # JULIET reaches every position of ROMEO
    after = two.view("ROMEO:", [(l, h) for l in range(2) for h in range(4)], "mean")["probs"]
    assert float((after - before).abs().max()) > 1e-6                 # (the prompt's own reference gives 0)


def test_the_ablation_explorer_shows_that_refusal_as_a_sentence(chars):
    model, tok = chars
    ex = explorer.explorer(model, tok, ["ROMEO:", "JULIET:"])
    ex.controls["prompt"].value = "JULIET:"
    first, drawn = ex.picture(), ex.drawn
    ex.controls["L0H1"].value = True                                  # mean ablation (the default kind)
    assert "second row" in ex.message.value and "JULIET:" in ex.message.value
    assert ex.drawn == drawn                                          # the picture keeps its last state
    with pytest.raises(CourseInputError, match="second row"):
        ex.picture()
    ex.controls["kind"].value = "zero"                                # zero ablation draws again
    assert ex.message.value == "" and ex.picture() != first


def test_induction_ablation_refuses_a_per_position_mean_over_one_sequence(induction, refused, monkeypatch):
    one = worlds.repeated_tokens(1, 8, induction.cfg.vocab_size, seed=2024)
    two = worlds.repeated_tokens(2, 8, induction.cfg.vocab_size, seed=2024)
    heads = [(0, 0), (1, 1)]
    clean = compute.induction_ablation(induction, one, [], "mean")          # nothing ablated: answered
    pooled = compute.induction_ablation(induction, one, heads, "mean", per_position=False)   # a mean over positions
    assert pooled["second"] != pytest.approx(clean["second"], abs=1e-3)
    for reference in (one, compute.induction_reference(induction, one)):
        refused(lambda reference=reference: compute.induction_ablation(induction, two, heads, "mean",
                                                                         reference=reference),
                "the mean reference", "second row", "a mean over two sequences at least", "longest length 17")
    got = compute.induction_ablation(induction, two, heads, "mean")
    assert got["second"] > clean["second"] + 0.05
    with monkeypatch.context() as m:                                        # ids as its own reference: no pass first
        no_pass(m)
        refused(lambda: compute.induction_ablation(induction, one, heads, "mean"), "the mean reference", "second row")
        refused(lambda: compute.induction_direct_effects(induction, one, [(1, 0)]), "the mean reference")
    assert compute.induction_direct_effects(induction, one)["direct"].shape == (2, 2)   # nothing ablated


def test_resample_donors_keeps_its_refusal_in_the_shared_sentence(refused):
    refused(lambda: compute.resample_donors([3, 5, 3], 0), "lengths should have a second row", "a donor for each row",
            "longest length 5")
    assert compute.resample_donors([3, 5, 5], 0).tolist()[1:] == [2, 1]


def test_ablated_copy_loss_refuses_one_sequence_and_keeps_the_cells_own(refused, capsys):
    model = Transformer(Config(vocab_size=128, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=64))
    model.reset_parameters(seed=0)
    calls = []

    def ablates_nothing(model, seqs, heads_off):
        calls.append(1)
        return 1.0
    one = circuit.random_repeats(1, 6, 128, 0)
    refused(lambda: real_checks.checked_ablation(model, one, [(1, 0)]), "seqs should have a second row",
            "a mean over two sequences at least")
    verdict = real_checks.ablated_copy_loss(ablates_nothing, model, one, [(1, 0)])
    assert not verdict and calls == [] and "second row" in capsys.readouterr().out
    many = circuit.random_repeats(16, 6, 128, 0)                           # the cell's own: 16 sequences
    seqs, heads = real_checks.checked_ablation(model, many, [(1, 0)])
    assert torch.equal(seqs, many) and heads == [(1, 0)]


# ------------------------------------------------------------ 5: a memory refusal names the function called

@pytest.mark.parametrize("name", ["head_statistics", "induction_scores", "receiver_scores", "copy_loss",
                                  "copy_effects"])
def test_circuit_memory_refusals_name_the_function_and_a_smaller_chunk(wide, name, refused, monkeypatch):
    ids = circuit.random_repeats(2, 511, wide.cfg.vocab_size, 0)
    call = {"receiver_scores": lambda **k: circuit.receiver_scores(wide, ids, (1, 0), **k)}.get(
        name, lambda **k: getattr(circuit, name)(wide, ids, **k))
    with monkeypatch.context() as m:
        no_pass(m)
        message = refused(lambda: call(chunk=2), "with chunk=2 (2 sequences in each pass: a smaller chunk needs less)",
                          "2 rows of 1,023 tokens")
        assert message.startswith(name + " "), message
        assert refused(lambda: call(chunk=1), "(one sequence a pass)").startswith(f"{name} with chunk=1 ")


def test_induction_direct_effects_names_itself_in_its_memory_refusal(wide, refused, monkeypatch):
    ids = circuit.random_repeats(2, 511, wide.cfg.vocab_size, 0)
    no_pass(monkeypatch)
    message = refused(lambda: compute.induction_direct_effects(wide, ids), "2 rows of 1,022 tokens")
    assert message.startswith("induction_direct_effects should need at most"), message


# ------------------------------------------------------------ 8, 10: passes counted before they run

def test_without_attention_blocks_counts_its_pass_first(wide, chars, refused, monkeypatch):
    model, tok = chars
    ids = tok.encode("ROMEO: what light")
    assert torch.equal(compute.without_attention_blocks(model, ids), model(ids, attention=False))
    with monkeypatch.context() as m:
        m.setattr(type(wide), "embed", lambda *a, **k: (_ for _ in ()).throw(AssertionError("a pass ran")))
        message = refused(lambda: compute.without_attention_blocks(wide, torch.zeros(2, 1024, dtype=torch.long)),
                          "2 rows of 1,024 tokens", "0.5 GiB")
    assert message.startswith("without_attention_blocks should need at most"), message


def test_a_resample_induction_ablation_counts_its_draws_logits_first(wide, induction, refused, monkeypatch):
    ids = circuit.random_repeats(2, 100, wide.cfg.vocab_size, 0)
    with monkeypatch.context() as m:
        no_pass(m)
        message = refused(lambda: compute.induction_ablation(wide, ids, [(0, 0)], "resample", draws=8),
                          "draws=8", "fewer draws need less", "16 rows of 200 tokens")
        assert message.startswith("induction_ablation with draws=8"), message
    small = worlds.repeated_tokens(50, 8, induction.cfg.vocab_size, seed=2024)   # the chapter's call still runs
    got = compute.induction_ablation(induction, small, [(1, 0), (1, 1)], "resample", draws=20)
    assert got["second"] > 1.0 and got["second_spread"] >= 0
