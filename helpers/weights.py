"""Save and load models as safetensors (the weights) plus JSON (the Config). Never pickle.

A model saved as ``data/cat/model`` is two files: ``model.safetensors`` and
``model.json``.
"""
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .errors import CourseInputError, check_finite, check_switch, check_text, fail, message_of, shown
from .files import named, read_json
from .model import Config, Transformer
from .recipes import INDUCTION_CONFIG
from .states import on_the_cpu


def data_folders():
    """The folders that hold the course's data (each with cat/ in it), in the order ``data_dir`` takes them:
    $COURSE_DATA, beside the package, near the cwd."""
    try:
        here = Path.cwd()
    except OSError:   # the working folder was deleted: only the other two places are left
        here = None
    candidates = [os.environ.get("COURSE_DATA"), Path(__file__).resolve().parent.parent / "data",
                  here and here / "data", here and here.parent / "data"]
    return [Path(c) for c in candidates if c and (Path(c) / "cat").is_dir()]


def data_dir():
    """The course's data/ folder: $COURSE_DATA, else beside the package, else near the cwd."""
    folders = data_folders()
    if folders:
        return folders[0]
    fail("expected the course's data/ folder (with cat/ in it) beside the helpers package or the "
         "notebook, but found none; set COURSE_DATA to its path")


MAX_CARD_BYTES = 2**20   # a saved model's .json (its config and card: a few kB)


def check_stem(stem):
    """Where a model is saved: a path (a str or pathlib.Path) without its suffix, whose characters UTF-8 can
    write (a lone surrogate such as '\\ud800' is refused, ``check_text``); return it as a Path."""
    if not isinstance(stem, (str, os.PathLike)) or "\x00" in os.fspath(stem) or not Path(stem).name:
        fail(f"stem should be a path such as 'my_model' (the files get .json and .safetensors), but got {shown(stem)}")
    check_text(os.fspath(stem), "stem", empty=True)
    return Path(stem)


def files_of(stem):
    """The two files of the model saved at ``stem`` (checked by ``check_stem``): (config, weights), its
    whole name with .json and .safetensors appended (a dot in it is kept: 'run.1' is run.1.json, not run.json)."""
    stem = check_stem(stem)
    return stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".safetensors")


def check_not_shipped(stem):
    """Refuse a ``stem`` (a Path) inside one of the course's data folders (``data_folders``): the models
    there are the course's own, which every chapter, explorer and check loads (load_cat, ...)."""
    try:
        where = stem.resolve()   # the stem need not exist; "..", the cwd and symlinks are resolved
    except (OSError, RuntimeError):   # a path that cannot even be resolved: writing it will say so
        return
    for folder in data_folders():
        try:
            inside = folder.resolve() in where.parents
        except (OSError, RuntimeError):
            continue
        if inside:
            fail(f"stem should be a path outside the course's data folder {named(folder)}, whose models every "
                 f"chapter and check loads, but got {named(stem)}: save yours under another name, such as 'my_model'")


def save(model, stem, card=None, *, shipped=False):
    """Write ``stem``.safetensors and ``stem``.json (config, plus an optional ``card`` dict).

    A stem inside the course's data folder is refused (the shipped models); ``shipped=True`` is for the
    course's build scripts in data/ only, which write those models."""
    if not isinstance(model, Transformer):
        fail(f"model should be a helpers.model.Transformer, but got {shown(model)}")
    if card is not None and not isinstance(card, dict):
        fail(f"card should be a dict (or None), but got {shown(card)}")
    stem = check_stem(stem)
    if not check_switch(shipped, "shipped"):
        check_not_shipped(stem)
    config_file, weights_file = files_of(stem)
    meta = {"config": model.cfg.to_dict(), "card": card or {}}
    if model.init != "unit":   # the shipped models' cards predate the choice and mean "unit"
        meta["init"] = model.init
    try:   # before any file is written: a card JSON cannot write would leave the weights without it
        text = json.dumps(meta, indent=2, sort_keys=True) + "\n"
    except (TypeError, ValueError, RecursionError) as error:
        fail(f"card should hold only what JSON can write (text, numbers, True/False, None, lists and dicts with "
             f"text keys), but it cannot be written ({type(error).__name__}: {message_of(error, 80)})")
    if len(text.encode("utf-8")) > MAX_CARD_BYTES:
        fail(f"card should take at most {MAX_CARD_BYTES:,} bytes as JSON (load reads no more), but takes "
             f"{len(text.encode('utf-8')):,}")
    tensors = {name: p.detach().contiguous() for name, p in model.state_dict().items()}
    for name, tensor in tensors.items():   # load refuses such a file: none is written
        if tensor.dtype != torch.float32:
            fail(f"the model's {name} should be float32 (load reads no other), but is {tensor.dtype}: "
                 f"call model.float() before saving")
        check_finite(tensor, f"the model's {name}")
    for f in (config_file, weights_file):   # both checked before either is written: never half a model
        if os.path.lexists(f) and not f.is_file():
            fail(f"expected a file (or nothing) at {named(f)} to write the model to, but there is a folder or "
                 f"another non-file there")
    temporaries = [f.with_name(f.name + ".tmp") for f in (config_file, weights_file)]
    try:   # both written beside their places first, then moved there: a failed save leaves no half a model
        config_file.parent.mkdir(parents=True, exist_ok=True)
        temporaries[0].write_text(text)
        save_file(tensors, str(temporaries[1]))
        temporaries[1].replace(weights_file)
        temporaries[0].replace(config_file)
    except Exception as error:   # noqa: BLE001 — safetensors raises its own error on a path it cannot write
        for f in temporaries:
            try:
                f.unlink(missing_ok=True)
            except OSError:
                pass
        fail(f"expected a folder the model can be written to, but {named(stem)} cannot be written "
             f"({type(error).__name__})")


