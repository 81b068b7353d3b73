"""Red team round 11, chapter 08 (normalization): each public helper refuses what it cannot use in one
sentence, before any work, instead of a raw error from deep inside, a clamped value or a silent answer."""
import numpy as np
import pytest
import torch

from helpers import weights, worlds
from helpers.normalization import checks, explorer
from helpers.normalization import compute as nz

H_LAST = np.array([0.054, 0.193, 0.865, 0.679, 0.475, 0.864])


@pytest.fixture(scope="module")
def curves():
    return nz.load_curves()


def test_round_11_explorer_refuses_curves_with_no_runs_or_text_learning_rates(refused, curves):
    """04: runs={} stopped in np.concatenate, lrs as text in a format code 'g'."""
    refused(lambda: explorer.explorer(dict(curves, runs={})), "curves' runs should hold a run", "it is empty")
    refused(lambda: explorer.explorer(dict(curves, lrs=[str(lr) for lr in curves["lrs"]])),
            "each of curves' lrs should be a number", "'0.03'")
    some = {key: run for key, run in curves["runs"].items() if not key.startswith("post/")}
    refused(lambda: explorer.explorer(dict(curves, runs=some)), "it has no run post/2/0.03")
    short = dict(curves["runs"], **{"pre/2/0.03": {"loss": [1.0], "grad_first": [1.0]}})
    refused(lambda: explorer.stack_figure(dict(curves, runs=short)), "pre/2/0.03's", "steps=300", "holds 1")


def test_round_11_training_refuses_stop_after_beyond_steps(refused):
    """09: stop_after=100 with steps=10 silently ran 10 steps (min(steps, stop_after))."""
    batch = nz.cat_batch()
    refused(lambda: nz.train_stack("pre", 2, 0.03, 10, batch=batch, stop_after=100),
            "stop_after should be None or a whole number of steps from 1 to steps=10", "100")
    refused(lambda: nz.run_plain(2, 0.03, 10, batch=batch, stop_after=11), "stop_after", "11")
    from helpers.model import Transformer
    from helpers.training import train
    model = Transformer(nz.stack_config("pre", 1))
    refused(lambda: train(model, batch, steps=5, progress=False, stop_after=6), "from 1 to steps=5", "6")
    assert len(train(model, batch, steps=5, progress=False, stop_after=5)) == 5


def test_round_11_residual_norms_check_refuses_a_trace_of_mixed_shapes():
    """10: a sliced trace entry gave "the check itself failed ... please report it" with NumPy's words."""
    cat, world = weights.load_cat(), worlds.cat_world()
    with torch.no_grad():
        trace = cat(world.tokenizer.encode("<BOS> the dog ran"), trace=True)
    norms = np.stack([np.linalg.norm(trace[n].numpy(), axis=-1) for n in nz.residual_names(2)])
    assert checks.residual_norms.feedback(norms, trace, n_layers=2) == []
    trace["L0.h"] = trace["L0.h"][:2]
    said = checks.residual_norms.feedback(norms, trace, n_layers=2)
    assert len(said) == 1 and said[0].startswith("the check cannot use what the check cell gives it"), said
    assert "trace's L0.h should have h0's shape (4, 6)" in said[0] and "(2, 6)" in said[0], said


def test_round_11_figures_refuse_arguments_they_cannot_draw(refused, curves):
    """11: plot_steps, plot_init and final_losses stopped in matplotlib or a KeyError; plot_grid drew a line
    for unigram='a'."""
    steps = nz.layer_norm_steps(H_LAST)
    refused(lambda: nz.plot_steps(H_LAST, steps, printed=H_LAST[:3]), "printed should be None or d=6 numbers", "3")
    refused(lambda: nz.plot_steps(H_LAST, steps, labels=["a"]), "labels should be None or a list of d=6 texts")
    refused(lambda: nz.plot_steps(H_LAST[:3], steps), "steps should be nz.layer_norm_steps(x) for this x of d=3")
    refused(lambda: nz.plot_steps(H_LAST, None), "steps should be the dict of nz.layer_norm_steps(x)", "None")
    refused(lambda: nz.plot_init({"pre": 5}), "results['pre'] should be the dict of nz.layer_gradients", "5")
    refused(lambda: nz.plot_init({"zz": {"h_norm": [1.0], "grads": [1.0]}}), "each key of results", "'zz'")
    refused(lambda: nz.final_losses({"runs": 5}), "curves should be the dict of nz.load_curves()")
    refused(lambda: nz.plot_grid(curves, "a", 1.0), "unigram should be a number", "'a'")
    refused(lambda: nz.plot_residual(curves, nz.load_plain_curves(), best="b"), "best should be a number")


def test_round_11_run_helpers_refuse_bad_arguments_and_gradients_not_yet_there(refused, curves):
    """12: get_run, run_key, layer_gradient_norms and block_gradient_norm raised raw errors; run_key('zz', ...)
    made a key for no placement; block_gradient_norm before backward() gave 0.0."""
    refused(lambda: nz.get_run(dict(curves, runs=5), "pre", 8, 0.03), "curves' runs should be a dict", "5")
    refused(lambda: nz.run_key("pre", 8, "x"), "lr should be a number", "'x'")
    refused(lambda: nz.run_key("zz", 8, 0.03), "norm should be one of 'pre', 'post', 'none'", "'zz'")
    refused(lambda: nz.layer_gradient_norms(5), "should be a helpers.model.Transformer", "5")
    refused(lambda: nz.block_gradient_norm(5), "block should be one layer of a model", "5")
    cat = weights.load_cat()
    refused(lambda: nz.block_gradient_norm(cat.blocks[0]), "no gradients yet: run loss.backward() first")
    refused(lambda: nz.layer_gradient_norms(cat), "layer 0", "no gradients yet")
    assert nz.run_key("pre", 8, 0.03) == "pre/8/0.03"
    grads = nz.layer_gradients("pre", 2)["grads"]
    assert grads.shape == (2,) and (grads > 0).all()
