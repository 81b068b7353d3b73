"""Round 30 (issue 31), readers A and B: four function checks called the learner's function on the check cell's
case only, so a constant computed earlier with the course's own patching passed; chapter 07's gpt3_mlp called any
whole number within 0.1% of the count "the count rounded", a forgotten bias too."""
import pytest
import torch

from helpers import patching
from helpers.ablation import checks as ablation_checks, compute as ablation
from helpers.mlp import checks as mlp_checks
from helpers.real import checks as real_checks, circuit
from test_ablation import _attribution_case, _lens, _lens_case, attribution_function, grid_function
from test_real import _ablation
from test_round_22_real import small_stand_in

D, N = 12288, 96
RIGHT = 8 * D * D * N   # W_1 and W_2 in GPT-3's 96 MLP blocks (with b_1 and b_2: N * (8 D² + 5 D))


# ------------------------------------------------------------ chapter 10: a constant made earlier is no answer

def test_patch_grid_refuses_a_grid_made_earlier(cat, cat_world):
    tok, metric = cat_world.tokenizer, ablation.logit_difference(cat_world)
    args = (cat, tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was"), metric)
    grid = patching.patch_heads(*args, per_position=True)   # an earlier cell
    said = ablation_checks.patch_grid.feedback(lambda *a: grid, *args)
    assert len(said) == 1 and said[0].startswith("on the same two prompts swapped"), said
    assert ablation_checks.patch_grid.feedback(grid_function(), *args) == []


def test_direct_attribution_refuses_a_dict_made_earlier(cat, cat_world):
    args = (cat, *_attribution_case(cat, cat_world))
    table = patching.attribute(*args)   # an earlier cell
    said = ablation_checks.direct_attribution.feedback(lambda *a: table, *args)
    assert len(said) == 1 and said[0].startswith("on parts the check draws"), said
    assert ablation_checks.direct_attribution.feedback(attribution_function(), *args) == []


def test_direct_attribution_names_a_slip_on_the_drawn_parts_too(cat, cat_world):
    """A function right on the check cell's parts only (a dict kept for them) and uncentred on any other."""
    args = (cat, *_attribution_case(cat, cat_world))
    table, uncentred = patching.attribute(*args), attribution_function("uncentred")

    def kept_for_the_cell(model, parts, *rest):
        given = all(torch.equal(p, args[1][name]) for name, p in parts.items())
        return table if given else uncentred(model, parts, *rest)
    said = ablation_checks.direct_attribution.feedback(kept_for_the_cell, *args)
    assert len(said) == 1 and said[0].startswith("on parts the check draws") and "not centred" in said[0], said


def test_lens_ranks_refuses_a_lens_made_earlier(cat, cat_world):
    sentence = cat_world.tokenizer.encode("<BOS> the dog sat on the red mat")
    trace, points, targets = _lens_case(cat, cat_world)
    _, logits = patching.logit_lens(cat, sentence[:-1], points)   # an earlier cell
    ranks = (logits > logits.gather(-1, targets.expand(len(points), -1)[..., None])).sum(-1)
    said = ablation_checks.lens_ranks.feedback(lambda *a: (logits, ranks), cat, trace, points, targets)
    assert len(said) == 1 and said[0].startswith("on a trace of random tokens the check draws"), said
    assert ablation_checks.lens_ranks.feedback(_lens(), cat, trace, points, targets) == []


def test_the_second_cases_are_the_same_at_every_run(cat, cat_world):
    trace, points, targets = _lens_case(cat, cat_world)
    seen = []

    def keeps(model, trace, points, targets):
        seen.append((trace["logits"].clone(), list(points), targets.clone()))
        return _lens()(model, trace, points, targets)
    for _ in range(2):
        assert ablation_checks.lens_ranks.feedback(keeps, cat, trace, points, targets) == []
    (a, pa, ta), (b, pb, tb) = seen[1], seen[3]
    assert torch.equal(a, b) and pa == pb and torch.equal(ta, tb)


# ------------------------------------------------------------ chapter 11: ablated_copy_loss, on a stand-in

@pytest.fixture(scope="module")
def stand_in():
    """The small course Transformer and repeated sequences of round 22's test (the check takes any)."""
    return small_stand_in()


HEADS = [(2, 0), (1, 1), (1, 2)]


def test_ablated_copy_loss_refuses_a_loss_made_earlier(stand_in):
    model, seqs = stand_in
    means = circuit.head_statistics(model, seqs)["means"]
    value = float(circuit.copy_loss(model, seqs, HEADS, means).mean())   # an earlier cell
    said = real_checks.ablated_copy_loss.feedback(lambda *a: value, model, seqs, HEADS)
    assert len(said) == 1 and "random tokens written twice, drawn by the check" in said[0], said
    assert real_checks.ablated_copy_loss.feedback(_ablation("right"), model, seqs, HEADS) == []


def test_the_drawn_ablation_case_is_small_seeded_and_of_other_heads(stand_in):
    model, seqs = stand_in
    where, drawn, heads = real_checks.drawn_ablation(model, seqs, HEADS)
    again = real_checks.drawn_ablation(model, seqs, HEADS)
    assert torch.equal(drawn, again[1]) and heads == again[2] and where == again[0]
    assert drawn.shape == (4, 11) and heads[:2] == HEADS[1:] and heads[2] not in HEADS
    assert circuit.check_repeats(drawn)[1] == 5


# ------------------------------------------------------------ chapter 07: gpt3_mlp's "rounded"

@pytest.mark.parametrize("answer, words", [
    (N * (8 * D * D + 4 * D), "b_1 but not b_2"),
    (N * (8 * D * D + D), "b_2 but not b_1"),
    (N * (8 * D * D + 2 * D), "LayerNorm before the MLP"),
    (RIGHT + 1, "is close, but too large"),
    (RIGHT - 2, "is close, but too small"),
])
def test_gpt3_mlp_names_a_whole_number_slip_not_a_rounding(answer, words):
    said = mlp_checks.gpt3_mlp.feedback(answer)
    assert len(said) == 1 and words in said[0] and "rounded" not in said[0], said


def test_gpt3_mlp_calls_a_rounding_of_the_count_rounded():
    """To 2 to 8 significant figures, of the count with or without the biases (1.2e11 was "too large" before)."""
    for answer in (1.2e11, 1.16e11, 115_964_000_000, 1.1596e11, 115_970_000_000, 1.1596412e11):
        said = mlp_checks.gpt3_mlp.feedback(answer)
        assert len(said) == 1 and "the count rounded" in said[0], (answer, said)
