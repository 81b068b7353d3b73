"""Temperature, top-k, top-p and generation with and without the KV cache."""
import torch

from helpers.sampling import compute as sampling
from helpers.weights import load_cat, load_dragon
from helpers.worlds import cat_world, dragon_world

LOGITS = torch.tensor([2.0, 1.0, 0.5, -1.0, 3.0])


def test_temperature_zero_is_greedy_and_one_is_softmax():
    assert sampling.with_temperature(LOGITS, 0).tolist() == [0, 0, 0, 0, 1]
    assert torch.allclose(sampling.with_temperature(LOGITS, 1), torch.softmax(LOGITS, -1))


def test_adding_a_constant_changes_nothing_and_argmax_never_moves():
    for t in (0.3, 1.0, 5.0):
        p = sampling.with_temperature(LOGITS, t)
        assert torch.allclose(p, sampling.with_temperature(LOGITS + 7.0, t))
        assert p.argmax() == 4


def test_top_k_keeps_k_tokens_renormalised():
    p = sampling.top_k_filter(torch.softmax(LOGITS, -1), 2)
    assert (p > 0).sum() == 2 and torch.isclose(p.sum(), torch.tensor(1.0)) and p[4] > p[0] > 0


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    assert sampling.nucleus(probs, 0.5).tolist() == [0]
    assert sampling.nucleus(probs, 0.8).tolist() == [0, 1]
    assert sampling.nucleus(probs, 0.81).tolist() == [0, 1, 2]
    assert sampling.nucleus(probs, 1.0).tolist() == [0, 1, 2, 3]


def test_seeded_draws_follow_the_probabilities_and_repeat():
    probs = torch.tensor([0.6, 0.3, 0.1])
    g = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.tensor([sampling.draw(probs, g) for _ in range(10_000)]), minlength=3)
    assert torch.allclose(counts / 10_000, probs, atol=0.02)
    first = [sampling.draw(probs, torch.Generator().manual_seed(5)) for _ in range(3)]
    assert first == [sampling.draw(probs, torch.Generator().manual_seed(5)) for _ in range(3)]


def test_generate_with_and_without_cache_gives_the_same_tokens():
    for model, world, prompt in ((load_cat(), cat_world(), "<BOS> the"),
                                 (load_dragon(), dragon_world(n=1), "<BOS> dragon drinks")):
        ids = world.tokenizer.encode(prompt)
        for settings in (dict(temperature=0), dict(temperature=1.0, seed=3), dict(top_p=0.9, seed=1)):
            a = sampling.generate(model, ids, 8, use_cache=True, **settings)
            b = sampling.generate(model, ids, 8, use_cache=False, **settings)
            assert a.tolist() == b.tolist()


def test_greedy_cat_generation_is_a_sentence_of_the_world():
    world = cat_world()
    out = sampling.generate(load_cat(), world.tokenizer.encode("<BOS> the cat sat"), 6, temperature=0,
                            stop_id=world.tokenizer.ids["<EOS>"])
    assert world.tokenizer.decode(out) in world.sentences


def test_generate_passes_switches_and_refuses_a_cache_without_the_mask():
    import pytest
    from helpers.errors import CourseInputError
    model, world = load_cat(), cat_world()
    ids = world.tokenizer.encode("<BOS> the")
    free = sampling.generate(model, ids, 4, temperature=0, use_cache=False, causal=False)
    assert free.tolist() != sampling.generate(model, ids, 4, temperature=0).tolist()
    with pytest.raises(CourseInputError, match="causal mask"):
        sampling.generate(model, ids, 4, causal=False)
