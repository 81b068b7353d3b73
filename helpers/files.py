"""Reading a file a learner (or a notebook) names: a regular file of at most a stated number of
bytes, or one sentence; never a device such as /dev/zero, which would be read until memory ran out."""
import json
import os
import stat

from .errors import count, fail, shown


def named(path):
    """A path as a sentence shows it: its repr, cut to its last 100 characters (the file's name stays)."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    return repr(text if len(text) <= 100 else "..." + text[-97:])


def read_bytes(path, what, most):
    """The bytes of the regular file at ``path`` (a str or os.PathLike), refused with a sentence
    before it is read if it is missing, not a regular file (a device, a folder, a pipe) or larger
    than ``most`` bytes. ``what`` names the file in the sentence ("the shipped curves")."""
    if not isinstance(path, (str, os.PathLike)):
        fail(f"{what} should be named by a path (a str), but got {shown(path)}")
    unreadable = f"expected {what} at {named(path)}, but it cannot be read"
    try:
        info = os.stat(path)
    except (OSError, ValueError) as error:   # ValueError: a path with a NUL byte in it
        fail(f"{unreadable} ({type(error).__name__})")
    if not stat.S_ISREG(info.st_mode):
        fail(f"expected {what} in a regular file, but {named(path)} is not one (a device, a folder or a pipe)")
    if info.st_size > most:
        fail(f"expected {what} in at most {count(most)} bytes, but {named(path)} has {count(info.st_size)}")
    try:
        with open(path, "rb") as file:
            data = file.read(most + 1)
    except OSError as error:
        fail(f"{unreadable} ({type(error).__name__})")
    if len(data) > most:   # the file grew while it was read
        fail(f"expected {what} in at most {count(most)} bytes, but {named(path)} has more")
    return data


def read_json(path, what, most):
    """The JSON data of the regular file at ``path`` (see ``read_bytes``); a file that is not JSON
    (UTF-8 text) gets a sentence too."""
    data = read_bytes(path, what, most)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as error:
        fail(f"expected {what} as JSON, but {named(path)} is not JSON ({type(error).__name__})")
