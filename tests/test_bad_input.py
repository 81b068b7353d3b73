"""Bad input gets one sentence that names what was expected and what arrived (issue 2 §8)."""
import numpy as np
import pytest
import torch

from helpers import reference as ref
from helpers.sampling import compute as sampling
from helpers.errors import CourseInputError
from helpers.model import Config, Transformer
from helpers.weights import data_dir, load, load_cat, load_dragon, save
from helpers.worlds import cat_world


def one_sentence(excinfo, *words):
    message = str(excinfo.value)
    assert "\n" not in message and message.count(". ") == 0, message
    for word in words:
        assert word in message, (word, message)


def test_q_and_k_with_different_d_k():
    with pytest.raises(CourseInputError) as e:
        ref.attention(np.ones((3, 5)), np.ones((3, 4)), np.ones((3, 4)))
    one_sentence(e, "K has d_k=4", "Q has d_k=5")


def test_mask_of_the_wrong_shape():
    with pytest.raises(CourseInputError) as e:
        ref.attention(np.ones((3, 4)), np.ones((3, 4)), np.ones((3, 4)), mask=ref.causal_mask(4))
    one_sentence(e, "(4, 4)", "(3, 3)")


@pytest.mark.parametrize("kwargs, words", [
    (dict(temperature=-0.5), ["temperature", ">= 0", "-0.5"]),
    (dict(top_p=0), ["top_p", "(0, 1]", "0"]),
    (dict(top_p=1.5), ["top_p", "(0, 1]", "1.5"]),
    (dict(top_k=0), ["top_k", "at least 1", "0"]),
])
def test_sampling_settings_out_of_range(kwargs, words):
    with pytest.raises(CourseInputError) as e:
        sampling.next_distribution(torch.zeros(5), **kwargs)
    one_sentence(e, *words)


def test_a_word_outside_the_vocabulary():
    with pytest.raises(CourseInputError) as e:
        cat_world().tokenizer.encode("<BOS> the zebra sat")
    one_sentence(e, "'zebra'", "<PAD>", "slow")


def test_a_head_index_out_of_range():
    model = load_cat()
    with pytest.raises(CourseInputError) as e:
        model(torch.tensor([1, 4, 5]), ablate_heads={(0, 2)})
    one_sentence(e, "head=2", "heads 0..1")


def test_a_weights_file_of_another_config(tmp_path):
    other = Transformer(Config(vocab_size=20, d_model=6, n_heads=3, n_layers=2, d_ff=8, n_max=16))
    save(other, tmp_path / "other")
    with pytest.raises(CourseInputError) as e:
        load(tmp_path / "other", expect=load_cat().cfg)
    one_sentence(e, "different model", "n_heads=2", "n_heads=3")


def test_weights_that_do_not_fit_their_config(tmp_path):
    stem = tmp_path / "bad"
    (tmp_path / "bad.json").write_text((data_dir() / "dragon" / "model.json").read_text())
    (tmp_path / "bad.safetensors").write_bytes((data_dir() / "cat" / "model.safetensors").read_bytes())
    with pytest.raises(CourseInputError) as e:
        load(stem)
    one_sentence(e, "do not fit")


def test_a_prompt_longer_than_n_max_for_learned_positions():
    model = load_dragon()
    with pytest.raises(CourseInputError) as e:
        model(torch.zeros(129, dtype=torch.long))
    one_sentence(e, "n_max=128", "129")


def test_token_ids_outside_the_vocabulary():
    with pytest.raises(CourseInputError) as e:
        load_cat()(torch.tensor([1, 25]))
    one_sentence(e, "[0, 20)", "25")


def test_config_that_does_not_split_into_heads():
    with pytest.raises(CourseInputError) as e:
        Config(vocab_size=5, d_model=6, n_heads=4, n_layers=1, d_ff=0)
    one_sentence(e, "d_model=6", "n_heads=4")
