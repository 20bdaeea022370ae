"""The suite's own footing (docs/testing.md, "How the suite runs"): the ports tests hand out are never
the kernel's to give, and the processes a test starts die with it, even when it is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import ports
from helpers import wait_until

TESTS = Path(__file__).resolve().parent


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def _claims_of(script: str, env: dict[str, str]) -> list[int]:
    out = subprocess.run([sys.executable, "-c", script], cwd=TESTS, env={**os.environ, **env},
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)


def test_ports_are_below_the_ephemeral_range_and_never_handed_out_twice() -> None:
    got = [ports.reserved_port() for _ in range(20)]
    assert len(set(got)) == 20
    assert all(p < _ephemeral_low() for p in got)


def test_two_test_processes_of_one_worker_slot_get_different_ports(tmp_path: Path) -> None:
    """Two runs on one machine (the same xdist worker name in each) are kept apart by the lock files."""
    script = "import json, ports; print(json.dumps([ports.reserved_port() for _ in range(5)]))"
    env = {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2",
           "STROM_TEST_PORT_LOCKS": str(tmp_path / "locks")}
    holder = subprocess.Popen([sys.executable, "-c", script + "\nimport sys; sys.stdin.read()"], cwd=TESTS,
                              env={**os.environ, **env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        first = json.loads(holder.stdout.readline())
        second = _claims_of(script, env)  # while the first still holds its claims
        assert not set(first) & set(second)
    finally:
        holder.communicate("", timeout=30)
    # Its claims released, a later process may take them.
    assert set(_claims_of(script, env)) & set(first)


def test_worker_slices_do_not_overlap() -> None:
    script = ("import json, ports; s = ports._slice(); print(json.dumps([s.start, s.stop]))")
    slices = [_claims_of(script, {"PYTEST_XDIST_WORKER": f"gw{i}", "PYTEST_XDIST_WORKER_COUNT": "3"})
              for i in range(3)]
    for (a_start, a_stop), (b_start, _) in zip(slices, slices[1:], strict=False):
        assert a_start < a_stop <= b_start
    assert slices[-1][1] <= _ephemeral_low()


def test_brokers_and_zookeeper_die_with_a_killed_test_process(tmp_path: Path) -> None:
    """A test process SIGKILLed mid-run (as CI's time limit or a Ctrl-\\ would) leaves no broker and no
    ZooKeeper behind: the brokers are children of the fork server, which follows the test process,
    and ZooKeeper has PR_SET_PDEATHSIG."""
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from brokerproc import BrokerProcess, free_port
        from strom.devcluster import ZooKeeperServer
        root = Path({str(tmp_path)!r})
        zk = ZooKeeperServer(root / "zk", free_port()).start()
        b = BrokerProcess(root / "broker").start()
        print(json.dumps({{"zookeeper": zk.proc.pid, "broker": b.proc.pid}}), flush=True)
        sys.stdin.read()
    """)
    test_process = subprocess.Popen([sys.executable, "-c", script], cwd=TESTS, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
    pids: dict[str, int] = {}
    try:
        assert test_process.stdout is not None
        pids = json.loads(test_process.stdout.readline())
        assert all(_alive(pid) for pid in pids.values())
        test_process.send_signal(signal.SIGKILL)
        test_process.wait(30)
        # The fork server gives running brokers a few seconds to stop on their own, then goes.
        wait_until(lambda: not any(_alive(pid) for pid in pids.values()), 30,
                   what=f"the test process's children gone: {pids}")
    finally:
        if test_process.poll() is None:
            test_process.kill()
        for pid in pids.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
