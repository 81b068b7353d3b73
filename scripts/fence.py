"""The fence around a student's run (scripts/autograde.py): what it may see, write and reach.

* **bubblewrap** (``bwrap``, Debian's package bubblewrap), where it works;
* else a **user namespace** through util-linux's ``unshare``, where the kernel allows them
  (``enter_fence`` below sets it up inside, as root of the new namespace);
* else nothing runs (``FenceError``), unless the instructor passes ``--unfenced``.

In either fence the run sees the whole machine read-only except its own folder, sees none of the
hidden folders, none of the people's folders (``homes``: /home, /root, the instructor's $HOME, /srv,
/mnt, /media, /opt) nor the unix sockets under SOCKET_DIRS (empty in their place), but for what a
run needs, bound back read-only (``shown``: the interpreter, its site-packages and the course's
package and data); it has no network (a network namespace of its own, with nothing in it), System V
IPC and POSIX message queues of its own (an IPC namespace: nothing shared with the machine or
another run), a host name of its own, no capability, no user namespace of its own to gain one in
(bubblewrap 0.8 and later; an older one allows one), and /proc and /sys read-only: graded as root,
the run is still root to the kernel, and most of the kernel's settings under /proc/sys (its host
name, the program it runs when a process crashes) ask for nothing more. ``fence_works`` tries a fence on a trial run before it is chosen;
tests/test_autograde.py checks each fence this machine has on writes and connections.

This file imports nothing of the course's (the user-namespace fence runs it as a script, before
the run starts).
"""
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

BUBBLEWRAP, USER_NAMESPACE, UNFENCED = "bubblewrap", "user namespace", "unfenced (--unfenced)"
FENCE_CHECK_SECONDS = 60   # the trial run that tells whether a fence works here
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")   # each fence's /dev
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"))   # and these links
DEV_BYTES, SHM_BYTES = 2**20, 64 * 2**20   # each fence's /dev and /dev/shm: both tmpfs, in memory, so capped
# Where the machine's unix sockets live (a docker or database socket, the user's session bus): a
# socket connects on a read-only mount too, and a network namespace of its own does not hide a
# path, so each fence covers these with an empty tmpfs (the run's folder, even under /tmp, is put
# back). Sockets elsewhere (under a home folder, /var/lib) are not covered: see ``fence_works``.
SOCKET_DIRS = ("/run", "/var/run", "/tmp", "/var/tmp")
# Where people's own files are (another checkout with solutions, other classes' work): hidden from
# every run, as is the instructor's $HOME; what a run needs there is bound back (``shown``).
HOMES = ("/home", "/root", "/srv", "/mnt", "/media", "/opt")
SYSTEM = ("/usr", "/bin", "/lib", "/etc")   # a "home" holding one of these is not hidden ($HOME=/ of a service)


def sockets():
    """The socket folders that are real folders here (not a link to another, as /var/run -> /run)."""
    return [p for p in SOCKET_DIRS if os.path.isdir(p) and not os.path.islink(p)]


def homes():
    """HOMES and the instructor's $HOME (of this process: a run's is its own folder) that are folders
    here, each as its real path (/home may be a link to /var/home), none that holds one of SYSTEM."""
    found = []
    for path in (*HOMES, os.environ.get("HOME", "")):
        real = os.path.realpath(path) if path and os.path.isdir(path) else None
        if real and real not in found and not any(within(system, real) for system in SYSTEM):
            found.append(real)
    return found


def within(path, folder):
    """Whether ``path`` is ``folder`` or lies inside it (by their names)."""
    return Path(path).is_relative_to(folder)


def covered(hidden=()):
    """The folders a fence covers with an empty tmpfs, in order: ``sockets``, ``homes``, then
    ``hidden``; one that lies inside another of them is covered already, and left out."""
    paths = list(dict.fromkeys(sockets() + homes() + [str(p) for p in hidden]))
    return [path for path in paths if not any(within(path, other) for other in paths if other != path)]


