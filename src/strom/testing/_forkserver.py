"""A warm fork server for EmbeddedBroker: brokers start in milliseconds instead of Python's start
plus the broker's imports (~0.3 s).

The first broker a test process starts launches, once, a server process (``python -m
strom.testing._forkserver``) that imports the broker's modules and then waits. Each broker is then
forked from it: the child applies the test process's environment and working directory of that
moment and runs the strom CLI's ``broker`` command, as ``python -m strom.testing._broker_main``
would. The server forks itself, never the test process, so a test process with threads (running
Kafka clients) forks nothing; at fork time the server has no event loop, no thread and no socket
but its channel to the test process.

Why not multiprocessing's forkserver context: its public API (``get_context("forkserver")``,
``set_forkserver_preload``) drives one server per process, shared with the test process's own use
of multiprocessing (the default start method from Python 3.14): our preloads (the broker's modules,
hypothesis made unimportable) would reach the application's worker processes, and a server the
application started first would come without them. And every child it starts imports the parent's
``__main__`` again (for ``pytest``, pytest itself; a script without a main guard runs again), which
would cost about what the server saves. A private server there means its undocumented internals;
what is needed here (a fork per request, the output pipe and the process's pidfd handed over with
SCM_RIGHTS, the exit status back) is short enough to write plainly.

Protocol. The test process and the server share a Unix socket pair. A request is a 4-byte length
and a JSON object (argv, env, cwd) with two descriptors attached: the write end of the broker's
output pipe and one end of a socket pair of that broker's own. On that per-broker socket the server
answers with the pid (and the child's pidfd attached) and later, once it has reaped the child, its
exit status; then it closes it. Signals go through the pidfd, so they never reach a recycled pid.

Lifetime. The server stops when the test process closes its end (at exit) or when the test process
dies (the server watches a pidfd of its parent). It then waits up to a few seconds for brokers still
running (a broker stops on its own when its control channel to the test process closes), then exits;
each broker has PR_SET_PDEATHSIG=SIGKILL towards the server, so one still alive then (a paused one,
say) is killed with it: no broker outlives the test process.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any, BinaryIO

DISABLE_ENV = "STROM_TESTING_FORK_SERVER"  # "0" (or false/no/off): every broker a fresh subprocess

# What the server imports before it forks: what `strom broker` imports until it serves (the CLI, the
# config tables, the broker and every handler). Imported by name: strom.testing itself imports no
# broker layer (tests/test_testing_plugin.py).
PRELOAD = ("strom.cli.main", "strom.config", "strom.broker.server", "strom.broker.faults", "uvloop",
           "encodings.idna")

# Environment variables that take effect before the server could apply the test process's
# environment to a child: read by the interpreter at start (PYTHON*, HOME for the user site), by the
# C library (locale, time zone, malloc) or the dynamic loader. When one of them (or one the
# preloaded modules read while imported, which the server reports) differs from the server's, the
# broker is started as a subprocess instead.
_STARTUP_PREFIXES = ("PYTHON", "LD_", "LC_", "MALLOC_")
_STARTUP_NAMES = frozenset({"LANG", "LANGUAGE", "HOME", "TZ", "GLIBC_TUNABLES"})

_LENGTH = struct.Struct(">I")
_STATUS = struct.Struct(">q")
_SHUTDOWN_GRACE = 5.0  # seconds the server waits for running brokers when the test process is gone
_PR_SET_PDEATHSIG = 1


def disabled() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip().lower() in ("0", "false", "no", "off")


def _is_startup_key(key: str, read_at_import: frozenset[str]) -> bool:
    return key.startswith(_STARTUP_PREFIXES) or key in _STARTUP_NAMES or key in read_at_import


class ForkServerError(RuntimeError):
    """The server could not be started or has gone: the broker is started as a subprocess."""


# ---------------------------------------------------------------------------------------------- client side


class ForkedProcess:
    """A broker forked by the server: the part of subprocess.Popen's interface EmbeddedBroker uses."""

    def __init__(self, args: list[str], pid: int, pidfd: int, status: socket.socket, stdout: BinaryIO) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdout: BinaryIO | None = stdout
        self._pidfd = pidfd
        self._status = status

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not self._read_status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # exited, not yet reaped
                signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def _read_status(self, timeout: float | None) -> bool:
        """True once the server has reaped the process (its exit status is then in returncode)."""
        ready, _, _ = select.select([self._status], [], [], timeout)
        if not ready:
            return False
        try:
            data = self._status.recv(_STATUS.size, socket.MSG_WAITALL)
        except OSError:
            data = b""
        if len(data) == _STATUS.size:
            self.returncode = _STATUS.unpack(data)[0]
        else:
            # The server went without telling: the process got SIGKILL with it (PR_SET_PDEATHSIG);
            # wait until it is gone, as far as a pidfd can tell.
            select.select([self._pidfd], [], [], 5)
            self.returncode = -signal.SIGKILL
        self._status.close()
        os.close(self._pidfd)
        return True


