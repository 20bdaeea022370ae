"""`strom demo trucking`: broker, simulator, Spark job and a live view of the alerts, in one command."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from strom.cli.common import ClientOptions
from strom.demo.trucking import ALERTS_TOPIC, EVENTS_SUBJECT, EVENTS_TOPIC

READY_MARK = "ready: listening on"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client_config(client: ClientOptions, **extra: Any) -> dict[str, Any]:
    """A librdkafka config for one of the demo's clients: the broker and the -X properties given."""
    return {"bootstrap.servers": client.bootstrap, **extra, **client.properties}


def broker_reachable(client: ClientOptions) -> bool:
    from confluent_kafka.admin import AdminClient

    timeout = client.connect_timeout
    admin = AdminClient(client_config(client, **{"socket.timeout.ms": int(timeout * 1000), "log_level": 0}))
    try:
        admin.list_topics(timeout=timeout)
        return True
    except Exception:
        return False


def registry_config(client: ClientOptions) -> dict[str, str]:
    """The schema registry client's settings from the demo's -X properties: the broker's SASL user as
    HTTP Basic credentials (the registry takes the broker's users), its CA for https://."""
    props = client.properties
    config = {}
    if "sasl.username" in props and "sasl.password" in props:
        config["basic.auth.user.info"] = f"{props['sasl.username']}:{props['sasl.password']}"
    if "ssl.ca.location" in props:
        config["ssl.ca.location"] = props["ssl.ca.location"]
    return config


def registry_reachable(url: str, config: dict[str, str]) -> bool:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    try:
        SchemaRegistryClient({**config, "url": url, "timeout": 5, "max.retries": 0}).get_subjects()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def embedded_broker(data_dir: Path, console: Console) -> Iterator[tuple[str, str]]:
    """A strom broker subprocess on a free 127.0.0.1 port with data in `data_dir`, its schema registry
    on another; yields its bootstrap and the registry's URL."""
    port, admin_port, registry_port = _free_port(), _free_port(), _free_port()
    cmd = [sys.executable, "-m", "strom.cli.main", "broker",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"log.dirs={data_dir}",
           "--override", f"admin.listeners=http://127.0.0.1:{admin_port}",
           "--override", f"schema.registry.listeners=http://127.0.0.1:{registry_port}",
           "--override", "group.initial.rebalance.delay.ms=0"]
    log_path = data_dir.parent / (data_dir.name + ".log")
    data_dir.mkdir(parents=True, exist_ok=True)
    log = log_path.open("w")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            log.flush()
            if READY_MARK in line:
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + 60
    while not ready.wait(0.1):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the embedded strom broker did not start; see {log_path}")
    bootstrap, registry = f"127.0.0.1:{port}", f"http://127.0.0.1:{registry_port}"
    console.print(f"[green]started an embedded strom broker[/] on {bootstrap} (schema registry {registry}, "
                  f"data in {data_dir}, log {log_path}, console http://127.0.0.1:{admin_port}/)")
    try:
        yield bootstrap, registry
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def ensure_topics(client: ClientOptions) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_config(client, log_level=3))  # librdkafka's notices (level 6) are not for the demo
    existing = set(admin.list_topics(timeout=10).topics)
    # Replication factor -1: the broker's default.replication.factor (3 in `strom dev-cluster 3`).
    wanted = [NewTopic(EVENTS_TOPIC, 3, -1), NewTopic(ALERTS_TOPIC, 1, -1)]
    new = [t for t in wanted if t.topic not in existing]
    if new:
        for f in admin.create_topics(new, request_timeout=30).values():
            f.result(timeout=30)


