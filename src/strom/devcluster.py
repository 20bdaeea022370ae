"""A local cluster for trying strom out and for tests: Debian's ZooKeeper on a loopback port with
its own data directory, and N strom brokers as child processes (``strom dev-cluster 3``).

Everything listens on 127.0.0.1 only and everything is stopped on exit (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ZK_SCRIPT_CANDIDATES = ("/usr/share/zookeeper/bin/zkServer.sh", "/opt/zookeeper/bin/zkServer.sh")
BROKER_READY_MARK = "ready: listening on"


class DevClusterError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> str | None:
    """Why ``port`` cannot be listened on (bound as a broker binds it), or None when it can."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen(1)
        except OSError as e:
            text = e.strerror or str(e)
            return text[:1].lower() + text[1:]
    return None


def check_ports(ports: dict[int, str]) -> None:
    """DevClusterError naming the first port (and what it was for) that cannot be listened on."""
    for port, what in ports.items():
        if not 0 < port <= 65535:
            raise DevClusterError(f"port {port} ({what}) is not a TCP port: choose another --base-port")
        why = port_in_use(port)
        if why is not None:
            raise DevClusterError(f"port {port} on 127.0.0.1 ({what}) cannot be used: {why}; stop what holds it "
                                  "or choose other ports (--base-port, --zookeeper-port)")


def die_with_parent() -> None:
    """A subprocess's preexec_fn: SIGKILL when its parent dies (Linux's PR_SET_PDEATHSIG, kept across
    exec), so ZooKeeper and the brokers of a dev cluster or a test never outlive what started them.
    The parent is the starting thread: use it from the main thread only."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


def _death_hook() -> Callable[[], None] | None:
    return die_with_parent if threading.current_thread() is threading.main_thread() else None


def zookeeper_script() -> str:
    for path in ZK_SCRIPT_CANDIDATES:
        if os.path.exists(path):
            return path
    found = shutil.which("zkServer.sh")
    if found:
        return found
    raise DevClusterError("ZooKeeper is not installed: apt-get install zookeeper (Debian's package)")


def zookeeper_mode(port: int, timeout: float = 1.0) -> str | None:
    """'standalone', 'leader', ... from the four-letter 'srvr' command; None when not serving."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"srvr")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    except OSError:
        return None
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


class ZooKeeperServer:
    """One standalone ZooKeeper. ``tick_ms`` sets the session timeouts it allows: 2 to 20 ticks, unless
    ``max_session_ms`` raises the upper bound (sessions expire in tick-sized steps, so a small tick
    with a large bound detects a dead broker closer to its session timeout)."""

    def __init__(self, data_dir: Path, port: int | None = None, tick_ms: int = 250,
                 max_session_ms: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.max_session_ms = max_session_ms
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text("\n".join([
            f"tickTime={self.tick_ms}",
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,stat",
            *([f"maxSessionTimeout={self.max_session_ms}"] if self.max_session_ms else []),
            "",
        ]))
        env = {**os.environ, "ZOO_LOG_DIR": str(self.data_dir), "ZOO_LOG4J_PROP": "WARN,CONSOLE",
               "JVMFLAGS": "-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"}
        log = open(self.data_dir / "zookeeper.out", "wb")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen([zookeeper_script(), "start-foreground", str(cfg)], stdout=log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                     preexec_fn=_death_hook())
        log.close()
        deadline = time.monotonic() + timeout
        while zookeeper_mode(self.port, 0.5) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                out = (self.data_dir / "zookeeper.out").read_text(errors="replace")[-2000:]
                self.stop()
                raise DevClusterError(f"ZooKeeper did not start on port {self.port}:\n{out}")
            time.sleep(0.1)
        return self

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)  # the script and its java child

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None


