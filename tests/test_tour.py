"""Chapter 00, the tour: the compute behind the explorer, the explorer itself, the checks, the read-out."""
import copy
import math

import numpy as np
import pytest
import torch

from helpers.errors import CourseInputError
from helpers.readout import format_step, top_tokens
from helpers.tour import checks, compute, explorer
from helpers.worlds import entropy_floor

PNG = b"\x89PNG"


def test_prompt_view_gives_probs_and_causal_weights(cat, cat_world):
    view = compute.prompt_view(cat, cat_world, "<BOS> the cat is")
    assert view["tokens"] == ["<BOS>", "the", "cat", "is"]
    assert torch.isclose(view["probs"].sum(), torch.tensor(1.0))
    assert view["weights"].shape == (2, 2, 4, 4)
    assert torch.all(torch.triu(view["weights"], diagonal=1) == 0)
    off = compute.prompt_view(cat, cat_world, "<BOS> the cat is", attention=False)
    assert torch.all(off["weights"] == 0)


def test_explorer_hatches_the_masked_keys_and_prints_no_weight_there(cat, cat_world):
    view = compute.prompt_view(copy.deepcopy(cat).double(), cat_world, "<BOS> the cat sat", True)
    figure = explorer.TourView(cat_world.tokenizer.vocab)
    figure.png(view, 1, 0)
    right = figure.axes[1]
    assert len(right.patches) == 6 and all(p.get_hatch() for p in right.patches)   # 4 × 4: six keys hidden
    shown = [t.get_text() for t in right.texts]
    assert [shown[i * 4 + j] == "" for i in range(4) for j in range(4)] == [j > i for i in range(4) for j in range(4)]


def test_prompt_view_rejects_unknown_words_with_a_sentence(cat, cat_world):
    with pytest.raises(CourseInputError, match="'zebra'"):
        compute.prompt_view(cat, cat_world, "<BOS> the zebra")


def test_explorer_draws_a_picture_and_redraws_when_a_control_moves(cat, cat_world, capsys):
    shown = explorer.explorer(cat, cat_world)
    assert set(shown.controls) == {"prompt", "layer", "head", "attention"}
    first = shown.picture()
    assert first.startswith(PNG)
    shown.controls["attention"].value = False
    assert shown.picture().startswith(PNG) and shown.picture() != first
    shown.controls["prompt"].value = "<BOS> the zebra"  # an unknown word: one red sentence, no crash
    assert "zebra" in shown.message.value


def test_scores_shape_check_diagnoses_without_giving_the_numbers():
    assert checks.scores_shape((2, 5, 5), n_heads=2, T=5)
    assert checks.scores_shape(torch.Size([2, 5, 5]), n_heads=2, T=5)
    wrong = {(5, 5, 5): "config", (2, 4, 4): "how many tokens", (2, 5, 4): "same length",
             (5, 5): "three", (2, 7, 7): "how many tokens", (5, 5, 2): "token count first"}
    for answer, words in wrong.items():
        message = checks.scores_shape.feedback(answer, n_heads=2, T=5)[0]
        assert words in message
        # neither the head count nor the token count is stated
        assert not any(str(n) in message for n in (2, 5) if not (len(answer) == 2 and n == 2)), message
    assert "<BOS>" in checks.scores_shape.feedback((2, 4, 4), n_heads=2, T=5)[0]
    assert "not answered" in checks.scores_shape.feedback(None, n_heads=2, T=5)[0]


def test_next_prob_check_names_the_usual_mistakes():
    logits = np.array([1.0, 2.0, 3.0])
    right = np.exp(3) / np.exp(logits).sum()
    assert checks.next_prob(right, logits, 2)
    assert checks.next_prob(torch.tensor(right, dtype=torch.float32), torch.tensor(logits), 2)
    assert "logit itself" in checks.next_prob.feedback(3.0, logits, 2)[0]
    assert "divide by the sum of exp over all 3" in checks.next_prob.feedback(np.exp(3.0), logits, 2)[0]
    assert "too small" in checks.next_prob.feedback(0.4, logits, 2)[0]
    e = np.exp(logits)
    assert "ln p" in checks.next_prob.feedback(np.log(right), logits, 2)[0]
    assert "percentage" in checks.next_prob.feedback(100 * right, logits, 2)[0]
    assert "largest exp(logit)" in checks.next_prob.feedback(e[1] / e.max(), logits, 1)[0]
    assert "sum of the logits" in checks.next_prob.feedback(logits[1] / logits.sum(), logits, 1)[0]
    with pytest.raises(AssertionError):
        checks.next_prob.grade(0.5, logits, 2)