class ForkServer:
    """The test process's handle on the server (started by ``get()``, at most one per process)."""

    def __init__(self, env: Mapping[str, str], start_timeout: float = 60.0) -> None:
        self.env = dict(env)
        self.children: weakref.WeakSet[ForkedProcess] = weakref.WeakSet()
        self._lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock: socket.socket | None = ours
        self._output = tempfile.TemporaryFile()  # noqa: SIM115 - the server's own output, for the error if it fails
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "strom.testing._forkserver", str(os.getpid()), str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=self.env, stdin=subprocess.DEVNULL, stdout=self._output,
                stderr=subprocess.STDOUT, start_new_session=True)  # the terminal's Ctrl-C goes to the test process
        finally:
            theirs.close()
        try:
            ours.settimeout(start_timeout)
            hello = json.loads(_recv_message(ours))
            ours.settimeout(None)
        except (OSError, ValueError, EOFError) as e:
            output = self._server_output()
            self.close(timeout=2)
            raise ForkServerError(f"the fork server did not start ({e!r}): {output}") from None
        self.read_at_import = frozenset(hello["read_at_import"])

    def compatible(self, env: Mapping[str, str]) -> bool:
        """Whether a child of the server would see ``env`` (and the working directory) as a fresh
        process would."""
        if "*" in self.read_at_import:  # a preloaded module looked at the whole environment
            return False
        try:
            os.getcwd()
        except OSError:  # removed: a subprocess can still start in it, a child cannot chdir to it
            return False
        keys = {k for k in (*env, *self.env) if _is_startup_key(k, self.read_at_import)}
        return all(env.get(k) == self.env.get(k) for k in keys)

    def spawn(self, args: list[str], env: Mapping[str, str], timeout: float = 30.0) -> ForkedProcess:
        """Fork a child that runs the strom CLI with ``args``; its output (stdout and stderr) comes
        out of the returned process's ``stdout``."""
        request = json.dumps({"argv": args, "env": dict(env), "cwd": os.getcwd()}).encode()
        out_r, out_w = os.pipe()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self._lock:
                if self._sock is None:
                    raise ForkServerError("the fork server is closed")
                try:
                    socket.send_fds(self._sock, [_LENGTH.pack(len(request))], [out_w, theirs.fileno()])
                    self._sock.sendall(request)
                except OSError as e:
                    raise ForkServerError(f"the fork server has gone ({e!r}): {self._server_output()}") from None
            os.close(out_w)
            out_w = -1
            theirs.close()
            ours.settimeout(timeout)
            try:
                data, fds, _, _ = socket.recv_fds(ours, _STATUS.size, 1, socket.MSG_WAITALL)
            except OSError as e:
                raise ForkServerError(f"the fork server did not answer ({e!r})") from None
            if len(data) != _STATUS.size or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise ForkServerError(f"the fork server could not fork: {self._server_output()}")
            ours.settimeout(None)
            stdout = open(out_r, "rb")  # noqa: SIM115 - EmbeddedBroker closes it, as Popen's
            out_r = -1
            child = ForkedProcess(args, _STATUS.unpack(data)[0], fds[0], ours, stdout)
            self.children.add(child)
            return child
        except BaseException:
            ours.close()
            theirs.close()
            for fd in (out_r, out_w):
                if fd >= 0:
                    os.close(fd)
            raise

    def close(self, timeout: float = 10.0) -> None:
        """Stop the server: it waits (a few seconds at most) for brokers still running, then exits."""
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # the server sees the end even if a fork of ours holds a copy
            sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._output.close()

    def _server_output(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._output.seek(0)
            return self._output.read()[-4000:].decode(errors="replace").strip() or "(no output)"
        return "(no output)"


_server: ForkServer | None = None
_server_error: str | None = None  # why the server could not start: not tried again in this process
_server_lock = threading.Lock()


def _forget_in_fork() -> None:
    """In a fork of the test process: that server is the parent's; the fork starts its own if it needs one."""
    global _server, _server_error, _server_lock
    _server, _server_error, _server_lock = None, None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_fork)


