"""Round 23 (issue 31), second wave on chapters 08 and 12: the last seed trains, curves' steps are
compared with the runs before anything is made, a learner's state_dict is checked entry by entry, an
encode's id outside the vocabulary is named, and a history's steps are whole numbers."""
import copy

import matplotlib
import numpy as np
import pytest
import torch

from helpers import weights, worlds
from helpers.errors import MAX_SEED
from helpers.gpt import compute as gc
from helpers.gpt import corpus, shipped
from helpers.model import Config, Transformer
from helpers.normalization import compute as nz
from helpers.normalization import explorer as nz_explorer
from helpers.sampling import explorer as sampling_explorer

matplotlib.use("Agg")


# ---------------------------------------------------------------- 0: the last seed

def test_the_last_seed_trains_and_its_validation_windows_take_the_next_seed_round_to_0():
    chars = corpus.CharTokenizer()
    ids = chars.encode("ROMEO: a small text to train on, twice over and again.\n" * 20)
    model = Transformer(Config(vocab_size=65, d_model=16, n_heads=2, n_layers=1, d_ff=32, n_max=16), seed=0)
    untouched = copy.deepcopy(model)
    losses, val_losses = gc.train_loop(model, ids, ids, steps=2, batch=2, context=8, lr=1e-3, warmup=0, min_lr=0,
                                       clip=1.0, eval_every=1, eval_batches=1, seed=MAX_SEED)
    assert len(losses) == 2 and sorted(val_losses) == [0, 1, 2]
    assert val_losses[0] == gc.evaluate(untouched, ids, 8, 1, 2, 0)   # MAX_SEED's next seed is 0


# ---------------------------------------------------------------- 8: curves' steps against the runs

def test_stack_view_compares_curves_steps_with_the_runs_before_it_makes_the_steps(refused):
    curves = copy.deepcopy(nz.load_curves())
    curves["steps"] = 10**12                     # np.arange of it would ask for 7 TiB
    refused(lambda: nz.stack_view(curves), "curves' run pre/8/0.03's loss", "steps=1,000,000,000,000", "holds 300")
    assert len(nz.stack_view(nz.load_curves())["steps"]) == 300


@pytest.mark.parametrize("call", ["plot_grid", "outcomes", "plot_residual", "stack_view"])
def test_runs_shorter_than_curves_steps_are_refused(refused, call):
    curves = copy.deepcopy(nz.load_curves())
    for run in curves["runs"].values():
        run["loss"] = run["loss"][:10]
    calls = {"plot_grid": lambda: nz.plot_grid(curves), "outcomes": lambda: nz.outcomes(curves, 1.0, 0.5),
             "plot_residual": lambda: nz.plot_residual(curves, nz.load_plain_curves()),
             "stack_view": lambda: nz.stack_view(curves)}
    refused(calls[call], "should hold curves' steps=300 numbers", "holds 10")


def test_stack_view_refuses_a_run_without_grad_first_in_a_sentence(refused):
    curves = copy.deepcopy(nz.load_curves())
    del curves["runs"]["post/8/0.03"]["grad_first"]
    refused(lambda: nz.stack_view(curves), "post/8/0.03", "grad_first")


def test_the_explorer_reads_a_grad_first_tensor_with_grad():
    curves = copy.deepcopy(nz.load_curves())
    run = curves["runs"]["pre/8/0.03"]
    run["grad_first"] = torch.tensor(run["grad_first"], requires_grad=True) * 1
    low, high = nz_explorer.limits(curves, "grad_first")
    assert 0 < low < high and np.isfinite(high)


# ---------------------------------------------------------------- 6: a learner's state_dict, entry by entry

def with_state(change):
    """The cat model whose state_dict() gives change(its real state_dict)."""
    model = copy.deepcopy(weights.load_cat())
    state = model.state_dict()
    model.state_dict = lambda *args, **kwargs: change(state)
    return model


STATES = {
    "a text": (lambda sd: dict(sd, E="tied"), ("'E'", "holds str")),
    "None": (lambda sd: None, ("should give a dict", "None")),
    "meta tensors": (lambda sd: {n: torch.empty_like(v, device="meta") for n, v in sd.items()}, ("meta device",)),
    "bools": (lambda sd: dict(sd, E=sd["E"] > 0), ("'E'", "floating-point", "torch.bool")),
    "a raise": (lambda sd: 1 / 0, ("state_dict()", "ZeroDivisionError")),
}


@pytest.mark.parametrize("kind", STATES)
@pytest.mark.parametrize("function", [gc.as_transformer, gc.small_start])
def test_a_state_dict_that_holds_no_tensors_of_numbers_is_refused(refused, kind, function):
    change, words = STATES[kind]
    model = with_state(change)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    refused(lambda: function(model), *words)
    assert all(torch.equal(before[name], p) for name, p in model.named_parameters())


def test_a_state_hook_writing_a_note_is_refused(refused):
    model = copy.deepcopy(weights.load_cat())
    model._register_state_dict_hook(lambda module, sd, prefix, local: sd.__setitem__("E", "tied"))
    refused(lambda: gc.as_transformer(model), "'E'", "holds str")
    refused(lambda: gc.small_start(model), "'E'", "holds str")


# ---------------------------------------------------------------- 7: an encode's id outside the vocabulary

def tokenizer_giving(given, base):
    class Tokenizer:
        vocab = list(base.vocab)

        def encode(self, text):
            return given

        def text(self, ids):
            return base.text(ids)

        def decode(self, ids):
            return base.decode(ids)
    return Tokenizer()


@pytest.mark.parametrize("given, words", [(torch.tensor([-5, 3]), ("the id -5",)),
                                          (torch.tensor([10**12]), ("the id 1,000,000,000,000",)),
                                          (torch.tensor([float("nan")]), ("dtype torch.float32",))])
def test_sample_text_and_samples_at_name_the_id_outside_the_vocabulary(refused, given, words):
    model, chars = shipped.load_model(), corpus.CharTokenizer()
    tok = tokenizer_giving(given, chars)
    refused(lambda: gc.sample_text(model, tok, "ROMEO:", 3), "tokenizer.encode", *words)
    refused(lambda: gc.samples_at(model, tok, "ROMEO:", 3, (0.8,)), "tokenizer.encode", *words)


def test_the_sampling_explorer_names_the_id_outside_the_vocabulary(refused):
    world = worlds.dragon_world(n=1)
    tok = tokenizer_giving(torch.tensor([-1, 2]), world.tokenizer)
    refused(lambda: sampling_explorer.explorer(weights.load_dragon(), tok, prompts=["<BOS> dragon drinks"]),
            "the id -1", "belong together")
    refused(lambda: worlds.tokenizer_encode(tok, "x", 10), "the id -1")
    assert worlds.token_ids([1, 2], 3) == [1, 2]


# ---------------------------------------------------------------- 9: a history's steps

def test_circuit_birth_refuses_steps_that_are_not_whole_numbers(refused):
    history = gc.induction_history(shipped.load_log())
    odd = dict(history, steps=np.asarray(history["steps"], dtype=float) + 0.5)
    refused(lambda: gc.circuit_birth(odd), "history's steps", "whole numbers", "0.5")
    birth = gc.circuit_birth(history)
    assert birth["step"] in list(history["steps"])
