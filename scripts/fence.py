"""The fence around a student's run (scripts/autograde.py): what it may see, write and reach.

* **bubblewrap** (``bwrap``, Debian's package bubblewrap), where it works;
* else a **user namespace** through util-linux's ``unshare``, where the kernel allows them
  (``enter_fence`` below sets it up inside, as root of the new namespace);
* else nothing runs (``FenceError``), unless the instructor passes ``--unfenced``.

In either fence the run sees the whole machine read-only except its own folder, sees none of the
hidden folders nor the unix sockets under SOCKET_DIRS (empty in their place), has no network (a network namespace of its own, with
nothing in it) and no capability. ``fence_works`` tries a fence on a trial run before it is
chosen; tests/test_autograde.py checks each fence this machine has on writes and connections.

This file imports nothing of the course's (the user-namespace fence runs it as a script, before
the run starts).
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

BUBBLEWRAP, USER_NAMESPACE, UNFENCED = "bubblewrap", "user namespace", "unfenced (--unfenced)"
FENCE_CHECK_SECONDS = 60   # the trial run that tells whether a fence works here
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")   # the user-namespace fence's /dev
# Where the machine's unix sockets live (a docker or database socket, the user's session bus): a
# socket connects on a read-only mount too, and a network namespace of its own does not hide a
# path, so each fence covers these with an empty tmpfs (the run's folder, even under /tmp, is put
# back). Sockets elsewhere (under a home folder, /var/lib) are not covered: see ``fence_works``.
SOCKET_DIRS = ("/run", "/var/run", "/tmp", "/var/tmp")


def covered(hidden=()):
    """The folders a fence covers with an empty tmpfs, in order: the socket folders that are real
    folders here (not a link to another, as /var/run -> /run), then ``hidden``."""
    return [p for p in SOCKET_DIRS if os.path.isdir(p) and not os.path.islink(p)] + [str(p) for p in hidden]


class FenceError(Exception):
    """No fence works on this machine and the instructor did not pass --unfenced (one sentence)."""


def bubblewrap_prefix(folder, hidden=()):
    """bubblewrap (Debian's package bubblewrap): the run sees the whole machine read-only except
    ``folder``, none of ``hidden`` nor of SOCKET_DIRS, and no network. It drops every capability (as root too, so
    the run cannot remount anything writable)."""
    command = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
               "--size", str(64 * 2**20), "--tmpfs", "/dev/shm"]
    for path in covered(hidden):
        if Path(path).is_dir():
            command += ["--tmpfs", path]
    folder = str(folder)
    sockets = [arg for path in covered() for arg in ("--remount-ro", path)]   # after the folder is bound in
    return command + ["--bind", folder, folder, *sockets, "--unshare-user", "--unshare-net", "--unshare-pid",
                      "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--chdir", folder]


def user_namespace_prefix(folder, hidden=()):
    """util-linux's unshare, where the kernel allows user namespaces: new user, mount, network and
    process namespaces; inside, ``enter_fence`` makes every mount read-only but ``folder``, hides
    ``hidden`` and drops every capability before the run starts. No network but its own loopback."""
    return [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--net", "--mount", "--pid",
            "--fork", "--mount-proc", "--kill-child", "--", sys.executable, "-I", str(Path(__file__).resolve()),
            str(folder), json.dumps([str(p) for p in hidden]), "--"]


PREFIXES = {BUBBLEWRAP: bubblewrap_prefix, USER_NAMESPACE: user_namespace_prefix, UNFENCED: lambda folder, hidden=(): []}


def _what(x):
    """What arrived, in a few words (never all of a long text)."""
    if isinstance(x, (list, tuple, dict, set, frozenset)):
        return f"a {type(x).__name__} of {len(x):,} item{'' if len(x) == 1 else 's'}"
    short = isinstance(x, (str, float)) and len(str(x)) <= 60 or isinstance(x, int) and x.bit_length() <= 64
    text = ascii(x) if short else None
    if text or x is None:
        return text or "None"
    if isinstance(x, int):
        return f"a whole number of {x.bit_length():,} bits"
    return f"a text of {len(x):,} characters" if isinstance(x, str) else f"a value of type {type(x).__name__}"


def fence_prefix(fence, folder, hidden=()):
    """The command that puts ``fence`` around a run in ``folder`` ([] when unfenced)."""
    if not isinstance(fence, str) or fence not in PREFIXES:
        raise ValueError(f"expected a fence among {', '.join(PREFIXES)}, but got {_what(fence)}")
    return PREFIXES[fence](folder, hidden)


def mount_points():
    """Every mount point this process sees, from /proc/self/mountinfo (octal escapes undone)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        field = line.split(" ")[4]
        points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field))
    return points


def loopback_up():
    """Bring up the network namespace's own loopback (the kernel and its client talk over it);
    it reaches nothing outside the namespace, not even the machine's own 127.0.0.1."""
    import fcntl
    import socket
    import struct

    get_flags, set_flags, up = 0x8913, 0x8914, 0x1   # SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock, get_flags, struct.pack("16sH14s", b"lo", 0, b"")))[1]
        fcntl.ioctl(sock, set_flags, struct.pack("16sH14s", b"lo", flags | up, b""))