@on_the_cpu   # (inside torch.device("meta") the model would be built there and loading it a no-op)
def load(stem, expect=None):
    """Rebuild the model saved at ``stem``; ``expect`` (a Config) must match if given."""
    config_file, weights_file = files_of(stem)
    if expect is not None and not isinstance(expect, Config):
        fail(f"expect should be a Config (helpers.model.Config, the model's settings) or None, but got {shown(expect)}")
    for f in (config_file, weights_file):
        if not os.path.lexists(f):   # (False, not an error, for a name too long to be a file)
            fail(f"expected a saved model file at {named(f)}, but there is none")
    meta = read_json(config_file, "the saved model's config", MAX_CARD_BYTES)
    try:
        cfg, init = Config(**meta["config"]), meta.get("init", "unit")
    except (ValueError, KeyError, TypeError) as error:   # Config's own refusal is a course sentence: shown whole
        said = message_of(error, 5_000 if isinstance(error, CourseInputError) else 200)
        fail(f"expected {config_file.name} to hold a model's config as JSON, but it cannot be read "
             f"({type(error).__name__}: {said})")
    if expect is not None and cfg != expect:
        fail(f"the weights file {weights_file.name} is for a different model: expected {expect}, "
             f"but the file holds {cfg}")
    model = Transformer(cfg, init=init)   # the start it was trained from, for row_moves and retraining
    try:
        tensors = load_file(str(weights_file))
    except Exception as error:  # safetensors raises its own errors on a truncated or foreign file
        fail(f"expected {weights_file.name} to be a complete safetensors file, but it cannot be read "
             f"({type(error).__name__})")
    wanted = model.state_dict()
    if set(tensors) != set(wanted) or any(tensors[k].shape != wanted[k].shape for k in wanted):
        fail(f"the weights in {weights_file.name} do not fit its config {cfg}")
    for name, tensor in tensors.items():
        if tensor.dtype != torch.float32:
            fail(f"expected float32 weights, but {name} in {weights_file.name} is {tensor.dtype}")
        if not torch.isfinite(tensor).all():
            fail(f"{name} in {weights_file.name} holds NaN or inf: the file is damaged or the training diverged")
    model.load_state_dict(tensors)
    model.eval()
    return model


def card(stem):
    """The model card saved beside the weights (a dict)."""
    meta = read_json(files_of(stem)[0], "the model card", MAX_CARD_BYTES)
    if not isinstance(meta, dict) or not isinstance(meta.get("card"), dict):
        fail(f"expected a saved model's .json with a card, but {shown(str(stem))}.json holds none")
    return meta["card"]


def load_cat():
    """The trained cat-world model shipped in data/cat/."""
    return load(data_dir() / "cat" / "model")


def load_dragon():
    """The trained dragon-world model shipped in data/dragon/."""
    return load(data_dir() / "dragon" / "model")


def load_induction():
    """The trained induction model shipped in data/induction/."""
    return load(data_dir() / "induction" / "model", expect=INDUCTION_CONFIG)
