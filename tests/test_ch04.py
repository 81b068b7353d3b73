"""Chapter 04 (masking): the mask, the wrong order, the leak, generation without a mask,
the explorer's compute and the checks."""
import numpy as np
import pytest
import torch

from helpers import masking, worlds
from helpers.checks import NOT_ANSWERED, ch04
from helpers.errors import CourseInputError
from helpers.model import Transformer
from helpers.weights import load_cat


@pytest.fixture(scope="module")
def cat():
    return load_cat()


@pytest.fixture(scope="module")
def world():
    return worlds.cat_world()


def test_mask_and_seed_example():
    assert torch.equal(masking.causal_mask(3), torch.tensor([[0, 1, 1], [0, 0, 1], [0, 0, 0]], dtype=torch.bool))
    ex = masking.seed_example()
    seed = torch.tensor([[1.0, 0.0, 0.0], [0.670, 0.330, 0.0], [0.401, 0.198, 0.401]])
    assert torch.allclose(ex["weights"], seed, atol=5e-4)
    assert torch.isinf(ex["masked"][0, 1]) and ex["masked"][0, 1] < 0
    assert torch.allclose(ex["weights"].sum(-1), torch.ones(3))


def test_mask_after_softmax():
    ex = masking.seed_example()
    after = masking.mask_after_softmax(ex["scores"])
    assert after["row_sums"][0] == pytest.approx(0.248, abs=1e-3)
    assert torch.allclose(after["renormalised"], after["before"], atol=1e-6)
    huge = masking.mask_after_softmax(torch.tensor([[0.0, 0.5, 200.0]] * 3))
    assert torch.isnan(huge["renormalised"][1]).all() and not torch.isnan(huge["before"]).any()


def test_leak_reproduces_the_seed():
    moved = masking.leak(seed=123)
    assert torch.allclose(moved["with_mask"], torch.tensor([0.0, 0.0, 0.299]), atol=5e-4)
    assert torch.allclose(moved["without_mask"], torch.tensor([0.334, 0.171, 0.299]), atol=5e-4)


def test_model_leak_moves_only_the_last_position_with_the_mask(cat, world):
    moved = masking.model_leak(cat, world, "<BOS> the cat sat on the mat".split(), "floor")
    assert (moved["with_mask"][:-1] == 0).all() and moved["with_mask"][-1] > 0
    assert (moved["without_mask"] > 0).all()


def test_generate_matches_the_cached_generator_when_causal(cat, world):
    from helpers.sampling.compute import generate as cached
    start = world.tokenizer.encode("<BOS> the")
    ours = masking.generate(cat, start, 6, causal=True, temperature=1.0, seed=3)
    assert torch.equal(ours, cached(cat, start, 6, temperature=1.0, seed=3))


def test_generate_stops_and_rejects_bad_input(cat, world):
    eos = world.tokenizer.ids["<EOS>"]
    ids = masking.generate(cat, world.tokenizer.encode("<BOS> the mat is"), 10, stop_id=eos)
    assert ids[-1] == eos and len(ids) == 6
    with pytest.raises(CourseInputError, match="temperature"):
        masking.generate(cat, world.tokenizer.encode("<BOS>"), 3, temperature=-1)
    with pytest.raises(CourseInputError, match="one sequence"):
        masking.generate(cat, torch.zeros(2, 3, dtype=torch.long), 3)


def test_prefix_scores_and_floor(cat, world):
    scores = masking.prefix_scores(cat, world)
    assert scores["decisions"] == 448 and scores["total"] == 432 and scores["correct"] == 302
    floor = masking.entropy_floor(world.train)
    assert 0.5 < floor < masking.teacher_forced_loss(cat, world)
    assert masking.share_valid(masking.sample_sentences(cat, world, n=5), world) == 1.0
    with pytest.raises(CourseInputError):
        masking.entropy_floor([])


def test_a_model_trained_without_the_mask_cheats(world):
    from helpers.recipes import CAT_CONFIG
    from helpers.training import train
    model = Transformer(CAT_CONFIG)
    losses = train(model, world.batch(world.train), steps=150, lr=3e-2, seed=0, progress=False, causal=False)
    assert losses[-1] < masking.entropy_floor(world.train)
    assert masking.prefix_scores(model, world, causal=False)["loss"] > 3


