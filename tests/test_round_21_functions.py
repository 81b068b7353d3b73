"""Round 21 (fixer C): grading records a student's code appends to (G), the real model's timing
(forward_seconds), scaling's advice, layer_case and geometry's figures near the float limit."""
import io
import json
import warnings

import numpy as np
import pytest
import torch

import autograde
from helpers import grading
from helpers.geometry import compute as geometry
from helpers.model import Config, Transformer
from helpers.real import compute as real
from helpers.scaling import compute as scaling

CELL, OTHER = "ch09_tempered", "ch09_greedy"
CHECKS = {5: CELL, 7: OTHER}   # the check cells' positions in the assembled notebook
FORGED = {"cell": CELL, "index": 0, "check": "tempered", "answer": "right"}
GENUINE = {"cell": CELL, "index": 0, "check": "tempered", "answer": "wrong"}


def line(entry):
    return json.dumps(entry) + "\n"


def report(at, text, **more):
    """One line of the driver's report: ``text`` written while the cell at ``at`` ran."""
    return json.dumps({"at": at, "lines": text, **more}) + "\n"


def read(kept, tmp_path, cells=(CELL,)):
    """(records, notes) as the grader reads the lines ``attributed`` kept."""
    path = tmp_path / "records.jsonl"
    path.write_text("".join(kept))
    notes = []
    return autograde.read_records(path, list(cells), notes), notes


def tampered(records, notes, cell=CELL):
    """Whether every answer of ``cell`` is TAMPERED and the notes say so."""
    return (all(r["answer"] == {"unknown": autograde.TAMPERED} for r in records if r["cell"] == cell)
            and any(note.startswith(f"{cell}: more than one answer") for note in notes))


# ---------------------------------------------------------------- 1 (G): records the course did not write


def test_a_filler_past_the_record_budget_does_not_hide_the_genuine_record(tmp_path):
    """Red team B 3: a forged record, then a filler that fills MAX_RECORD_CONTAINERS, then the genuine
    record (all written while the check ran): the genuine one was skipped by the budget before the
    duplicate test, and the forged one was judged right."""
    room = autograde.MAX_RECORD_CONTAINERS - autograde.containers_in(line(FORGED)) - 1
    filler = line({"cell": CELL, "index": 1, "answer": "[" * room})
    text = line(FORGED) + filler + line(GENUINE)
    records, notes = read(autograde.attributed(report(5, text), CHECKS), tmp_path)
    assert tampered(records, notes) and all(r["answer"] != "right" for r in records)
    records, notes = read([text], tmp_path)   # the records file alone: the skipped line's key still counts
    assert tampered(records, notes)


def test_a_fragment_glued_to_the_genuine_record_makes_the_check_count_nothing(tmp_path):
    """Red team B 3b: an unterminated fragment after a forged record; the genuine record, appended onto it,
    no longer parsed and was dropped without a note."""
    records, notes = read(autograde.attributed(report(5, line(FORGED) + "#" + line(GENUINE)), CHECKS), tmp_path)
    assert tampered(records, notes) and all(r["answer"] != "right" for r in records)


@pytest.mark.parametrize("odd", ["not json\n", line({"x": 1}), line({**FORGED, "extra": 1}),
                                 line({**FORGED, "index": -1}), line({**FORGED, "index": "0"}), "[1, 2]\n"])
def test_any_line_of_another_form_written_while_a_check_runs_makes_it_count_nothing(tmp_path, odd):
    records, notes = read(autograde.attributed(report(5, odd + line(FORGED)), CHECKS), tmp_path)
    assert tampered(records, notes)


def test_records_the_driver_could_not_read_to_their_end_count_nothing(tmp_path):
    records, notes = read(autograde.attributed(report(5, line(FORGED), cut=True), CHECKS), tmp_path)
    assert tampered(records, notes)


