"""Red team round 15, reader B (chapter 11, the real model SmolLM2): the passes of continuations,
patching_view and the circuit's measurements counted before the first one and refused past about a
minute (entries 8-10); patching_view's clean run traced once and a repeated layer refused (entry 9);
measured_growth's model and ids checked first (entry 15)."""
import pytest
import torch

from helpers.real import checks, circuit
from helpers.real import compute as real

FACT_ITALY = "The capital of Italy is"


@pytest.fixture(scope="module")
def smol():
    return real.load()


@pytest.fixture
def passes(smol, monkeypatch):
    """The real model, each forward pass counted (the real pass runs); more than 40 is a failure at once,
    so a call that should have been refused does not run for minutes."""
    model, tok = smol
    seen, forward = [], model.forward

    def counted(ids, *args, **kwargs):
        seen.append(tuple(ids.shape))
        assert len(seen) <= 40, "a call that should have been refused up front ran"
        return forward(ids, *args, **kwargs)
    monkeypatch.setattr(model, "forward", counted)
    return model, tok, seen


def test_work_is_counted_per_pass_and_row(smol):
    from helpers.sampling.compute import forward_macs

    model, _ = smol
    one = real.real_work(model, [(1, 1, 21, 0)])
    assert one == forward_macs(model.cfg, 21) + real.REAL_PASS_WORK
    assert real.real_work(model, [(1, 25, 21, 0)]) == 25 * (one - real.REAL_PASS_WORK) + real.REAL_PASS_WORK
    assert real.real_work(model, [(0, 25, 21, 0)]) == 0
    assert real.real_work(model, [(3, 1, 21, 0)]) == 3 * one


# ------------------------------------------------------------ entry 8: continuations

def test_continuations_refuse_too_many_passes_before_the_first(passes, refused):
    model, tok, seen = passes
    ids = torch.tensor(tok.encode(real.FACT))
    refused(lambda: real.continuations(model, ids, 1000, [0]), "continuations should need at most",
            "1,000 passes", "fewer new tokens")
    refused(lambda: real.continuations(model, ids, 100, [0]), "continuations should need at most", "100 passes")
    refused(lambda: real.continuations(model, ids, 40, list(range(64))), "continuations should need at most")
    assert seen == []


def test_the_chapters_continuations_stay_well_under_the_limit(passes):
    model, tok, seen = passes
    story = torch.tensor(tok.encode("Once upon a time, a small dragon"))   # chapter 11's call: 8 tokens, 4 rows, 8 new
    assert len(story) == 8
    assert real.real_work(model, [(1, 4, 8, 0), (7, 4, 1, 16)]) < real.MAX_REAL_WORK / 5
    rows = real.continuations(model, story, 8, seeds=(0, 1, 0, None))
    assert len(seen) == 8 and all(len(r) == 16 for r in rows) and torch.equal(rows[0], rows[2])


# ------------------------------------------------------------ entry 9: patching_view

def test_patching_view_refuses_a_layer_twice(passes, refused):
    model, tok, seen = passes
    refused(lambda: real.patching_view(model, tok, layers=[0] * 1000), "different layers", "0 comes twice")
    refused(lambda: real.patching_view(model, tok, layers=(3, 29, 3)), "different layers", "3 comes twice")
    refused(lambda: real.patching_view(model, tok, layers=[]), "non-empty list of layers")
    refused(lambda: real.patching_view(model, tok, layers=[30]), "layer")
    assert seen == []


def test_patching_view_refuses_long_prompts_for_every_layer_before_the_first_pass(passes, refused):
    model, tok, seen = passes
    before = "In the old atlas on the shelf, among maps of rivers, mountains, railways and harbours, " * 3
    assert len(tok.encode(before + real.FACT)) > 60
    refused(lambda: real.patching_view(model, tok, before + real.FACT, before + FACT_ITALY),
            "patching_view should need at most", "32 passes", "fewer layers")
    assert seen == []