def test_attention_maps(cat, world):
    maps = masking.attention_maps(cat, world, "<BOS> the cat sat", causal=True)
    assert maps["weights"].shape == (2, 2, 4, 4) and maps["next"] == "on"
    assert torch.all(maps["weights"][..., 0, 1:] == 0)
    off = masking.attention_maps(cat, world, ["<BOS>", "the", "cat", "sat"], causal=False)
    assert torch.all(off["weights"][..., 0, 1:].sum(-1) > 0)
    with pytest.raises(CourseInputError, match="vocabulary"):
        masking.attention_maps(cat, world, "<BOS> the unicorn")
    with pytest.raises(CourseInputError, match="empty"):
        masking.attention_maps(cat, world, "")


def test_bad_input():
    with pytest.raises(CourseInputError):
        masking.causal_mask(0)
    with pytest.raises(CourseInputError, match="square"):
        masking.apply_mask(torch.zeros(2, 3))
    with pytest.raises(CourseInputError, match="split"):
        masking.SeedAttention(5, 2)


def test_widget_view_draws_and_refuses_long_prompts(cat, world):
    from helpers.widgets import ch04 as widget
    models = {"cat": cat}
    _, show = widget.maps_view(2, 2)
    assert show(widget.explore(models, world, "<BOS> the cat", "cat", True))[:4] == b"\x89PNG"
    assert show(widget.explore(models, world, "<BOS> the cat", "cat", False))[:4] == b"\x89PNG"
    with pytest.raises(CourseInputError, match="at most"):
        show(widget.explore(models, world, " ".join(["the"] * 12), "cat", True))


# ------------------------------------------------------------------ checks

def words(check, answer, *args, **kwargs):
    return " ".join(check.feedback(answer, *args, **kwargs))


def test_mask_check():
    right = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    assert ch04.mask.feedback(right, T=5) == []
    assert ch04.mask.feedback(right.int().numpy(), T=5) == []
    assert "diagonal is hidden" in words(ch04.mask, torch.triu(torch.ones(5, 5, dtype=torch.bool)), T=5)
    assert "True should mark" in words(ch04.mask, ~right, T=5)
    assert "hides the past" in words(ch04.mask, right.T, T=5)
    assert "shape" in words(ch04.mask, right[:4, :4], T=5)
    assert words(ch04.mask, None) == NOT_ANSWERED


def test_masked_weight_check():
    scores = torch.tensor([[0.5, 1.0, 0.0, 2.0], [1.5, 0.0, 1.0, 0.5],
                           [1.0, 2.0, 0.5, 3.0], [0.0, 1.0, 1.0, 0.0]])
    right = float(torch.softmax(scores[2, :3], -1)[1])
    assert ch04.masked_weight.feedback(right, scores, query=2, key=1) == []
    leaky = float(torch.softmax(scores[2], -1)[1])
    assert "includes keys after" in words(ch04.masked_weight, leaky, scores, query=2, key=1)
    assert "too large" in words(ch04.masked_weight, 0.9, scores, query=2, key=1)
    assert words(ch04.masked_weight, None, scores, query=2, key=1) == NOT_ANSWERED


def test_renormalised_check():
    scores = torch.tensor([[0.5, 1.0, 0.0], [1.5, 0.0, 1.0], [1.0, 2.0, 0.5]])
    zeroed = torch.softmax(scores, -1).masked_fill(masking.causal_mask(3), 0.0)
    assert ch04.renormalised.feedback(zeroed / zeroed.sum(-1, keepdim=True), zeroed) == []
    assert "divide each row" in words(ch04.renormalised, zeroed, zeroed)
    assert "above the diagonal" in words(ch04.renormalised, torch.softmax(scores, -1), zeroed)
    assert "divide each row" in words(ch04.renormalised, zeroed / zeroed.sum(0, keepdim=True), zeroed)
    assert words(ch04.renormalised, None, zeroed) == NOT_ANSWERED


def test_moved_positions_check():
    assert ch04.moved_positions.feedback([2, 3, 4, 5], T=6, changed=2) == []
    assert ch04.moved_positions.feedback(np.array([5, 4, 3, 2]), T=6, changed=2) == []
    assert "earlier position" in words(ch04.moved_positions, [0, 1, 2, 3, 4, 5], T=6, changed=2)
    assert "later positions are missing" in words(ch04.moved_positions, [2], T=6, changed=2)
    assert "itself changes" in words(ch04.moved_positions, [3, 4, 5], T=6, changed=2)
    assert "0 to 5" in words(ch04.moved_positions, [2, 3, 4, 5, 6], T=6, changed=2)
    assert "list of positions" in words(ch04.moved_positions, "two", T=6, changed=2)
    assert words(ch04.moved_positions, None, T=6, changed=2) == NOT_ANSWERED
