"""Chapter 03 (scaling): the spread table, every head's scaled scores on the cat model (the learner's piece and
its check), the six-key example, the gradients and where the 1/√d_k reaches, the explorer and the checks."""
import math

import numpy as np
import pytest
import torch

from helpers import worlds
from helpers.errors import CourseInputError
from helpers.exercises import NOT_ANSWERED
from helpers.reference import softmax
from helpers.scaling import checks, compute as scaling, explorer


def test_chunked_draws_equal_one_big_draw():
    g = torch.Generator().manual_seed(123)
    q, k = torch.randn(20_000, 3, generator=g), torch.randn(20_000, 3, generator=g)
    chunked = scaling.raw_scores(3, 20_000, torch.Generator().manual_seed(123), chunk=4_000)
    assert np.array_equal(chunked, (q * k).sum(1).numpy().astype(float))


def test_spread_table_reproduces_the_book_and_the_theory():
    rows = scaling.dot_spread(dims=(2, 4, 64), n=100_000, seed=123)
    for row in rows:
        assert (round(row["raw"], 2), round(row["scaled"], 2)) == scaling.BOOK_SPREAD[row["d"]]
        assert abs(row["raw"] / math.sqrt(row["d"]) - 1) < 0.01


def test_six_keys_and_the_book_gradients():
    raw = scaling.six_keys(d=64, n_keys=6, seed=1)
    assert np.allclose(raw, scaling.BOOK_SIX_SCORES, atol=1e-3)
    assert round(scaling.weight_gradient(raw, 2)["wrt_input"], 3) == scaling.BOOK_GRADIENTS["raw"]
    scaled = scaling.weight_gradient(raw, 2, divide_by=8)
    assert round(scaled["wrt_input"], 3) == scaling.BOOK_GRADIENTS["scaled"]
    assert scaled["wrt_scores"] == pytest.approx(scaled["wrt_input"] / 8)


def test_jacobian_matches_autograd_and_rows_sum_to_zero():
    s = np.array([0.3, -1.2, 2.0, 0.5])
    J = scaling.softmax_jacobian(softmax(s))
    J_torch = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), torch.tensor(s)).numpy()
    assert np.allclose(J, J_torch, atol=1e-12)
    assert np.allclose(J.sum(1), 0)
    assert np.allclose(scaling.jacobian_size(softmax(s)[None]), np.linalg.norm(J))


def test_unscaled_gradient_collapses_and_scaled_does_not():
    rows = scaling.gradient_by_dim(dims=(4, 256), n_queries=300, seed=0)
    assert rows[1]["raw"] < 0.01 * rows[0]["raw"]
    assert abs(rows[1]["scaled"] - rows[0]["scaled"]) < 0.05
    assert rows[1]["saturated_scaled"] == 0


def test_explore_compute():
    a, b = scaling.explore(64, scaled=False), scaling.explore(64.0, scaled=True)
    assert a["scores"].shape == (2000,) and a["weights"].shape == (6,)
    assert a["spread"] == pytest.approx(8 * b["spread"])
    assert b["spread"] == pytest.approx(1, abs=0.1)
    assert b["gradient_wrt_raw"] == pytest.approx(b["gradient"] / 8)
    assert scaling.explore(1024, False)["weights"].max() > 0.99


def test_explorer_redraws_when_d_or_the_scaling_moves():
    shown = explorer.explorer(d=64, scaled=False)
    assert set(shown.controls) == {"d", "scaled"}
    first = shown.picture()
    assert first[:8] == b"\x89PNG\r\n\x1a\n"
    shown.controls["scaled"].value = True
    scaled = shown.picture()
    shown.controls["d"].value = 512
    assert len({first, scaled, shown.picture()}) == 3


@pytest.mark.parametrize("bad", [dict(d=0), dict(d=5000), dict(d="x"), dict(d=3.7), dict(d=float("nan"))])
def test_explore_bad_input(bad):
    with pytest.raises(CourseInputError):
        scaling.explore(**bad)


