"""Round 14 of the red team (reader B), chapter 09's sampling helpers:

6. the generate check watches every pass: a loop that runs the model past the watched wrapper
   (Transformer.forward(model, ids), the real model behind it) or runs another model is not ✓,
   and the wrapper never hands out the real model;
7. a prompt's state from before the weights changed is refused, and the explorer makes it again;
10. the multiply-add counts read the Config's own choices (shared K/V heads, SwiGLU's three matrices).
"""
import copy
import json
from types import SimpleNamespace

import pytest
import torch

from helpers import grading
from helpers.model import Config, KVCache, Transformer
from helpers.sampling import checks, compute as sampling, explorer as sampling_explorer


# ---- 6: the generate check sees every pass -------------------------------------------------------

def drawn_from(logits, temperature, top_k, top_p, g):
    """One token (1,) drawn as the course's generate draws it (through its own next_distribution)."""
    return torch.multinomial(sampling.next_distribution(logits, temperature, top_k, top_p), 1, generator=g)


def full_passes(run):
    """A generate whose every step runs ``run(model, ids)`` -> logits (T, V): no cache, whatever cache says."""
    def generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True):
        g = torch.Generator().manual_seed(seed)
        ids = torch.as_tensor(ids).reshape(-1)
        for _ in range(n_new):
            with torch.no_grad():
                logits = run(model, ids)[-1]
            ids = torch.cat([ids, drawn_from(logits, temperature, top_k, top_p, g)])
        return ids
    return generate


def said(answer, cat, dragon):
    return " ".join(checks.generate_loop.feedback(answer, cat, dragon))


def test_a_loop_through_transformer_forward_past_the_wrapper_is_not_right(cat, dragon):
    text = said(full_passes(lambda model, ids: Transformer.forward(model, ids)), cat, dragon)
    assert "model._forward" in text and "model(ids, cache=kv)" in text, text
    text = said(full_passes(lambda model, ids: torch.nn.Module.__call__(model, ids)), cat, dragon)
    assert "model._call_impl" in text, text


def test_the_wrapper_has_no_real_model_to_hand_out(cat, dragon):
    text = said(full_passes(lambda model, ids: model.model(ids)), cat, dragon)
    assert "no attribute 'model'" in text, text


def test_a_loop_that_runs_another_model_is_not_right(cat, dragon):
    models = {cat.cfg.vocab_size: copy.deepcopy(cat), dragon.cfg.vocab_size: copy.deepcopy(dragon)}

    def generate(model, ids, n_new, **settings):   # the right tokens, from a model of its own
        return sampling.generate(models[model.cfg.vocab_size], ids, n_new, **settings)
    text = said(generate, cat, dragon)
    assert "ran the model it was given 0 times" in text and "n_new=6" in text, text


def test_a_loop_that_runs_the_model_once_for_all_its_tokens_is_named(cat, dragon):
    def generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True):
        logits = model(ids)[-1]                 # one pass, every token drawn from it
        g = torch.Generator().manual_seed(seed)
        return torch.cat([ids] + [drawn_from(logits, temperature, top_k, top_p, g) for _ in range(n_new)])
    text = said(generate, cat, dragon)
    assert "drew 6 tokens but ran the model it was given 1 time:" in text, text


def test_what_the_wrapper_returns_is_the_wrapper_never_the_real_model(cat, dragon):
    seen = []

    def generate(model, ids, n_new, **settings):
        handed = [model.eval(), model.train(False), next(model.modules()), dict(model.named_modules())[""],
                  model.get_submodule(""), model.requires_grad_(False)]
        seen.append(all(m is model for m in handed) and not any(m is cat or m is dragon for m in handed)
                    and not hasattr(model.check_ids, "__self__"))
        return sampling.generate(model, ids, n_new, **settings)   # the course's loop, on the wrapper
    assert checks.generate_loop.feedback(generate, cat, dragon) == []
    assert seen and all(seen)
    assert not cat.training and not dragon.training and all(p.requires_grad for p in dragon.parameters())


def test_a_pass_past_the_wrapper_is_judged_from_its_record_as_live(cat, dragon):
    answer = full_passes(lambda model, ids: Transformer.forward(model, ids))
    record = json.loads(json.dumps(grading.record_answer(checks.generate_loop, answer, (cat, dragon), {})))
    judged = checks.generate_loop.feedback(grading.decode(record), cat, dragon)
    assert judged == checks.generate_loop.feedback(answer, cat, dragon) and judged