def enter_fence(folder, hidden, command):
    """Inside unshare's namespaces, as root of its own user namespace: ``folder`` stays writable,
    every other mount becomes read-only, each of SOCKET_DIRS and ``hidden`` is covered by an
    empty read-only tmpfs, /dev is a tmpfs of its own with DEVICES only (and a small /dev/shm), the namespace's
    loopback is up; then ``command``
    runs with no capability at all and no way to gain one (so it cannot remount anything, nor
    write /proc, so no nested user namespace either). Any step that fails ends the run."""
    tools = {name: os.path.realpath(shutil.which(name) or name) for name in ("mount", "setpriv")}   # before /tmp is covered

    def mount(*args):
        done = subprocess.run([tools["mount"], "--no-mtab", *args], capture_output=True, text=True)   # / is read-only
        if done.returncode:
            print(f"grader: the user-namespace fence could not be set up (mount {' '.join(args)}: "
                  f"{done.stderr.strip()[:200]})", flush=True)
            sys.exit(97)

    try:
        loopback_up()
    except OSError as error:
        print(f"grader: the user-namespace fence could not bring up its loopback ({error})", flush=True)
        sys.exit(97)
    mount("--bind", folder, folder)
    os.chdir(folder)
    for point in dict.fromkeys(mount_points()):
        if point != folder:
            mount("-o", "remount,bind,ro", point)
    # a /dev of its own, as bubblewrap's: the machine's disks and consoles are not there
    dev = os.path.join(folder, ".dev")
    os.mkdir(dev)
    mount("-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", dev)
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            open(os.path.join(dev, name), "w").close()
            mount("--bind", f"/dev/{name}", os.path.join(dev, name))
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, os.path.join(dev, name))
    os.mkdir(os.path.join(dev, "shm"))
    mount("-t", "tmpfs", "-o", f"size={64 * 2**20}", "tmpfs", os.path.join(dev, "shm"))
    mount("--move", dev, "/dev")
    os.rmdir(dev)
    mounted = []
    for path in covered(hidden):   # one may lie under another (a hidden folder under /tmp): gone already
        if os.path.isdir(path) and not os.path.islink(path):
            mount("-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", path)
            mounted.append(path)
    os.makedirs(folder, exist_ok=True)              # in a hidden path's tmpfs, the folder is not there
    mount("--no-canonicalize", "--bind", "/proc/self/cwd", folder)   # the folder itself, writable (our cwd)
    for path in mounted:
        mount("-o", "remount,bind,ro", path)
    os.chdir(folder)
    os.execv(tools["setpriv"], ["setpriv", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--", *command])


def fence_works(fence):
    """None if ``fence`` runs a trial command here that can write its folder and nothing else; else why not."""
    import tempfile

    if fence == BUBBLEWRAP and not shutil.which("bwrap"):
        return "bwrap is not installed"
    if fence == USER_NAMESPACE and not all(map(shutil.which, ("unshare", "mount", "setpriv"))):
        return "util-linux's unshare, mount or setpriv is missing"
    with tempfile.TemporaryDirectory(prefix="fence-check-") as base:
        folder, hidden = Path(base, "run"), Path(base, "hidden")
        folder.mkdir()
        hidden.mkdir()
        trial = ("import pathlib; pathlib.Path('written').write_text('ok')\n"
                 f"try:\n    open({str(Path(base, 'outside'))!r}, 'w')\nexcept OSError:\n    pass")
        try:
            done = subprocess.run(fence_prefix(fence, folder, [hidden]) + [sys.executable, "-c", trial], cwd=folder,
                                  capture_output=True, text=True, timeout=FENCE_CHECK_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"its trial run failed ({type(error).__name__})"
        if done.returncode or not (folder / "written").exists():
            said = (done.stderr or done.stdout).strip().splitlines()
            return f"its trial run failed ({said[-1][:160] if said else f'exit code {done.returncode}'})"
        if Path(base, "outside").exists():
            return "its trial run could write outside its folder"
    return None


def choose_fence(unfenced=False):
    """The fence the runs get: bubblewrap where it works, else a user namespace; with neither,
    no fence only if the instructor said so (``unfenced``), else FenceError, before anything runs."""
    if type(unfenced) is not bool:
        raise TypeError(f"expected unfenced to be True or False, but got {_what(unfenced)}")
    why = {}
    for fence in (BUBBLEWRAP, USER_NAMESPACE):
        why[fence] = fence_works(fence)
        if why[fence] is None:
            return fence
    if unfenced:
        return UNFENCED
    raise FenceError(
        f"expected a fence around the students' code (bubblewrap, or a user namespace through util-linux's "
        f"unshare), but neither works on this machine (bubblewrap: {why[BUBBLEWRAP]}; user namespace: "
        f"{why[USER_NAMESPACE]}), so no submission was run: install bubblewrap (Debian's package bubblewrap), "
        f"or pass --unfenced to run the submissions without a fence, where they can read and change your "
        f"files and reach the network")


if __name__ == "__main__":   # inside unshare's namespaces: FOLDER HIDDEN_JSON -- COMMAND...
    if sys.argv[3:4] == ["--"] and sys.argv[4:]:
        enter_fence(sys.argv[1], json.loads(sys.argv[2]), sys.argv[4:])
    sys.exit("usage: fence.py FOLDER HIDDEN_JSON -- COMMAND (run by the user-namespace fence)")