def shown(hidden=(), needed=()):
    """What a run needs that ``homes`` or ``hidden`` would hide, bound back read-only over them: the
    interpreter (sys.prefix, sys.base_prefix, the folder of sys.executable), its site-packages, every
    sys.path folder outside ``hidden`` (the driver's own under the course are not the run's) and
    ``needed`` (the course's package and data). Never a folder that holds a hidden one, nor one under
    SOCKET_DIRS (kept covered, as the run's sockets are); each once, the outermost."""
    import site

    hidden = [str(p) for p in hidden]
    interpreter = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                   os.path.dirname(os.path.realpath(sys.executable)), *site.getsitepackages()]
    paths = interpreter + [p for p in sys.path if not any(within(os.path.abspath(p or "."), h) for h in hidden)]
    paths = {real for p in paths + [str(p) for p in needed] if p and os.path.isdir(p)
             for real in (os.path.abspath(p), os.path.realpath(p))}
    kept = []
    for path in sorted(paths, key=len):
        if (any(within(path, c) for c in homes() + hidden) and not any(within(path, s) for s in sockets())
                and not any(within(h, path) for h in hidden) and not any(within(path, k) for k in kept)):
            kept.append(path)
    return kept


class FenceError(Exception):
    """No fence works on this machine and the instructor did not pass --unfenced (one sentence)."""


def bubblewrap_prefix(folder, hidden=(), needed=()):
    """bubblewrap (Debian's package bubblewrap): the run sees the whole machine read-only except
    ``folder``, none of ``covered(hidden)`` but what ``shown(hidden, needed)`` binds back read-only,
    and no network. It drops every capability (as root too, so the run cannot remount anything writable).
    System V IPC and POSIX message queues are the run's own (a shared-memory segment a run makes dies with
    it: no other run, nor the instructor's own processes, can attach or read it), and so is its host name.
    Its /proc is read-only, /proc/sys first: graded as root, the run is the machine's root to the kernel
    (bwrap maps it to the caller, and ``--uid`` would not change that), and most sysctls (core_pattern,
    hostname) ask only that, not a capability; bwrap 0.8 leaves /proc/sys writable, its own check
    finding the folder r-x. /sys is read-only through ``--ro-bind / /``. Its /dev is small (``dev_arguments``).
    No nested user namespace
    (``--disable-userns``, bubblewrap 0.8 and later: ``disables_userns``; an older one allows one, in
    which the machine's mounts stay locked)."""
    command = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", *dev_arguments(), "--proc", "/proc"]
    covers = [path for path in covered(hidden) if Path(path).is_dir()]
    for path in covers:
        command += ["--tmpfs", path]
    for path in shown(hidden, needed):   # (bwrap reads a source as the machine has it, not as covered)
        command += ["--ro-bind", path, path]
    folder = str(folder)
    read_only = [arg for path in covers for arg in ("--remount-ro", path)]   # after the folder is bound in
    read_only += ["--ro-bind", "/proc/sys", "/proc/sys", "--remount-ro", "/proc"]   # (the fresh /proc's)
    nested = ["--disable-userns"] if disables_userns(command[0]) else []
    return command + ["--bind", folder, folder, *read_only, "--unshare-user", *nested, "--unshare-net",
                      "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--cap-drop", "ALL", "--die-with-parent",
                      "--new-session", "--chdir", folder]


def dev_arguments():
    """bubblewrap's arguments for a /dev like the user-namespace fence's (``enter_fence``): a tmpfs of DEV_BYTES
    with DEVICES bound in, fd and the std streams as links, and a /dev/shm of SHM_BYTES. (bwrap's own ``--dev``
    is a tmpfs of no size, up to half the machine's memory, outside the run's memory limit: red team round 29.)"""
    arguments = ["--size", str(DEV_BYTES), "--tmpfs", "/dev"]
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            arguments += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for name, target in DEV_LINKS:
        arguments += ["--symlink", target, f"/dev/{name}"]
    return arguments + ["--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]


@functools.lru_cache(maxsize=None)
def disables_userns(bwrap):
    """Whether the bubblewrap at ``bwrap`` knows --disable-userns (0.8 and later), from its --help."""
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=FENCE_CHECK_SECONDS)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--disable-userns" in done.stdout + done.stderr


def user_namespace_prefix(folder, hidden=(), needed=()):
    """util-linux's unshare, where the kernel allows user namespaces: new user, mount, network, process,
    IPC and UTS namespaces (System V IPC, POSIX message queues and a host name of its own); inside, ``enter_fence``
    makes every mount read-only but ``folder``, covers ``covered(hidden)``, binds back
    ``shown(hidden, needed)`` read-only (both found here: inside, $HOME is the run's) and drops
    every capability before the run starts. No network but its own loopback."""
    return [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--net", "--mount", "--pid", "--ipc",
            "--uts", "--fork", "--mount-proc", "--kill-child", "--", sys.executable, "-I", str(Path(__file__).resolve()),
            str(folder), json.dumps(covered(hidden)), json.dumps(shown(hidden, needed)), "--"]