def test_the_right_loops_still_pass_live_and_from_their_record(cat, dragon):
    def generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True):
        g, kv, fed = torch.Generator().manual_seed(seed), KVCache(model.cfg.n_layers), ids
        for _ in range(n_new):
            logits = (model(fed, cache=kv) if cache else model(ids))[-1]
            token = drawn_from(logits, temperature, top_k, top_p, g)
            ids, fed = torch.cat([ids, token]), token
        return ids
    assert checks.generate_loop.feedback(generate, cat, dragon) == []
    record = json.loads(json.dumps(grading.record_answer(checks.generate_loop, generate, (cat, dragon), {})))
    assert checks.generate_loop.feedback(grading.decode(record), cat, dragon) == []


# ---- 7: a prompt's state belongs to the weights it was made with ---------------------------------

def edited(model, how="add_"):
    """model's weights changed in place, as more training would (``how``: through the parameter, or .data)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            step = 0.5 * torch.randn(p.shape, generator=g)
            (p.data if how == "data" else p).add_(step)
    return model


@pytest.mark.parametrize("how", ["add_", "data"])
def test_a_state_from_before_the_weights_changed_is_refused(how, dragon, dragon_world, refused):
    model = copy.deepcopy(dragon)
    state = sampling.prompt_state(model, dragon_world, "<BOS> dragon drinks", room=6)
    edited(model, how)
    refused(lambda: sampling.continuations(model, state, 4, 6), "weights", "changed", "prompt_state")
    refused(lambda: sampling.slide(model, dragon_world, "<BOS> dragon drinks", state=state), "changed")
    fresh = sampling.prompt_state(model, dragon_world, "<BOS> dragon drinks", room=6)
    rows = sampling.continuations(model, fresh, 4, 6, seed=0)
    ids = fresh["ids"]
    assert all(torch.equal(rows[i], sampling.generate(model, ids, 6, seed=i)[len(ids):]) for i in range(4))


def test_a_state_without_its_weights_is_no_prompt_state(dragon, dragon_world, refused):
    state = sampling.prompt_state(dragon, dragon_world, "<BOS> dragon drinks", room=2)
    old = {k: v for k, v in state.items() if k != "weights"}
    refused(lambda: sampling.continuations(dragon, old, 2, 2), "prompt_state", "weights")


def test_the_explorer_makes_a_prompts_state_again_after_the_weights_change(dragon, dragon_world, monkeypatch):
    model = copy.deepcopy(dragon)
    shown = []

    def slide(*args, **kwargs):
        shown.append(sampling.slide(*args, **kwargs))
        return shown[-1]
    monkeypatch.setattr(sampling_explorer, "slide", slide)
    view = sampling_explorer.explorer(model, dragon_world, prompts=["<BOS> dragon drinks", "<BOS> troll"])
    view.picture()
    edited(model)                          # the model trained on while the explorer is open
    view.set(seed=1)
    view.picture()
    ids = dragon_world.tokenizer.encode("<BOS> dragon drinks")
    expected = [" ".join(dragon_world.tokenizer.decode(sampling.generate(model, ids, 4, seed=1 + i)[len(ids):]))
                for i in range(3)]
    assert shown[-1]["continuations"] == expected
    with torch.no_grad():
        logits = model(ids)[-1]
    assert shown[-1]["order"] == torch.argsort(logits, descending=True, stable=True).tolist()


def test_samples_still_draw_what_generate_draws(cat, cat_world):
    start = cat_world.tokenizer.encode("<BOS> the")
    rows = sampling.samples(cat, start, 6, 3, temperature=1.3, seed=4)
    assert all(torch.equal(row, sampling.generate(cat, start, 6, temperature=1.3, seed=4 + i))
               for i, row in enumerate(rows))


# ---- 10: multiply-adds counted from the Config's own choices ------------------------------------

@pytest.mark.parametrize("n_kv_heads, activation",
                         [(2, "swiglu"), (1, "gelu"), (0, "swiglu"), (3, "relu"), (6, "gelu")])
def test_the_formula_counts_what_the_pass_calls_for_shared_heads_and_swiglu(n_kv_heads, activation):
    cfg = Config(vocab_size=50, d_model=48, n_heads=6, n_kv_heads=n_kv_heads, n_layers=2, d_ff=128,
                 activation=activation, norm_kind="rmsnorm", positions="rotary", bias=False, n_max=64)
    model = Transformer(cfg, seed=0).eval()
    ids = torch.arange(1, 9)
    assert sampling.forward_macs(cfg, 8) == sampling.counted_macs(model, ids)
    cache = sampling.prefilled(model, ids[:-1])
    assert sampling.forward_macs(cfg, 1, 7) == sampling.counted_macs(model, ids[-1:], cache)
    assert sampling.generation_macs(cfg, 3, 4, use_cache=True) == sampling.forward_macs(cfg, 3) + sum(
        sampling.forward_macs(cfg, 1, seen) for seen in (3, 4, 5))


def test_the_red_teams_config_counts_its_pass():
    cfg = Config(vocab_size=50, d_model=48, n_heads=6, n_kv_heads=2, n_layers=2, d_ff=128, activation="swiglu",
                 norm_kind="rmsnorm", positions="rotary", bias=False, n_max=64)
    parts = sampling.macs_by_part(cfg, 8)
    assert parts == dict(projections=2 * 8 * (2 * 48 * 48 + 2 * 48 * 16), attention=2 * 2 * 8 * 8 * 48,
                         mlp=2 * 3 * 8 * 48 * 128, unembedding=8 * 48 * 50)
    assert sum(parts.values()) == 424_704


def test_a_gpt_like_config_counts_as_before(dragon):
    cfg, T = dragon.cfg, 12
    d, L, f, V = cfg.d_model, cfg.n_layers, cfg.d_ff, cfg.vocab_size
    assert sampling.forward_macs(cfg, T) == L * (4 * T * d * d + 2 * T * T * d + 2 * T * d * f) + T * d * V
    wide = Config(vocab_size=1000, d_model=256, n_heads=4, n_layers=4, d_ff=1024, n_max=1024, positions="learned")
    assert round(sampling.forward_macs(wide, 512) / sampling.forward_macs(wide, 1, 511)) == 512   # chapter 09 prints it


@pytest.mark.parametrize("cfg", [None, SimpleNamespace(d_model=8, n_layers=1, d_ff=16, vocab_size=10),
                                 {"d_model": 8}])
def test_what_is_not_a_config_is_refused(cfg, refused):
    refused(lambda: sampling.macs_by_part(cfg, 3), "Config")
    refused(lambda: sampling.forward_macs(cfg, 3), "Config")
    refused(lambda: sampling.generation_macs(cfg, 3, 2, use_cache=True), "Config")


def test_a_loop_that_runs_too_few_passes_is_judged_from_its_record_as_live(cat, dragon):
    """The pass count was checked live only (the judge's replay ran no pass): a loop that drew its
    tokens from a model of its own was ✗ live and ✓ in the grade. The record keeps the count now."""
    models = {m.cfg.vocab_size: copy.deepcopy(m) for m in (cat, dragon)}

    def generate(model, ids, n_new, **settings):
        return sampling.generate(models[model.cfg.vocab_size], ids, n_new, **settings)

    live = checks.generate_loop.feedback(generate, cat, dragon)
    record = json.loads(json.dumps(grading.record_answer(checks.generate_loop, generate, (cat, dragon), {})))
    assert '"counts": [[0, 0]]' in json.dumps(record)
    judged = checks.generate_loop.feedback(grading.decode(record), cat, dragon)
    assert live and judged == live and "ran the model it was given 0 times" in judged[0]


def test_a_record_whose_counts_are_not_counts_is_refused(cat, dragon):
    def generate(model, ids, n_new, **settings):
        return sampling.generate(model, ids, n_new, **settings)

    record = json.loads(json.dumps(grading.record_answer(checks.generate_loop, generate, (cat, dragon), {})))
    text = json.dumps(record).replace('"counts": [[0, ', '"counts": [[0, -')
    assert text != json.dumps(record)
    said = checks.generate_loop.feedback(grading.decode(json.loads(text)), cat, dragon)
    assert said and "counts" in " ".join(said)
