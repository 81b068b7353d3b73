"""helpers/frames.py and frames.js: the page-kernel protocol checks every message before acting.

A message the page may not send (content None, a message nested 500 deep, a 10 MB text, wrong
types, unknown kinds or keys, binary data) is dropped with one line on the ``course.frames``
logger: no exception leaves the comm handler, nothing is printed, the explorer is as it was.
The page's own check (frames.js ``checkMessage``) runs in Node where Node is installed.
"""
import json
import logging
import shutil
import subprocess
from pathlib import Path

import ipywidgets as widgets
import pytest

from helpers import frames
from helpers.explorer import Explorer

pytest.importorskip("anywidget")


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


GOOD = [
    {"kind": "hello", "lab": True},
    {"kind": "more", "id": 3},
    {"kind": "want", "state": [1.0, ["b", 1]]},
    {"kind": "forget", "states": [[1.0, ["a", 0]], [0.5, ["b", 1]]]},
]
BAD = {
    "content None": None,
    "a list": [{"kind": "hello", "lab": True}],
    "no kind": {"lab": True},
    "an unknown kind": {"kind": "shutdown"},
    "a kind that is not text": {"kind": ["hello"]},
    "an extra key": {"kind": "hello", "lab": True, "eval": "import os"},
    "a missing key": {"kind": "want"},
    "lab as the text 'False'": {"kind": "hello", "lab": "False"},
    "id as a bool": {"kind": "more", "id": True},
    "id negative": {"kind": "more", "id": -1},
    "id as a float": {"kind": "more", "id": 1.5},
    "id huge": {"kind": "more", "id": 2**64},
    "a state of one entry too many": {"kind": "want", "state": [1.0, ["b", 1], 3]},
    "a state that is a dict": {"kind": "want", "state": {"slope": 1.0}},
    "a menu entry that is a number": {"kind": "want", "state": [1.0, 1]},
    "a menu index that is a bool": {"kind": "want", "state": [1.0, ["b", True]]},
    "a NaN value": {"kind": "want", "state": [float("nan"), ["b", 1]]},
    "an infinite value": {"kind": "want", "state": [float("inf"), ["b", 1]]},
    "nested 500 deep": {"kind": "want", "state": nested(500)},
    "forget nested 500 deep": {"kind": "forget", "states": nested(500)},
    "a 10 MB text": {"kind": "want", "state": ["x" * 10_000_000, ["b", 1]]},
    "a 10 MB label": {"kind": "want", "state": [1.0, ["x" * 10_000_000, 1]]},
    "forget a million states": {"kind": "forget", "states": [[1.0, ["a", 0]]] * 1_000_000},
    "states as text": {"kind": "forget", "states": "all"},
}


@pytest.fixture
def explorer():
    controls = {"slope": widgets.FloatSlider(value=1.0, min=0, max=2, step=0.5),
                "word": widgets.Dropdown(options=["a", "b"], value="b")}
    drawn = []

    def render(slope, word):
        drawn.append((slope, word))
        return b"\x89PNG picture"

    ex = Explorer(controls, render)
    ex.sent_messages = []
    ex.frames.send = lambda content, buffers=None: ex.sent_messages.append(content)
    ex.drawn_calls = drawn
    return ex


def page_says(ex, content, buffers=()):
    """What ipywidgets does with a custom message from the page (the comm's handler)."""
    ex.frames._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": list(buffers)})


def snapshot(ex):
    return (ex.live, set(ex.sent), set(ex.refused), list(ex.failed), ex.resent, ex.renders, list(ex.drawn_calls),
            list(ex.sent_messages))


@pytest.mark.parametrize("content", GOOD, ids=[m["kind"] for m in GOOD])
def test_the_messages_the_page_sends_pass(content):
    assert frames.check_message(content, [], kinds=["value", "label"]) is None


@pytest.mark.parametrize("name", BAD)
def test_a_bad_message_is_one_sentence(name):
    sentence = frames.check_message(BAD[name], [], kinds=["value", "label"])
    assert sentence and sentence.startswith("expected") and " but " in sentence and "\n" not in sentence
    assert len(sentence) < 400   # never the message itself


def test_binary_data_with_a_page_message_is_refused():
    assert "no binary data" in frames.check_message({"kind": "more", "id": 1}, [b"\x00" * 10])