def test_per_layer_check_names_what_was_left_out():
    assert checks.per_layer(302, d_model=6, d_ff=8)
    assert all(w in checks.per_layer.feedback(278, d_model=6, d_ff=8)[0] for w in ("LayerNorms", "attention biases"))
    assert "biases" in checks.per_layer.feedback(302 - 24 - 8 - 6, d_model=6, d_ff=8)[0]
    assert "not it" in checks.per_layer.feedback(300, d_model=6, d_ff=8)[0]
    assert "whole number" in checks.per_layer.feedback(302.5, d_model=6, d_ff=8)[0]
    assert "str" in checks.per_layer.feedback("many", d_model=6, d_ff=8)[0]
    assert checks.per_layer(7_087_872, d_model=768, d_ff=3072)   # GPT-2 small's layer
    lecture = checks.per_layer.feedback(12 * 768 ** 2 + 9 * 768, d_model=768, d_ff=3072)[0]   # 7,084,800
    assert "Lecture's 12d² + 9d" in lecture and "attention biases" in lecture   # as the dragon's box reads it
    d, f = 768, 3072
    right = 7_087_872
    for answer, words in {right - f - d: "MLP's biases", right - 2 * d: "a scale and a shift",
                          right + f - d: "b_2 has d_model", right - d * d - d: "one attention matrix",
                          right + 2 * d: "final LayerNorm", 4 * d * d + 2 * d * f: "only the matrices"}.items():
        assert words in checks.per_layer.feedback(answer, d_model=d, d_ff=f)[0], (answer, words)


def test_readout_formats_shapes_and_top_tokens():
    text = format_step("L0.weights", torch.eye(3).repeat(2, 1, 1), ["a", "b", "c"])
    assert text.startswith("L0.weights  [2 × 3 × 3]") and "head 1:" in text
    rows = top_tokens(torch.tensor([0.1, 0.7, 0.2]), ["x", "y", "z"], k=2)
    assert [r[1] for r in rows] == ["y", "z"]


def test_step_rows_follow_one_token_and_join_the_heads(cat, cat_world):
    trace = cat(cat_world.tokenizer.encode("<BOS> the cat sat"), trace=True)
    rows = compute.step_rows(trace, 0, -1, ["head_out", "concat", "pre", "h"])
    assert torch.equal(rows["head_out"], rows["concat"])          # heads side by side = concat
    assert rows["pre"].shape == (8,) and torch.equal(rows["h"], trace["L0.h"][-1].detach())
    with pytest.raises(CourseInputError, match="L0.nope"):
        compute.step_rows(trace, 0, -1, ["nope"])
    with pytest.raises(CourseInputError, match="position should be a whole number from -4 to 3, but got 9"):
        compute.step_rows(trace, 0, 9, ["h"])


def test_top_next_is_sorted_and_sums_below_one(cat, cat_world):
    top = compute.top_next(cat, cat_world, "<BOS> the cat sat", k=3)
    assert top[0][0] == "on" and [p for _, p in top] == sorted((p for _, p in top), reverse=True)
    assert sum(p for _, p in top) <= 1 + 1e-6
    with pytest.raises(CourseInputError, match="k"):
        compute.top_next(cat, cat_world, "<BOS> the cat", k=0)
    with pytest.raises(CourseInputError, match="'zebra'"):
        compute.top_next(cat, cat_world, "<BOS> the zebra")


