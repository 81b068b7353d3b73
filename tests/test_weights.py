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


def copy_of_cat(tmp_path):
    for suffix in (".json", ".safetensors"):
        (tmp_path / f"cat{suffix}").write_bytes((data_dir() / "cat" / f"model{suffix}").read_bytes())
    return tmp_path / "cat"


def test_a_truncated_weights_file(refused, tmp_path):
    stem = copy_of_cat(tmp_path)
    data = stem.with_suffix(".safetensors").read_bytes()
    stem.with_suffix(".safetensors").write_bytes(data[:len(data) // 2])
    refused(lambda: load(stem), "complete safetensors file", "cat.safetensors")


def test_a_config_that_is_not_json(refused, tmp_path):
    stem = copy_of_cat(tmp_path)
    stem.with_suffix(".json").write_text("{not json")
    refused(lambda: load(stem), "cat.json", "JSON")


@pytest.mark.parametrize("change, words", [
    (lambda t: t.to(torch.int32), ["float32", "torch.int32"]),
    (lambda t: t * float("nan"), ["NaN or inf"]),
])
def test_weights_of_the_wrong_kind(refused, tmp_path, cat, change, words):
    from safetensors.torch import save_file
    stem = copy_of_cat(tmp_path)
    tensors = {k: v.clone() for k, v in cat.state_dict().items()}
    tensors["E"] = change(tensors["E"])
    save_file(tensors, str(stem.with_suffix(".safetensors")))
    refused(lambda: load(stem), "E", *words)


def test_a_path_that_cannot_hold_a_model_is_refused_in_one_sentence(refused, tmp_path):
    """Red team round 3: card('nope'), load(None), save(None, ...) and a path under /proc were tracebacks."""
    from helpers import weights
    refused(lambda: weights.card(tmp_path / "nope"), "model card", "FileNotFoundError")
    refused(lambda: weights.load(None), "stem", "None")
    refused(lambda: weights.save(None, tmp_path / "m"), "Transformer", "None")
    refused(lambda: weights.save(weights.load_cat(), "/proc/course-model"), "cannot be written")
    weights.save(weights.load_cat(), tmp_path / "m", card={"note": 1})
    assert weights.card(tmp_path / "m") == {"note": 1} and weights.load(tmp_path / "m").cfg.d_model == 6


# ------------------------------------------------------------------ red team round 8

def test_round_8_save_checks_the_card_before_writing_anything(tmp_path, cat, refused):
    refused(lambda: save(cat, tmp_path / "x", card={"x": object()}), "card should hold only what JSON can write")
    refused(lambda: save(cat, tmp_path / "x", card={"x": "y" * 2**21}), "card should take at most")
    assert list(tmp_path.iterdir()) == []


def test_round_8_a_stem_without_a_name_is_refused(refused):
    for stem in ("", ".", "/"):
        refused(lambda: load(stem), "stem should be a path")