def test_patching_view_traces_the_clean_run_once_and_gives_the_same_numbers(passes):
    """2 passes (the clean run traced, the corrupted run) and one per layer, where it took 2 per layer;
    the numbers are patched_logits' own, one layer at a time."""
    model, tok, seen = passes
    view = real.patching_view(model, tok, layers=(0, 17, 29))
    assert len(seen) == 5 and view["layers"] == [0, 17, 29]
    a, b = torch.tensor(tok.encode(real.FACT)), torch.tensor(tok.encode(FACT_ITALY))
    paris, rome = tok.encode(" Paris")[0], tok.encode(" Rome")[0]
    with torch.no_grad():
        clean, corrupt = model(a)[-1], model(b)[-1]
    assert view["clean"] == float(clean[paris] - clean[rome]) and view["corrupt"] == float(corrupt[paris] - corrupt[rome])
    for layer, got in zip(view["layers"], view["patched"]):
        logits = real.patched_logits(model, a, b, layer, view["position"])[-1]
        assert got == float(logits[paris] - logits[rome])


def test_patching_views_default_stays_under_the_limit(smol):
    model, tok = smol
    T = len(tok.encode(real.FACT))
    assert real.real_work(model, [(2 + model.cfg.n_layers, 1, T, 0)]) < real.MAX_REAL_WORK / 2


# ------------------------------------------------------------ entry 10: the circuit's passes

def circuit_calls(model):
    """Each circuit measurement that runs one pass per chunk of sequences, as a function of (ids, chunk)."""
    return {"head_statistics": lambda ids, chunk=25: circuit.head_statistics(model, ids, chunk),
            "copy_loss": lambda ids, chunk=25: circuit.copy_loss(model, ids, chunk=chunk),
            "copy_effects": lambda ids, chunk=25: circuit.copy_effects(model, ids, chunk=chunk),
            "induction_scores": lambda ids, chunk=25: circuit.induction_scores(model, ids, chunk=chunk),
            "receiver_scores": lambda ids, chunk=25: circuit.receiver_scores(model, ids, (17, 5), chunk=chunk)}


def test_circuit_measurements_refuse_too_many_sequences_before_the_first_pass(passes, refused):
    model, _, seen = passes
    many = circuit.random_repeats(2000, 10, model.cfg.vocab_size, 0)
    hundred = many[:100]
    for name, run in circuit_calls(model).items():
        refused(lambda: run(many), f"{name} should need at most", "80 passes", "fewer or shorter sequences")
        refused(lambda: run(hundred, 1), f"{name} should need at most", "100 passes")   # a pass per sequence
        refused(lambda: run(hundred, 0), "chunk")
    long = circuit.random_repeats(10, 400, model.cfg.vocab_size, 0)    # 10 sequences of 801 tokens, one chunk
    refused(lambda: circuit.head_statistics(model, long), "head_statistics should need at most", "its 1 pass would")
    assert seen == []


def test_the_chapters_and_the_build_scripts_sizes_stay_under_the_limit(passes):
    model, _, seen = passes
    T = 21                                                          # 10 tokens written twice after the start
    assert real.real_work(model, [(1, 2, T, 0)]) < real.MAX_REAL_WORK / 20            # the chapter: 2 sequences
    assert real.real_work(model, [(4, 25, T, 0)]) < real.MAX_REAL_WORK                # the build script: 100 in 25s
    seqs = circuit.random_repeats(3, 10, model.cfg.vocab_size, 0)
    stats = circuit.head_statistics(model, seqs, chunk=2)              # a full chunk and the rest: 2 passes
    assert len(seen) == 2 and stats["induction"].shape == (3, 30, 9)


# ------------------------------------------------------------ entry 15: measured_growth

def test_measured_growth_checks_the_model_and_the_ids_first(smol, refused):
    model, tok = smol
    ids = tok.encode(real.FACT)                                     # a list, as the tokenizer gives it
    assert checks.measured_growth(model, ids) == checks.measured_growth(model, torch.tensor(ids))
    refused(lambda: checks.measured_growth(model, real.FACT), "token ids should be whole numbers")
    refused(lambda: checks.measured_growth(None, torch.tensor(ids)), "model should be the course's Transformer", "None")
    refused(lambda: checks.measured_growth(model, torch.tensor(ids)[None]), "one prompt (T,)", "(1, 5)")
    refused(lambda: checks.measured_growth(model, torch.zeros(2000, dtype=torch.long)), "at most 1,024 tokens")


def test_measured_growth_is_one_layer_of_keys_and_values_per_layer(smol):
    model, tok = smol
    got = checks.measured_growth(model, tok.encode(real.FACT))
    assert got["right"] == 2 * model.cfg.n_layers * model.cfg.kv_heads * model.cfg.d_k * 4
    assert got["only_k"] * 2 == got["right"]
