"""Save and load models as safetensors (the weights) plus JSON (the Config). Never pickle.

A model saved as ``data/cat/model`` is two files: ``model.safetensors`` and
``model.json``.
"""
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .errors import fail
from .model import Config, Transformer
from .recipes import INDUCTION_CONFIG



def data_dir():
    """The course's data/ folder: $COURSE_DATA, else beside the package, else near the cwd."""
    candidates = [os.environ.get("COURSE_DATA"), Path(__file__).resolve().parent.parent / "data",
                  Path.cwd() / "data", Path.cwd().parent / "data"]
    for c in candidates:
        if c and (Path(c) / "cat").is_dir():
            return Path(c)
    fail("expected the course's data/ folder (with cat/ in it) beside the helpers package or the "
         "notebook, but found none; set COURSE_DATA to its path")


def save(model, stem, card=None):
    """Write ``stem``.safetensors and ``stem``.json (config, plus an optional ``card`` dict)."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    tensors = {name: p.detach().contiguous() for name, p in model.state_dict().items()}
    save_file(tensors, str(stem.with_suffix(".safetensors")))
    meta = {"config": model.cfg.to_dict(), "card": card or {}}
    if model.init != "unit":   # the shipped models' cards predate the choice and mean "unit"
        meta["init"] = model.init
    stem.with_suffix(".json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def load(stem, expect=None):
    """Rebuild the model saved at ``stem``; ``expect`` (a Config) must match if given."""
    stem = Path(stem)
    config_file, weights_file = stem.with_suffix(".json"), stem.with_suffix(".safetensors")
    for f in (config_file, weights_file):
        if not f.exists():
            fail(f"expected a saved model file at {f}, but there is none")
    try:
        meta = json.loads(config_file.read_text())
        cfg, init = Config(**meta["config"]), meta.get("init", "unit")
    except (ValueError, KeyError, TypeError) as error:
        fail(f"expected {config_file.name} to hold a model's config as JSON, but it cannot be read "
             f"({type(error).__name__}: {str(error)[:80]})")
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
    return json.loads(Path(stem).with_suffix(".json").read_text())["card"]


def load_cat():
    """The trained cat-world model shipped in data/cat/."""
    return load(data_dir() / "cat" / "model")


def load_dragon():
    """The trained dragon-world model shipped in data/dragon/."""
    return load(data_dir() / "dragon" / "model")


def load_induction():
    """The trained induction model shipped in data/induction/."""
    return load(data_dir() / "induction" / "model", expect=INDUCTION_CONFIG)
