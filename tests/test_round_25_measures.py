"""Round 25 (reader B: 3, 6, 7, 8, 11). The measures of chapters 07, 08, 10 and patching.py ran a dropout model
in training mode with its dropout on (another answer each call, torch's global generator drawn); chapter 12's
losses and ch10's copula figures measured a model whose weights hold NaN as NaN; the sampling, ablation and
real-model explorers drew "$" as math (or raised matplotlib's raw ValueError); check_seconds said "would take
about 60 s" against a limit of 60 s; cat_ablation built 10,000 resample draws before it checked their pass."""
import copy

import pytest
import torch

from helpers import patching
from helpers.ablation import compute as ablation
from helpers.ablation import explorer as ablation_explorer
from helpers.gpt import compute as gc
from helpers.gpt import corpus, shipped, train
from helpers.mlp import compute as mlp
from helpers.model import Config, Transformer
from helpers.normalization import compute as nz
from helpers.real import explorer as real_explorer
from helpers.sampling import explorer as sampling_explorer


@pytest.fixture(scope="module")
def dropout_cat(cat_world):
    """A cat-world model with dropout 0.3 (and MLPs), in training mode."""
    torch.manual_seed(0)
    V = len(cat_world.tokenizer.vocab)
    return Transformer(Config(vocab_size=V, d_model=8, n_heads=2, n_layers=2, d_ff=16, n_max=16, dropout=0.3)).train()


def gap(out):
    return out["logits"][:, -1, 0] - out["logits"][:, -1, 1]


def measures(model, world):
    """Each measure of the family, as a function of nothing giving a tensor."""
    ids = world.tokenizer.encode("<BOS> the cat sat on the mat")
    clean, corrupt = world.tokenizer.encode("<BOS> the cat is"), world.tokenizer.encode("<BOS> the mat is")
    V = model.cfg.vocab_size
    return {
        "logit_lens": lambda: patching.logit_lens(model, ids)[1],
        "capture": lambda: patching.capture(model, ids, ["L0.h"])[0],
        "head_outputs": lambda: patching.head_outputs(model, ids)[1],
        "direct_logit_attribution": lambda: torch.tensor(
            list(patching.direct_logit_attribution(model, ids, torch.ones(V)).values())),
        "residual_parts": lambda: torch.stack(list(patching.residual_parts(model, ids)[0].values())),
        "token_lens": lambda: torch.tensor(patching.token_lens(model, ids, 3)["p"]),
        "patch_heads": lambda: patching.patch_heads(model, clean, corrupt, gap),
        "patch_residual": lambda: patching.patch_residual(model, clean, corrupt, gap),
        "attribution_patch": lambda: patching.attribution_patch(model, clean, corrupt, gap),
        "cat_ablation": lambda: torch.tensor(list(ablation.cat_ablation(model, world, [(0, 0)], "mean").values())),
        "cat_ablation resample": lambda: torch.tensor(
            list(ablation.cat_ablation(model, world, [(0, 0)], "resample", draws=2).values())),
        "copula_figures": lambda: torch.tensor(list(ablation.copula_figures(model, world).values())),
        "rule_ablation": lambda: torch.tensor(list(ablation.rule_ablation(model, world, [(0, 0)], "zero").values())),
        "attention_on_subject": lambda: ablation.attention_on_subject(model, world),
        "without_attention_blocks": lambda: ablation.without_attention_blocks(model, ids),
        "collect_activations": lambda: torch.tensor(mlp.collect_activations(model, world, world.sentences[:3])["act"][0]),
        "apply_block_mlp": lambda: mlp.apply_block_mlp(model, 0, torch.ones(3, model.cfg.d_model)),
        "residual_norms": lambda: torch.as_tensor(nz.residual_norms(model, ids)[1]),
    }


MEASURES = ["logit_lens", "capture", "head_outputs", "direct_logit_attribution", "residual_parts", "token_lens",
            "patch_heads", "patch_residual", "attribution_patch", "cat_ablation", "cat_ablation resample",
            "copula_figures", "rule_ablation", "attention_on_subject", "without_attention_blocks", "collect_activations",
            "apply_block_mlp", "residual_norms"]


@pytest.mark.parametrize("name", MEASURES)
def test_a_measure_of_a_dropout_model_in_training_mode_is_its_eval_mode_answer(name, dropout_cat, cat_world):
    call = measures(dropout_cat, cat_world)[name]
    before = torch.random.get_rng_state()
    first, second = call(), call()
    assert torch.equal(before, torch.random.get_rng_state()), "the measure drew from torch's global generator"
    assert torch.equal(first, second)
    assert all(m.training for m in dropout_cat.modules()), "the model's modes were not put back"
    dropout_cat.eval()
    try:
        assert torch.allclose(call(), first)                    # the eval-mode answer
    finally:
        dropout_cat.train()


def test_a_module_in_eval_mode_stays_so_after_a_patching_measure(dropout_cat, cat_world):
    model = copy.deepcopy(dropout_cat)
    model.blocks[0].eval()
    patching.logit_lens(model, cat_world.tokenizer.encode("<BOS> the cat"))
    assert model.training and not model.blocks[0].training and model.blocks[1].training


# ------------------------------------------------------------ B7: a model whose weights hold NaN

@pytest.fixture(scope="module")
def chars_and_text():
    text = corpus.load_text()
    return corpus.CharTokenizer(text), text


@pytest.fixture(scope="module")
def nan_gpt(chars_and_text):
    chars, _ = chars_and_text
    torch.manual_seed(0)
    m = Transformer(Config(vocab_size=len(chars.vocab), d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=64))
    with torch.no_grad():
        m.blocks[0].mlp.W_1[0, 0] = float("nan")
    return m


