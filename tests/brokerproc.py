"""Run a real strom broker as a subprocess for tests: start, wait for ready, stop, SIGKILL, restart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

READY_MARK = "ready: listening on"


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free now and never handed out before in this test process: the kernel may give the
    same ephemeral port to two successive bind(0) calls, and two brokers of one cluster then clash."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


class BrokerProcess:
    """A broker subprocess on 127.0.0.1:<port> with data in ``data_dir``."""

    def __init__(self, data_dir: Path, port: int | None = None, overrides: dict[str, str] | None = None,
                 config_file: Path | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.config_file = config_file
        self.proc: subprocess.Popen[str] | None = None
        self.log_lines: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

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
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
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

    def log_text(self) -> str:
        return "\n".join(self.log_lines)