def test_the_driver_says_when_it_cut_what_a_cell_wrote(tmp_path, monkeypatch):
    monkeypatch.setattr(autograde, "RESULT_MB", 1)
    sent = io.StringIO()
    attributor = autograde.Attributor(True, sent)   # (round 25: records come on a channel, no longer a file)
    attributor.start(cell_index=5)   # the check cell starts; while it runs, past RESULT_MB is written:
    attributor.kernel_end.sendall((line(FORGED) + line({"cell": CELL, "index": 1, "answer": "x" * 2**20})
                                   + line(GENUINE)).encode())
    attributor.flush()
    chunk = json.loads(sent.getvalue().splitlines()[0])
    assert chunk["cut"] is True and chunk["lines"] == line(FORGED)


def test_honest_records_and_a_forgery_for_another_check_are_read_as_before(tmp_path):
    """The course's own records (two grade calls) count; a record naming another check is only left out."""
    text = line(GENUINE) + line({**GENUINE, "index": 1}) + line({"cell": OTHER, "index": 0, "answer": 1})
    records, notes = read(autograde.attributed(report(5, text), CHECKS), tmp_path, (CELL, OTHER))
    assert [(r["cell"], r["index"], r["answer"]) for r in records] == [(CELL, 0, "wrong"), (CELL, 1, "wrong")]
    assert len(notes) == 1 and OTHER in notes[0] and "left out" in notes[0]


