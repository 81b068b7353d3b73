"""Round 19 (issue 31), heads explorer, sampling explorer and count checks: an explorer's default fits the
learner's own model or its sentence says it is the default; a tokenizer whose vocab (or encode) cannot be read
is one sentence; a count with a fractional part is not a right count; chapter 10's checks refuse a wrapper
of the course's own implementation and take a learner's."""
import pytest
import torch

from helpers import patching
from helpers.ablation import checks as ablation_checks
from helpers.ablation import compute as ablation
from helpers.heads import compute as heads
from helpers.heads import explorer as heads_explorer
from helpers.mlp import checks as mlp_checks
from learner_loops import attribution_written, layer_parameters
from helpers.model import Config, Transformer
from helpers.real import checks as real_checks
from helpers.sampling import compute as sampling
from helpers.sampling import explorer as sampling_explorer


def one_layer_model(world):
    """A learner's own one-layer model of ``world``'s vocabulary."""
    cfg = Config(vocab_size=len(world.tokenizer.vocab), d_model=8, n_heads=2, n_layers=1, d_ff=16, n_max=16)
    return Transformer(cfg, seed=0).eval()


# ------------------------------------------------------------ A10: an explorer's default fits the model


def test_heads_explorer_starts_a_one_layer_model_at_its_last_layer(cat_world, refused):
    net = one_layer_model(cat_world)
    shown = heads_explorer.explorer(net, tokenizer=cat_world.tokenizer, prompts=["<BOS> the cat sat"])
    assert shown.controls["layer"].value == 0 and shown.controls["layer"].max == 0
    assert heads_explorer.explorer().controls["layer"].value == 1     # the course's two-layer models: layer 1
    refused(lambda: heads_explorer.explorer(net, layer=1, tokenizer=cat_world, prompts=["<BOS> the cat"]),
            "layer", "0 to 0", "got 1")                               # a layer the learner gives is still checked


def test_sampling_explorer_says_its_default_prompt_is_the_dragon_worlds(cat, cat_world, dragon, dragon_world,
                                                                         refused):
    for call in (lambda: sampling_explorer.explorer(cat, cat_world), lambda: sampling.slide(cat, cat_world)):
        refused(call, "default", "'<BOS> dragon drinks'", "dragon world", "'dragon'")
    assert sampling.slide(dragon, dragon_world)["prompt"] == sampling.DEFAULT_PROMPT
    assert sampling_explorer.explorer(cat, cat_world, "<BOS> the cat").controls["seed"].value == 0


def test_sampling_explorer_names_length_when_the_prompt_leaves_no_room_for_it(cat_world, refused):
    net = one_layer_model(cat_world)   # n_max 16: the default 4 words after a prompt of 13
    refused(lambda: sampling_explorer.explorer(net, cat_world, "<BOS>" + " the" * 12), "n_max = 16", "length")
    assert sampling_explorer.explorer(net, cat_world, "<BOS>" + " the" * 12, length=3).controls


# ------------------------------------------------------------ A11: a tokenizer whose vocab raises


class RaisingVocab:
    """A learner's tokenizer whose vocab property raises (its file was never loaded)."""

    @property
    def vocab(self):
        raise RuntimeError("vocabulary file not loaded")

    def encode(self, text):
        return torch.tensor([0, 1])

    def decode(self, ids):
        return ["a" for _ in ids]


class RaisingEncode:
    """A learner's tokenizer whose encode is a property that raises when read."""
    vocab = ["a", "b", "c", "d", "e"]

    @property
    def encode(self):
        raise ValueError("no encoder yet")

    def decode(self, ids):
        return ["a" for _ in ids]


def test_a_tokenizer_whose_parts_cannot_be_read_is_one_sentence(refused):
    net = Transformer(Config(vocab_size=5, d_model=8, n_heads=2, n_layers=2, d_ff=16, n_max=16), seed=0).eval()
    vocab = ("the tokenizer's vocab should be readable", "RuntimeError", "vocabulary file not loaded")
    refused(lambda: heads_explorer.explorer(net, tokenizer=RaisingVocab(), prompts=["ab"]), *vocab)
    refused(lambda: heads.head_view(net, 0, 0, "ab", RaisingVocab()), *vocab)
    refused(lambda: sampling_explorer.explorer(net, RaisingVocab(), "ab"), *vocab)
    refused(lambda: sampling.slide(net, RaisingVocab(), "ab"), *vocab)
    encode = ("the tokenizer's encode should be readable", "ValueError", "no encoder yet")
    refused(lambda: heads_explorer.explorer(net, tokenizer=RaisingEncode(), prompts=["ab"]), *encode)
    refused(lambda: sampling_explorer.explorer(net, RaisingEncode(), "ab"), *encode)


