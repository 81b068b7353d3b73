"""helpers.weights: safetensors + JSON, refusing files of another model with one sentence."""
import pytest
import torch

from helpers.errors import CourseInputError
from helpers.model import Config, Transformer
from helpers.weights import card, data_dir, load, save


def test_save_and_load_give_the_same_model(tmp_path, cat):
    save(cat, tmp_path / "copy", card={"note": "test"})
    again = load(tmp_path / "copy", expect=cat.cfg)
    assert all(torch.equal(again.state_dict()[k], v) for k, v in cat.state_dict().items())
    assert card(tmp_path / "copy") == {"note": "test"}


def test_a_weights_file_of_another_config(tmp_path, cat):
    other = Transformer(Config(vocab_size=20, d_model=6, n_heads=3, n_layers=2, d_ff=8, n_max=16))
    save(other, tmp_path / "other")
    with pytest.raises(CourseInputError, match="different model.*n_heads=2.*n_heads=3"):
        load(tmp_path / "other", expect=cat.cfg)


def test_weights_that_do_not_fit_their_config(tmp_path):
    (tmp_path / "bad.json").write_text((data_dir() / "dragon" / "model.json").read_text())
    (tmp_path / "bad.safetensors").write_bytes((data_dir() / "cat" / "model.safetensors").read_bytes())
    with pytest.raises(CourseInputError, match="do not fit"):
        load(tmp_path / "bad")


def test_a_missing_file(tmp_path):
    with pytest.raises(CourseInputError, match="no.*file|there is none"):
        load(tmp_path / "nothing")