def test_append_starts_its_record_on_a_line_of_its_own(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text(line(FORGED) + "#")    # a fragment a student's function left
    grading.append(str(path), GENUINE)
    assert path.read_text().splitlines() == [line(FORGED).strip(), "#", line(GENUINE).strip()]
    empty = tmp_path / "empty.jsonl"
    grading.append(str(empty), GENUINE)
    assert empty.read_text() == line(GENUINE)


@pytest.mark.parametrize("name", ["OutOfTime", "_OutOfTime"])
def test_a_recorded_time_out_is_replayed_as_one_by_either_name(name):
    """(Since round 30 the Recorder marks the course's own time-out with "stopped": a class name alone, which a
    learner's own exception may copy, is no time-out.)"""
    replay = grading.Replay([{"inputs": grading.fingerprint(((1,), {})), "raised": [name, ""], "stopped": "time"}])
    with pytest.raises(grading.ReplayError, match="longer than the time limit"):
        replay(1)


# ---------------------------------------------------------------- 2 (T+M): forward_seconds


def tiny(**more):
    torch.manual_seed(0)
    return Transformer(Config(vocab_size=20, d_model=8, n_heads=2, n_layers=1, d_ff=8, n_max=16, **more))


def test_forward_seconds_refuses_a_huge_T_before_any_tensor(refused, monkeypatch):
    """Red team B 2: T=10**30 gave torch's TypeError; T=4e8 made 3.2 GB of zeros before check_ids refused."""
    model = tiny(positions="rotary")

    def no_tensor(*args, **kwargs):
        raise AssertionError("a tensor was made before the arguments were checked")

    for name in ("zeros", "randint", "empty"):
        monkeypatch.setattr(torch, name, no_tensor)
    refused(lambda: real.forward_seconds(model, T=10**30, repeats=1), "T should be at most 16", "10000000")
    refused(lambda: real.forward_seconds(model, T=4 * 10**8, repeats=1), "T should be at most 16", "400,000,000")
    refused(lambda: real.forward_seconds(model, T=17), "at most 16", "17")
    refused(lambda: real.forward_seconds(model, T=True), "T should be", "True")
    refused(lambda: real.forward_seconds(model, seed=-1), "seed", "-1")
    refused(lambda: real.forward_seconds(model, seed=2**64), "seed")
    monkeypatch.undo()
    assert real.forward_seconds(model, T=16, repeats=1) > 0


# ---------------------------------------------------------------- 3 (W): dot_spread's advice


@pytest.mark.parametrize("call", [lambda: scaling.dot_spread(dims=(10**12,), n=100_000),
                                  lambda: scaling.dot_spread(dims=(600_000_000,), n=4),
                                  lambda: scaling.spread_figure(dims=(10**12,), n=20_000)])
def test_too_large_dims_are_named_not_an_impossible_n(refused, call):
    """Red team A 2: 'ask for n <= 0' (n must be at least 2)."""
    message = refused(call, "ask for smaller dims", "they add up to")
    assert "n <=" not in message


def test_one_chunk_at_a_huge_d_is_counted_before_it_is_drawn(refused):
    """dims=(10**8,), n=2 draws few numbers, but a chunk of queries, keys and products at d = 1e8 is 2.4 GB."""
    refused(lambda: scaling.dot_spread(dims=(10**8,), n=2), "d=100,000,000", "ask for d <= 67,108,864")
    assert len(scaling.dot_spread(dims=(4, 64), n=100)) == 2   # the chapter's kind of call still runs


# ---------------------------------------------------------------- 4 (T, W): layer_case


def tiny_world_model(**more):
    from helpers.worlds import cat_world

    return Transformer(Config(vocab_size=len(cat_world().tokenizer.vocab), d_model=8, n_heads=2, n_layers=2, d_ff=8,
                              n_max=16, **more))


WORDS = "<BOS> the cat sat on the".split()


def test_layer_case_of_a_model_without_biases_gives_zero_biases_that_reproduce_its_scores():
    """Red team A 3: AttributeError on the missing b_Q."""
    torch.manual_seed(0)
    case = scaling.layer_case(tiny_world_model(bias=False), WORDS, layer=1)
    assert torch.equal(case["b_Q"], torch.zeros(8)) and torch.equal(case["b_K"], torch.zeros(8))
    scores = scaling.scaled_scores(case["x"], case["W_Q"], case["W_K"], case["b_Q"], case["b_K"], case["n_heads"])
    below = torch.tril(torch.ones(len(WORDS), len(WORDS), dtype=torch.bool))
    assert torch.allclose(scores[:, below], case["scores"][:, below], atol=1e-6)


@pytest.mark.parametrize("more, words", [(dict(positions="rotary"), ["positions='rotary'"]),
                                         (dict(n_kv_heads=1), ["n_kv_heads=1", "n_heads=2"])])
def test_layer_case_refuses_a_model_whose_scores_scaled_scores_cannot_make(refused, more, words):
    """Red team A 3, A 4: shared key heads gave a W_K scaled_scores refuses; rotary positions gave scores
    that contradict q·k/√d_k of the returned pieces."""
    refused(lambda: scaling.layer_case(tiny_world_model(**more), WORDS), "layer_case should get a model", *words)


# ---------------------------------------------------------------- 5 (T): geometry near the float limit


def drawn_quietly(call):
    """call() (a figure or an Axes) drawn to PNG; returns the warnings it raised."""
    import matplotlib.pyplot as plt

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = call()
        (made if hasattr(made, "savefig") else made.figure).savefig(io.BytesIO(), format="png")
    plt.close("all")
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("vectors, limit, words", [
    ({"a": np.array([1e308, 1e308]), "b": np.array([1.0, 2.0])}, None, ["'a'", "at most 1e+300"]),
    ({"a": np.array([1.0, 2.0])}, 1e308, ["limit should be at most 1.25e+300", "1e+308"])])
def test_arrows_near_the_float_limit_are_refused_without_a_warning(refused, vectors, limit, words):
    """Red team A 5: overflow warnings, then matplotlib's ValueError when the figure was drawn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        refused(lambda: geometry.arrows_figure(vectors, limit=limit), *words)


def test_arrows_up_to_the_limit_are_drawn_without_a_warning():
    assert drawn_quietly(lambda: geometry.arrows_figure({"a": np.array([1e300, -1e300])})) == []
    assert drawn_quietly(lambda: geometry.arrows_figure({"a": np.array([1.0, 2.0])}, limit=1.25e300)) == []


def test_plot_cosines_refuses_numbers_that_are_no_cosines(refused):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        refused(lambda: geometry.plot_cosines(np.array([[1, 1e308], [1e308, 1]]), ["a", "b"]),
                "table should hold cosines, from -1 to 1", "1e+308")
        refused(lambda: geometry.plot_cosines(np.array([[1, -1.5], [-1.5, 1]]), ["a", "b"]), "-1.5")
    rounded = np.array([[1 + 1e-12, 0.5], [0.5, 1.0]])   # a cosine past 1 by its rounding is still drawn
    assert drawn_quietly(lambda: geometry.plot_cosines(rounded, ["a", "b"])) == []
