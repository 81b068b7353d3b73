"""Every notebook runs as a learner meets it on Binder: offline, under 2 GB, exercises left undone.

Each learner's copy (notebooks/: every solution replaced by `# YOUR CODE HERE`, as nbgrader releases
it, and shown collapsed after its check) is executed in a fresh kernel that cannot reach the network
and shares one memory cgroup limited to 2 GiB, like Binder's pod (tests/sandboxed.py says how).
tests/conftest.py runs each copy that way once a session: the same run's outputs are compared with
the committed ones by tests/test_notebooks.py.

So one run per notebook proves three things: no network, under Binder's ceiling, and the
notebook still runs top to bottom when every exercise is left undone.
"""
import os

import pytest

from execute_notebooks import learner_notebooks
from sandboxed import LIMIT, SANDBOX, MemoryCgroup


@pytest.mark.parametrize("path", learner_notebooks(), ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_learners_copy_runs_offline_under_2_gb(path, executed):
    run = executed.binder(path)
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
