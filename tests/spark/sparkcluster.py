"""A Spark standalone cluster for tests: one master and N workers on 127.0.0.1, started with the
`spark-class` launcher that PySpark ships, each daemon in its own process group (its executors and
their Python workers are its children), logs kept in a directory for failure reports."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from brokerproc import die_with_parent_hook, free_port

import strom

# Small, quick-starting JVMs: C1 only, serial GC; the tests move little data.
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xss4m"


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def strom_src() -> str:
    """The directory this process imports strom from: the workers' Python processes import the same."""
    return str(Path(strom.__file__).resolve().parent.parent)


def loopback_env(**extra: str) -> dict[str, str]:
    """The environment of Spark processes kept on loopback (no interface lookup, no warning about it)."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1", **extra}
    env.pop("SPARK_HOME", None)  # spark-class finds the installed PySpark's own
    return env


class _Daemon:
    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log: Path, ready: re.Pattern[str]) -> None:
        self.name, self.cmd, self.env, self.log, self.ready = name, cmd, env, log, ready
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as f:
            self.proc = subprocess.Popen(self.cmd, stdout=f, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True, preexec_fn=die_with_parent_hook())

    def is_ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"spark {self.name} exited with {self.proc.returncode}:\n{self.tail()}")
        return self.log.exists() and self.ready.search(self.log.read_text(errors="replace")) is not None

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the whole process group (daemon, executors, Python workers), SIGKILL what is left."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None


class SparkStandalone:
    """`with SparkStandalone(tmp, workers=2) as c:` ... `c.master_url`; everything stopped on exit."""

    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                 strom_on_workers: bool = True) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        common = {"SPARK_DAEMON_MEMORY": "256m", "SPARK_DAEMON_JAVA_OPTS": FAST_JVM,
                  "SPARK_NO_DAEMONIZE": "1"}
        launcher = str(spark_class())
        self.master = _Daemon(
            "master",
            [launcher, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
             "--webui-port", str(free_port())],
            loopback_env(**common), root / "master.log", re.compile(r"New state: ALIVE"))
        # The workers' executors run Python workers that import strom: from this checkout, as an
        # installed package would be on a real cluster (unless the job is to bring its own).
        pythonpath = os.pathsep.join(p for p in (strom_src() if strom_on_workers else "",
                                                 os.environ.get("PYTHONPATH", "")) if p)
        self.workers = [
            _Daemon(
                f"worker-{i}",
                [launcher, "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                 "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                 "--work-dir", str(root / f"work-{i}")],
                loopback_env(**common, PYTHONPATH=pythonpath), root / f"worker-{i}.log",
                re.compile(r"Successfully registered with master"))
            for i in range(workers)]

    def start(self, timeout: float = 90.0) -> SparkStandalone:
        deadline = time.monotonic() + timeout
        try:
            self.master.start()
            self._wait([self.master], deadline)
            for w in self.workers:
                w.start()
            self._wait(self.workers, deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, daemons: list[_Daemon], deadline: float) -> None:
        while not all(d.is_ready() for d in daemons):
            if time.monotonic() > deadline:
                raise TimeoutError("the Spark cluster did not start in time:\n" + self.logs())
            time.sleep(0.2)

    def stop(self) -> None:
        for d in [*self.workers, self.master]:
            d.stop()

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def executor_logs(self) -> list[Path]:
        """The stderr files of every executor the workers have run (work-<i>/<app>/<executor>/stderr)."""
        return sorted(self.root.glob("work-*/app-*/*/stderr"))

    def logs(self, lines: int = 40) -> str:
        parts = [f"--- {d.name} ({d.log}) ---\n{d.tail(lines)}" for d in [self.master, *self.workers]]
        for path in self.executor_logs():
            tail = "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            parts.append(f"--- executor {path} ---\n{tail}")
        return "\n".join(parts)