@pytest.mark.parametrize("name", BAD)
def test_the_widget_drops_a_bad_message_with_a_log_line_and_nothing_changes(name, explorer, caplog, capsys):
    page_says(explorer, {"kind": "hello", "lab": True})
    before = snapshot(explorer)
    with caplog.at_level(logging.WARNING, logger="course.frames"):
        page_says(explorer, BAD[name])                      # no exception leaves the handler
    assert snapshot(explorer) == before
    lines = [r.getMessage() for r in caplog.records if r.name == "course.frames"]
    assert len(lines) == 1 and lines[0].startswith("explorer: a message from the page was dropped: expected")
    assert "\n" not in lines[0] and len(lines[0]) < 500
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err


def test_good_messages_still_reach_the_explorer(explorer):
    page_says(explorer, {"kind": "hello", "lab": True})
    assert explorer.live and explorer.sent_messages[-1]["kind"] == "frame"
    page_says(explorer, {"kind": "more", "id": 1})
    assert explorer.sent_messages[-1]["id"] == 1


def test_a_handler_that_fails_is_one_log_line(explorer, caplog):
    def broken(*args):
        raise RuntimeError("the render broke\nacross lines")

    explorer.frames._msg_callbacks.callbacks.clear()
    explorer.frames.on_msg(broken)
    with caplog.at_level(logging.WARNING, logger="course.frames"):
        page_says(explorer, {"kind": "more", "id": 1})
        explorer.frames._handle_msg({"content": None, "buffers": []})   # not even a comm message
    lines = [r.getMessage() for r in caplog.records if r.name == "course.frames"]
    assert len(lines) == 2 and all(line.startswith("explorer: a message from the page could not be handled")
                                   for line in lines)
    assert "RuntimeError: the render broke\\nacross lines" in lines[0]
    assert all(r.exc_info is None for r in caplog.records)      # no traceback


JS = Path(frames.__file__).with_name("frames.js")


@pytest.mark.skipif(not shutil.which("node"), reason="Node is not installed: frames.js's check runs in the page only")
def test_the_page_checks_the_kernels_messages_too(tmp_path):
    cases = {
        "a frame": ({"kind": "frame", "state": [1.0, ["b", 1]], "prefetch": False, "id": None}, True, None),
        "done": ({"kind": "done", "id": 4}, False, None),
        "null": (None, False, "expected a message object"),
        "an unknown kind": ({"kind": "eval"}, False, "expected a message kind"),
        "a state too short": ({"kind": "frame", "state": [1.0], "prefetch": False, "id": 1}, True, "2 entries"),
        "a NaN entry": ({"kind": "frame", "state": ["NaN", ["b", 1]], "prefetch": False, "id": 1}, True, None),
        "no picture": ({"kind": "frame", "state": [1.0, ["b", 1]], "prefetch": False, "id": 1}, False, "picture"),
        "prefetch as text": ({"kind": "frame", "state": [1.0, ["b", 1]], "prefetch": "false", "id": 1}, True,
                             "prefetch"),
        "a negative id": ({"kind": "done", "id": -2}, False, "whole number"),
    }
    script = tmp_path / "check.mjs"
    script.write_text(
        f"import {{ checkMessage }} from {json.dumps(JS.as_uri())};\n"
        f"const cases = {json.dumps({k: [m, b] for k, (m, b, _) in cases.items()})};\n"
        "const out = {};\n"
        "for (const [name, [msg, withPicture]] of Object.entries(cases))\n"
        "  out[name] = checkMessage(msg, withPicture ? [new DataView(new ArrayBuffer(8))] : [], 2);\n"
        "console.log(JSON.stringify(out));\n")
    done = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=60)
    said = json.loads(done.stdout)
    for name, (_, _, words) in cases.items():
        if words is None:
            assert said[name] is None, (name, said[name])
        else:
            assert said[name] and words in said[name] and said[name].startswith("expected"), (name, said[name])


def test_round_9_a_message_is_json_s_own_types_or_refused():
    """A dict subclass whose .get raised, or buffers that are not bytes, raised out of check_message."""
    class Odd(dict):
        def get(self, *args):
            raise RuntimeError("get")

    assert "expected a message" in frames.check_message(Odd(kind="hello", lab=True))
    assert "no binary data" in frames.check_message({"kind": "hello", "lab": True}, [1])
    assert "no binary data" in frames.check_message({"kind": "hello", "lab": True}, (b for b in [b"x"]))
    assert frames.check_message({"kind": "hello", "lab": True}, []) is None
