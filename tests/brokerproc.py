"""Run a real strom broker as a subprocess for tests: start, wait for ready, stop, SIGKILL, restart."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ports import reserved_port

from strom.testing import _forkserver

READY_MARK = "ready: listening on"


def free_port() -> int:
    """A loopback port for a broker (or anything else a test starts) that no other process is given
    while this test process lives: see ports.py."""
    return reserved_port()


class BrokerProcess:
    """A broker subprocess on 127.0.0.1:<port> with data in ``data_dir``."""

    def __init__(self, data_dir: Path, port: int | None = None, overrides: dict[str, str] | None = None,
                 config_file: Path | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.config_file = config_file
        self.proc: Any = None  # a ForkedProcess or a subprocess.Popen
        self.log_lines: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def registry_url(self) -> str:
        """The first address of the broker's schema registry (schema.registry.listeners)."""
        listeners = self.overrides.get("schema.registry.listeners", "")
        if not listeners:
            raise AttributeError("this broker has no schema.registry.listeners")
        return listeners.split(",")[0].strip()

    def settings(self) -> dict[str, str]:
        """The broker's --override settings: the tests' defaults, then ``overrides``."""
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            "group.initial.rebalance.delay.ms": "0",
            "admin.listeners": "http://127.0.0.1:0",  # no clash on 8090 between test brokers
            **self.overrides,
        }

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "strom.cli.main", "broker"]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        for k, v in self.settings().items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        self.log_lines = []
        self.proc = self._launch()
        ready = threading.Event()
        proc = self.proc

        def pump() -> None:
            assert proc.stdout is not None
            for line in io.TextIOWrapper(proc.stdout, errors="replace"):  # type: ignore[arg-type]
                self.log_lines.append(line.rstrip("\n"))
                if READY_MARK in line:
                    ready.set()

        self._reader = threading.Thread(target=pump, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not become ready:\n" + "\n".join(self.log_lines[-50:]))
        return self

    def _launch(self) -> Any:
        """The broker process: forked from strom.testing's warm fork server (about 20 ms instead of a
        Python start and the broker's imports), a plain subprocess where the server cannot serve.
        A forked broker dies with the server, and the server with this test process, so an aborted
        run leaves no broker behind (PR_SET_PDEATHSIG, see strom/testing/_forkserver.py)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        argv = self.command()[3:]  # after `python -m strom.cli.main`
        if not _forkserver.disabled():
            try:
                server = _forkserver.get(env)
                if server is not None and server.compatible(env):
                    return server.spawn(argv, env)
            except _forkserver.ForkServerError as e:
                _forkserver.discard(str(e))
        return subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, preexec_fn=die_with_parent_hook())

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: a clean shutdown."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        if self._reader is not None:
            self._reader.join(5)
        self.proc = None
        return rc

    def kill(self) -> None:
        """SIGKILL: an unclean stop, nothing flushed by the broker."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            if self._reader is not None:
                self._reader.join(5)
            self.proc = None

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss_bytes(self) -> int:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def peak_rss_bytes(self) -> int:
        """The most resident memory the broker has had (VmHWM) since it started or since
        reset_peak_rss(): what a passing allocation cost, after it was freed."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    def reset_peak_rss(self) -> None:
        """Start peak_rss_bytes() again from the current resident memory (Linux's clear_refs)."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/clear_refs", "w") as f:
            f.write("5")

    def wait_for_log(self, *parts: str, timeout: float = 20.0, since: int = 0) -> str:
        """The first log line from index ``since`` on that holds every one of ``parts``, waited for:
        the log comes through a pipe read by a thread, so a line can arrive after the client
        already saw the answer the broker logged it for."""
        found: list[str] = []

        def seen() -> bool:
            found[:] = [line for line in self.log_lines[since:] if all(p in line for p in parts)][:1]
            return bool(found)

        deadline = time.monotonic() + timeout
        while not seen():
            if time.monotonic() > deadline:
                raise AssertionError(f"no log line with {parts!r} within {timeout:.0f}s; last lines:\n"
                                     + "\n".join(self.log_lines[-20:]))
            time.sleep(0.02)
        return found[0]

    def log_text(self) -> str:
        return "\n".join(self.log_lines)


def die_with_parent_hook() -> Any:
    """A preexec_fn that gives the child SIGKILL when the test process dies (PR_SET_PDEATHSIG), so an
    aborted run leaves no child behind; None off the main thread, where the signal would come when
    the starting thread ends, not the process."""
    from strom.devcluster import die_with_parent

    return die_with_parent if threading.current_thread() is threading.main_thread() else None
