"""Red team round 17 (reader B, entries 1 and 6): a float16 or bfloat16 model asked to ablate a head met
its float32 row mask in a raw RuntimeError; attention of width d_k = 0 was refused as an overflow."""
import numpy as np
import pytest
import torch

from helpers.model import Config, Transformer
from helpers.reference import attention
from helpers.sampling import compute as sampling


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_round_17_a_half_precision_model_ablates_a_head_in_its_own_dtype(dtype):
    model = Transformer(Config(vocab_size=20, d_model=8, n_heads=2, n_layers=1, d_ff=16, n_max=8)).to(dtype)
    ids = torch.tensor([1, 2, 3, 4])
    out = model(ids, ablate_heads={(0, 0)})
    assert out.dtype == dtype and torch.isfinite(out.float()).all()
    assert not torch.equal(out, model(ids))   # the head's share is gone


def test_round_17_attention_of_width_zero_names_the_width(refused):
    refused(lambda: attention(np.ones((5, 0)), np.ones((5, 0)), np.ones((5, 2))), "d_k of at least 1", "d_k=0")
    refused(lambda: sampling.shared_kv_attention(np.ones((6, 5, 0)), np.ones((2, 5, 0)), np.ones((2, 5, 2))),
            "d_k of at least 1")


def test_round_17_a_learners_hook_that_raises_is_said_in_one_sentence_by_every_measure(refused):
    """(Round 16's heads fixer: a forward hook that raises reached the learner as a raw traceback through
    every measure.) measuring turns the hook's error into one sentence; without a hook an error passes on."""
    from helpers import model as course_model
    from helpers.tour import compute as tour
    from helpers.weights import load_cat
    from helpers.worlds import cat_world

    cat = load_cat()
    handle = cat.blocks[0].register_forward_hook(lambda module, args, out: 1 / 0)
    try:
        refused(lambda: tour.mean_loss(cat, cat_world()), "forward hooks", "ZeroDivisionError")
    finally:
        handle.remove()
    assert tour.mean_loss(cat, cat_world()) > 0
    with pytest.raises(KeyError):   # a course error with no hook in the model is no hook's: it passes on
        with course_model.measuring(cat):
            raise KeyError("x")
