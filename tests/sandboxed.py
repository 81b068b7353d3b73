"""Executing a notebook as a learner meets it on Binder: offline, under 2 GiB.

tests/conftest.py executes every learner's copy (notebooks/) this way, once a session; its outputs
serve tests/test_notebooks.py and its facts (network attempts, memory) tests/test_offline.py. The
kernel

* cannot reach the network: tests/sandbox/sitecustomize.py refuses every socket connection that is
  not loopback and logs the attempt, so even a caught error fails the test;
* shares one memory cgroup limited to 2 GiB, like Binder's pod limit (the kernel joins it at
  start-up). A cgroup limits resident memory, as Binder does. An address-space limit (RLIMIT_AS)
  does not work as a stand-in: torch, OpenBLAS and numba reserve far more virtual memory than they
  touch (chapter 01 reserves ~2.5 GB of address space for ~0.7 GB resident) and fail under 2 GB of
  it. Where no memory cgroup can be made (not root, no controller), the kernel's peak resident
  memory (VmHWM) is measured and asserted under 2 GiB instead.
"""
import os
import tempfile
import time
from pathlib import Path

import execute_notebooks

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


def run_like_binder(path):
    """Execute the notebook at `path` offline under 2 GiB: a dict with the executed notebook ('nb',
    None if it failed), the 'error' it raised, the connections it tried ('blocked'), its peak
    resident memory ('rss'), the cgroup's peak ('group_peak'), how memory was limited ('kind')
    and whether the cgroup killed it ('oom')."""
    group = MemoryCgroup(LIMIT, f"transformer-course-{os.getpid()}-{Path(path).stem}")
    with tempfile.TemporaryDirectory(prefix="course-netlog-") as folder:
        netlog = Path(folder) / "network.log"
        netlog.touch()
        extra = {"COURSE_SANDBOX_NETLOG": str(netlog),
                 "PYTHONPATH": os.pathsep.join(filter(None, [str(SANDBOX), os.environ.get("PYTHONPATH")]))}
        if group.path:
            extra["COURSE_SANDBOX_CGROUP"] = str(group.path)
        client = execute_notebooks.make_client(path)
        start_kernel = client.async_start_new_kernel

        async def start_sandboxed(**kwargs):   # execute() passes the kernel's environment here
            kwargs["env"] = {**kwargs.get("env", os.environ), **extra}
            return await start_kernel(**kwargs)
        client.async_start_new_kernel = start_sandboxed
        peaks = [0]
        client.on_cell_complete = lambda **_: peaks.append(resident_peak(client.km.provisioner.process.pid))
        nb = error = None
        try:
            nb = execute_notebooks.execute(path, client)
        except Exception as exc:  # reported by the tests, with the cgroup's verdict
            error = exc
        finally:
            result = dict(nb=nb, error=error, blocked=netlog.read_text().splitlines(), rss=max(peaks),
                          group_peak=group.peak(), kind=group.kind or "VmHWM only",
                          oom="oom_kill 1" in read(group.path / "memory.oom_control") if group.path else False)
            group.remove()
    return result
