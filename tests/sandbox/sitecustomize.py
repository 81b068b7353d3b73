"""Binder-like limits for a notebook kernel, loaded at interpreter start through PYTHONPATH.

The tests put this folder first on the kernel's PYTHONPATH; nothing else imports it.

* COURSE_SANDBOX_CGROUP=<folder>: join that memory cgroup (the test sets its limit to Binder's 2 GB),
  so the kernel and everything it starts share one memory ceiling.
* COURSE_SANDBOX_MEMORY=<bytes>: cap the address space instead (RLIMIT_AS). Stricter than Binder:
  torch and numba reserve far more address space than they use, so this is only for experiments.
* COURSE_SANDBOX_NETLOG=<file>: block every socket connection that is not loopback (or a Unix
  socket) and append one line per blocked attempt to <file>, so a notebook that catches the
  error still fails the test.
"""
import os


def _cap_memory(limit):
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _is_local(address):
    """True for a Unix socket path, loopback hosts (127.x, ::1, localhost) and "any" (None, 0.0.0.0, ::)."""
    if not isinstance(address, tuple):  # AF_UNIX: a path (str or bytes)
        return True
    host = address[0]
    if isinstance(host, bytes):
        host = host.decode()
    return host in (None, "", "localhost", "0.0.0.0", "::", "::1") or str(host).startswith(("127.", "::ffff:127."))


def _block_network(logfile):
    import socket

    def refuse(what, target):
        with open(logfile, "a") as log:
            log.write(f"{what} {target!r}\n")
        raise ConnectionRefusedError(f"network blocked by the test sandbox: {what} {target!r}")

    original_connect, original_connect_ex = socket.socket.connect, socket.socket.connect_ex
    original_sendto, original_getaddrinfo = socket.socket.sendto, socket.getaddrinfo

    def connect(self, address):
        if not _is_local(address):
            refuse("connect", address)
        return original_connect(self, address)

    def connect_ex(self, address):
        if not _is_local(address):
            refuse("connect", address)
        return original_connect_ex(self, address)

    def sendto(self, data, *args):
        address = args[-1]
        if not _is_local(address):
            refuse("sendto", address)
        return original_sendto(self, data, *args)

    def getaddrinfo(host, *args, **kwargs):
        if not _is_local((host,)):
            refuse("resolve", host)
        return original_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    socket.socket.sendto, socket.getaddrinfo = sendto, getaddrinfo


if os.environ.get("COURSE_SANDBOX_CGROUP"):
    with open(os.path.join(os.environ["COURSE_SANDBOX_CGROUP"], "cgroup.procs"), "w") as procs:
        procs.write(str(os.getpid()))
if int(os.environ.get("COURSE_SANDBOX_MEMORY") or 0) > 0:
    _cap_memory(int(os.environ["COURSE_SANDBOX_MEMORY"]))
if os.environ.get("COURSE_SANDBOX_NETLOG"):
    _block_network(os.environ["COURSE_SANDBOX_NETLOG"])
