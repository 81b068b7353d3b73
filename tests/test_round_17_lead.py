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
