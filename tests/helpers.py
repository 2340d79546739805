"""Test helpers: write set configs, run the CLIs, run relays, read topics."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import fastavro
import psycopg2
import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from pgshovel2 import names, tablenames
from pgshovel2.cluster import ClusterStore
from pgshovel2.codec.connect import unwrap
from pgshovel2.ops import status
from pgshovel2.ops.verify import read_topics, verify_set

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent
# A killed active relay is replaced after this many seconds (the ZooKeeper session timeout).
SESSION_TIMEOUT = os.environ.get("PGSHOVEL2_TEST_SESSION_TIMEOUT", "3")
KAFKA_LIBS = Path(os.environ.get("KAFKA_LIBS") or REPO / ".cache" / "kafka-libs")


def write_config(tmp_path: Path, stack, tables: list, encoding: str = "avro", backend: str = "trigger",
                 **extra) -> Path:
    """A set config file for tables (list of table entries) on the test database.

    backend logical: also sets REPLICA IDENTITY FULL on the tables (so values are never unchanged
    and unlogged; tests of pgshovel.unchanged set DEFAULT afterwards, see pgshovel2.backends.logical).
    backend pgoutput: a logical set with ``decoder: pgoutput``.
    """
    if backend == "pgoutput":
        backend, extra = "logical", {"decoder": "pgoutput", **extra}
    data = {"database": {"dsn": stack.dsn}, "encoding": encoding, "backend": backend, "tables": tables, **extra}
    if backend == "logical":
        replica_identity_full(stack, tables)
    path = tmp_path / f"set-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def replica_identity_full(stack, tables: list) -> None:
    """ALTER TABLE ... REPLICA IDENTITY FULL on each table entry (a name as a config takes it, or {schema, name})."""
    conn = psycopg2.connect(stack.dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        for t in tables:
            entry = {"name": t} if isinstance(t, str) else t
            schema, name = (entry["schema"], entry["name"]) if "schema" in entry else tablenames.split(entry["name"])
            cur.execute(f"ALTER TABLE {names.qualified(schema or 'public', name)} "
                        "REPLICA IDENTITY FULL")
    conn.close()


def cli_env(stack, cluster: str) -> dict:
    """Environment of the CLIs under test: the test stack, and this checkout's code first."""
    return {**os.environ, "PGSHOVEL_ZOOKEEPER_HOSTS": stack.zk, "PGSHOVEL_CLUSTER": cluster,
            "PGSHOVEL_BOOTSTRAP_SERVERS": stack.bootstrap, "PGSHOVEL_SCHEMA_REGISTRY": stack.registry,
            "PGSHOVEL_ZOOKEEPER_SESSION_TIMEOUT": SESSION_TIMEOUT,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def pgshovel(stack, cluster: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the admin CLI; returns the completed process (stdout/stderr captured)."""
    proc = subprocess.run([str(BIN / "pgshovel"), *args], env=cli_env(stack, cluster),
                          capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"pgshovel {' '.join(args)} failed: {proc.stderr}")
    return proc


class RelayProcess:
    """A pgshovel-kafka-relay subprocess for a set. Every one still running when its test ends is
    SIGKILLed by the autouse fixture in conftest (kill_leftover_relays), even after a failure."""

    started: list["RelayProcess"] = []

    def __init__(self, stack, cluster: str, set_name: str, *args: str, log_path: Path,
                 extra_env: dict | None = None):
        self.log_path = log_path
        self._log = open(log_path, "a")
        self.proc = subprocess.Popen(
            [str(BIN / "pgshovel-kafka-relay"), set_name, "--progress-interval", "1", *args],
            env={**cli_env(stack, cluster), **(extra_env or {})}, stdout=self._log, stderr=subprocess.STDOUT)
        RelayProcess.started.append(self)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            if sig != signal.SIGKILL:
                self.proc.send_signal(signal.SIGCONT)
        code = self.proc.wait(timeout)
        self._log.close()
        return code

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, text: str, timeout: float = 60) -> None:
        """Wait until the relay's log contains text; fail if it exits first."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"relay never logged {text!r}:\n{self.log()}")
            time.sleep(0.05)


def caught_up(stack, cluster: str, set_name: str, timeout: float = 60) -> None:
    """Wait until the set's relay relayed every committed change (either backend)."""
    with ClusterStore(stack.zk, cluster) as store:
        status.wait_caught_up(store, set_name, stack.bootstrap, timeout)


class Decoder:
    """Decodes Avro (Confluent framing, schema from the registry) or JSON (Kafka Connect's
    ``{"schema", "payload"}`` form: its payload, values as written)."""

    def __init__(self, registry_url: str):
        self._client = SchemaRegistryClient({"url": registry_url})
        self._schemas: dict[int, object] = {}

    def __call__(self, data: bytes | None):
        if data is None:
            return None
        if data[:1] != b"\x00":
            return unwrap(json.loads(data))
        schema_id = int.from_bytes(data[1:5], "big")
        if schema_id not in self._schemas:
            text = self._client.get_schema(schema_id).schema_str
            self._schemas[schema_id] = fastavro.parse_schema(json.loads(text))
        return fastavro.schemaless_reader(io.BytesIO(data[5:]), self._schemas[schema_id])


def messages(stack, topic: str) -> list[tuple]:
    """[(decoded key, decoded value, headers)] of a topic, in offset order."""
    decode = Decoder(stack.registry)
    return [(decode(k), decode(v), h) for k, v, h in read_topics(stack.bootstrap, [topic])[topic]]


def verify(stack, cluster: str, set_name: str):
    """pgshovel2.ops.verify.verify_set for a set of the cluster (the relay must be caught up)."""
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set(set_name)
    return verify_set(record, stack.bootstrap, stack.registry)


def assert_verified(reports) -> None:
    """Fail with the first difference of any table."""
    bad = [r for r in reports if not r.ok]
    assert not bad, bad[0].first_difference


def kafka_partitions(keys: list[bytes], partitions: int) -> list[tuple[int, int]]:
    """[(murmur2 hash, partition)] of each serialized key, computed by Kafka's own Java client.

    Runs tests/java/KafkaPartitions.java (Utils.murmur2 and
    BuiltInPartitioner.partitionForKey of the kafka-clients jar in $KAFKA_LIBS) for a topic
    of partitions partitions: what a Java producer's default partitioner does with the key.
    """
    lines = "".join(k.hex() + "\n" for k in keys)
    proc = subprocess.run(["java", "-cp", f"{KAFKA_LIBS}/*", str(REPO / "tests" / "java" / "KafkaPartitions.java"),
                           str(partitions)], input=lines, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = [tuple(int(x) for x in line.split()) for line in proc.stdout.splitlines()]
    assert len(out) == len(keys), proc.stdout
    return out


def read_offsets(bootstrap: str, topic: str, isolation: str = "read_committed",
                 timeout: float = 60) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """[(partition, offset, key, value)] of every message of topic a consumer with isolation.level
    isolation reads (read_uncommitted: aborted ones too), partition by partition in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pgshovel-test-{time.monotonic_ns()}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        parts = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out, pending = [], set(parts)
        while pending:
            msg = consumer.poll(timeout)
            assert msg is not None, f"no message from {topic} within {timeout}s; waiting for {sorted(pending)}"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error().str()
                pending.discard(msg.partition())
                continue
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        return sorted(out, key=lambda m: m[0])
    finally:
        consumer.close()


def read_partitioned(bootstrap: str, topic: str, timeout: float = 60) -> list[tuple[int, bytes | None, bytes | None]]:
    """[(partition, key, value)] of every committed message of topic (partition by partition)."""
    return [(p, key, value) for p, _, key, value in read_offsets(bootstrap, topic, timeout=timeout)]


def until(ready: Callable[[], object], what: str, timeout: float, step: float = 0.05) -> None:
    """Return once ready() is true, checking every step s; fail naming what after timeout s."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        time.sleep(step)


def capture_into(cur, queue: str, table: str, columns: str, attnums: str) -> None:
    """Create table (columns: its SQL column list, the first one its key) and PgQ queue, and capture
    the table's rows into the queue with the C trigger pgshovel2.capture (table tag 'tag', the
    columns numbered attnums, e.g. '1,2'); cur: an autocommit cursor."""
    from pgshovel2.backends import trigger

    cur.execute("CREATE EXTENSION IF NOT EXISTS pgq")
    trigger.ensure_extension(cur)
    cur.execute(f"CREATE TABLE {table} ({columns})")
    cur.execute("SELECT pgq.create_queue(%s)", (queue,))
    cur.execute(f"CREATE TRIGGER c AFTER INSERT OR UPDATE OR DELETE ON {table} FOR EACH ROW "
                f"EXECUTE FUNCTION pgshovel2.capture(%s, 'tag', %s, '1', 'all')", (queue, attnums))


def drop_slot(dsn: str, slot: str) -> None:
    """Drop slot on dsn, ending its walsender first; best effort (the server may be down)."""
    try:
        conn = psycopg2.connect(dsn, connect_timeout=5)
    except psycopg2.Error:
        return
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for _ in range(50):
                cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,))
                row = cur.fetchone()
                if row is None:
                    return
                if row[0] is None:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    return
                cur.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                time.sleep(0.1)
    except psycopg2.Error:
        pass
    finally:
        conn.close()
