"""Chapter 10, ablation: the three ways to switch attention off, single-head surgery, the tables'
rows, the explorer and the checks."""
import copy

import numpy as np
import pytest
import torch

from helpers import patching
from helpers.ablation import checks, compute, explorer
from helpers.errors import CourseInputError
from helpers.model import Config, Transformer

PROMPTS = ("<BOS> the cat is", "<BOS> the mat was", "<BOS> the dog sat on the")
HEADS = [(layer, head) for layer in range(2) for head in range(2)]


def test_deleted_blocks_zeroed_write_back_and_the_switch_agree_to_the_last_bit(cat, cat_world):
    surgery = compute.zeroed_copy(cat)
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = cat_world.tokenizer.encode(prompt)
            method1 = compute.without_attention_blocks(cat, ids)
            method2 = surgery(ids)
            switch = cat(ids, attention=False)
            assert torch.equal(method1, method2) and torch.equal(method2, switch), prompt


def test_deleted_blocks_take_a_batch(cat, cat_world):
    ids = torch.stack([cat_world.tokenizer.encode(p) for p in ("<BOS> the cat is", "<BOS> the mat is")])
    with torch.no_grad():
        assert torch.equal(compute.without_attention_blocks(cat, ids), cat(ids, attention=False))


@pytest.mark.parametrize("choices", [dict(norm="none", activation="relu", final_norm=False),
                                     dict(norm="pre", activation="relu", bias=False)])
def test_deleted_blocks_use_the_models_own_norm_activation_and_read_out(choices):
    model = Transformer(Config(vocab_size=7, d_model=4, n_heads=2, n_layers=2, d_ff=6, **choices))
    model.reset_parameters(seed=3)
    ids = torch.tensor([1, 4, 2, 6, 0])
    with torch.no_grad():
        assert torch.equal(compute.without_attention_blocks(model, ids), model(ids, attention=False))
        assert torch.equal(compute.zeroed_copy(model)(ids), model(ids, attention=False))