def test_bad_input_elsewhere():
    with pytest.raises(CourseInputError, match="index"):
        scaling.weight_gradient([1.0, 2.0], 5)
    with pytest.raises(CourseInputError, match="softmax output"):
        scaling.softmax_jacobian([0.5, 0.9])
    with pytest.raises(CourseInputError, match="multiple of 16"):
        scaling.raw_scores(4, 100, torch.Generator(), chunk=10)


# ------------------------------------------------------------------ checks

def feedback(check, answer, *args, **kwargs):
    return " ".join(check.feedback(answer, *args, **kwargs))


def test_typical_size_check():
    assert checks.typical_size.feedback(math.sqrt(512), d=512) == []
    assert "variance" in feedback(checks.typical_size, 512, d=512)
    assert "after dividing" in feedback(checks.typical_size, 1.0, d=512)
    assert "too small" in feedback(checks.typical_size, 20.0, d=512)
    assert "one number" in feedback(checks.typical_size, [22.6, 1.0], d=512)
    assert feedback(checks.typical_size, None) == NOT_ANSWERED
    with pytest.raises(AssertionError):
        checks.typical_size.grade(512, d=512)


def test_jacobian_check():
    w = softmax(np.array([0.1, 1.0, -0.5, 2.0]))
    J = np.diag(w) - np.outer(w, w)
    assert checks.jacobian.feedback(J, w) == []
    assert "sign" in feedback(checks.jacobian, -J, w)
    assert "diagonal is missing" in feedback(checks.jacobian, -np.outer(w, w), w)
    assert "off-diagonal" in feedback(checks.jacobian, np.diag(w * (1 - w)), w)
    assert "sum to 0" in feedback(checks.jacobian, J + 0.01, w)
    assert "differs" in feedback(checks.jacobian, J + np.eye(4) * 0.1 - 0.025, w)
    assert "shape" in feedback(checks.jacobian, J[:3], w)
    assert feedback(checks.jacobian, None, w) == NOT_ANSWERED


def test_gradient_wrt_raw_check():
    raw = scaling.six_keys()
    sizes = scaling.weight_gradient(raw, 2, divide_by=8)
    assert checks.gradient_wrt_raw.feedback(sizes["wrt_scores"], raw) == []
    assert "own input" in feedback(checks.gradient_wrt_raw, sizes["wrt_input"], raw)
    assert "don't multiply" in feedback(checks.gradient_wrt_raw, sizes["wrt_input"] * 8, raw)
    assert "unscaled" in feedback(checks.gradient_wrt_raw, 0.0414, raw)
    assert "too large" in feedback(checks.gradient_wrt_raw, 0.03, raw)
    assert feedback(checks.gradient_wrt_raw, None, raw) == NOT_ANSWERED
    with pytest.raises(AssertionError, match="chain rule"):
        checks.gradient_wrt_raw.grade(sizes["wrt_input"], raw)


# ------------------------------------------------------------------ fits, Adam and training without √d

def test_log_fit_tells_sqrt_d_from_d():
    dims = [64, 256, 768]
    along_sqrt = np.exp(0.3 - 0.5 * np.sqrt(dims))
    fit = scaling.log_fit(dims, along_sqrt)
    assert fit["sqrt_d"][0] == pytest.approx(-0.5) and fit["sqrt_d"][2] < 1e-9
    assert fit["d"][2] > 0.5                     # a straight line in d misses these points
    along_d = np.exp(-0.01 * np.array(dims))
    assert scaling.log_fit(dims, along_d)["d"][2] < 1e-9
    with pytest.raises(CourseInputError, match="at least 3"):
        scaling.log_fit([64, 256], [0.1, 0.01])


def test_adam_cancels_a_constant_factor_but_plain_steps_would_not():
    g = np.random.default_rng(3).normal(size=(30, 3))
    full, eighth = scaling.adam_trajectory(g, 1.0), scaling.adam_trajectory(g, 1 / 8)
    assert np.abs(full - eighth).max() < 1e-6 * np.abs(full).max()
    assert np.abs(full).max() > 0.01
    with pytest.raises(CourseInputError, match="factor"):
        scaling.adam_trajectory(g, 0.0)