def test_the_losses_of_chapter_12_refuse_a_model_whose_weights_hold_nan(refused, nan_gpt, chars_and_text):
    chars, text = chars_and_text
    ids = chars.encode(text[:30000])
    calls = [lambda: shipped.text_losses(nan_gpt, chars, text[:2000], context=32),
             lambda: shipped.whole_text_loss(nan_gpt, ids[:500], context=32, batch=4),
             lambda: gc.spread_loss(nan_gpt, ids[:3000], context=32, every=8),
             lambda: gc.copy_rule(nan_gpt, ids[:3000], [1, 2], context=32, every=8),
             lambda: gc.evaluate(nan_gpt, ids, 16, 2, 2, 0),
             lambda: train.estimate_loss(nan_gpt, ids, 16, 2, 2, 0)]
    for call in calls:
        refused(call, "should be finite numbers", "blocks.0.mlp.W_1")


def test_the_copula_figures_refuse_a_cat_model_whose_weights_hold_nan(refused, cat, cat_world):
    broken = copy.deepcopy(cat)
    with torch.no_grad():
        broken.blocks[1].mlp.W_1[0, 0] = float("nan")
    refused(lambda: ablation.copula_figures(broken, cat_world), "should be finite numbers")
    refused(lambda: ablation.cat_ablation(broken, cat_world, [(0, 0)], "zero"), "should be finite numbers")


def test_a_diverged_training_run_still_records_its_nan_losses(chars_and_text):
    """The loops' own evaluations are not refused: a run that diverged logs NaN (and says so elsewhere)."""
    chars, text = chars_and_text
    ids = chars.encode(text[:4000])
    torch.manual_seed(0)
    m = Transformer(Config(vocab_size=len(chars.vocab), d_model=16, n_heads=2, n_layers=1, d_ff=32, n_max=32))
    with torch.no_grad():
        m.blocks[0].mlp.W_1[0, 0] = float("nan")
    assert train.mean_loss(m, ids, 16, 1, 2, 0) != train.mean_loss(m, ids, 16, 1, 2, 0)   # NaN, as it is
    loss = gc.evaluation_loss(m, ids, 16, 1, 2, torch.Generator().manual_seed(0))
    assert loss != loss


# ------------------------------------------------------------ B8: the time a call would take

def test_check_seconds_never_says_the_limit_as_the_estimate(refused):
    message = refused(lambda: gc.check_seconds(gc.MAX_SECONDS + 0.4, "this call", "do less"), "this call")
    assert f"at most about {gc.MAX_SECONDS:.0f} s" in message and f"about {int(gc.MAX_SECONDS) + 1} s" in message
    gc.check_seconds(gc.MAX_SECONDS, "this call", "do less")    # the limit itself passes


# ------------------------------------------------------------ B11: resample draws counted first

def test_cat_ablation_counts_its_resample_pass_before_drawing_donors(refused, cat, cat_world, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the donors were drawn before the pass's size was checked")
    monkeypatch.setattr(ablation, "donor_draws", never)
    monkeypatch.setattr(ablation, "head_outputs", never)
    refused(lambda: ablation.cat_ablation(cat, cat_world, [(0, 0)], "resample", draws=10_000),
            "cat_scores should need at most")


# ------------------------------------------------------------ B6: "$" drawn as typed

def drawn_texts(fig):
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


def dollar_model(chars):
    """A model that has learnt to like "$": every continuation is "$$$...". """
    torch.manual_seed(0)
    d = chars.vocab.index("$")
    m = Transformer(Config(vocab_size=len(chars.vocab), d_model=16, n_heads=2, n_layers=1, d_ff=32, n_max=64))
    with torch.no_grad():
        m.final_ln.bias.copy_(m.E[d] / m.E[d].norm() ** 2 * 20)
    return m


def test_the_sampling_explorer_draws_dollars_as_typed(chars_and_text):
    chars, _ = chars_and_text
    ex = sampling_explorer.explorer(dollar_model(chars), chars, prompts=["ROMEO: a$b$c", "JULIET:\nO "])
    ex.picture()                                            # no raw ValueError from matplotlib's math parser


def test_the_slide_view_escapes_every_dollar_it_draws(chars_and_text):
    chars, _ = chars_and_text
    view = sampling_explorer.SlideView(["a", "$", "b"], [1, 0, 2])
    result = dict(vocab=["a", "$", "b"], order=[1, 0, 2], prompt="pay $5 or $6", tempered=[0.2, 0.6, 0.2],
                  final=[0.2, 0.6, 0.2], kept=[0, 1, 2], continuations=["$$", "a$b$c", "$ $"], spaced=False)
    fig = view.update(result, "T = 1.00")
    fig.canvas.draw()                                       # a "$$" drawn as math would raise here
    texts = drawn_texts(fig)
    assert r"a\$b\$c" in texts and r"\$\$" in texts
    assert all("$" not in t.replace(r"\$", "") for t in texts), [t for t in texts if "$" in t.replace(r"\$", "")]
    assert "pay $5 or $6" in view.caption                   # the caption is the text as typed


def test_the_ablation_explorer_draws_dollar_prompts(chars_and_text):
    chars, _ = chars_and_text
    ex = ablation_explorer.explorer(dollar_model(chars), chars, prompts=["ROMEO: $$ a", "JULIET: $$ b"])
    ex.picture()


def test_the_real_explorer_labels_a_dollar_token_as_typed():
    assert real_explorer.label("$$") == r"\$\$" and real_explorer.label(" $") == r"·\$"