def get(env: Mapping[str, str]) -> ForkServer | None:
    """This process's fork server, started on first use with ``env``: None where there is none (no
    pidfds: not Linux), or since it failed; ForkServerError when it fails to start now."""
    global _server, _server_error
    with _server_lock:
        if _server_error is not None:
            return None
        if _server is None:
            if not hasattr(os, "pidfd_open") or not hasattr(signal, "pidfd_send_signal"):
                _server_error = "needs Linux's pidfds"
                return None
            try:
                _server = ForkServer(env)
            except (OSError, ForkServerError) as e:
                _server_error = str(e)
                raise ForkServerError(_server_error) from None
            import atexit

            atexit.register(shutdown)
        return _server


def discard(reason: str) -> None:
    """The server failed: stop it, and start brokers as subprocesses from now on."""
    global _server, _server_error
    with _server_lock:
        server, _server, _server_error = _server, None, reason
    if server is not None:
        server.close(timeout=2)


def shutdown() -> None:
    """At exit: stop the server. A broker still running was left by its owner: killed, as
    EmbeddedBroker's own exit hook would (which may run after this one)."""
    global _server
    with _server_lock:
        server, _server = _server, None
    if server is not None:
        for child in list(server.children):
            child.kill()
        server.close()


def _recv_message(sock: socket.socket) -> bytes:
    head = _recv_exactly(sock, _LENGTH.size)
    return _recv_exactly(sock, _LENGTH.unpack(head)[0])


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError("the other side closed the socket")
        data += chunk
    return bytes(data)


# ---------------------------------------------------------------------------------------------- server side


class _RecordingEnviron(os._Environ):  # type: ignore[name-defined,misc]
    """os.environ as the preloaded modules see it while they are imported: notes every key read."""

    read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        _RecordingEnviron.read.add(key)
        return super().__getitem__(key)  # type: ignore[no-any-return]

    def __iter__(self) -> Any:
        _RecordingEnviron.read.add("*")  # the whole environment was looked at
        return super().__iter__()


def _preload() -> list[str]:
    """Import PRELOAD (and every broker handler); returns the environment keys read meanwhile."""
    import importlib

    environ_class = os.environ.__class__
    os.environ.__class__ = _RecordingEnviron
    try:
        for name in PRELOAD:
            importlib.import_module(name)
        importlib.import_module("strom.broker.handlers").discover()  # imports every handler module
    finally:
        os.environ.__class__ = environ_class
    return sorted(_RecordingEnviron.read)