def test_the_scaled_switch_changes_only_the_division():
    model = scaling.scaling_model(d_model=8, n_heads=2, n_layers=1)
    ids = torch.tensor([1, 4, 5, 11, 16])
    trace, unscaled = model(ids, trace=True), model(ids, trace=True, scaled=False)
    assert torch.allclose(unscaled["L0.scores"].nan_to_num(0, 0, 0),
                          trace["L0.scores"].nan_to_num(0, 0, 0) * 2, atol=1e-6)   # √d_k = 2
    assert not torch.allclose(trace["logits"], unscaled["logits"])
    with pytest.raises(CourseInputError, match="scaled"):
        model(ids, scaled="no")


def test_saturated_share_counts_rows_with_two_or_more_keys():
    from helpers import worlds
    world = worlds.cat_world()
    batch = world.batch(world.train)
    model = scaling.scaling_model()
    share_scaled, share_raw = (scaling.saturated_share(model, batch, scaled=s) for s in (True, False))
    assert share_scaled < 0.1 < 0.3 < share_raw      # position 0 (always weight 1) is not counted
    assert scaling.saturated_share(model, batch, scaled=True, above=0.0) == 1.0


def chapter_claims(runs, floor):
    """What chapter 03 says of its six runs (section 5), asserted."""
    assert [(r["seed"], r["scaled"]) for r in runs] == [(s, d) for s in (0, 1, 2) for d in (True, False)]
    for r in runs:
        assert r["d_k"] == 32 and len(r["losses"]) == 300
        assert 16 <= r["losses"][0] <= 21 and floor < r["final"] < 1.0
        assert (r["saturated_at_start"] == 0) if r["scaled"] else (1 / 3 <= r["saturated_at_start"] <= 0.55)
    for seed in (0, 1, 2):
        with_it, without = (r["grad_W_Q_at_start"] for r in runs if r["seed"] == seed)
        assert without > with_it   # the gradient reaching W_Q is larger without the division, not smaller


def test_training_without_the_division_still_learns_the_cat_world():
    """Chapter 03 reads its six runs from data/scaling/runs.json; trained again here (on the CPU
    path this test runs on: CI runs it on two), every run meets every claim the chapter makes,
    and its first 8 steps are the file's."""
    floor = scaling.loss_floor(worlds.cat_world().train)
    runs = scaling.train_with_and_without_scaling(**scaling.SCALING_RUNS)
    chapter_claims(runs, floor)
    assert scaling.same_start(scaling.shipped_runs(), [{**r, "losses": r["losses"][:8]} for r in runs])
    fig = scaling.training_figure(runs)
    assert len(fig.axes[0].lines) == 6 and fig.axes[0].get_legend() is not None


def test_the_shipped_runs_are_the_recipes_and_carry_the_chapters_claims():
    shipped = scaling.shipped_runs()
    chapter_claims(shipped, scaling.loss_floor(worlds.cat_world().train))
    again = scaling.train_with_and_without_scaling(**scaling.SCALING_RUNS, stop_after=8)
    assert scaling.same_start(shipped, again)
    other_lr = scaling.train_with_and_without_scaling(**{**scaling.SCALING_RUNS, "lr": 0.9}, stop_after=8)
    assert not scaling.same_start(shipped, other_lr)   # a changed recipe shows within 8 steps
    assert not scaling.same_start(shipped, again[:5])


@pytest.mark.parametrize("bad, words", [
    (dict(runs="runs"), "a list of runs"), (dict(again=[{"seed": 0}]), "a list of runs"),
    (dict(rel=-1), "rel should be > 0"), (dict(rel="a"), "rel should be a number")])
def test_same_start_refuses_what_is_not_runs(bad, words):
    shipped = scaling.shipped_runs()
    args = {**dict(runs=shipped, again=shipped, rel=1e-4), **bad}
    with pytest.raises(CourseInputError, match=words):
        scaling.same_start(**args)