PREFIXES = {BUBBLEWRAP: bubblewrap_prefix, USER_NAMESPACE: user_namespace_prefix,
            UNFENCED: lambda folder, hidden=(), needed=(): []}


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


def fence_prefix(fence, folder, hidden=(), needed=()):
    """The command that puts ``fence`` around a run in ``folder`` ([] when unfenced); ``needed``:
    folders the run reads that ``hidden`` or ``homes`` hold (the course's package and data)."""
    if not isinstance(fence, str) or fence not in PREFIXES:
        raise ValueError(f"expected a fence among {', '.join(PREFIXES)}, but got {_what(fence)}")
    return PREFIXES[fence](folder, hidden, needed)


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


def enter_fence(folder, covers, bound, command):
    """Inside unshare's namespaces, as root of its own user namespace: ``folder`` stays writable,
    every other mount becomes read-only, each of ``covers`` (``covered``) is covered by an empty
    read-only tmpfs, each of ``bound`` (``shown``) is bound back read-only over them, /dev is a tmpfs
    of its own with DEVICES only (and a small /dev/shm), the namespace's loopback is up, and the namespace
    allows no user namespace inside it (its own user.max_user_namespaces is 0: a nested one would
    give back every capability there); then ``command`` runs with no capability at all and no way to
    gain one (so it cannot remount anything, nor write /proc, nor raise that limit). Any step that fails
    ends the run."""
    tools = {name: os.path.realpath(shutil.which(name) or name) for name in ("mount", "setpriv")}   # before /tmp is covered

    def mount(*args, keep=()):
        done = subprocess.run([tools["mount"], "--no-mtab", *args], capture_output=True, text=True,   # / is read-only
                              pass_fds=keep)
        if done.returncode:
            print(f"grader: the user-namespace fence could not be set up (mount {' '.join(args)}: "
                  f"{done.stderr.strip()[:200]})", flush=True)
            sys.exit(97)

    try:
        loopback_up()
    except OSError as error:
        print(f"grader: the user-namespace fence could not bring up its loopback ({error})", flush=True)
        sys.exit(97)
    try:   # (this namespace's own limit, not the machine's; written while /proc is writable)
        Path("/proc/sys/user/max_user_namespaces").write_text("0")
    except OSError as error:
        print(f"grader: the user-namespace fence could not forbid nested user namespaces ({error})", flush=True)
        sys.exit(97)
    mount("--bind", folder, folder)
    os.chdir(folder)
    for point in dict.fromkeys(mount_points()):
        if point != folder:
            mount("-o", "remount,bind,ro", point)
    # a /dev of its own, as bubblewrap's: the machine's disks and consoles are not there
    dev = os.path.join(folder, ".dev")
    os.mkdir(dev)
    mount("-t", "tmpfs", "-o", f"size={DEV_BYTES},mode=0755", "tmpfs", dev)
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            open(os.path.join(dev, name), "w").close()
            mount("--bind", f"/dev/{name}", os.path.join(dev, name))
    for name, target in DEV_LINKS:
        os.symlink(target, os.path.join(dev, name))
    os.mkdir(os.path.join(dev, "shm"))
    mount("-t", "tmpfs", "-o", f"size={SHM_BYTES}", "tmpfs", os.path.join(dev, "shm"))
    mount("--move", dev, "/dev")
    os.rmdir(dev)
    sources = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in bound}   # before they are covered
    mounted = []
    for path in covers:
        if os.path.isdir(path) and not os.path.islink(path):
            mount("-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", path)
            mounted.append(path)
    for path, source in sources.items():   # in a covered folder's tmpfs: its place made, the folder bound there
        os.makedirs(path, exist_ok=True)
        mount("--no-canonicalize", "--bind", f"/proc/self/fd/{source}", path, keep=(source,))
        mount("-o", "remount,bind,ro", path)
        os.close(source)
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


if __name__ == "__main__":   # inside unshare's namespaces: FOLDER COVERED_JSON SHOWN_JSON -- COMMAND...
    if sys.argv[4:5] == ["--"] and sys.argv[5:]:
        enter_fence(sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[5:])
    sys.exit("usage: fence.py FOLDER COVERED_JSON SHOWN_JSON -- COMMAND (run by the user-namespace fence)")
