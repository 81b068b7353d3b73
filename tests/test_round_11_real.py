"""Red team round 11 (chapters 10 and 11): the real model's views and top_tokens, the patching and ablation
helpers given the wrong object, the induction metric on sequences of another length, and two checks that
handed the notebook's own objects (the metric, SmolLM2's Config) to the learner's function."""
import pytest
import torch

from helpers import patching
from helpers.ablation import checks as ablation_checks
from helpers.ablation import compute as ablation
from helpers.real import compute as real


@pytest.fixture(scope="module")
def smol():
    torch.set_num_threads(1)
    return real.load()


def test_round_11_top_tokens_refuses_what_is_no_distribution(smol, refused):
    _, tok = smol
    V = len(tok.vocab)
    logits = torch.randn(V, generator=torch.Generator().manual_seed(0))
    for probs in (logits, torch.full((V,), float("nan")), -torch.rand(V), torch.full((V,), 2.0 / V)):
        refused(lambda: real.top_tokens(tok, probs, k=3), "probs should be probabilities", "softmax")
    assert real.top_tokens(tok, torch.softmax(logits, -1), k=1)[0][1] == pytest.approx(float(torch.softmax(logits, -1).max()))


def test_round_11_real_views_name_a_swapped_model_and_tokenizer(smol, refused):
    model, tok = smol
    for call in (lambda: real.norm_view(tok, model), lambda: real.stream_sizes(tok, model),
                 lambda: real.shape_table(tok, [1, 2, 3]), lambda: real.parameters_counted(tok),
                 lambda: real.rotary_orders(tok, [1, 2, 3]), lambda: real.swiglu_view(tok, model),
                 lambda: real.patching_view(tok, model), lambda: real.induction_view(tok, model),
                 lambda: real.logit_lens(tok, [1, 2], 0), lambda: real.trace(tok, [1, 2])):
        refused(call, "model should be the course's Transformer", "Tokenizer")
    for call in (lambda: real.rotary_view(model, "x"), lambda: real.prompt_view(model, "x", "Hi"),
                 lambda: real.norm_view(model, "x"), lambda: real.swiglu_view(model, model)):
        refused(call, "tok should be the model's tokenizer")


def test_round_11_patching_and_ablation_name_a_tokenizer_given_for_a_model_or_world(cat, cat_world, refused):
    tok = cat_world.tokenizer
    for call in (lambda: patching.residual_parts(tok, [1, 2, 3]), lambda: patching.residual_names(tok),
                 lambda: patching.direct_logit_attribution(tok, [1, 2], [0.0] * 20)):
        refused(call, "model should be a course model", "Tokenizer")
    for call in (lambda: ablation.logit_difference(tok), lambda: ablation.attention_on_subject(cat, tok),
                 lambda: ablation.cat_scores(cat, tok)):
        refused(call, "world should be a helpers.worlds.World", "Tokenizer")
    # the direction is checked before the pass, too
    refused(lambda: patching.direct_logit_attribution(cat, tok.encode("<BOS> the cat is"), [0.0] * 3),
            "direction", f"({len(tok.vocab)},)")


def test_round_11_induction_attention_refuses_sequences_of_another_length(induction, refused):
    clean, corrupt = ablation.induction_pairs(40, 8, induction.cfg.vocab_size, seed=2024)
    right = patching.metric_ends(induction, clean, corrupt, ablation.induction_attention(8), ("L1.weights",))
    assert right[0] > 0.8 > 0.1 > right[1]   # the notebook's call, as before
    for length in (3, 100):
        refused(lambda: patching.metric_ends(induction, clean, corrupt, ablation.induction_attention(length),
                                             ("L1.weights",)),
                f"length={length}", f"{2 * length + 1} tokens", "17 tokens", "induction_attention(8)")


def test_round_11_patch_grid_check_keeps_the_notebooks_metric(cat, cat_world):
    tok = cat_world.tokenizer
    dog_was, floor_was = tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was")
    metric = ablation.logit_difference(cat_world)
    with torch.no_grad():
        before = metric({"logits": cat(dog_was[None])})

    def edits_the_metric(model, clean_ids, corrupt_ids, metric):
        for cell in metric.__closure__:
            if isinstance(cell.cell_contents, list) and len(cell.cell_contents) == 2:
                cell.cell_contents[:] = cell.cell_contents[:1]   # the metric now reads only the first word
                break
        return patching.patch_heads(model, clean_ids, corrupt_ids, metric, per_position=True).numpy()

    said = ablation_checks.patch_grid.feedback(edits_the_metric, cat, dog_was, floor_was, metric)
    assert said and "grid" in said[0]
    with torch.no_grad():
        assert torch.equal(metric({"logits": cat(dog_was[None])}), before)
    # a metric wrapped in another function (as the explorer makes one) is copied all the way down
    wrapped = lambda out: 1.0 * metric(out)
    assert ablation_checks.patch_grid.feedback(edits_the_metric_inside(edits_the_metric), cat, dog_was, floor_was,
                                               wrapped)
    with torch.no_grad():
        assert torch.equal(metric({"logits": cat(dog_was[None])}), before)


def edits_the_metric_inside(edit):
    """A patch_grid that edits the metric inside the wrapper it is given."""
    def grid(model, clean_ids, corrupt_ids, metric):
        inner = next(c.cell_contents for c in metric.__closure__ if callable(c.cell_contents))
        edit(model, clean_ids, corrupt_ids, inner)
        return patching.patch_heads(model, clean_ids, corrupt_ids, metric, per_position=True).numpy()
    return grid


def test_round_11_layer_parameters_check_keeps_smollm2s_config(smol):
    from helpers.real import checks

    model, tok = smol
    cfg = model.cfg
    fact = torch.tensor(tok.encode(real.FACT))
    with torch.no_grad():
        top = int(model(fact)[-1].argmax())

    def forgets_the_norms(c):
        d, d_kv, f = c.d_model, c.kv_heads * c.d_k, c.d_ff
        attention = 2 * d * d + 2 * d * d_kv + c.bias * (2 * d + 2 * d_kv)
        matrices = 3 if c.activation == "swiglu" else 2
        mlp = matrices * d * f + c.bias * ((matrices - 1) * f + d) if f else 0
        object.__setattr__(c, "norm", "none")   # the slip, made true by removing the norms
        object.__setattr__(cfg, "norm", "none")   # and the notebook's own cfg, reached by another way
        return attention + mlp

    said = checks.layer_parameters.feedback(forgets_the_norms, cfg)
    assert said and "norms" in said[0]
    assert cfg.norm == "pre"
    with torch.no_grad():
        assert int(model(fact)[-1].argmax()) == top