def _fmt_ms(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%H:%M")


def describe_alert(a: dict[str, Any]) -> str:
    kinds = [(a.get("overspeed", 0), "overspeed"), (a.get("laneDepartures", 0), "lane departure"),
             (a.get("unsafeFollowing", 0), "unsafe following")]
    detail = ", ".join(f"{n} {what}" for n, what in kinds if n)
    return (f"[bold red]ALERT[/] driver {a['driverId']} [bold]{a['driverName']}[/] "
            f"{_fmt_ms(a['windowStart'])}-{_fmt_ms(a['windowEnd'])} UTC: "
            f"{a['violations']} violations in {a['events']} events ({detail}), "
            f"avg speed {a['avgSpeed']:.1f}, max {a['maxSpeed']}")


class NoRegistry(RuntimeError):
    """The broker answers but no schema registry does at the URL given."""


def run_demo(client: ClientOptions, duration: float, rate: float, speedup: float, trucks: int, output: Path,
             data_dir: Path, console: Console | None = None, master: str = "local[2]",
             spark_conf: dict[str, str] | None = None, registry: str = "http://127.0.0.1:8081") -> int:
    console = console or Console()
    with contextlib.ExitStack() as stack:
        if broker_reachable(client):
            console.print(f"using the broker at {client.bootstrap}, the schema registry at {registry}")
            if not registry_reachable(registry, registry_config(client)):
                raise NoRegistry(f"no schema registry answers at {registry}: start the broker with "
                                 "schema.registry.listeners (make run does), or give --registry URL")
        else:
            console.print(f"no broker answers at {client.bootstrap}; starting one")
            bootstrap, registry = stack.enter_context(embedded_broker(data_dir, console))
            client = dataclasses.replace(client, bootstrap=bootstrap)
        ensure_topics(client)
        return _run(client, duration, rate, speedup, trucks, output, console, master, spark_conf or {}, registry)
    return 0  # unreachable; for type checkers


def _loopback_master(master: str) -> bool:
    """A local master, or a standalone master on this machine's loopback interface."""
    if master.startswith("local"):
        return True
    host = master.split("://", 1)[-1].split(",")[0].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def spark_session(master: str, log_path: Path, conf: dict[str, str]) -> Any:
    """The demo's SparkSession, its JVM's output (start-up notices, log4j) in `log_path`, not the terminal.

    Spark stays on loopback (SPARK_LOCAL_IP=127.0.0.1) unless SPARK_LOCAL_IP is set or the master
    is on another host, whose executors must reach this driver. The Python workers run this
    interpreter unless PYSPARK_PYTHON says otherwise; strom.spark.register checks they import strom.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    from strom.spark import register
    from strom.spark.jvm import with_jar

    if _loopback_master(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false",
                "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **conf}
    jars = with_jar(settings.get("spark.jars"))  # from_avro decodes in the JVM where strom's jar is built
    if jars:
        settings["spark.jars"] = jars
    spark_conf = SparkConf().setMaster(master).setAppName("strom-trucking-demo").setAll(list(settings.items()))
    if SparkContext._active_spark_context is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        with log_path.open("ab") as log:  # the JVM keeps its own copy of the descriptor
            gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": log, "stderr": log})
        sc = SparkContext(conf=spark_conf, gateway=gateway)
    else:  # under spark-submit, or a context exists: use it as it is
        sc = SparkContext.getOrCreate(spark_conf)
    sc.setLogLevel("WARN")
    spark = SparkSession(sc)
    try:
        register(spark)
    except Exception:
        spark.stop()  # e.g. WorkerSetupError: the executors cannot import strom
        raise
    return spark


def _run(client: ClientOptions, duration: float, rate: float, speedup: float, trucks: int, output: Path,
         console: Console, master: str, spark_conf: dict[str, str], registry: str) -> int:
    from confluent_kafka import Consumer

    from strom.demo.trucking import job
    from strom.demo.trucking.simulator import LiveSimulator, register_event_schema

    start_ms = int(time.time() * 1000)
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)

    errors: list[str] = []
    reg_config = registry_config(client)
    schema_id = register_event_schema(registry, reg_config)  # from_avro types the job's columns with it
    sim = LiveSimulator(client.bootstrap, EVENTS_TOPIC, registry, rate=rate, speedup=speedup, trucks=trucks,
                        on_error=errors.append, properties=client.properties, registry_config=reg_config)
    sim.start()
    console.print(f"simulator: {trucks} trucks, ~{rate:g} events/s to [bold]{EVENTS_TOPIC}[/] in Avro (schema id "
                  f"{schema_id}, subject {EVENTS_SUBJECT}), event time "
                  f"{speedup:g}x faster than the clock ({job.WINDOW_SECONDS}s windows close every "
                  f"~{job.WINDOW_SECONDS / speedup:.0f}s)")
    spark_log = output / "spark.log"
    console.print(f"starting Spark ({master}; its log: {spark_log}) ...")
    try:
        spark = spark_session(master, spark_log, spark_conf or {})
    except Exception:
        sim.stop()
        raise
    # This run's events only: from the first record produced at or after its start.
    # The -X properties reach Spark's clients as the source's and sink's "kafka.*" options.
    kafka_options = {f"kafka.{k}": v for k, v in client.properties.items()}
    queries = job.start(spark, client.bootstrap, output, output / "checkpoints", registry_url=registry,
                        registry_config=reg_config, trigger={"processingTime": "2 seconds"},
                        source_options={**kafka_options, "startingTimestamp": str(start_ms),
                                        "startingOffsetsByTimestampStrategy": "latest"},
                        sink_options=kafka_options)
    console.print(f"streaming queries running: alerts -> [bold]{ALERTS_TOPIC}[/], per-driver windows -> "
                  f"{output / 'driver_stats'} (Parquet). Waiting for windows to close"
                  + (f"; stopping after {duration:g}s" if duration else "; Ctrl-C to stop") + ".")

    consumer = Consumer(client_config(client, **{"group.id": f"strom-demo-{start_ms}", "enable.auto.commit": False,
                                                 "auto.offset.reset": "latest"}))
    consumer.assign([_alerts_from(consumer, start_ms)])
    alerts = 0
    deadline = time.monotonic() + duration if duration else None
    last_status = time.monotonic()
    # Ctrl-C sets a flag rather than raising KeyboardInterrupt: raised inside a Py4J call it would
    # break the connection to the JVM (and the clean stop and summary that follow).
    interrupted = threading.Event()
    previous_handler = (signal.signal(signal.SIGINT, lambda *_: interrupted.set())
                        if threading.current_thread() is threading.main_thread() else None)
    try:
        while (deadline is None or time.monotonic() < deadline) and not interrupted.is_set():
            for q in queries:
                if q.exception() is not None:
                    console.print(f"[red]query {q.name} failed:[/] {q.exception()}")
                    return 1
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                alerts += 1
                console.print(describe_alert(json.loads(msg.value() or b"{}")))
            if time.monotonic() - last_status > 15:
                last_status = time.monotonic()
                progress: dict[str, Any] = queries[0].lastProgress or {}
                console.print(f"[dim]{sim.produced} events produced, {alerts} alerts so far, "
                              f"last batch {progress.get('numInputRows', 0)} rows, "
                              f"watermark {progress.get('eventTime', {}).get('watermark', '-')}[/]")
            if errors:
                console.print(f"[red]producing failed:[/] {errors[0]}")
                return 1
        if interrupted.is_set():
            console.print("stopping ...")
    finally:
        sim.stop()
        for q in queries:
            _stop_between_batches(q)
        consumer.close()
        if previous_handler is not None:
            signal.signal(signal.SIGINT, previous_handler)
    _summary(spark, output, console, sim.produced, alerts)
    spark.stop()
    return 0


def _stop_between_batches(query: Any, timeout: float = 20.0) -> None:
    """Stop a query when no micro-batch is running, so no task is cancelled halfway (and nothing
    noisy is logged); a batch that does not end in time is cancelled all the same."""
    deadline = time.monotonic() + timeout
    with contextlib.suppress(Exception):
        while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.05)
    with contextlib.suppress(Exception):
        query.stop()


def _alerts_from(consumer: Any, start_ms: int, patience_s: float = 60.0) -> Any:
    """Where the alerts of this run start in the alerts topic; asked again while a broker of a
    cluster restarts or the partition's leadership moves."""
    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.monotonic() + patience_s
    while True:
        try:
            tp = consumer.offsets_for_times([TopicPartition(ALERTS_TOPIC, 0, start_ms)], timeout=10)[0]
            if tp.offset < 0:
                tp = TopicPartition(ALERTS_TOPIC, 0, consumer.get_watermark_offsets(tp, timeout=10)[1])
            return tp
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _summary(spark: Any, output: Path, console: Console, produced: int, alerts: int) -> None:
    from pyspark.sql import functions as F
    from rich.table import Table

    path = output / "driver_stats"
    console.print(f"{produced} events produced, {alerts} alerts shown.")
    if not (path / "_spark_metadata").exists():
        return
    stats = spark.read.parquet(str(path))
    per_driver = (stats.groupBy("driverId", "driverName")
                  .agg(F.count("*").alias("windows"), F.sum("events").alias("events"),
                       F.sum("violations").alias("violations"),
                       (F.sum(F.col("avgSpeed") * F.col("events")) / F.sum("events")).alias("avgSpeed"))
                  .orderBy(F.desc("violations")).collect())
    if not per_driver:
        console.print("no window closed yet; run longer (--duration) to see the aggregates.")
        return
    table = Table(title=f"closed windows in {path}")
    for col in ("driver", "name", "windows", "events", "violations", "avg speed"):
        table.add_column(col)
    for r in per_driver:
        table.add_row(str(r.driverId), r.driverName, str(r.windows), str(r.events), str(r.violations),
                      f"{r.avgSpeed:.1f}")
    console.print(table)