# ------------------------------------------------------------ B6: a count with a fractional part


def test_layer_parameters_refuses_a_count_with_a_fractional_part(cat):
    assert real_checks.layer_parameters.feedback(layer_parameters, cat.cfg) == []
    said = real_checks.layer_parameters.feedback(lambda cfg: layer_parameters(cfg) + 0.4, cat.cfg)
    assert said and "should be a whole number" in said[0] and ".4" in said[0], said


def test_gpt3_mlp_refuses_a_count_with_a_fractional_part():
    right = 8 * 12288 * 12288 * 96
    assert mlp_checks.gpt3_mlp.feedback(right) == [] and mlp_checks.gpt3_mlp.feedback(float(right)) == []
    said = mlp_checks.gpt3_mlp.feedback(right + 0.25)
    assert said and "should be a whole number" in said[0] and "115964116992.25" in said[0], said


def kv_growth(model, ids):
    """A learner's growth per token: a key and a value per layer and shared head, d_k float32 numbers each."""
    cfg = model.cfg
    return 2 * cfg.n_layers * cfg.kv_heads * (cfg.d_model // cfg.n_heads) * 4


def test_kv_growth_refuses_bytes_with_a_fractional_part_but_reads_round_off(cat):
    ids = torch.tensor([1, 4, 5, 9])
    assert real_checks.kv_growth.feedback(kv_growth, cat, ids) == []
    assert real_checks.kv_growth.feedback(lambda m, i: kv_growth(m, i) / 1e6 * 1e6 - 1e-9, cat, ids) == []
    said = real_checks.kv_growth.feedback(lambda m, i: kv_growth(m, i) + 0.4, cat, ids)
    assert said and "should be a whole number" in said[0], said


# ------------------------------------------------------------ checks: chapter 10's own tripwires


def _drop_case(cat, cat_world):
    ids, cls, _ = ablation.copula_prompts(cat_world)
    return cat, ids, cls, ids, ablation.rule_reference(cat_world, "all")


def test_mean_ablation_drop_refuses_the_courses_pieces(cat, cat_world):
    case = _drop_case(cat, cat_world)

    def with_the_courses_pieces(model, head, task_ids, class_ids, reference_ids):
        means = patching.mean_head_outputs(model, reference_ids)
        with torch.no_grad():
            def p_class(**switches):
                probs = torch.softmax(model(task_ids, **switches).double(), -1)[:, -1]
                return probs.gather(-1, class_ids).sum(-1).mean()
            return float(p_class() - p_class(replace=patching.ablation_replace([head], "mean", means)))
    checks_own = lambda m, h, t, c, r: ablation_checks._course_drop(m, h, t, c, r)["drop"]
    for wrapper, piece in ((with_the_courses_pieces, "mean_head_outputs"), (checks_own, "_course_drop")):
        said = ablation_checks.mean_ablation_drop.feedback(wrapper, *case)
        assert said and "course's own" in said[0] and piece in said[0], said


def test_direct_attribution_refuses_the_courses_attribute_and_takes_a_learners(cat, cat_world):
    from test_ablation import _attribution_case

    args = (cat, *_attribution_case(cat, cat_world))
    said = ablation_checks.direct_attribution.feedback(lambda m, p, d, s: patching.attribute(m, p, d, s), *args)
    assert said and "course's own" in said[0] and "attribute" in said[0], said

    learners = attribution_written
    assert ablation_checks.direct_attribution.feedback(learners, *args) == []


@pytest.mark.parametrize("value", [302.9, 3.5])
def test_a_whole_count_check_names_the_fraction_it_got(value):
    said = mlp_checks.gpt3_mlp.feedback(value)
    assert said and f"it is {value!r}" in said[0], said