def test_a_missing_or_damaged_runs_file_is_one_sentence(tmp_path):
    with pytest.raises(CourseInputError, match="no file there"):
        scaling.shipped_runs(str(tmp_path / "none.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(CourseInputError, match="cannot be read"):
        scaling.shipped_runs(tmp_path / "bad.json")


def test_loss_floor_is_the_entropy_of_each_prefix_and_bounds_the_training_loss():
    two = [["<BOS>", "the", "cat", "<EOS>"], ["<BOS>", "the", "dog", "<EOS>"]]
    # 6 decisions: after "<BOS> the" cat or dog (−ln ½ each); the other four certain
    assert scaling.loss_floor(two) == pytest.approx(2 * math.log(2) / 6)
    assert scaling.loss_floor(two[:1]) == 0
    from helpers import worlds
    world = worlds.cat_world()
    inputs, targets = world.batch(world.train)
    assert int((targets != -100).sum()) == len(worlds.decisions(world.train))   # one target per decision
    assert 0 < scaling.loss_floor(world.train) < math.log(20)
    with pytest.raises(CourseInputError, match="non-empty list of sentences"):
        scaling.loss_floor([])


# ------------------------------------------------------------------ every head's scaled scores (the learner's piece)

def cat_case(layer=0, words="<BOS> the big cat sat on the blue floor"):
    from helpers.weights import load_cat
    return scaling.layer_case(load_cat(), words.split(), layer)


@pytest.mark.parametrize("layer", [0, 1])
def test_course_scaled_scores_are_the_models_own(layer):
    case = cat_case(layer)
    args = [case[name] for name in ("x", "W_Q", "W_K", "b_Q", "b_K", "n_heads")]
    scores = scaling.scaled_scores(*args)
    seen = torch.isfinite(case["scores"])
    assert scores.shape == (2, 9, 9) and torch.isfinite(scores).all()
    assert torch.allclose(scores[seen], case["scores"][seen], atol=1e-5)
    assert (seen == ~torch.triu(torch.ones(9, 9, dtype=torch.bool), 1)).all()
    one_head = scaling.scaled_scores(*args[:5], 1)      # one head of d_k = 6: the heads' sums over √6
    assert torch.allclose(one_head[0], (scores * math.sqrt(3)).sum(0) / math.sqrt(6), atol=1e-4)


def test_scaled_scores_bad_input_is_one_sentence():
    case = cat_case()
    x, W_Q, W_K, b_Q, b_K = (case[name] for name in ("x", "W_Q", "W_K", "b_Q", "b_K"))
    with pytest.raises(CourseInputError, match="split into n_heads = 4"):
        scaling.scaled_scores(x, W_Q, W_K, b_Q, b_K, 4)
    with pytest.raises(CourseInputError, match=r"W_K should have shape \(6, 6\)"):
        scaling.scaled_scores(x, W_Q, W_K[:3], b_Q, b_K, 2)
    with pytest.raises(CourseInputError, match="x should have shape"):
        scaling.scaled_scores(x[0], W_Q, W_K, b_Q, b_K, 2)
    with pytest.raises(CourseInputError, match="n_heads"):
        scaling.scaled_scores(x, W_Q, W_K, b_Q, b_K, 0)
    with pytest.raises(CourseInputError, match="layer should be one of"):
        cat_case(layer=2)


def test_the_division_reaches_exactly_the_gradients_through_the_scores():
    from helpers.weights import load_cat
    world = worlds.cat_world()
    grads = scaling.score_path_gradients(load_cat(), world.batch(world.train), layer=0)
    for name in ("W_Q", "b_Q", "W_K"):
        g = grads[f"blocks.0.attn.{name}"]
        assert g["as_is"] / g["undone"] == pytest.approx(1 / math.sqrt(3), rel=1e-4)
    assert max(grads["blocks.0.attn.b_K"]["as_is"], grads["blocks.0.attn.b_K"]["undone"]) < 1e-6   # shifts a row only
    before = ("E", "blocks.0.ln1.weight", "blocks.0.ln1.bias")
    for name, g in grads.items():
        if name in before:      # part through q and k, part through v and the residual stream
            assert 1 / math.sqrt(3) + 0.01 < g["as_is"] / g["undone"] < 0.99 and not g["identical"]
        elif not name.startswith(("blocks.0.attn.W_Q", "blocks.0.attn.b_Q", "blocks.0.attn.W_K", "blocks.0.attn.b_K")):
            assert g["identical"], name          # the value path and everything after attention
    with pytest.raises(CourseInputError, match="layer"):
        scaling.score_path_gradients(load_cat(), world.batch(world.train), layer=5)


def right_scores(x, W_Q, W_K, b_Q, b_K, n_heads):
    T, d_model = x.shape
    d_k = d_model // n_heads
    q, k = x @ W_Q + b_Q, x @ W_K + b_K
    heads = []
    for h in range(n_heads):
        columns = slice(h * d_k, (h + 1) * d_k)
        heads.append(q[:, columns] @ k[:, columns].T / math.sqrt(d_k))
    return torch.stack(heads)


def slipped(divide=lambda d_k, d_model: math.sqrt(d_k), transpose_q=False, transpose_k=False, split="blocks",
            biases=True, b_K=True, heads=None, mask=False, swap=False, reverse=False, softmax=False):
    """A learner's scaled_scores with the named slips."""
    keep_b_K = b_K

    def scores(x, W_Q, W_K, b_Q, b_K, n_heads):
        T, d_model = x.shape
        H = n_heads if heads is None else heads
        d_k = d_model // H
        q = x @ (W_Q.T if transpose_q else W_Q) + (b_Q if biases else 0)
        k = x @ (W_K.T if transpose_k else W_K) + (b_K if biases and keep_b_K else 0)
        if split == "strided":
            q, k = (t.view(T, d_k, H).permute(2, 0, 1) for t in (q, k))
        elif split == "reshape":
            q, k = (t.reshape(H, T, d_k) for t in (q, k))
        else:
            q, k = (t.view(T, H, d_k).transpose(0, 1) for t in (q, k))
        s = (k @ q.transpose(-2, -1) if swap else q @ k.transpose(-2, -1)) / divide(d_k, d_model)
        if reverse:
            s = s.flip(0)
        if mask:
            s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        if softmax:
            s = torch.softmax(s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf")), -1)
        return s
    return scores


def test_layer_scores_passes_the_right_piece_and_keeps_it_for_chapter_03():
    assert checks.layer_scores.feedback(right_scores) == []
    assert checks.layer_scores.feedback(lambda *args: scaling.scaled_scores(*args)) == []
    assert "the course's own" in " ".join(checks.layer_scores.feedback(scaling.scaled_scores))
    assert checks.layer_scores.feedback(lambda *args: right_scores(*args).double()) == []
    assert checks.layer_scores.keeps == "03"
    checks.layer_scores.grade(right_scores)


def test_layer_scores_skeleton_is_not_answered_yet():
    def skeleton(x, W_Q, W_K, b_Q, b_K, n_heads):
        """The learner's copy: the solution region became a comment."""
        scores = None
        # YOUR CODE HERE
        return scores
    found = checks.layer_scores.feedback(skeleton)
    assert len(found) == 1 and found[0].startswith("not answered yet")
    assert checks.layer_scores.feedback(None)[0].startswith("not answered yet")
    with pytest.raises(AssertionError, match="not answered yet"):
        checks.layer_scores.grade(skeleton)


@pytest.mark.parametrize("mistake, words", [
    (dict(divide=lambda d_k, d_model: 1.0), "division by √d_k is missing"),
    (dict(divide=lambda d_k, d_model: d_k), "by √d_k twice"),                         # √d_k applied twice = d_k
    (dict(divide=lambda d_k, d_model: math.sqrt(d_k) ** 2), "by √d_k twice"),
    (dict(divide=lambda d_k, d_model: math.sqrt(d_model)), "divided by √d_model = √6"),
    (dict(divide=lambda d_k, d_model: d_model), "divided by d_model = 6"),
    (dict(transpose_q=True, transpose_k=True), "W_Q and W_K are used transposed"),
    (dict(transpose_q=True), "W_Q is used transposed"),
    (dict(transpose_k=True), "W_K is used transposed"),
    (dict(split="strided"), "wrong columns"),
    (dict(split="strided", divide=lambda d_k, d_model: 1.0), "not (T, d_k, n_heads)); and the division by √d_k is missing"),
    (dict(reverse=True), "reverse order"),
    (dict(swap=True), "rows and columns are swapped"),
    (dict(biases=False), "b_Q and b_K are missing"),
    (dict(b_K=False), "b_K is missing"),
    (dict(mask=True), "that is the causal mask"),
    (dict(split="reshape"), "view q as (T, n_heads, d_k), then transpose(0, 1)"),
    (dict(softmax=True), "those are the softmax weights; return the scores before the softmax"),
    (dict(heads=2), "returns 2 heads"),
    (dict(divide=lambda d_k, d_model: math.sqrt(3)), "not fixed numbers"),
])
def test_layer_scores_names_each_mistake(mistake, words):
    found = checks.layer_scores.feedback(slipped(**mistake))
    assert len(found) == 1 and words in found[0], found


def test_layer_scores_other_wrong_answers_are_one_sentence():
    words = lambda fn: " ".join(checks.layer_scores.feedback(fn))
    assert "shape (n_heads, T, T) = (2, 4, 4)" in words(lambda x, *a: x)
    assert "ZeroDivisionError" in words(lambda *a: 1 / 0)
    assert "differ from the model's" in words(lambda *a: right_scores(*a) + 0.5)
    assert "NaN" in words(lambda *a: right_scores(*a) * float("nan"))
    assert "a function" in words(3.0)
    assert "returns a list of 2 items" in words(lambda *a: list(right_scores(*a)))     # heads not stacked
    assert "returns ndarray output" in words(lambda *a: right_scores(*a).numpy())


def test_a_piece_that_changes_its_inputs_in_place_is_named_and_the_model_keeps_its_weights():
    """The reader's two pieces: the right scores, reached by dividing x, or W_Q and b_Q, in place."""
    def x_in_place(x, W_Q, W_K, b_Q, b_K, n_heads):
        fourth_root = (x.shape[1] // n_heads) ** 0.25
        x /= fourth_root
        return right_scores(x, W_Q, W_K, b_Q / fourth_root, b_K / fourth_root, n_heads) * math.sqrt(x.shape[1] // n_heads)

    def W_Q_in_place(x, W_Q, W_K, b_Q, b_K, n_heads):
        d_k = x.shape[1] // n_heads
        W_Q /= math.sqrt(d_k)
        b_Q /= math.sqrt(d_k)
        return right_scores(x, W_Q, W_K, b_Q, b_K, n_heads) * math.sqrt(d_k)

    before = [a.clone() if torch.is_tensor(a) else a for _, args, _ in checks.cat_cases() for a in args]
    for piece, name in ((x_in_place, "x"), (W_Q_in_place, "W_Q")):
        found = checks.layer_scores.feedback(piece)
        assert len(found) == 1 and f"your function changed {name} in place" in found[0], found
        with pytest.raises(AssertionError, match=f"changed {name} in place"):
            checks.layer_scores.grade(piece)
    after = [a for _, args, _ in checks.cat_cases() for a in args]
    assert all(torch.equal(a, b) if torch.is_tensor(a) else a == b for a, b in zip(before, after))


def test_the_figure_draws_the_tables_pairs_and_refuses_a_missing_d():
    rows = scaling.dot_spread(dims=(4, 8), n=1_600, seed=123)
    assert [len(r["scores"]) for r in rows] == [1_600, 1_600]
    assert np.array_equal(rows[1]["scores"], scaling.raw_scores(8, 1_600, rows_generator(4, 1_600)))
    fig = scaling.spread_figure(rows, dims=(4, 8))
    assert "1,600 pairs" in fig.axes[0].get_title()
    with pytest.raises(CourseInputError, match="no row for d = \\[64\\]"):
        scaling.spread_figure(rows, dims=(4, 64))


def rows_generator(d, n, seed=123):
    """A generator seeded with ``seed`` that has drawn the n pairs of dimension d (queries, then keys)."""
    g = torch.Generator().manual_seed(seed)
    torch.randn(2 * n, d, generator=g)
    return g


# --- issue 31: every argument checked before any work --------------------------------------------

def test_draws_and_memory_are_bounded_before_any_draw(refused):
    refused(lambda: scaling.dot_spread(dims=[2], n=10**12), "at most 2,000,000,000 random numbers", "n <=")
    refused(lambda: scaling.dot_spread(dims=[2], n=10, seed=2**64), "seed", "2**64 - 1")
    refused(lambda: scaling.dot_spread(dims=range(10**20)), "dims should be a list of 1 to 64")
    refused(lambda: scaling.gradient_by_dim(n_queries=10**9), "random numbers")
    refused(lambda: scaling.gradient_by_dim(seed="0"), "seed should be a whole number")
    refused(lambda: scaling.six_keys(seed=-1), "seed should be at least 0")
    refused(lambda: scaling.spread_figure(n=10**12), "random numbers")
    refused(lambda: scaling.softmax_jacobian(np.full(100_000, 1e-5)), "1.5 GiB", "n <= 10,033")
    refused(lambda: scaling.jacobian_size(np.full((10**4, 10**3), 1e-3)), "1.5 GiB")


def test_training_steps_seeds_and_switches_are_checked_first(refused):
    refused(lambda: scaling.train_with_and_without_scaling(seeds=[0], steps=10**9), "steps should be at most 10,000")
    refused(lambda: scaling.train_with_and_without_scaling(seeds=[2**64]), "each seed")
    refused(lambda: scaling.train_with_and_without_scaling(seeds=[0], steps=3, stop_after=4), "stop_after should be")
    refused(lambda: scaling.train_with_and_without_scaling(seeds=[0], lr="0.1"), "lr should be a number")
    refused(lambda: scaling.train_with_and_without_scaling(seeds=[0], width=3), "the sizes should be")
    refused(lambda: scaling.explore(64, "False"), "scaled is a switch")
    refused(lambda: scaling.weight_gradient([1.0, 2.0, 3.0], True), "index should be a whole number")
    refused(lambda: scaling.adam_trajectory(np.ones((2, 2)), lr=float("nan")), "lr should be a finite number")


def test_checks_refuse_their_own_bad_arguments_in_one_sentence():
    w = np.array([0.2, 0.3, 0.5])
    cases = [(checks.typical_size, 3.0, dict(d=512)), (checks.jacobian, np.zeros((3, 3)), dict(weights=w)),
             (checks.gradient_wrt_raw, 0.1, dict(scores=[1.0, 2.0, 3.0], index=2, divide_by=8.0))]
    for check, answer, given in cases:
        for name in given:
            for bad in (None, "False", -1, float("nan"), [1, 2], np.zeros((2, 3, 4)), True):
                found = check.feedback(answer, **{**given, name: bad})
                assert len(found) == 1 and found[0].startswith("the check cannot use what the check cell gives it"), \
                    (check.title, name, bad, found)


def test_dot_spread_needs_two_pairs_for_a_spread(refused):
    """Red team round 4: n=1 gave a spread of 0.0 for every d."""
    refused(lambda: scaling.dot_spread(dims=[2], n=1), "n should be at least 2", "1")
    assert scaling.dot_spread(dims=[2], n=2)[0]["raw"] > 0


# ------------------------------------------------------------------ red team round 8

def test_round_8_broadcast_scores_are_counted_before_they_are_made(refused):
    big = np.broadcast_to(np.zeros(1), (10**9,))
    refused(lambda: scaling.weight_gradient(big, 0), "1.5 GiB")
    refused(lambda: scaling.log_fit([64, 128, 256], big), "1.5 GiB")


def test_round_8_layer_case_refuses_what_is_no_model(cat, refused):
    for bad in (None, "cat", torch.zeros(3)):
        refused(lambda: scaling.layer_case(bad, ["<BOS>", "the"], 0), "model should be a helpers.model.Transformer")
        refused(lambda: scaling.score_path_gradients(bad, None), "model should be a helpers.model.Transformer")
    assert scaling.layer_case(cat, ["<BOS>", "the"], 0)["n_heads"] == cat.cfg.n_heads


def test_round_8_adam_trajectory_refuses_what_would_overflow(refused):
    g = np.ones((5, 4))
    refused(lambda: scaling.adam_trajectory(g, 1.0, 1e308), "lr should be at most")
    refused(lambda: scaling.adam_trajectory(g, 1e308), "factor × the largest gradient should be at most")
    refused(lambda: scaling.adam_trajectory(g * 1e200, 1e-40), "factor × the largest gradient")
    assert np.isfinite(scaling.adam_trajectory(g * 1e150, 1.0, 1e100)).all()
    assert (scaling.adam_trajectory(np.zeros((0, 4)), 1.0) == np.zeros((0,))).all()


def test_round_8_scaled_scores_count_an_expanded_tensor_before_using_it(refused):
    x, W, b = torch.zeros(1, 1).expand(10**9, 2), torch.zeros(2, 2), torch.zeros(2)
    refused(lambda: scaling.scaled_scores(x, W, W, b, b, 1), "x (a tensor of 2,000,000,000 numbers)", "1.5 GiB")


# ------------------------------------------------------------------ red team round 9

def test_round_9_adam_trajectory_bounds_its_steps_and_counts_its_memory(refused):
    refused(lambda: scaling.adam_trajectory(np.zeros((10**6, 1))), "at most 10,000 steps", "(1000000, 1)")
    refused(lambda: scaling.adam_trajectory(np.broadcast_to(0.0, (1, 10**8))), "Adam on gradients", "1.5 GiB")
    assert scaling.adam_trajectory(np.ones((10_000, 2))).shape == (10_000, 2)


def test_round_9_score_path_gradients_leaves_every_grad_as_it_was(cat, cat_world, refused):
    import copy
    model, batch = copy.deepcopy(cat), cat_world.batch(cat_world.train)
    model.E.requires_grad_(False)
    refused(lambda: scaling.score_path_gradients(model, batch), "should require grad", "E does not")
    assert all(p.grad is None for p in model.parameters())
    model.E.requires_grad_(True)
    model.E.grad = torch.ones_like(model.E)
    with torch.no_grad():
        found = scaling.score_path_gradients(model, batch)
    assert torch.equal(model.E.grad, torch.ones_like(model.E))
    assert all(p.grad is None for name, p in model.named_parameters() if name != "E")
    assert found == scaling.score_path_gradients(cat, batch) and found["E"]["as_is"] > 0


def test_round_9_training_runs_inside_no_grad():
    with torch.no_grad():
        runs = scaling.train_with_and_without_scaling(seeds=(0,), steps=2, stop_after=1)
    assert len(runs) == 2 and all(np.isfinite(run["final"]) for run in runs)


def test_round_9_scaling_helpers_refuse_in_one_sentence_naming_the_cause(cat, cat_world, refused):
    batch = cat_world.batch(cat_world.train)
    inputs, targets = batch
    refused(lambda: scaling.score_path_gradients(cat, inputs), "batch should be (inputs, targets)")
    refused(lambda: scaling.score_path_gradients(cat, (inputs, targets[:1])), "the same (B, T) shape")
    refused(lambda: scaling.score_path_gradients(cat, (inputs, targets + 100)), "token ids 0..")
    refused(lambda: scaling.saturated_share(None, batch), "helpers.model.Transformer")
    refused(lambda: scaling.saturated_share(cat, batch, above=float("nan")), "above should be a finite number")
    refused(lambda: scaling.saturated_share(cat, batch, above=1.5), "above should be below 1")
    refused(lambda: scaling.saturated_share(cat, batch, scaled="yes"), "scaled is a switch")
    refused(lambda: scaling.train_with_and_without_scaling(lr=1e10), "lr should be at most 10")
    for bad in ([], [{}], "x"):
        refused(lambda: scaling.training_figure(bad), "runs should be a list of runs")
        refused(lambda: scaling.gradient_figure(bad), "rows should be a list of rows as gradient_by_dim")
        refused(lambda: scaling.spread_figure(spread=bad), "spread should be a list of rows as dot_spread")
    refused(lambda: scaling.shipped_runs(3), "path should be None")
    refused(lambda: scaling.log_fit([64, 128, 256], [0.1, 0.0, 0.2]), "values should be finite numbers above 0")
    refused(lambda: scaling.log_fit([64, 128], [0.1, 0.2, 0.3]), "2 dims and 3 values")
    refused(lambda: scaling.softmax_jacobian([2.0, -1.0]), "hold a negative entry, -1")
    refused(lambda: scaling.softmax_jacobian([0.5, 0.6]), "sum to 1.1")
    assert [row["d"] for row in scaling.dot_spread(dims=np.array(3), n=2)] == [3]
    assert [row["d"] for row in scaling.gradient_by_dim(dims=np.array(3), n_queries=2)] == [3]