def test_zeroing_one_heads_rows_equals_the_models_head_switch(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the cat is")
    with torch.no_grad():
        for pair in HEADS:
            assert torch.equal(compute.zeroed_copy(cat, {pair})(ids), cat(ids, ablate_heads={pair})), pair


def test_zeroed_copy_leaves_the_original_untouched(cat):
    before = cat.blocks[0].attn.W_O.clone()
    clone = compute.zeroed_copy(cat, {(0, 1)})
    assert torch.equal(cat.blocks[0].attn.W_O, before)
    assert torch.all(clone.blocks[0].attn.W_O[3:6] == 0) and torch.equal(clone.blocks[0].attn.W_O[:3], before[:3])
    assert torch.equal(clone.blocks[0].attn.b_O, cat.blocks[0].attn.b_O)


def test_configurations_cover_every_head_and_attention_off(cat):
    labels = [label for label, _ in compute.configurations(cat)]
    assert labels[:2] == ["none (the trained model)", "attention off"] and len(labels) == 6


def test_damage_rows_of_the_trained_model(cat, cat_world):
    r = compute.damage_row(cat, cat_world)
    assert r["held_out_rule"] == 1.0 and r["copula"] == 1.0 and r["bigram"] == pytest.approx(302 / 432)
    off = compute.damage_row(cat, cat_world, attention=False)
    assert off["copula"] <= 0.5  # a per-position model cannot know the subject's class


def test_prompt_row_reads_the_top_token_and_the_animal_adjectives(cat, cat_world):
    r = compute.prompt_row(cat, cat_world, "<BOS> the cat is")
    assert r["top"] in ("big", "small") and r["p_animal_adj"] >= r["p_top"]


def test_attention_on_subject_and_effects_have_one_entry_per_head(cat, cat_world):
    looks = compute.attention_on_subject(cat, cat_world)
    effect = compute.class_probability_drop(cat, cat_world)
    assert looks.shape == effect.shape == (2, 2)
    assert torch.all((looks >= 0) & (looks <= 1)) and torch.all(effect <= 1)


def test_cat_lab_view_reads_one_prompt_the_rule_the_scores_and_the_patch_map(cat, cat_world):
    lab = compute.CatLab(cat, cat_world)
    on = lab.view("<BOS> the cat is", [], "mean")
    assert on["scores"] is None                  # the 64 types' accuracies need their own reference
    assert on["rule"]["p_class"] == pytest.approx(compute.copula_figures(cat, cat_world)["p_class"], abs=1e-6)
    assert torch.isclose(on["probs"].sum(), torch.tensor(1.0))
    with torch.no_grad():
        assert torch.allclose(on["probs"], torch.softmax(cat(cat_world.tokenizer.encode("<BOS> the cat is"))[-1], -1),
                              atol=1e-6)
    for kind in ("mean", "resample"):
        for reference in compute.REFERENCES:
            got = lab.view("<BOS> the mat was", [(1, 0)], kind, reference)
            assert got["rule"] == pytest.approx(compute.rule_ablation(cat, cat_world, [(1, 0)], kind, reference))
            assert (got["scores"] is None) == (reference == "copula")
    default = lab.view("<BOS> the mat was", [(1, 1)], "mean")
    assert default["rule"] == lab.view("<BOS> the mat was", [(1, 1)], "mean", "copula")["rule"]   # task-matched by default
    every = lab.view("<BOS> the cat is", [(0, 0)], "mean", "all")
    assert every["scores"] == pytest.approx(compute.cat_ablation(cat, cat_world, [(0, 0)], "mean"))
    off = lab.view("<BOS> the cat is", [(0, 0)], "zero")
    assert off["scores"] == pytest.approx(compute.cat_ablation(cat, cat_world, [(0, 0)], "zero"))
    assert on["patch"].shape == (5, 4) and on["patch"][0, 2] == pytest.approx(1.0)
    assert lab.view("<BOS> the floor is", [(1, 1)], "resample")["patch"][-1, -1] == pytest.approx(1.0)


def test_cat_lab_refuses_a_prompt_outside_the_task_and_an_unknown_reference(cat, cat_world, refused):
    lab = compute.CatLab(cat, cat_world)
    refused(lambda: lab.view("<BOS> the cat sat", [], "mean"), "copula prompts", "cat sat")
    refused(lambda: lab.view("<BOS> the cat is", [(0, 0)], "mean", "corpus"), "reference", "'corpus'")


def test_cat_ablation_resamples_twenty_donors_at_least_as_long(cat, cat_world):
    ids, lengths = compute.cat_batch(cat_world)
    shorter = lengths[None, :] < lengths[:, None]
    for donors in compute.donor_draws(len(ids), len(ids), 20, seed=0, same=shorter):
        assert (donors != torch.arange(len(ids))).all() and (lengths[donors] >= lengths).all()
    r = compute.cat_ablation(cat, cat_world, [(1, 0)], "resample")
    assert r["p_class_spread"] > 0 and 0 < r["p_class"] < 1
    assert compute.cat_ablation(cat, cat_world, [(1, 0)], "resample") == r      # seeded


def test_explorer_has_a_kind_a_reference_and_a_box_per_head_and_redraws(cat, cat_world, capsys):
    shown = explorer.explorer(cat, cat_world)
    assert set(shown.controls) == {"prompt", "kind", "reference", "L0H0", "L0H1", "L1H0", "L1H1"}
    assert shown.controls["reference"].value == "copula"             # task-matched by default
    first = shown.picture()
    assert first.startswith(b"\x89PNG")
    shown.controls["L1H1"].value = True
    second = shown.picture()
    assert second != first
    shown.controls["reference"].value = "all"
    third = shown.picture()
    assert third != second
    shown.controls["kind"].value = "zero"
    assert shown.picture() != third


def test_write_back_check():
    concat = np.array([[1.0, 2.0, -1.0, 3.0]])
    W_O = np.arange(12.0).reshape(4, 3)
    right = concat[:, :2] @ W_O[:2]
    assert checks.write_back(right, concat, W_O, d_k=2)
    assert checks.write_back(torch.tensor(right, requires_grad=True), concat, W_O, d_k=2)
    assert "full write-back" in checks.write_back.feedback(concat @ W_O, concat, W_O, d_k=2)[0]
    assert "part removed" in checks.write_back.feedback(concat[:, 2:] @ W_O[2:], concat, W_O, d_k=2)[0]
    assert "differs" in checks.write_back.feedback(right + 1, concat, W_O, d_k=2)[0]
    assert "shape" in checks.write_back.feedback(right.T, concat, W_O, d_k=2)[0]
    assert "not answered" in checks.write_back.feedback(None, concat, W_O, d_k=2)[0]


def test_method2_check_demands_the_last_bit(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the dog was")
    with torch.no_grad():
        ref = cat(ids, attention=False)
        assert checks.method2_logits(compute.zeroed_copy(cat)(ids), ref)
    assert "differ" in checks.method2_logits.feedback(ref + 1e-6, ref)[0]
    assert "shape" in checks.method2_logits.feedback(ref[:2], ref)[0]


# ------------------------------------------------------------ zero, mean, resample; patching; lens; DLA

def small_model(**choices):
    model = Transformer(Config(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=12, **choices))
    model.reset_parameters(seed=4)
    return model


def test_zero_replacement_equals_the_head_switch_and_mean_uses_the_reference():
    model = small_model()
    ids = torch.randint(0, 11, (5, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for heads in ([(0, 1)], [(1, 0), (1, 1)]):
            assert torch.equal(model(ids, replace=patching.ablation_replace(heads, "zero")),
                               model(ids, ablate_heads=set(heads)))
    means = patching.mean_head_outputs(model, ids)
    assert means[0].shape == (2, 6, 4)
    assert torch.allclose(means[1], patching.head_outputs(model, ids)[1].mean(0))
    flat = patching.mean_head_outputs(model, ids, per_position=False)
    assert flat[0].shape == (2, 1, 4) and torch.allclose(flat[0][:, 0], means[0].mean(1))
    logits, kept = patching.capture(model, ids[:2], ["L1.head_out", "L0.h"])
    assert kept["L1.head_out"].shape == (2, 2, 6, 4) and kept["L0.h"].shape == (2, 6, 8)
    with torch.no_grad():
        assert torch.equal(logits, model(ids[:2]))


def test_mean_ablation_with_a_one_prompt_reference_changes_nothing_and_padding_is_left_out():
    model = small_model()
    ids = torch.tensor([[1, 5, 2, 7]])
    means = patching.mean_head_outputs(model, ids)
    with torch.no_grad():
        assert torch.allclose(model(ids, replace=patching.ablation_replace([(0, 0), (1, 1)], "mean", means)),
                              model(ids), atol=1e-6)
    padded = torch.tensor([[1, 5, 2, 7], [3, 4, 0, 0]])
    m = patching.mean_head_outputs(model, padded, lengths=[4, 2])
    alone = patching.head_outputs(model, padded[:1])[0][0]
    assert torch.allclose(m[0][:, 2:], alone[:, 2:]) and not torch.allclose(m[0][:, :2], alone[:, :2])


def test_resample_takes_the_other_prompts_head_output():
    model = small_model()
    a, b = torch.tensor([[1, 5, 2, 7]]), torch.tensor([[3, 4, 9, 8]])
    source = patching.head_outputs(model, b)
    _, got = patching.capture(model, a, ["L1.head_out"],
                             replace=patching.ablation_replace([(1, 0)], "resample", source=source))
    assert torch.equal(got["L1.head_out"][0, 0], source[1][0, 0])
    assert torch.equal(got["L1.head_out"][0, 1], patching.head_outputs(model, a)[1][0, 1])


def test_ablation_replace_refuses_bad_kinds(refused):
    refused(lambda: patching.ablation_replace([(0, 0)], "mean"), "means", "None")
    refused(lambda: patching.ablation_replace([(0, 0)], "noise"), "zero", "'noise'")


def test_cat_scores_equal_the_slow_tables(cat, cat_world):
    fast = compute.cat_scores(cat, cat_world, ablate_heads={(1, 1)})
    slow = compute.damage_row(cat, cat_world, ablate_heads={(1, 1)})
    assert {k: fast[k] for k in slow} == pytest.approx(slow)
    rows = compute.worlds.copula_report(cat, cat_world, ablate_heads={(1, 1)})
    assert fast["p_class"] == pytest.approx(sum(r["p_class"] for r in rows) / len(rows), abs=1e-5)
    zero = compute.cat_ablation(cat, cat_world, [(1, 1)], "zero")
    assert zero == pytest.approx(fast, abs=1e-6)


def test_resample_donors_are_other_rows_at_least_as_long():
    lengths = torch.tensor([5, 5, 8, 9, 9])
    donors = compute.resample_donors(lengths, seed=1)
    assert all(d != b and lengths[d] >= lengths[b] for b, d in enumerate(donors.tolist()))


def test_patching_everything_restores_all_and_nothing_restores_none(cat, cat_world):
    tok = cat_world.tokenizer
    clean, corrupt = tok.encode("<BOS> the cat is"), tok.encode("<BOS> the mat is")
    metric = compute.logit_difference(cat_world)
    grid = patching.patch_residual(cat, clean, corrupt, metric)
    assert grid.shape == (3, 4)
    assert grid[0, 2] == pytest.approx(1.0) and grid[-1, -1] == pytest.approx(1.0)   # the only token that differs; the last point
    assert torch.all(grid[0, [0, 1, 3]].abs() < 1e-6)       # same tokens there: nothing to restore
    heads = patching.patch_heads(cat, clean, corrupt, metric)
    assert heads.shape == (2, 2) and not torch.allclose(heads, torch.zeros(2, 2))
    reverse = patching.patch_heads(cat, corrupt, clean, metric)
    assert not torch.allclose(reverse, heads)


def test_patch_heads_matches_a_one_head_patch_done_by_hand(cat, cat_world):
    tok = cat_world.tokenizer
    clean, corrupt = tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was")
    metric = compute.logit_difference(cat_world)
    clean_out = patching.head_outputs(cat, clean[None])[1]

    def patch(x):
        x = x.clone()
        x[:, 1] = clean_out[:, 1]
        return x
    with torch.no_grad():
        value = lambda **kw: float(metric({"logits": cat(corrupt[None], **kw)})[0])
        by_hand = (value(replace={"L1.head_out": patch}) - value()) / (
            float(metric({"logits": cat(clean[None])})[0]) - value())
    assert patching.patch_heads(cat, clean, corrupt, metric)[1, 1] == pytest.approx(by_hand, abs=1e-5)


def test_patching_can_watch_attention_weights(induction):
    ids = torch.arange(1, 9)
    metric = lambda out: out["L1.weights"][:, 0, -1, 0]
    grid = patching.patch_heads(induction, ids, ids.flip(0), metric, watch=("L1.weights",))
    assert grid.shape == (2, 2) and torch.isfinite(grid).all()


def test_logit_lens_ends_at_the_models_logits_and_starts_at_the_embedding(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the cat sat")
    names, lens = patching.logit_lens(cat, ids)
    assert names == ["h0", "L0.h_mid", "L0.h", "L1.h_mid", "L1.h"] and lens.shape == (5, 4, 20)
    with torch.no_grad():
        assert torch.allclose(lens[-1], cat(ids), atol=1e-5)
        assert torch.allclose(lens[0], cat.unembed(cat.embed(ids[None]))[0], atol=1e-5)
    assert not torch.allclose(lens[0], lens[-1])


def test_dla_terms_sum_to_the_actual_logit_and_difference(cat, cat_world, induction):
    tok = cat_world.tokenizer
    ids = tok.encode("<BOS> the cat is")
    with torch.no_grad():
        logits = cat(ids)[-1]
    for direction in (torch.eye(20)[tok.ids["big"]], torch.eye(20)[3] - torch.eye(20)[7]):
        terms = patching.direct_logit_attribution(cat, ids, direction)
        assert list(terms)[:2] == ["embedding", "L0H0"] and "L1 MLP" in terms and "final-norm bias" in terms
        assert sum(terms.values()) == pytest.approx(float(logits @ direction), abs=1e-4)
    seq = torch.tensor([0, 3, 5, 2, 3, 5])
    terms = patching.direct_logit_attribution(induction, seq, torch.eye(16)[2], position=4)
    with torch.no_grad():
        assert sum(terms.values()) == pytest.approx(float(induction(seq)[4, 2]), abs=1e-4)
    assert "L0 MLP" not in terms


def test_dla_refuses_a_post_ln_model(refused):
    model = small_model(norm="post")
    refused(lambda: patching.direct_logit_attribution(model, torch.tensor([1, 2]), torch.eye(11)[0]), "post-LN")


def test_dla_without_a_final_norm_sums_too():
    model = small_model(final_norm=False, norm="none")
    ids = torch.tensor([1, 2, 6])
    terms = patching.direct_logit_attribution(model, ids, torch.eye(11)[4])
    with torch.no_grad():
        assert sum(terms.values()) == pytest.approx(float(model(ids)[-1, 4]), abs=1e-4)


def test_dla_with_rmsnorm_divides_without_centring():
    model = small_model(norm_kind="rmsnorm", bias=False)
    ids = torch.tensor([1, 2, 6, 3])
    direction = torch.eye(11)[4] - torch.eye(11)[5]
    terms = patching.direct_logit_attribution(model, ids, direction)
    with torch.no_grad():
        assert sum(terms.values()) == pytest.approx(float(model(ids)[-1] @ direction), abs=1e-5)
    assert "final-norm bias" not in terms and not any(name.endswith("b_O") for name in terms)
    parts, h = patching.residual_parts(model, ids)
    centred = {name: p - p.mean() for name, p in parts.items()}
    wrong = patching.attribute(model, centred, direction, patching.final_norm_scale(model, h))
    assert abs(sum(wrong.values()) - sum(terms.values())) > 1e-3      # RMSNorm does not centre


def test_dla_parts_sum_to_the_logit_minus_the_bias_terms(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the dog was")
    direction = torch.eye(20)[cat_world.tokenizer.ids["small"]]
    terms = patching.direct_logit_attribution(cat, ids, direction)
    parts, h = patching.residual_parts(cat, ids)
    assert torch.allclose(sum(parts.values()), h, atol=1e-5)
    bias = sum(v for name, v in terms.items() if name.endswith(patching.BIAS_PARTS))
    with torch.no_grad():
        logit = float(cat(ids)[-1] @ direction)
        beta = float(cat.final_ln.bias @ (cat.E.T @ direction))
    assert terms["final-norm bias"] == pytest.approx(beta, abs=1e-6)
    assert sum(v for name, v in terms.items() if not name.endswith(patching.BIAS_PARTS)) == \
        pytest.approx(logit - bias, abs=1e-4)


def test_dla_scale_can_be_frozen_at_another_run(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the cat is")
    direction = torch.eye(20)[cat_world.tokenizer.ids["big"]]
    parts, h = patching.residual_parts(cat, ids)
    own = patching.direct_logit_attribution(cat, ids, direction)
    doubled = patching.direct_logit_attribution(cat, ids, direction, scale=2 * patching.final_norm_scale(cat, h))
    for name in own:
        if name != "final-norm bias":
            assert doubled[name] == pytest.approx(own[name] / 2, abs=1e-5)


def test_dla_on_the_real_model_sums_to_its_logit():
    from helpers.real import compute as real
    model, tok = real.load()
    ids = torch.tensor(tok.encode("The capital of France is"))
    with torch.no_grad():
        logits = model(ids)[-1]
    top = int(logits.argmax())
    direction = torch.zeros(model.cfg.vocab_size)
    direction[top] = 1.0
    terms = patching.direct_logit_attribution(model, ids, direction)
    assert len(terms) == 1 + 30 * (9 + 1)                 # embedding, 9 heads and an MLP per layer, no bias
    assert sum(terms.values()) == pytest.approx(float(logits[top]), abs=1e-3)


def test_value_bias_write_is_what_a_w_v_zeroed_head_writes(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the cat is")
    clone = compute.value_zeroed_copy(cat)
    writes = compute.value_bias_write(cat)
    with torch.no_grad():
        attn = patching.capture(clone, ids[None], ["L0.attn"])[1]["L0.attn"][0]
        expected = sum(writes[(0, h)] for h in range(2)) + cat.blocks[0].attn.b_O
    assert torch.allclose(attn, expected.expand_as(attn), atol=1e-5)
    assert min(float(v.norm()) for v in writes.values()) > 0


def test_lens_row_check_names_the_likely_slips(cat, cat_world):
    with torch.no_grad():
        trace = cat(cat_world.tokenizer.encode("<BOS> the dog sat on"), trace=True)
        right = cat.unembed(trace["L0.h"])
        assert checks.lens_row(right, trace, "L0.h", cat)
        feedback = lambda a: checks.lens_row.feedback(a, trace, "L0.h", cat)[0]
        assert "without the final LayerNorm" in feedback(trace["L0.h"] @ cat.E.T)
        assert "probabilities" in feedback(torch.softmax(right, -1))
        assert "L0.h_mid" in feedback(cat.unembed(trace["L0.h_mid"]))
        assert "L1.h" in feedback(trace["logits"])
        assert "shape" in feedback(right[:2])


def test_explorer_refuses_prompts_it_cannot_patch(cat, cat_world, refused):
    refused(lambda: explorer.explorer(cat, cat_world, prompts=("<BOS> the cat sat",)), "NOUN COPULA", "cat sat")


# ------------------------------------------------------------ task-matched references (issue 30)

def test_rule_ablation_with_the_task_reference_gives_the_measured_falls(cat, cat_world):
    base = compute.copula_figures(cat, cat_world)["p_class"]
    falls = {ref: [base - compute.rule_ablation(cat, cat_world, [p], "mean", ref)["p_class"] for p in HEADS]
             for ref in compute.REFERENCES}
    assert np.allclose(falls["copula"], [0.124, 0.166, 0.517, 0.144], atol=6e-4)
    assert np.allclose(falls["all"], [0.847, 0.125, 0.433, 0.797], atol=6e-4)
    assert base == pytest.approx(compute.cat_scores(cat, cat_world)["p_class"], abs=1e-6)


def test_rule_resample_uses_twenty_other_donors_and_reports_a_spread(cat, cat_world):
    ids = compute.copula_prompts(cat_world)[0]
    for donors in compute.donor_draws(8, 8, 20, seed=0):
        assert (donors != torch.arange(8)).all()
    r = compute.rule_ablation(cat, cat_world, [(1, 0)], "resample", "copula", draws=20)
    assert r["p_class_spread"] > 0.01 and 0 < r["p_class"] < 1
    again = compute.rule_ablation(cat, cat_world, [(1, 0)], "resample", "copula", draws=20)
    assert again == r                                      # seeded
    assert ids.shape == (8, 4)


def test_induction_resample_batches_the_draws_like_one_draw_at_a_time(induction):
    from helpers import worlds
    from helpers.heads import compute as heads_compute
    ids = worlds.repeated_tokens(12, 4, 16, seed=3)
    ref = worlds.repeated_tokens(12, 4, 16, seed=4)
    got = compute.induction_ablation(induction, ids, [(1, 0)], "resample", reference=ref, draws=3, seed=5)
    outs = patching.head_outputs(induction, ref[:, :-1])
    seconds = []
    for donors in compute.donor_draws(12, 12, 3, seed=5, avoid_self=False):
        source = {layer: x[donors] for layer, x in outs.items()}
        seconds.append(heads_compute.copy_losses(induction, ids, 4, replace=patching.ablation_replace(
            [(1, 0)], "resample", source=source))["second"])
    assert got["second"] == pytest.approx(float(np.mean(seconds)), abs=1e-5)
    assert got["second_spread"] == pytest.approx(float(np.std(seconds, ddof=1)), abs=1e-5)


def test_copula_figures_split_the_class_probability(cat, cat_world):
    r = compute.copula_figures(cat, cat_world)
    assert r["p_class"] <= r["p_adjective"] <= 1 and r["class_share"] == pytest.approx(1.0, abs=1e-3)


# ------------------------------------------------------------ both directions, per position, path, attribution

def test_noising_one_pair_is_one_minus_denoising_the_reverse_pair(cat, cat_world):
    tok, metric = cat_world.tokenizer, compute.logit_difference(cat_world)
    c, k = tok.encode("<BOS> the cat is"), tok.encode("<BOS> the mat is")
    for per_position in (False, True):
        noise = patching.patch_heads(cat, c, k, metric, direction="noise", per_position=per_position)
        denoise = patching.patch_heads(cat, k, c, metric, per_position=per_position)
        assert torch.allclose(noise, 1 - denoise, atol=1e-5)


def test_per_position_patching_is_zero_where_nothing_can_reach_the_answer(cat, cat_world, refused):
    tok, metric = cat_world.tokenizer, compute.logit_difference(cat_world)
    grid = patching.patch_heads(cat, tok.encode("<BOS> the cat is"), tok.encode("<BOS> the mat is"), metric,
                                per_position=True)
    assert grid.shape == (2, 2, 4)
    assert grid[:, :, :2].abs().max() < 1e-5              # <BOS> and "the" are the same in both prompts
    assert grid[1, :, :3].abs().max() < 1e-5              # the last layer acts on the answer at the last position only
    refused(lambda: patching.patch_heads(cat, tok.encode("<BOS> the cat is"), tok.encode("<BOS> the mat is"),
                                         metric, direction="sideways"), "denoise", "sideways")


def test_path_patching_through_values_cannot_move_attention(induction, refused):
    clean, corrupt = compute.induction_pairs(6, 4, 16, seed=1)
    query = torch.arange(5, 9)
    look = lambda out: out["L1.weights"][:, 0, query, query - 3].mean(-1)
    got = patching.path_patch(induction, clean, corrupt, look, (0, 1), [(1, 0)], watch=("L1.weights",))
    assert got[(1, 0), "v"] == pytest.approx(0.0, abs=1e-6)
    assert got[(1, 0), "k"] > 0.3
    refused(lambda: patching.path_patch(induction, clean, corrupt, look, (1, 0), [(1, 1)]), "after the sender")
    refused(lambda: patching.path_patch(induction, clean, corrupt, look, (0, 0), [(1, 1)], parts=("o",)), "'o'")


def test_composition_scores_follow_transformerlens_definitions(induction):
    got = patching.composition_scores(induction, (0, 1), (1, 0), fold_ln=False)
    d_k, a0, a1 = induction.cfg.d_k, induction.blocks[0].attn, induction.blocks[1].attn
    with torch.no_grad():
        ov1 = a0.W_V[:, d_k:] @ a0.W_O[d_k:]
        qk2, ov2 = a1.W_Q[:, :d_k] @ a1.W_K[:, :d_k].T, a1.W_V[:, :d_k] @ a1.W_O[:d_k]
        score = lambda a, b: float(torch.linalg.norm(a @ b) / torch.linalg.norm(a) / torch.linalg.norm(b))
        assert got == pytest.approx(dict(q=score(ov1, qk2), k=score(ov1, qk2.T), v=score(ov1, ov2)), abs=1e-6)
    mean, sd = patching.composition_baseline(64, 32, draws=50, seed=0)
    assert 0.1 < mean < 0.15 and sd < 0.02


def test_attribution_patching_is_exact_where_the_metric_is_linear_in_the_heads():
    model = Transformer(Config(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=0, norm="none",
                               final_norm=False))
    model.reset_parameters(seed=2)
    clean, corrupt = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[1, 5, 3, 6]])
    metric = lambda out: out["logits"][:, -1, 7] - out["logits"][:, -1, 2]
    exact = patching.patch_heads(model, clean, corrupt, metric, per_position=True)
    estimate = patching.attribution_patch(model, clean, corrupt, metric)
    assert torch.allclose(exact, estimate, atol=1e-4)


# ------------------------------------------------------------ the learner's methods: exercises 1 and 2

def _task(cat, cat_world):
    ids, cls, _ = compute.copula_prompts(cat_world)
    return ids, cls, compute.rule_reference(cat_world, "all")


def drop_function(reference=None, per_position=True, kind="mean", what="drop", every_head=False, head_shift=0):
    """A mean_ablation_drop, right by default, with one known mistake when asked."""
    def drop(model, head, task_ids, class_ids, reference_ids):
        layer, h = head[0], (head[1] + head_shift) % 2
        ref = reference_ids if reference is None else reference
        seen = {}
        with torch.no_grad():
            model(ref, replace={f"L{layer}.head_out": lambda x: seen.setdefault("x", x)})
            mean = seen["x"].mean(0) if per_position else seen["x"].mean((0, 2), keepdim=True)[0]

            def put(x):
                x = x.clone()
                for g in (range(2) if every_head else [h]):
                    x[:, g] = 0.0 if kind == "zero" else mean[g]
                return x

            def p(**kw):
                return torch.softmax(model(task_ids, **kw)[:, -1], -1).gather(-1, class_ids).sum(-1).mean()
            before, after = p(), p(replace={f"L{layer}.head_out": put})
        return float({"drop": before - after, "after": after, "sign": after - before}[what])
    return drop


def test_mean_ablation_drop_check_passes_the_right_function_and_waits_for_the_skeleton(cat, cat_world):
    ids, cls, off = _task(cat, cat_world)
    assert checks.mean_ablation_drop(drop_function(), cat, ids, cls, ids, off)

    def skeleton(model, head, task_ids, class_ids, reference_ids):
        drop = None
        return drop
    assert "not answered yet" in checks.mean_ablation_drop.feedback(skeleton, cat, ids, cls, ids, off)[0]


@pytest.mark.parametrize("mistake, words", [
    (dict(reference="off"), "wrong prompts"),
    (dict(per_position=False), "over the positions too"),
    (dict(kind="zero"), "zero ablation"),
    (dict(what="after"), "return the fall"),
    (dict(what="sign"), "sign is turned round"),
    (dict(every_head=True), "every head of layer"),
    (dict(head_shift=1), "that is the fall for L1H1"),
])
def test_mean_ablation_drop_check_names_each_mistake(cat, cat_world, mistake, words):
    ids, cls, off = _task(cat, cat_world)
    if mistake.get("reference") == "off":
        mistake = dict(reference=off)
    said = checks.mean_ablation_drop.feedback(drop_function(**mistake), cat, ids, cls, ids, off)
    assert said and words in said[0], said


def test_mean_ablation_drop_check_names_a_function_that_ignores_its_reference(cat, cat_world):
    """The mean taken over task_ids whatever reference_ids says passes the task-matched call; the
    second call, with the 64 sentence types as the reference, names it (L1H0: 0.433, not 0.517)."""
    ids, cls, off = _task(cat, cat_world)
    said = checks.mean_ablation_drop.feedback(drop_function(reference=ids), cat, ids, cls, ids, off)
    assert said and "ignores reference_ids" in said[0], said


def grid_function(mode="right"):
    """A patch_grid, right by default, with one known mistake when asked."""
    def grid(model, clean_ids, corrupt_ids, metric):
        L, H, T = model.cfg.n_layers, model.cfg.n_heads, len(clean_ids)
        source, base = ((corrupt_ids, clean_ids) if mode == "noise" else (corrupt_ids, corrupt_ids)
                        if mode == "source" else (clean_ids, corrupt_ids))
        out = torch.zeros(L, H, T)
        with torch.no_grad():
            value = lambda ids, **kw: float(metric({"logits": model(ids[None], **kw)})[0])
            clean_v, corrupt_v = value(clean_ids), value(corrupt_ids)
            trace = model(source, trace=True)
            for layer in range(L):
                for h in range(H):
                    for t in range(T):
                        u = t - 1 if mode == "behind" else t + 1 if mode == "ahead" else t
                        if not 0 <= u < T:
                            continue

                        def put(x, layer=layer, h=h, u=u):
                            x = x.clone()
                            if mode == "whole":
                                x[:, h] = trace[f"L{layer}.head_out"][h]
                            else:
                                x[:, h, u] = trace[f"L{layer}.head_out"][h, u]
                            return x
                        patched = value(base, replace={f"L{layer}.head_out": put})
                        out[layer, h, t] = {"raw": patched, "change": patched - corrupt_v,
                                            "flipped": (patched - corrupt_v) / (corrupt_v - clean_v)}.get(
                            mode, (patched - corrupt_v) / (clean_v - corrupt_v))
        return 1 - out if mode == "missing" else out
    return grid


def test_patch_grid_check_passes_the_right_loop_and_waits_for_the_skeleton(cat, cat_world):
    tok, metric = cat_world.tokenizer, compute.logit_difference(cat_world)
    args = (cat, tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was"), metric)
    assert checks.patch_grid(grid_function(), *args)
    assert "not answered yet" in checks.patch_grid.feedback(lambda *a: None, *args)[0]


@pytest.mark.parametrize("mode, words", [("raw", "raw metric values"), ("change", "divide by the whole gap"),
                                         ("missing", "still missing"), ("noise", "other way"),
                                         ("whole", "every position at once"), ("behind", "one position off"),
                                         ("ahead", "not t + 1"), ("flipped", "denominator is flipped"),
                                         ("source", "from the clean run")])
def test_patch_grid_check_names_each_mistake(cat, cat_world, mode, words):
    tok, metric = cat_world.tokenizer, compute.logit_difference(cat_world)
    args = (cat, tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was"), metric)
    said = checks.patch_grid.feedback(grid_function(mode), *args)
    assert said and words in said[0], said


# ------------------------------------------------------------ the explorer on any model (anymodel.md)

class CharTokenizer:
    """65 characters, one id each (the capstone's kind of tokenizer)."""

    def __init__(self):
        self.vocab = list("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
        self.index = {c: i for i, c in enumerate(self.vocab)}

    def encode(self, text):
        return torch.tensor([self.index[c] for c in text])

    def decode(self, ids):
        return [self.vocab[int(i)] for i in ids]


def test_explorer_drives_any_transformer_with_a_character_tokenizer(refused):
    model = Transformer(Config(vocab_size=65, d_model=32, n_heads=4, n_layers=2, d_ff=64, n_max=128))
    model.reset_parameters(seed=0)
    tok = CharTokenizer()
    ex = explorer.explorer(model, tok, ["ROMEO: what light", "JULIET: O Romeo, O", "ROMEO:"])
    first = ex.picture()
    ex.controls["kind"].value = "resample"
    ex.controls["L1H2"].value = True
    assert ex.picture() != first
    lab = compute.AnyLab(model, tok, ["ROMEO: what light", "ROMEO:"])
    view = lab.view("ROMEO:", [(0, 1)], "resample")
    assert view["lens"].shape == (5, 6) and float(view["probs"].sum()) == pytest.approx(1.0, abs=1e-5)
    none = lab.view("ROMEO: what light", [], "zero")
    assert torch.allclose(none["lens"][-1], torch.softmax(model(tok.encode("ROMEO: what light")), -1).max(-1).values,
                          atol=1e-5)                      # the last point's lens is the model's own prediction
    refused(lambda: explorer.explorer(model, tok, None), "prompts")
    learned = Transformer(Config(vocab_size=65, d_model=32, n_heads=4, n_layers=2, d_ff=64, n_max=128,
                                 positions="learned"))   # (its positions stop at n_max; sinusoidal ones go on)
    refused(lambda: compute.AnyLab(learned, tok, ["x" * 200]), "at most 128")
    refused(lambda: compute.AnyLab(Transformer(Config(vocab_size=20, d_model=8, n_heads=2, n_layers=1, d_ff=0)),
                                   tok, ["ROMEO:"]), "vocabulary of 20")


# ------------------------------------------------------------ exercise 3: direct logit attribution, the scale frozen

def attribution_function(mistake=None):
    """A direct_attribution, right by default, with one known mistake when asked."""
    def attribution(model, parts, direction, scale):
        ln = model.final_ln
        with torch.no_grad():
            u = model.E.T @ direction
            s = patching.final_norm_scale(model, sum(parts.values())) if mistake == "recomputed" else \
                scale ** 2 if mistake == "variance" else scale
            gamma = torch.ones_like(ln.weight) if mistake == "no gamma" else ln.weight
            plus = ln.bias if mistake == "beta everywhere" else 0.0
            out = {name: float((((p if mistake == "uncentred" else p - p.mean()) / s * gamma) + plus) @ u)
                   for name, p in parts.items()}
            if mistake != "no beta":
                out["final-norm bias"] = float(ln.bias @ u)
        return out
    return attribution


def _attribution_case(cat, cat_world):
    tok = cat_world.tokenizer
    _, h = patching.residual_parts(cat, tok.encode("<BOS> the cat is"))
    parts, _ = patching.residual_parts(cat, tok.encode("<BOS> the mat is"))
    direction = torch.zeros(20)
    direction[[tok.ids["big"], tok.ids["small"]]], direction[[tok.ids["red"], tok.ids["blue"]]] = 0.5, -0.5
    return parts, direction, patching.final_norm_scale(cat, h)


def test_direct_attribution_check_passes_the_right_function_and_waits_for_the_skeleton(cat, cat_world):
    args = (cat, *_attribution_case(cat, cat_world))
    assert checks.direct_attribution(attribution_function(), *args)
    assert "not answered yet" in checks.direct_attribution.feedback(lambda *a: None, *args)[0]


@pytest.mark.parametrize("mistake, words", [("recomputed", "recomputed from these parts"),
                                            ("uncentred", "not centred"), ("no gamma", "γ is missing"),
                                            ("variance", "square root"), ("beta everywhere", "every part"),
                                            ("no beta", "β is missing")])
def test_direct_attribution_check_names_each_mistake(cat, cat_world, mistake, words):
    said = checks.direct_attribution.feedback(attribution_function(mistake), cat, *_attribution_case(cat, cat_world))
    assert said and words in said[0], said


def test_direct_attribution_check_names_centring_under_rmsnorm():
    model = small_model(norm_kind="rmsnorm", bias=False)
    _, h = patching.residual_parts(model, torch.tensor([1, 2, 3]))
    parts, _ = patching.residual_parts(model, torch.tensor([1, 5, 3]))
    direction = torch.eye(11)[4]
    scale = patching.final_norm_scale(model, h)

    def centring(model, parts, direction, scale):
        with torch.no_grad():
            u = model.E.T @ direction
            return {name: float(((p - p.mean()) / scale * model.final_ln.weight) @ u) for name, p in parts.items()}
    said = checks.direct_attribution.feedback(centring, model, parts, direction, scale)
    assert said and "RMSNorm does not subtract" in said[0], said

    def right(model, parts, direction, scale):   # an RMSNorm only divides and multiplies: no centring, no β
        with torch.no_grad():
            u = model.E.T @ direction
            return {name: float((p / scale * model.final_ln.weight) @ u) for name, p in parts.items()}
    assert checks.direct_attribution.feedback(right, model, parts, direction, scale) == []


def test_the_references_refuse_in_one_sentence(cat, cat_world, induction, refused):
    from helpers import worlds
    ids, other = worlds.repeated_tokens(4, 4, 16, seed=0), worlds.repeated_tokens(4, 5, 16, seed=0)
    refused(lambda: compute.induction_ablation(induction, ids, [(1, 0)], "mean", reference=other), "length 9", "11")
    refused(lambda: compute.rule_reference(cat_world, "corpus"), "reference", "'corpus'")


def test_direct_effects_of_a_batch_add_up_to_the_logits_and_match_one_sequence(cat, cat_world, induction):
    from helpers import worlds
    ids = worlds.repeated_tokens(5, 8, 16, seed=1)
    got = patching.direct_effects(induction, ids[:, :-1], ids[:, 1:])
    with torch.no_grad():
        logits = induction(ids[:, :-1]).gather(-1, ids[:, 1:, None])[..., 0]
    assert torch.allclose(sum(got["terms"].values()), logits, atol=1e-4)
    one = patching.direct_logit_attribution(induction, ids[2, :-1], torch.eye(16)[ids[2, 12]], position=11)
    assert list(one) == list(got["terms"])
    assert [v for v in one.values()] == pytest.approx([float(t[2, 11]) for t in got["terms"].values()], abs=1e-5)
    assert torch.equal(got["heads"][:, 1, 0], got["terms"]["L1H0"])
    cat_ids = torch.stack([cat_world.tokenizer.encode(p) for p in ("<BOS> the cat is", "<BOS> the mat is")])
    terms = patching.direct_effects(cat, cat_ids, cat_ids.roll(-1, 1))["terms"]      # LayerNorm, biases, MLPs
    with torch.no_grad():
        logits = cat(cat_ids).gather(-1, cat_ids.roll(-1, 1)[..., None])[..., 0]
    assert "L1 MLP" in terms and "final-norm bias" in terms
    assert torch.allclose(sum(terms.values()), logits, atol=1e-4)


def test_direct_effects_refuse_mismatched_targets(induction, refused):
    ids = torch.zeros(2, 5, dtype=torch.long)
    refused(lambda: patching.direct_effects(induction, ids, ids[:, :4]), "one shape", "(2, 4)")


def test_no_backup_in_the_induction_model_the_other_head_writes_the_same(induction):
    from helpers import worlds
    ids, ref = worlds.repeated_tokens(30, 8, 16, seed=2024), worlds.repeated_tokens(30, 8, 16, seed=11)
    none = compute.induction_direct_effects(induction, ids)
    off = compute.induction_direct_effects(induction, ids, [(1, 0)], ref)
    assert torch.equal(off["outputs"][1][:, 1], none["outputs"][1][:, 1])       # same layer: it cannot see L1H0
    assert not torch.equal(off["outputs"][1][:, 0], none["outputs"][1][:, 0])
    assert none["direct"].shape == (2, 2) and none["direct"][1, 0] > 1 and none["direct"][1, 1] > 1


# ------------------------------------------------------------ the second reading's slips of exercises 1-3

def slipped_drop(mistake):
    """A mean_ablation_drop with one more known mistake: the mean over the heads too, the larger
    class probability instead of their sum, or the softmax over the positions."""
    def drop(model, head, task_ids, class_ids, reference_ids):
        layer, h = head
        seen = {}
        with torch.no_grad():
            model(reference_ids, replace={f"L{layer}.head_out": lambda x: seen.setdefault("x", x)})
            mean = seen["x"].mean((0, 1)) if mistake == "heads" else seen["x"][:, h].mean(0)

            def put(x):
                x = x.clone()
                x[:, h] = mean
                return x

            def p(**kw):
                logits = model(task_ids, **kw)
                probs = torch.softmax(logits, 1)[:, -1] if mistake == "positions" else torch.softmax(logits[:, -1], -1)
                chosen = probs.gather(-1, class_ids)
                return (chosen.max(-1).values if mistake == "max" else chosen.sum(-1)).mean()
            return float(p() - p(replace={f"L{layer}.head_out": put}))
    return drop


@pytest.mark.parametrize("mistake, words", [("heads", "over the heads too"), ("max", "larger of the two"),
                                            ("positions", "softmax runs over the positions")])
def test_mean_ablation_drop_check_names_the_second_readings_mistakes(cat, cat_world, mistake, words):
    ids, cls, off = _task(cat, cat_world)
    said = checks.mean_ablation_drop.feedback(slipped_drop(mistake), cat, ids, cls, ids, off)
    assert said and words in said[0], said


@pytest.mark.parametrize("mistake, words", [
    # ARENA's noising metric, (patched - clean) / (clean - corrupted), is the right grid minus 1
    (lambda grid: grid - 1, "numerator is patched - clean"),
    (lambda grid: grid.transpose(0, 1).contiguous(), "layers and heads are swapped"),
])
def test_patch_grid_check_names_the_second_readings_mistakes(cat, cat_world, mistake, words):
    tok, metric = cat_world.tokenizer, compute.logit_difference(cat_world)
    args = (cat, tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was"), metric)
    said = checks.patch_grid.feedback(lambda *a: mistake(grid_function()(*a)), *args)
    assert said and words in said[0], said


def slipped_attribution(mistake):
    """A direct_attribution with one more known mistake: each part through its own LayerNorm (its own
    scale, β added to each), each part divided by its own scale, or β divided by the frozen scale."""
    def attribution(model, parts, direction, scale):
        ln = model.final_ln
        with torch.no_grad():
            u = model.E.T @ direction
            if mistake == "own norm":
                out = {name: float(ln(p) @ u) for name, p in parts.items()}
            else:
                out = {name: float(((p - p.mean()) / (p.var(unbiased=False) + ln.eps).sqrt()
                                    if mistake == "own scale" else (p - p.mean()) / scale) * ln.weight @ u)
                       for name, p in parts.items()}
            out["final-norm bias"] = float((ln.bias / scale if mistake == "beta scaled" else ln.bias) @ u)
        return out
    return attribution


@pytest.mark.parametrize("mistake, words", [("own norm", "its own LayerNorm"), ("own scale", "its own scale"),
                                            ("beta scaled", "β was divided by the scale")])
def test_direct_attribution_check_names_the_second_readings_mistakes(cat, cat_world, mistake, words):
    said = checks.direct_attribution.feedback(slipped_attribution(mistake), cat, *_attribution_case(cat, cat_world))
    assert said and words in said[0], said


# ------------------------------------------------------------ issue 31: patching refuses what it cannot answer

def tiny_model():
    return Transformer(Config(vocab_size=10, d_model=8, n_heads=2, n_layers=2, d_ff=8, n_max=16), seed=0)


def gap(out):
    return out["logits"][:, -1, 5] - out["logits"][:, -1, 6]


CLEAN, CORRUPT = torch.tensor([1, 2, 3]), torch.tensor([1, 4, 3])


@pytest.mark.parametrize("call", [
    lambda m: patching.patch_heads(m, CLEAN, CLEAN, gap),
    lambda m: patching.patch_residual(m, CLEAN, CLEAN, gap),
    lambda m: patching.path_patch(m, CLEAN, CLEAN, gap, (0, 0), [(1, 0)]),
    lambda m: patching.attribution_patch(m, CLEAN, CLEAN, gap),
])
def test_identical_clean_and_corrupted_prompts_are_refused_with_the_reason(call):
    with pytest.raises(CourseInputError, match="should differ .* the normalised metric divides by it"):
        call(tiny_model())


def test_normalised_refuses_a_zero_gap_and_a_metric_that_gives_nan():
    with pytest.raises(CourseInputError, match=r"divides by \(clean - corrupted\).*both give 2"):
        patching.normalised(1.0, 2.0, 2.0)
    with pytest.raises(CourseInputError, match="finite numbers, but returned NaN or infinity in 4 of its 4 rows"):
        patching.patch_heads(tiny_model(), CLEAN, CORRUPT, lambda out: gap(out) * float("nan"))


@pytest.mark.parametrize("token_id", [-2, True, 2.0, 10, np.bool_(False)])
def test_the_lens_refuses_a_token_id_outside_the_vocabulary(token_id):
    with pytest.raises(CourseInputError, match=r"token_id should be a token id of this model, a whole number from 0 to 9"):
        patching.token_lens(tiny_model(), CLEAN, token_id)


def test_token_lens_reads_the_logit_lens_at_the_last_position():
    model = tiny_model()
    names, lens = patching.logit_lens(model, CLEAN, ["h0", "L0.h", "L1.h"])
    got = patching.token_lens(model, CLEAN, 4)
    probs = torch.softmax(lens[:, -1], -1)
    assert got["layers"] == [-1, 0, 1] and got["top"] == probs.argmax(-1).tolist()
    assert np.allclose(got["p"], probs[:, 4].tolist(), atol=1e-6)
    assert got["rank"] == (lens[:, -1] > lens[:, -1, 4:5]).sum(-1).tolist()


@pytest.mark.parametrize("call, words", [
    (lambda m: patching.head_circuits(m, 99, 0), "from 0 to 1"),
    (lambda m: patching.residual_parts(m, CLEAN, 99), "from -3 to 2"),
    (lambda m: m(CLEAN, replace=patching.ablation_replace([(0, 9)], "zero")), "heads 0..1, but got head 9"),
    (lambda m: patching.path_patch(m, CLEAN, CORRUPT, gap, (0, 9), [(1, 0)]), "the sender's head"),
    (lambda m: patching.logit_lens(m, torch.stack([CLEAN, CORRUPT])), "one sequence"),
    (lambda m: patching.patch_residual(m, CLEAN, CORRUPT, gap, ["L0.weights"]), "has a heads axis"),
    (lambda m: patching.capture(m, CLEAN, ["h0"], stop_after="L9.h"), "stop_after should be one of"),
    (lambda m: patching.composition_baseline(16, 8, draws=10**9), "draws"),
])
def test_out_of_range_is_refused_never_clamped(call, words):
    with pytest.raises(CourseInputError, match=words):
        call(tiny_model())


def test_a_batched_pass_above_the_memory_limit_is_refused_before_any_work():
    wide = Transformer(Config(vocab_size=50_000, d_model=8, n_heads=2, n_layers=2, d_ff=8, n_max=64), seed=0)
    calls = []
    metric = lambda out: calls.append(1) or out["logits"][:, -1, 0]   # noqa: E731
    with pytest.raises(CourseInputError, match=r"patch_heads should need at most 0\.5 GiB .* rows of 60 tokens"):
        patching.patch_heads(wide, torch.arange(60), torch.arange(1, 61), metric, per_position=True)
    assert calls == []


def state_of(model):
    return (model.training, [(n, p.detach().clone(), p.grad) for n, p in model.named_parameters()])


def same_state(a, b):
    return a[0] == b[0] and all(n == m and torch.equal(p, q) and g is None and h is None
                                for (n, p, g), (m, q, h) in zip(a[1], b[1]))


@pytest.mark.parametrize("call", [
    lambda m: patching.patch_heads(m, CLEAN, CORRUPT, lambda out: 1 / 0),
    lambda m: patching.patch_residual(m, CLEAN, CORRUPT, lambda out: out["logits"]),
    lambda m: patching.path_patch(m, CLEAN, CORRUPT, lambda out: None, (0, 0), [(1, 0)]),
    lambda m: patching.attribution_patch(m, CLEAN, CORRUPT, lambda out: gap(out) * float("inf")),
    lambda m: patching.direct_effects(m, CLEAN[None], CORRUPT[None], replace={"L0.h": lambda x: x[:, :1]}),
    lambda m: m(CLEAN, replace=patching.ablation_replace([(0, 1)], "mean", {0: torch.zeros(2, 3, 5)})),
])
def test_a_failed_call_leaves_the_model_as_a_fresh_one(call):
    model, fresh = tiny_model(), tiny_model()
    with pytest.raises(Exception):
        call(model)
    assert same_state(state_of(model), state_of(fresh))
    with torch.no_grad():   # and the next valid call answers as the fresh model's
        assert torch.equal(patching.patch_heads(model, CLEAN, CORRUPT, gap), patching.patch_heads(fresh, CLEAN, CORRUPT, gap))


def test_a_failed_cat_lab_view_leaves_the_lab_as_a_fresh_one(cat, cat_world):
    lab, fresh = compute.CatLab(cat, cat_world, draws=2), compute.CatLab(cat, cat_world, draws=2)
    prompt = lab.prompts[0]
    for bad in [((9, 0),), "L0H0"]:
        with pytest.raises(CourseInputError, match="ablate_heads|head"):
            lab.view(prompt, bad, "zero")
    with pytest.raises(CourseInputError, match="copula prompts"):
        lab.view("the cat", [], "zero")
    assert lab.patches == fresh.patches == {}
    got, want = lab.view(prompt, [(0, 1)], "zero"), fresh.view(prompt, [(0, 1)], "zero")
    assert torch.equal(got["probs"], want["probs"]) and torch.equal(got["patch"], want["patch"])


# ---- issue 31 (red team): the checks refuse their own bad arguments with one sentence

@pytest.mark.parametrize("args", [(None, np.ones((4, 5)), 2), (np.ones((3, 4)), [[1, 2], [3]], 2),
                                  (np.ones((3, 4)), np.ones((4, 5)), None), (np.ones((3, 4)), np.ones((4, 5)), 3),
                                  (np.ones((3, 4)), np.ones((6, 5)), 2)])
def test_the_write_back_check_refuses_its_own_bad_arguments(args):
    said = " ".join(checks.write_back.feedback(np.ones((3, 5)), *args))
    assert said.startswith("the check cannot use what the check cell gives it"), said


@pytest.mark.parametrize("reference", [None, [[1, 2], [3]], np.ones(3), "logits"])
def test_the_method2_check_refuses_a_bad_reference(reference):
    said = " ".join(checks.method2_logits.feedback(np.ones((3, 4)), reference))
    assert said.startswith("the check cannot use what the check cell gives it"), said


def test_the_method_checks_refuse_bad_check_cell_arguments_before_calling_the_answer(cat, cat_world):
    tok = cat_world.tokenizer
    cannot = "the check cannot use what the check cell gives it"
    with torch.no_grad():
        trace = cat(tok.encode("<BOS> the dog sat on"), trace=True)
    right = cat.unembed(trace["L0.h"]).detach()
    for args in ((None, "L0.h", cat), (trace, "L9.h", cat), (trace, "L0.h", None)):
        assert checks.lens_row.feedback(right, *args)[0].startswith(cannot)
    ids, cls, off = _task(cat, cat_world)
    called = []
    for args in ((None, ids, cls, ids, off), (cat, ids[0], cls, ids, off), (cat, ids, [1, 2], ids, off),
                 (cat, ids, cls[:3], ids, off), (cat, ids, cls, "x", off), (cat, ids, cls, ids, None)):
        said = checks.mean_ablation_drop.feedback(lambda *a: called.append(a), *args)
        assert said[0].startswith(cannot), said
    clean, corrupt, metric = tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was"), \
        compute.logit_difference(cat_world)
    for args in ((None, clean, corrupt, metric), (cat, clean[None], corrupt[None], metric), (cat, clean, clean, metric),
                 (cat, clean, corrupt, None), (cat, 3, corrupt, metric)):
        assert checks.patch_grid.feedback(lambda *a: called.append(a), *args)[0].startswith(cannot)
    parts, direction, scale = _attribution_case(cat, cat_world)
    for args in ((None, parts, direction, scale), (cat, None, direction, scale), (cat, parts, None, scale),
                 (cat, parts, direction, -1.0), (cat, parts, direction, "x")):
        assert checks.direct_attribution.feedback(lambda *a: called.append(a), *args)[0].startswith(cannot)
    assert not called                       # the learner's function never ran on a bad argument


def test_mean_ablation_drop_check_leaves_the_model_as_it_was_whatever_the_function_does(cat, cat_world):
    """A function that returns the right fall and then zeroes a weight of the course's model: the
    check puts the weight back before it computes its own answer (red team round 3), so the right
    value passes and the model is as it was."""
    ids, cls, off = _task(cat, cat_world)
    before = {name: t.clone() for name, t in cat.state_dict().items()}
    right = drop_function()

    def meddles(model, head, *rest):
        value = right(model, head, *rest)
        model.blocks[1].attn.W_O.data.zero_()
        return value
    assert checks.mean_ablation_drop.feedback(meddles, cat, ids, cls, ids, off) == []
    assert all(torch.equal(t, before[name]) for name, t in cat.state_dict().items())


# ------------------------------------------------------------ issue 30 review: the 8 matched pairs, direct paths

def test_class_pairs_are_the_eight_matched_pairs_differing_in_the_noun_alone(cat_world):
    from helpers import worlds
    clean, corrupt, labels = compute.class_pairs(cat_world)
    tok = cat_world.tokenizer
    assert clean.shape == corrupt.shape == (8, 4) and len(set(labels)) == 8
    assert torch.equal(clean[0], tok.encode("<BOS> the cat is")) and torch.equal(corrupt[0], tok.encode("<BOS> the mat is"))
    assert ((clean != corrupt).sum(1) == 1).all() and (clean[:, 2] != corrupt[:, 2]).all()
    assert {tok.vocab[int(i)] for i in clean[:, 2]} == set(worlds.ANIMALS)
    assert {tok.vocab[int(i)] for i in corrupt[:, 2]} == set(worlds.SURFACES)
    assert len({(int(a), int(b), int(c)) for a, b, c in zip(clean[:, 2], corrupt[:, 2], clean[:, 3])}) == 8


def test_per_pair_normalises_each_pair_by_its_own_runs(cat, cat_world):
    clean, corrupt, _ = compute.class_pairs(cat_world)
    metric = compute.logit_difference(cat_world)
    each = compute.per_pair(patching.patch_heads, cat, clean[:3], corrupt[:3], metric, direction="noise")
    assert each.shape == (3, 2, 2)
    for i in range(3):
        assert torch.allclose(each[i], patching.patch_heads(cat, clean[i], corrupt[i], metric, direction="noise"))
    paths = compute.per_pair(patching.path_patch, cat, clean[:2], corrupt[:2], metric, (0, 1), [(1, 0)])
    assert set(paths) == {((1, 0), p) for p in "qkv"} and paths[(1, 0), "v"].shape == (2,)
    assert abs(float(paths[(1, 0), "v"][1]) - patching.path_patch(cat, clean[1], corrupt[1], metric, (0, 1), [(1, 0)])[(1, 0), "v"]) < 1e-6


def test_per_pair_refuses_pairs_of_two_shapes(cat, cat_world, refused):
    clean, corrupt, _ = compute.class_pairs(cat_world)
    metric = compute.logit_difference(cat_world)
    refused(lambda: compute.per_pair(patching.patch_heads, cat, clean[:3], corrupt[:2], metric), "one shape")
    refused(lambda: compute.per_pair("patch_heads", cat, clean, corrupt, metric), "patching function")


def test_path_patch_with_the_mlp_frozen_is_the_direct_path(cat, cat_world):
    """Recomputed by hand: the sender's clean output in, layer 0's MLP held at the corrupted run,
    L1H0's value recorded, then put alone into the corrupted run."""
    clean, corrupt, _ = compute.class_pairs(cat_world)
    clean, corrupt = clean[0], corrupt[0]
    metric = compute.logit_difference(cat_world)
    d_k = cat.cfg.d_k
    with torch.no_grad():
        c, k = cat(clean, trace=True), cat(corrupt, trace=True)
        value = lambda **kw: float(metric({"logits": cat(corrupt[None], **kw)})[0])
        ends = value(), float(metric({"logits": cat(clean[None])})[0])
        seen = {}

        def sender(x):
            x = x.clone()
            x[:, 1] = c["L0.head_out"][1]
            return x
        cat(corrupt[None], replace={"L0.head_out": sender, "L0.mlp": lambda x: k["L0.mlp"].reshape(x.shape),
                                    "L1.v": lambda x: seen.setdefault("v", x)})

        def put(x):
            x = x.clone()
            x[..., :d_k] = seen["v"][..., :d_k]
            return x
        by_hand = (value(replace={"L1.v": put}) - ends[0]) / (ends[1] - ends[0])
    got = patching.path_patch(cat, clean, corrupt, metric, (0, 1), [(1, 0)], freeze=["L0.mlp"])
    recomputed = patching.path_patch(cat, clean, corrupt, metric, (0, 1), [(1, 0)])
    assert abs(got[(1, 0), "v"] - by_hand) < 1e-5
    assert abs(recomputed[(1, 0), "v"] - got[(1, 0), "v"]) > 0.1        # the MLP route is there to cut


@pytest.mark.parametrize("freeze, words", [(["L1.mlp"], "before the receivers' layer"), (["L0.h"], "MLP outputs"),
                                           ("L0.mlp", "list of trace names")])
def test_path_patch_refuses_a_freeze_that_is_not_an_earlier_mlp(cat, cat_world, refused, freeze, words):
    clean, corrupt, _ = compute.class_pairs(cat_world)
    metric = compute.logit_difference(cat_world)
    refused(lambda: patching.path_patch(cat, clean[0], corrupt[0], metric, (0, 1), [(1, 0)], freeze=freeze), words)


def _lens_case(cat, cat_world):
    sentence = cat_world.tokenizer.encode("<BOS> the dog sat on the red mat")
    with torch.no_grad():
        trace = cat(sentence[:-1], trace=True)
    return trace, patching.residual_names(cat), sentence[1:]


def _lens(mistake=None):
    def lens(model, trace, points, targets):
        with torch.no_grad():
            read = (lambda h: h @ model.E.T) if mistake == "no norm" else model.unembed
            logits = torch.stack([read(trace[p]) for p in (points[::-1] if mistake == "reversed" else points)])
            if mistake == "probs":
                logits = torch.softmax(logits, -1)
            goal = targets.roll(1) if mistake == "shifted" else targets
            at = logits.gather(-1, goal.expand(len(points), -1)[..., None])
            ranks = (logits < at).sum(-1) if mistake == "below" else (logits > at).sum(-1)
            if mistake == "from 1":
                ranks = ranks + 1
            if mistake == "argmax":
                ranks = logits.argmax(-1)
        return logits, ranks
    return lens


@pytest.mark.parametrize("mistake, words", [
    ("no norm", "without the final LayerNorm"), ("probs", "probabilities"), ("reversed", "reverse order"),
    ("from 1", "count from 1"), ("below", "below the target"), ("argmax", "argmax"), ("shifted", "one position off")])
def test_lens_ranks_check_names_the_likely_mistakes(cat, cat_world, mistake, words):
    args = _lens_case(cat, cat_world)
    assert checks.lens_ranks(_lens(), cat, *args)
    said = checks.lens_ranks.feedback(_lens(mistake), cat, *args)
    assert said and words in said[0], said


def test_lens_ranks_check_refuses_bad_check_cell_arguments_before_calling_the_answer(cat, cat_world):
    trace, points, targets = _lens_case(cat, cat_world)
    called = []
    cannot = "the check cannot use what the check cell gives it"
    for args in ((None, trace, points, targets), (cat, None, points, targets), (cat, trace, [], targets),
                 (cat, trace, ["L9.h"], targets), (cat, trace, points, targets[:3]), (cat, trace, points, targets + 100)):
        said = checks.lens_ranks.feedback(lambda *a: called.append(a), *args)
        assert said[0].startswith(cannot), said
    assert not called


def test_class_pairs_refuses_a_world_without_the_cat_worlds_words(refused):
    from helpers import worlds
    refused(lambda: compute.class_pairs(worlds.dragon_world()), "the cat world", "dragon")
    refused(lambda: compute.class_pairs(None), "the cat world", "None")


@pytest.mark.parametrize("answer, words", [(lambda *a: 3, "two things"), (lambda *a: (None, None), "not answered yet"),
                                           (lambda *a: (None, torch.zeros(5, 7)), "the logits is None")])
def test_lens_ranks_check_says_what_the_answer_returned(cat, cat_world, answer, words):
    said = checks.lens_ranks.feedback(answer, cat, *_lens_case(cat, cat_world))
    assert said and words in said[0], said


# ------------------------------------------------------------ red team round 4

def test_direct_attribution_check_names_entries_that_are_no_part(cat, cat_world):
    right = attribution_function()
    said = checks.direct_attribution.feedback(lambda *a: {**right(*a), "total": 1.0}, cat, *_attribution_case(cat, cat_world))
    assert said and "only" in said[0] and "'total'" in said[0], said


def test_copula_prompts_and_figures_refuse_a_world_without_the_task(cat, cat_world, refused):
    """copula_prompts on the dragon world stopped in torch.stack of nothing; rows=-1 in torch."""
    from helpers import worlds

    refused(lambda: compute.copula_prompts(worlds.dragon_world(n=1)), "copula sentences", "dragon")
    refused(lambda: compute.copula_prompts(None), "World", "None")
    refused(lambda: compute.copula_figures(cat, cat_world, rows=-1), "rows", "-1")
    refused(lambda: compute.copula_figures(cat, worlds.dragon_world(n=1)), "vocabulary of 10")
    assert compute.copula_figures(cat, cat_world, rows=2)["p_class"].shape == (2,)


def test_metrics_refuse_what_would_measure_nothing(cat, cat_world, refused):
    refused(lambda: compute.logit_difference(cat_world, up=["big"], down=["big", "red"]), "share no word", "big")
    metric = compute.induction_attention(8, layer=5)
    refused(lambda: metric({"logits": torch.zeros(1, 17, 20)}), "L5.weights", "watch")
    refused(lambda: compute.induction_attention(0), "length")


def test_patching_refuses_points_that_are_not_the_residual_stream_and_int_metrics(cat, cat_world, refused):
    """names=['L0.q'] was patched or read out as if it were the stream; an int metric stopped in
    mean(); a (2,) scale broadcast silently over one row."""
    tok = cat_world.tokenizer
    clean, corrupt = tok.encode("<BOS> the cat is"), tok.encode("<BOS> the mat is")
    metric = compute.logit_difference(cat_world)
    refused(lambda: patching.patch_residual(cat, clean, corrupt, metric, names=["L0.q"]), "residual", "'L0.q'")
    refused(lambda: patching.logit_lens(cat, clean, names=["final_ln"]), "residual", "'final_ln'")
    refused(lambda: patching.patch_residual(cat, clean, corrupt, metric, names=["h0", "h0"]), "distinct")
    refused(lambda: patching.patch_heads(cat, clean, corrupt, lambda out: out["logits"][:, -1, 0].long()),
            "floating-point", "int64")
    part = {"a": torch.ones(6)}
    refused(lambda: patching.attribute(cat, part, torch.ones(20), torch.ones(2)), "fits (1,)", "(2,)")
    assert patching.logit_lens(cat, clean, names=["h0", "L0.h_mid"])[0] == ["h0", "L0.h_mid"]
    assert set(patching.attribute(cat, part, torch.ones(20), torch.ones(1))) == {"a", "final-norm bias"}


def test_composition_scores_with_the_rotation_at_an_offset(induction, refused):
    """offset=δ puts rotary's R(δ) between W_Q and W_Kᵀ: δ = 0 is the score without it, and a
    query at i meets a key at j through W_Q R(i - j) W_Kᵀ, as the model's own attention scores do."""
    plain = patching.composition_scores(induction, (0, 1), (1, 0))
    assert patching.composition_scores(induction, (0, 1), (1, 0), offset=0) == pytest.approx(plain, abs=1e-6)
    d_k, attn = induction.cfg.d_k, induction.blocks[1].attn
    ids = torch.randint(1, induction.cfg.vocab_size, (induction.cfg.n_max,), generator=torch.Generator().manual_seed(0))
    trace = induction(ids, trace=True)
    x, scores = trace["L1.ln1"].reshape(-1, induction.cfg.d_model), trace["L1.scores"].reshape(2, len(ids), len(ids))
    with torch.no_grad():
        q, k = x @ attn.W_Q[:, :d_k] + attn.b_Q[:d_k], x @ attn.W_K[:, :d_k] + attn.b_K[:d_k]
        for i, j in ((9, 2), (24, 0), (5, 5)):                # the model's own score of query i against key j
            R = patching.rotary_rotation(induction, i - j)
            assert float(scores[0, i, j]) == pytest.approx(float(q[i] @ R @ k[j]) / d_k ** 0.5, abs=1e-4)
        R = patching.rotary_rotation(induction, 7)
        qk, _ = patching.head_circuits(induction, 1, 0, fold_ln=False, offset=7)
        assert torch.allclose(qk, attn.W_Q[:, :d_k] @ R @ attn.W_K[:, :d_k].T, atol=1e-5)
    moved = patching.composition_scores(induction, (0, 1), (1, 0), offset=7)
    assert moved["v"] == pytest.approx(plain["v"], abs=1e-6)
    assert moved["k"] != pytest.approx(plain["k"], abs=1e-5) and moved["q"] != pytest.approx(plain["q"], abs=1e-5)
    refused(lambda: patching.composition_scores(induction, (0, 1), (1, 0), offset=25), "from 0 to 24")
    refused(lambda: patching.composition_scores(induction, (0, 1), (1, 0), offset=True), "True")
    cat = Transformer(Config(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=0))
    refused(lambda: patching.head_circuits(cat, 1, 0, offset=1), "rotary positions")


def test_round_6_the_checks_put_back_a_model_or_a_dict_the_learner_changed(cat, cat_world):
    """Red team round 6: patch_grid, direct_attribution and lens_ranks ran the learner's function on
    the model itself and then computed their own answer on whatever it had left (a tripled W_O passed
    as right), and handed it the notebook's own trace and parts dicts."""
    tok, metric = cat_world.tokenizer, compute.logit_difference(cat_world)
    before = {name: t.clone() for name, t in cat.state_dict().items()}

    def tripled(model, *args):
        with torch.no_grad():
            for block in model.blocks:
                block.attn.W_O.mul_(3.0)
        return grid_function()(model, *args)

    said = checks.patch_grid.feedback(tripled, cat, tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was"), metric)
    assert said and all(torch.equal(before[name], t) for name, t in cat.state_dict().items())
    parts, direction, scale = _attribution_case(cat, cat_world)
    kept = {name: p.clone() for name, p in parts.items()}

    def centred_in_place(model, parts, direction, scale):
        with torch.no_grad():
            model.final_ln.weight.mul_(2.0)
            for p in parts.values():
                p -= p.mean()
        return attribution_function()(model, parts, direction, scale)

    said = checks.direct_attribution.feedback(centred_in_place, cat, parts, direction, scale)
    assert said and "in place" in said[0] and "dict" in said[0], said
    assert all(torch.equal(kept[name], p) for name, p in parts.items())
    assert all(torch.equal(before[name], t) for name, t in cat.state_dict().items())


def test_round_6_the_explorer_refuses_prompts_it_cannot_draw_when_it_is_built(cat, cat_world, refused):
    """Red team round 6: a cat-view prompt like 'xyz the cat is' passed the constructor and failed on
    every redraw; the general view took any number of prompts (100 took 16 s)."""
    for prompt in ("xyz the cat is", "<BOS> cat cat is", "<BOS>\tthe cat is"):
        refused(lambda prompt=prompt: explorer.explorer(cat, cat_world, prompts=[prompt]), "copula prompts", "but got")
    refused(lambda: compute.AnyLab(cat, cat_world.tokenizer, ["<BOS> the cat is"] * 33), "at most 32", "33")


def test_round_6_a_prompt_too_long_for_the_model_gets_a_sentence_of_the_rule(cat, cat_world, refused):
    """Red team round 6: 'your model takes at most 16 tokens, but the prompt has 81' said neither
    what was expected nor should; book_attention's 'does not split' had no 'but'."""
    from helpers.masking import compute as masking

    refused(lambda: explorer.explorer(cat, cat_world.tokenizer, prompts=["<BOS> " + "the cat " * 520]),
            "should have at most 1,024 tokens", "1,041")   # (sinusoidal positions: past n_max, to the course's limit)
    refused(lambda: masking.book_attention(5, 2), "should split", "d_model=5")


def test_round_9_max_abs_diff_never_wraps_and_refuses_what_is_no_number(refused):
    """Red team round 9: uint8 0 vs 1 gave 255 and int8 127 vs -128 gave 1 (integer subtraction wraps);
    bool, meta and sparse tensors gave raw torch errors."""
    assert compute.max_abs_diff(torch.tensor([0], dtype=torch.uint8), torch.tensor([1], dtype=torch.uint8)) == 1
    assert compute.max_abs_diff(torch.tensor([127], dtype=torch.int8), torch.tensor([-128], dtype=torch.int8)) == 255
    refused(lambda: compute.max_abs_diff(torch.tensor([True]), torch.tensor([False])), "a should hold numbers",
            "True/False")
    refused(lambda: compute.max_abs_diff(torch.zeros(2, device="meta"), torch.zeros(2)), "meta device")
    refused(lambda: compute.max_abs_diff(torch.zeros(2).to_sparse(), torch.zeros(2)), "layout")
    refused(lambda: compute.max_abs_diff(torch.zeros(2), torch.tensor([0.0, float("inf")])), "b should hold finite")
    refused(lambda: compute.max_abs_diff(torch.tensor([1e308], dtype=torch.float64),
                                         torch.tensor([-1e308], dtype=torch.float64)), "overflows to inf")


def test_round_9_induction_direct_effects_checks_its_ids_and_reference(refused):
    """Red team round 9: an even-length batch returned NaN, a list of ids an AttributeError, 1-D ids an
    IndexError, reference={} a KeyError (induction_ablation too)."""
    from helpers import worlds
    from helpers.weights import load_induction

    ind = load_induction()
    seqs = worlds.repeated_tokens(8, 5, ind.cfg.vocab_size, 0)
    refused(lambda: compute.induction_direct_effects(ind, seqs[:, :4]), "odd length", "(8, 4)")
    refused(lambda: compute.induction_direct_effects(ind, seqs[0]), "repeated sequences (B, 2L+1)", "(11,)")
    refused(lambda: compute.induction_direct_effects(ind, seqs, [(1, 0)], {}), "reference should be None")
    refused(lambda: compute.induction_ablation(ind, seqs, [(1, 0)], "mean", reference={}), "reference should be None")
    refused(lambda: compute.induction_direct_effects(None, seqs), "should be a helpers.model.Transformer")
    refused(lambda: compute.induction_ablation(ind, seqs, [(1, 0)], "zeros"), "the ablation kind")
    got = compute.induction_direct_effects(ind, seqs.tolist(), [(1, 0)])
    assert torch.isfinite(got["direct"]).all()


def test_round_9_the_chapter_functions_name_a_model_that_is_none(refused, cat, cat_world):
    """Red team round 9: None as the model gave raw AttributeErrors; a prompt of 5 an AttributeError;
    donor_draws with `same` banning every row torch's 'invalid multinomial distribution'; resample_donors
    took negative and fractional lengths."""
    for call in (lambda: compute.without_attention_blocks(None, [1, 2]), lambda: compute.zeroed_copy(None),
                 lambda: compute.value_zeroed_copy(None), lambda: compute.value_bias_write(None),
                 lambda: compute.configurations(None)):
        refused(call, "should be a helpers.model.Transformer", "None")
    refused(lambda: compute.prompt_row(cat, cat_world, 5), "prompt should be a string")
    refused(lambda: compute.donor_draws(3, 3, 1, 0, True, torch.ones(3, 3, dtype=torch.bool)), "row 0 has none")
    refused(lambda: compute.resample_donors([3, -1, 3], 0), "whole numbers of at least 1")
    refused(lambda: compute.resample_donors([3, 2.5, 3], 0), "whole numbers of at least 1")


def test_round_9_final_norm_scale_refuses_rows_whose_variance_overflows(refused, cat):
    """Red team round 9: final_norm_scale(cat, 1e30 * [1, -1, ...]) returned tensor([inf]) (the float32
    variance overflows)."""
    h = torch.full((6,), 1e30) * torch.tensor([1., -1, 1, -1, 1, -1])
    refused(lambda: patching.final_norm_scale(cat, h), "h should hold numbers whose squares stay finite in float32",
            "1e+30")
    assert torch.isfinite(patching.final_norm_scale(cat, h / 1e13)).all()


def test_round_9_copy_log_prob_refuses_rows_that_do_not_repeat_clean(refused):
    """Red team round 9: the copy_log_prob metric returned an empty tensor when the rows were no whole
    number of repeats of clean."""
    metric = compute.copy_log_prob(torch.zeros(2, 9, dtype=torch.long), 4)
    assert metric({"logits": torch.zeros(4, 9, 5)}).shape == (4,)
    refused(lambda: metric({"logits": torch.zeros(3, 9, 5)}), "repeats clean's 2 rows", "(3, 9, 5)")
    refused(lambda: metric({}), "this metric reads the logits")
