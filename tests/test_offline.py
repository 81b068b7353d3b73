"""Every notebook runs as a learner meets it on Binder: offline, under 2 GB, exercises left undone.

Each chapter's student version (every solution replaced by `# YOUR CODE HERE`, as nbgrader
releases it) is executed in a fresh kernel that

* cannot reach the network: tests/sandbox/sitecustomize.py refuses every socket connection
  that is not loopback and logs the attempt, so even a caught error fails the test;
* shares one memory cgroup limited to 2 GiB, like Binder's pod limit (the kernel joins it at
  start-up). A cgroup limits resident memory, as Binder does. An address-space limit
  (RLIMIT_AS) does not work as a stand-in: torch, OpenBLAS and numba reserve far more virtual
  memory than they touch (chapter 01 reserves ~2.5 GB of address space for ~0.7 GB resident)
  and fail under 2 GB of it. Where no memory cgroup can be made (not root, no controller), the
  kernel's peak resident memory (VmHWM) is measured and asserted under 2 GiB instead.

So one run per notebook proves three things: no network, under Binder's ceiling, and the
notebook still runs top to bottom when every exercise is left undone.
"""
import os
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import homework
from execute_notebooks import CELL_TIMEOUT, all_notebooks, kernel_env

SANDBOX = Path(__file__).parent / "sandbox"
LIMIT = 2 * 1024 ** 3  # Binder's memory ceiling
CGROUP_ROOTS = (Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup"))  # v1 memory controller, v2 unified


class MemoryCgroup:
    """A fresh memory cgroup with a limit, or None-like when this machine cannot make one."""

    def __init__(self, limit, name):
        self.path, self.kind = None, None
        for root in CGROUP_ROOTS:
            v1 = (root / "memory.limit_in_bytes").exists() or root.name == "memory"
            v2 = "memory" in read(root / "cgroup.subtree_control")
            if not (os.access(root, os.W_OK) and (v1 or v2)):
                continue
            try:
                path = root / name
                path.mkdir(exist_ok=True)
                (path / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(str(limit))
                self.path, self.kind = path, "cgroup v1" if v1 else "cgroup v2"
                return
            except OSError:
                continue

    def peak(self):
        """The group's peak memory in bytes (v1: max_usage; v2: memory.peak), or None."""
        for name in ("memory.max_usage_in_bytes", "memory.peak"):
            if self.path and (self.path / name).exists():
                return int(read(self.path / name))
        return None

    def remove(self):
        for _ in range(50):  # the kernel process may take a moment to exit
            try:
                self.path and self.path.rmdir()
                return
            except OSError:
                time.sleep(0.2)


def read(path):
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def resident_peak(pid):
    """VmHWM of a process, in bytes (0 once it has exited)."""
    for line in read(f"/proc/{pid}/status").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def run_like_binder(path, tmp_path):
    """Execute the student version of `path` offline under 2 GiB; return what the run showed."""
    nb = homework.student_version(nbformat.read(path, as_version=4))
    netlog = tmp_path / "network.log"
    netlog.touch()
    group = MemoryCgroup(LIMIT, f"transformer-course-{os.getpid()}-{path.stem}")
    env = {**kernel_env(), "COURSE_SANDBOX_NETLOG": str(netlog),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SANDBOX), os.environ.get("PYTHONPATH")]))}
    if group.path:
        env["COURSE_SANDBOX_CGROUP"] = str(group.path)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    peaks = [0]
    client.on_cell_complete = lambda **_: peaks.append(resident_peak(client.km.provisioner.process.pid))
    error = None
    try:
        client.execute(env=env)
    except Exception as exc:  # reported by the test, with the cgroup's verdict
        error = exc
    finally:
        result = dict(error=error, blocked=netlog.read_text().splitlines(), rss=max(peaks),
                      group_peak=group.peak(), kind=group.kind or "VmHWM only",
                      oom="oom_kill 1" in read(group.path / "memory.oom_control") if group.path else False)
        group.remove()
    return result


@pytest.mark.parametrize("path", all_notebooks(), ids=lambda path: path.stem)
def test_student_version_runs_offline_under_2_gb(path, tmp_path):
    run = run_like_binder(path, tmp_path)
    gib = lambda n: f"{(n or 0) / 1024 ** 3:.2f} GiB"
    where = f"{path.name} (limit by {run['kind']}; peak RSS {gib(run['rss'])}, group peak {gib(run['group_peak'])})"
    assert run["error"] is None, f"{where} failed{' (killed: out of memory)' if run['oom'] else ''}:\n{run['error']}"
    assert run["blocked"] == [], f"{where} tried to reach the network: {run['blocked']}"
    assert run["rss"] < LIMIT, f"{where} used more than 2 GiB"
    print(f"{path.stem}: {run['kind']}, peak RSS {gib(run['rss'])}, group peak {gib(run['group_peak'])}")


def test_sandbox_blocks_the_network_but_not_loopback(tmp_path):
    """The sitecustomize itself: a refused outside connection is logged; loopback still connects."""
    import subprocess
    import sys

    code = ("import socket\n"
            "server = socket.create_server(('127.0.0.1', 0)); port = server.getsockname()[1]\n"
            "socket.create_connection(('127.0.0.1', port)).close()\n"
            "try:\n    socket.socket().connect(('192.0.2.1', 80))\nexcept OSError as e:\n    print(e)\n"
            "try:\n    socket.getaddrinfo('example.org', 443)\nexcept OSError as e:\n    print(e)\n")
    env = {**os.environ, "PYTHONPATH": str(SANDBOX), "COURSE_SANDBOX_NETLOG": str(tmp_path / "net.log")}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("network blocked by the test sandbox") == 2, run.stdout
    logged = (tmp_path / "net.log").read_text().splitlines()
    assert logged == ["connect ('192.0.2.1', 80)", "resolve 'example.org'"], logged


def test_memory_cgroup_really_limits(tmp_path):
    """The cgroup the notebooks run in kills a process that goes over its limit (here 200 MB)."""
    import subprocess
    import sys

    group = MemoryCgroup(200 * 1024 ** 2, f"transformer-course-{os.getpid()}-probe")
    if not group.path:
        pytest.skip("no writable memory cgroup here: the notebooks' peak RSS is asserted instead")
    try:
        env = {**os.environ, "PYTHONPATH": str(SANDBOX), "COURSE_SANDBOX_CGROUP": str(group.path)}
        code = "b = bytearray(400 * 1024 ** 2)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')"
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode != 0 and "survived" not in run.stdout
    finally:
        group.remove()