class BrokerChild:
    """A strom broker process of the dev cluster, its output relayed with a prefix."""

    def __init__(self, broker_id: int, port: int, data_dir: Path, zk_connect: str,
                 overrides: dict[str, str] | None = None) -> None:
        self.broker_id = broker_id
        self.port = port
        self.data_dir = data_dir
        self.settings = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(data_dir),
            "zookeeper.connect": zk_connect,
            "admin.listeners": "",
            **(overrides or {}),
        }
        self.proc: subprocess.Popen[str] | None = None
        self.ready = threading.Event()
        self.failure: str | None = None  # the broker's one-line reason, when it stopped at start
        self.pump: threading.Thread | None = None

    def start(self, echo: bool = True) -> None:
        cmd = [sys.executable, "-m", "strom.cli.main", "broker"]
        for k, v in self.settings.items():
            cmd += ["--override", f"{k}={v}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
                                     preexec_fn=_death_hook())

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                if BROKER_READY_MARK in line:
                    self.ready.set()
                elif line.startswith("strom: "):
                    self.failure = line[len("strom: "):].strip()
                if echo:
                    sys.stdout.write(f"[broker {self.broker_id}] {line}")

        self.pump = threading.Thread(target=pump, daemon=True)
        self.pump.start()

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def planned_ports(brokers: int, base_port: int, zk_port: int | None, registry_port: int | None) -> dict[int, str]:
    """Every port the dev cluster will listen on, and what for: broker i's Kafka listener on
    base_port + i - 1, its schema registry on registry_port + i - 1 (None: no registries)."""
    wanted = {base_port + i: f"broker {i + 1}'s listener" for i in range(brokers)}
    if registry_port is not None:
        for i in range(brokers):
            port = registry_port + i
            if port in wanted:
                raise DevClusterError(f"port {port} cannot be both broker {i + 1}'s schema registry and "
                                      f"{wanted[port]}: choose another --registry-port")
            wanted[port] = f"broker {i + 1}'s schema registry"
    if zk_port:
        if zk_port in wanted:
            raise DevClusterError(f"port {zk_port} cannot be both ZooKeeper's and {wanted[zk_port]}")
        wanted[zk_port] = "ZooKeeper's"
    return wanted


def broker_overrides(broker_id: int, brokers: int, registry_port: int | None) -> dict[str, str]:
    """Broker ``broker_id``'s settings beyond its listener, data and ZooKeeper: replication as far as
    ``brokers`` allows, and its own schema registry listener (every broker serves the registry)."""
    overrides = {"default.replication.factor": str(min(3, brokers)),
                 "offsets.topic.replication.factor": str(min(3, brokers)),
                 "min.insync.replicas": str(min(2, brokers)),
                 "zookeeper.session.timeout.ms": "6000"}
    if registry_port is not None:
        overrides["schema.registry.listeners"] = f"http://127.0.0.1:{registry_port + broker_id - 1}"
    return overrides


def run_dev_cluster(brokers: int, base_port: int, data_dir: Path, zk_port: int | None,
                    registry_port: int | None = None) -> None:
    """Start ZooKeeper and ``brokers`` brokers (each with its schema registry on registry_port +
    i - 1 unless that is None), print the bootstrap list and registry URLs, wait for Ctrl-C/SIGTERM."""
    # A port already taken stops everything before anything starts, naming the port.
    check_ports(planned_ports(brokers, base_port, zk_port, registry_port))
    data_dir.mkdir(parents=True, exist_ok=True)
    zk = ZooKeeperServer(data_dir / "zookeeper", zk_port, tick_ms=500)
    print(f"starting ZooKeeper on 127.0.0.1:{zk.port} ...", flush=True)
    zk.start()
    children = [BrokerChild(i + 1, base_port + i, data_dir / f"broker-{i + 1}", zk.connect,
                            broker_overrides(i + 1, brokers, registry_port))
                for i in range(brokers)]
    stopping = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        for child in children:
            child.start()
        deadline = time.monotonic() + 60
        for child in children:
            while not child.ready.wait(0.2):
                exited = child.proc is not None and child.proc.poll() is not None
                if stopping.is_set() or exited or time.monotonic() > deadline:
                    if exited and child.pump is not None:
                        child.pump.join(5)  # its last line may still be in the pipe
                    why = f": {child.failure}" if child.failure else ""
                    raise DevClusterError(f"broker {child.broker_id} did not start{why}")
        bootstrap = ",".join(f"127.0.0.1:{c.port}" for c in children)
        registries = ",".join(c.settings["schema.registry.listeners"] for c in children
                              if "schema.registry.listeners" in c.settings)
        print(f"\nstrom dev cluster ready: {brokers} brokers, ZooKeeper {zk.connect}\n"
              f"bootstrap servers: {bootstrap}\n"
              + (f"schema registry: {registries}\n" if registries else "")
              + "Ctrl-C stops everything.\n", flush=True)
        while not stopping.wait(0.5):
            dead = [c.broker_id for c in children if c.proc is not None and c.proc.poll() is not None]
            if len(dead) == len(children):
                raise DevClusterError("every broker has exited")
    finally:
        print("stopping the dev cluster ...", flush=True)
        for child in children:
            child.stop()
        zk.stop()