class _Server:
    def __init__(self, parent: int, sock: socket.socket) -> None:
        self.sock = sock
        # Where it was started (what `python -m` put first in sys.path); it then waits in / so that
        # a directory removed meanwhile cannot trouble the children it forks.
        self.launch_cwd = os.getcwd()
        os.chdir("/")
        self.parent_pidfd = os.pidfd_open(parent)
        if os.getppid() != parent:  # the test process died before we could watch it
            raise SystemExit(0)
        self.children: dict[int, tuple[int, int, socket.socket]] = {}  # pidfd -> (pid, pidfd, status socket)
        self.poller = select.poll()
        self.poller.register(self.sock, select.POLLIN)
        self.poller.register(self.parent_pidfd, select.POLLIN)
        self.pid = os.getpid()
        import ctypes

        self.libc = ctypes.CDLL(None, use_errno=True)

    def serve(self) -> dict[str, Any] | None:
        """Serve fork requests; returns a request's contents in the forked child, None to exit."""
        while True:
            for fd, _ in self.poller.poll():
                if fd == self.parent_pidfd:
                    self._wind_down()
                    return None
                if fd == self.sock.fileno():
                    try:
                        request, fds = self._receive()
                    except (EOFError, OSError):
                        self._wind_down()
                        return None
                    if self._fork(request, fds):
                        return request
                elif fd in self.children:
                    self._reap(fd)

    def _receive(self) -> tuple[dict[str, Any], list[int]]:
        head, fds, _, _ = socket.recv_fds(self.sock, _LENGTH.size, 2)
        if not head:
            raise EOFError
        head += _recv_exactly(self.sock, _LENGTH.size - len(head))
        return json.loads(_recv_exactly(self.sock, _LENGTH.unpack(head)[0])), fds

    def _fork(self, request: dict[str, Any], fds: list[int]) -> bool:
        """Fork a child for ``request``: True in the child (set up to run it), False in the server."""
        out_w, status_fd = fds
        status = socket.socket(fileno=status_fd)
        try:
            pid = os.fork()
        except OSError:
            os.close(out_w)
            status.close()  # the requester sees no pid: the broker starts as a subprocess
            return False
        if pid == 0:
            try:
                self._become_child(request, out_w, status)
            except BaseException:
                import traceback

                traceback.print_exc()  # into the broker's output once it is set up, for its last words
                sys.stderr.flush()
                os._exit(70)
            return True
        os.close(out_w)
        pidfd = os.pidfd_open(pid)
        with contextlib.suppress(OSError):  # the requester has gone: the child finds no control channel, exits
            socket.send_fds(status, [_STATUS.pack(pid)], [pidfd])
        self.children[pidfd] = (pid, pidfd, status)
        self.poller.register(pidfd, select.POLLIN)
        return False

    def _become_child(self, request: dict[str, Any], out_w: int, status: socket.socket) -> None:
        os.setsid()  # a session of its own, as EmbeddedBroker's subprocesses (start_new_session)
        if self.libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != self.pid:
            os._exit(70)  # could not tie its life to the server's, or the server is already gone
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.close(out_w)
        status.close()
        self.sock.close()
        os.close(self.parent_pidfd)
        for _pid, pidfd, other in self.children.values():
            os.close(pidfd)
            other.close()
        self.children.clear()
        # The environment and the working directory of the moment the test process asked.
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        if sys.path and sys.path[0] == self.launch_cwd:  # what `python -m` put first
            sys.path[0] = request["cwd"]
        tempfile.tempdir = None  # found again from TMPDIR & co. when asked
        import gc

        gc.enable()

    def _reap(self, pidfd: int) -> None:
        pid, _, status = self.children.pop(pidfd)
        self.poller.unregister(pidfd)
        _, wait_status = os.waitpid(pid, 0)
        with contextlib.suppress(OSError):
            status.sendall(_STATUS.pack(os.waitstatus_to_exitcode(wait_status)))
        status.close()
        os.close(pidfd)

    def _wind_down(self) -> None:
        """The test process has gone or closed the server: give running brokers a moment to stop
        (their control channel has closed too), then exit; PR_SET_PDEATHSIG ends the rest."""
        self.poller.unregister(self.sock)
        self.poller.unregister(self.parent_pidfd)
        deadline = time.monotonic() + _SHUTDOWN_GRACE
        while self.children and (left := deadline - time.monotonic()) > 0:
            for fd, _ in self.poller.poll(left * 1000):
                self._reap(fd)


def _serve(parent: int, fd: int) -> dict[str, Any] | None:
    import gc

    gc.disable()  # no collections while importing, and frozen below: the children share these pages
    sock = socket.socket(fileno=fd)
    read_at_import = _preload()
    server = _Server(parent, sock)
    if threading.active_count() != 1:  # forking a process with threads is not safe: refuse to serve
        raise RuntimeError(f"the preloaded modules started threads: {threading.enumerate()}")
    hello = json.dumps({"read_at_import": read_at_import}).encode()
    sock.sendall(_LENGTH.pack(len(hello)) + hello)
    gc.freeze()
    return server.serve()


if __name__ == "__main__":
    # As in _broker_main: kio registers hypothesis strategies whenever it can import hypothesis,
    # which costs a broker ~0.4 s and serves nothing in it.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    request = _serve(int(sys.argv[1]), int(sys.argv[2]))
    if request is None:
        sys.exit(0)
    # The forked child: the broker, as `python -m strom.testing._broker_main ARGS` runs it.
    sys.argv = [os.path.join(os.path.dirname(__file__), "_broker_main.py"), *request["argv"]]
    from strom.cli.main import main

    main()