def test_copula_splits_name_the_held_out_adjective(cat, cat_world):
    rows = {r["prompt"]: r for r in compute.copula_splits(cat, cat_world)}
    assert len(rows) == 8
    assert rows["<BOS> the cat is"]["held_out"] == ("small",)
    assert rows["<BOS> the dog is"]["held_out"] == ()
    for r in rows.values():
        assert r["adjectives"] in (("big", "small"), ("red", "blue"))
        assert 0 < sum(r["p"]) <= 1 + 1e-6
        for adj in r["held_out"]:   # the model favours the adjective it saw after this prompt
            seen = r["p"][1 - r["adjectives"].index(adj)]
            assert seen > r["p"][r["adjectives"].index(adj)]


def test_our_positional_encoding_is_the_primers(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the cat sat")
    trace = cat(ids, trace=True)
    pe = (trace["h0"] - cat.E[ids]).detach().numpy()
    assert np.abs(pe - np.array(compute.PRIMER_PE)).max() <= 5e-4   # equal to the printed 3 decimals


def test_mean_loss_is_the_mean_of_minus_ln_p_of_the_true_next_token(cat, cat_world):
    model = copy.deepcopy(cat).double()   # the fixture is shared: leave it float32
    sentences = cat_world.train[:3]
    by_hand = []
    for s in sentences:
        for t in range(1, len(s)):
            probs = model(cat_world.tokenizer.encode(s[:t]), trace=True)["probs"][-1]
            by_hand.append(-math.log(probs[cat_world.tokenizer.ids[s[t]]].item()))
    assert compute.mean_loss(model, cat_world, sentences) == pytest.approx(sum(by_hand) / len(by_hand), abs=1e-9)
    # the trained model sits above the entropy floor of the sentences it was trained on, and far below ln V
    train = compute.mean_loss(model, cat_world)
    assert entropy_floor(cat_world.train) < train < entropy_floor(cat_world.train) + 0.05 < math.log(20)
    with pytest.raises(CourseInputError, match="non-empty list of sentences"):
        compute.mean_loss(model, cat_world, [])
    with pytest.raises(CourseInputError, match="shorter one"):
        compute.mean_loss(model, cat_world, [["<BOS>"]])


def test_the_small_start_begins_near_ln_V_and_the_unit_start_above_it(cat, cat_world):
    ln_v = math.log(cat.cfg.vocab_size)
    small = compute.first_losses(cat.cfg, cat_world, range(5), init="small")
    unit = compute.first_losses(cat.cfg, cat_world, range(5), init="unit")
    assert all(abs(loss - ln_v) < 0.1 * ln_v for loss, _ in small)
    assert all(loss > ln_v + 1 for loss, _ in unit)
    # the logits spread about √d_model · std(E): 0.02 · √6 against 1 · √6
    assert all(0.02 < spread < 0.08 for _, spread in small) and all(1.2 < spread < 4 for _, spread in unit)
    with pytest.raises(CourseInputError, match="init"):
        compute.first_losses(cat.cfg, cat_world, [0], init="large")
    with pytest.raises(CourseInputError, match="seeds should be a list of 1 to 100 seeds"):
        compute.first_losses(cat.cfg, cat_world, [], init="small")


def test_followers_of_the_in_the_cat_world(cat_world):
    assert compute.followers(cat_world.sentences, "<BOS> the") == ["cat", "dog", "mat", "floor", "big", "small"]
    assert compute.followers(cat_world.sentences, ["on", "the"]) == ["mat", "floor", "red", "blue"]
    assert len(compute.followers(cat_world.sentences, "the")) == 8
    with pytest.raises(CourseInputError, match="never followed"):
        compute.followers(cat_world.sentences, "zebra")
    with pytest.raises(CourseInputError, match="one or more words"):
        compute.followers(cat_world.sentences, "")


def test_sentence_loss_check_names_the_usual_mistakes(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the big dog sat on the red mat <EOS>")
    logits = copy.deepcopy(cat).double()(ids).detach()
    right = torch.nn.functional.cross_entropy(logits[:-1], ids[1:]).item()
    assert checks.sentence_loss(right, logits, ids)
    assert checks.sentence_loss(torch.tensor(right, dtype=torch.float32), logits.numpy(), ids.numpy())
    log_probs = torch.log_softmax(logits, dim=-1)
    per = -log_probs[torch.arange(len(ids) - 1), ids[1:]]
    wrong = {
        per.sum().item(): "sum over the predicted positions",
        -right: "never negative",
        right / math.log(10): "base-10",
        right / math.log(2): "bits",
        math.exp(right): "perplexity",
        (-log_probs[torch.arange(len(ids) - 1), ids[:-1]]).mean().item(): "not with token t",
        (-logits[torch.arange(len(ids) - 1), ids[1:]]).mean().item(): "a logit is not a log-probability",
        -math.log(per.neg().exp().mean().item()): "log of the mean probability",
        per.sum().item() / len(ids): "divides by T = 10",                                  # /T, not /(T - 1)
        (-torch.log_softmax(logits, dim=0)[torch.arange(len(ids) - 1), ids[1:]]).mean().item():
            "runs down each column",                                                       # softmax over axis 0
        right + 0.5: "too large",
        (-log_probs[torch.arange(len(ids)), ids]).mean().item(): "all T rows against their own tokens",
        (-log_probs[torch.arange(1, len(ids)), ids[1:]]).mean().item(): "rows 1 to T - 1",
        per[1:].mean().item(): "skips the first prediction",
    }
    for answer, words in wrong.items():
        assert words in checks.sentence_loss.feedback(answer, logits, ids)[0], (answer, words)
    assert "not answered" in checks.sentence_loss.feedback(None, logits, ids)[0]
    assert "should be one number, but it is a str" in checks.sentence_loss.feedback("1.2", logits, ids)[0]
    assert "NaN" in checks.sentence_loss.feedback(float("nan"), logits, ids)[0]
    with pytest.raises(AssertionError):
        checks.sentence_loss.grade(right + 0.5, logits, ids)


def test_current_token_accuracy_is_below_the_whole_prefix_ceiling(cat_world):
    assert compute.current_token_accuracy(cat_world.sentences) == (270, 432)   # 0.625
    from helpers.worlds import best_possible_accuracy
    assert best_possible_accuracy(cat_world.sentences) == (302, 432)           # 0.699


@pytest.mark.parametrize("check, args", [
    (checks.next_prob, (torch.zeros(20), 999)), (checks.next_prob, (torch.zeros(20), 1.0)),
    (checks.next_prob, (torch.zeros(1, 20), 3)), (checks.next_prob, (torch.full((20,), float("nan")), 3)),
    (checks.per_layer, ("768", 3072)), (checks.per_layer, (768, -1)),
    (checks.sentence_loss, (torch.zeros(5, 20), torch.tensor([1, 2, 3, 4, 104]))),
    (checks.sentence_loss, (torch.zeros(3, 20), torch.tensor([1, 2, 3, 4, 5]))),
    (checks.sentence_loss, (torch.zeros(5, 20), torch.tensor([1.5, 2, 3, 4, 5]))),
])
def test_a_check_cell_edited_gets_one_sentence_not_a_broken_check(check, args):
    said = check.feedback(5 if check is checks.per_layer else 0.5, *args)
    assert len(said) == 1 and said[0].startswith("the check cannot use what the check cell gives it"), said


# ------------------------------------------------------------------ red team round 8

def test_round_8_followers_takes_a_tuple_context_as_the_list_it_holds(cat_world):
    assert compute.followers(cat_world.sentences, ("on", "the")) == compute.followers(cat_world.sentences, "on the")


def test_round_8_per_layer_shows_a_fraction_it_refuses():
    said = " ".join(checks.per_layer.feedback(7087872.000000001, d_model=768, d_ff=3072))
    assert "7087872.000000001" in said


# ------------------------------------------------------------------ red team round 9

def test_round_9_first_losses_counts_the_float64_copy_up_front(cat_world, refused):
    from helpers.model import Config
    big = Config(vocab_size=len(cat_world.tokenizer.vocab), d_model=4096, n_heads=8, n_layers=3, d_ff=4096)
    refused(lambda: compute.first_losses(big, cat_world, [0], init="small"), "in float64", "1.5 GiB")
    refused(lambda: compute.first_losses("cfg", cat_world, [0], init="small"), "cfg should be a helpers.model.Config")
    refused(lambda: compute.first_losses(big, None, [0], init="small"), "world should be a helpers.worlds.World")
