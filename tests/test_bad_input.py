"""Sampling settings out of range get one sentence (moves into tests/test_sampling.py)."""
import pytest
import torch

from helpers.sampling import compute as sampling


@pytest.mark.parametrize("kwargs, words", [
    (dict(temperature=-0.5), ["temperature", ">= 0", "-0.5"]),
    (dict(top_p=0), ["top_p", "(0, 1]", "0"]),
    (dict(top_p=1.5), ["top_p", "(0, 1]", "1.5"]),
    (dict(top_k=0), ["top_k", "at least 1", "0"]),
])
def test_sampling_settings_out_of_range(refused, kwargs, words):
    refused(lambda: sampling.next_distribution(torch.zeros(5), **kwargs), *words)
