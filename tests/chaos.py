"""Fault-injection harness: a steady pgbench load on a set, the relay SIGKILLed
again and again (at random moments and at failpoints around the Kafka commit),
each service restarted once, a SIGSTOPped zombie relay fenced by its
successor; then every change captured in the source is compared with what
reached Kafka.

Ground truth is a second PgQ consumer (``chaos_audit``) registered on the
set's queue before the load starts (backend ``logical``: a second slot of our
output plugin, read with ``pg_logical_slot_get_binary_changes``): it sees
exactly the changes the relay must deliver. Expected messages follow the row envelope: I -> c, U -> u (a
key change: d of the old key + c of the new), D -> d. Kafka is read
``read_committed``; lost = expected - relayed, duplicated = relayed -
expected, as multisets of (topic, txid, key, op).
"""

import json
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psycopg2
from confluent_kafka import Producer

from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.ops.verify import read_topics, verify_set
from pgshovel2.relay.logical.records import records
from pgshovel2.relay.logical.source import RECORD_FORMAT, RecordDecoder
from pgshovel2.relay.source import Change
from pgshovel2.setrecord import SetRecord
from pgshovel2.sinks.kafka import PARTITIONER
from tests.helpers import Decoder, RelayProcess, caught_up, pgshovel, read_offsets, write_config

AUDIT = "chaos_audit"
FAILPOINTS = "before_commit=0.03,after_commit=0.08,before_finish=0.03"
SCRIPT = """\\set id random(1, 1000)
\\set amt random(-100, 100)
\\set a random(1, 40)
\\set b random(1, 40)
BEGIN;
INSERT INTO {s}.accounts (id, balance, note) VALUES (:id, :amt, 'n')
  ON CONFLICT (id) DO UPDATE SET balance = {s}.accounts.balance + EXCLUDED.balance;
INSERT INTO {s}.ledger (account, amount) VALUES (:id, :amt);
INSERT INTO {s}.tags (a, b, v) VALUES (:a, :b, 'x') ON CONFLICT (a, b) DO UPDATE SET v = left({s}.tags.v || 'y', 50);
END;
"""
SCRIPT_CHURN = """\\set id random(1, 1000)
\\set a random(1, 40)
BEGIN;
UPDATE {s}.accounts SET id = nextval('{s}.moved') WHERE id = :id;
DELETE FROM {s}.tags WHERE a = :a AND b < 5;
DELETE FROM {s}.ledger WHERE id = (SELECT max(id) - 10 FROM {s}.ledger);
END;
"""


@dataclass
class ChaosReport:
    """What a chaos run did and found."""

    kills: int = 0
    failpoint_kills: int = 0
    zombies_fenced: int = 0  # fenced by Kafka, or stood by after its session ended, without writing
    service_restarts: dict = field(default_factory=dict)  # "kafka", "postgres crash", "kafka crash + relay kill", ...
    relay_exits: list = field(default_factory=list)  # outages a running relay did not survive by itself
    source_transactions: int = 0
    expected_messages: int = 0
    relayed_messages: int = 0
    lost: int = 0
    duplicated: int = 0
    first_lost: str | None = None
    first_duplicated: str | None = None
    transactions_lost: int = 0
    transactions_duplicated: int = 0
    first_duplicated_transaction: list | None = None  # its records in the transactions topic, in order
    duplicate_trace: list | None = None  # where its copies sit in Kafka (_trace)
    state_equal: bool = False
    seconds: float = 0.0

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    def transactions_problem(self) -> str:
        """The transaction-level findings first (a failure's message is shown cut after a few hundred
        characters): counts, the first duplicated transaction's trace and records, then the rest."""
        return (f"transactions lost {self.transactions_lost}, duplicated {self.transactions_duplicated}; "
                f"trace {self.duplicate_trace}; records {self.first_duplicated_transaction}; report {self}")


class Load:
    """pgbench at a steady rate on the chaos tables, restarted whenever it exits."""

    def __init__(self, stack, schema: str, workdir: Path, rate: int = 150):
        self.stack, self.rate = stack, rate
        self.scripts = []
        for name, text, weight in (("main", SCRIPT, 4), ("churn", SCRIPT_CHURN, 1)):
            path = workdir / f"chaos-{name}.sql"
            path.write_text(text.format(s=schema))
            self.scripts.append(f"{path}@{weight}")
        self.log = open(workdir / "pgbench.log", "a")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        port = self.stack.env["PG_PORT"]
        while not self._stop.is_set():
            args = ["pgbench", "-n", "-c", "2", "-j", "1", "--rate", str(self.rate), "-T", "3600",
                    "--max-tries", "20", "-h", "127.0.0.1", "-p", port, "-U", "postgres"]
            for script in self.scripts:
                args += ["-f", script]
            self.proc = subprocess.Popen([*args, "pgshovel"], stdout=self.log, stderr=subprocess.STDOUT)
            while self.proc.poll() is None and not self._stop.is_set():
                time.sleep(0.2)
            if self.proc.poll() is None:
                self.proc.terminate()
                self.proc.wait(30)
            self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.log.close()


class ChaosRun:
    """One chaos run on a fresh set in schema (tables created here)."""

    def __init__(self, stack, cluster: str, db, schema: str, workdir: Path, kills: int, seed: int = 1,
                 backend: str = "trigger"):
        self.stack, self.cluster, self.db, self.schema = stack, cluster, db, schema
        self.backend = backend
        self.audit_slot = f"chaos_audit_{cluster}"
        self.workdir, self.kill_target = workdir, kills
        self.rnd = random.Random(seed)
        self.set_name = "chaos"
        self.queue = f"pgshovel2.{cluster}.{self.set_name}"
        self.report = ChaosReport()
        self.relay: RelayProcess | None = None
        self._relays = 0
        self._truth: tuple[Counter, set] | None = None

    # -- set-up -------------------------------------------------------------
    def create_set(self) -> None:
        s = f'"{self.schema}"'
        with self.db.cursor() as cur:
            cur.execute(f"CREATE TABLE {s}.accounts (id bigint PRIMARY KEY, balance int, note text)")
            cur.execute(f"CREATE TABLE {s}.ledger (id bigserial PRIMARY KEY, account bigint, amount int)")
            cur.execute(f"CREATE TABLE {s}.tags (a int, b int, v text, PRIMARY KEY (a, b))")
            cur.execute(f"CREATE SEQUENCE {s}.moved START 1000000")
        tables = [{"schema": self.schema, "name": n} for n in ("accounts", "ledger", "tags")]
        cfg = write_config(self.workdir, self.stack, tables, topic_prefix=f"chaos{self.cluster}",
                           backend=self.backend)
        pgshovel(self.stack, self.cluster, "set", "create", self.set_name, str(cfg))

    def start_relay(self, failpoints: bool = False) -> RelayProcess:
        self._relays += 1
        env = {"PGSHOVEL2_FAILPOINTS": FAILPOINTS} if failpoints else {}
        extra = os.environ.get("PGSHOVEL2_CHAOS_RELAY_ARGS", "").split()  # e.g. --no-transactions
        relay = RelayProcess(self.stack, self.cluster, self.set_name, "--max-transaction-messages", "500", *extra,
                             log_path=self.workdir / f"relay-{self._relays:03d}.log", extra_env=env)
        relay.wait_for("relaying set")
        return relay

    # -- faults -------------------------------------------------------------
    def kill_once(self, failpoints: bool) -> None:
        self.relay = self.start_relay(failpoints)
        if failpoints:
            deadline = time.monotonic() + 20
            while self.relay.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        else:
            time.sleep(self.rnd.uniform(0.3, 3.0))
        self_killed = self.relay.proc.poll() is not None
        code = self.relay.stop(signal.SIGKILL)
        assert code == -signal.SIGKILL, f"relay exited with {code}, not killed:\n{self.relay.log()}"
        self.report.kills += 1
        self.report.failpoint_kills += self_killed
        self.relay = None

    def restart_service(self, service: str, down_seconds: float, how: str = "stop") -> None:
        """Stop (how "stop") or crash (how "crash": PostgreSQL -m immediate, SIGKILL of the JVM) the
        service under load, and start it again. The running relay must ride it out by itself;
        "crash+kill" also SIGKILLs the relay at the same moment (then a new one starts)."""
        self.relay = self.relay or self.start_relay()
        time.sleep(1)
        if how == "crash+kill":
            self.relay.proc.kill()
        self.stack.script("stop" if how == "stop" else "crash", service)
        time.sleep(down_seconds)
        self.stack.script("start", service)
        if service == "postgres":
            self.stack.script("start", "pgqd")
        label = service if how == "stop" else f"{service} {how.replace('+kill', ' + relay kill')}"
        self.report.service_restarts[label] = self.report.service_restarts.get(label, 0) + 1
        if how == "crash+kill":
            self.relay.stop(signal.SIGKILL)
            self.report.kills += 1
            self.relay = self.start_relay()
        time.sleep(3)
        if self.relay.proc.poll() is not None:
            self.report.relay_exits.append(f"{label}: exit {self.relay.proc.returncode}\n{self.relay.log()[-2000:]}")

    def zombie(self) -> None:
        """SIGSTOP the active relay, start a second one (it takes over once the first one's
        ZooKeeper session expired), resume the first: the zombie must not write again. It
        either finds its session lost and stands by, or is fenced by Kafka on its next
        commit ("took over", exit 1); the successor keeps relaying either way."""
        old = self.relay or self.start_relay()
        time.sleep(self.rnd.uniform(0.5, 1.5))
        old.proc.send_signal(signal.SIGSTOP)
        new = self.start_relay()
        time.sleep(3)
        old.proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 30
        while old.proc.poll() is None and "no longer the active relay" not in old.log() \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)
        fenced = old.proc.poll() == 1 and "took over" in old.log()
        standing_by = old.proc.poll() is None and "no longer the active relay" in old.log()
        if (fenced or standing_by) and new.proc.poll() is None:
            self.report.zombies_fenced += 1
        old.stop(signal.SIGKILL)
        self.relay = new if new.proc.poll() is None else None

    SERVICE_FAULTS = [("kafka", 3.0, "stop"), ("postgres", 2.0, "stop"), ("zookeeper", 12.0, "stop"),
                      ("zombie", 0.0, ""), ("kafka", 3.0, "crash"), ("postgres", 2.0, "crash"),
                      ("kafka", 3.0, "crash+kill"), ("postgres", 2.0, "crash+kill")]

    def faults(self) -> None:
        services = list(self.SERVICE_FAULTS)
        every = max(1, self.kill_target // (len(services) + 1))
        for i in range(self.kill_target):
            if i and i % every == 0 and services:
                self._service_fault(*services.pop(0))
                if self.relay is not None:
                    self.relay.stop(signal.SIGKILL)
                    self.report.kills += 1
                    self.relay = None
                    continue
            self.kill_once(failpoints=i % 2 == 1)
        for fault in services:
            self._service_fault(*fault)

    def _service_fault(self, service: str, down: float, how: str) -> None:
        if service == "zombie":
            self.zombie()
        else:
            self.restart_service(service, down, how)

    # -- the run --------------------------------------------------------------
    def run(self) -> ChaosReport:
        started = time.monotonic()
        self.create_set()
        first = self.start_relay()
        first.wait_for("snapshot done")
        first.stop(signal.SIGKILL)
        self._register_audit()
        load = Load(self.stack, f'"{self.schema}"', self.workdir)
        load.start()
        try:
            self.faults()
        finally:
            load.stop()
        final = self.relay or self.start_relay()
        caught_up(self.stack, self.cluster, self.set_name, timeout=300)
        assert final.stop() == 0, final.log()
        self._compare()
        self.report.seconds = round(time.monotonic() - started, 1)
        return self.report

    def _register_audit(self) -> None:
        with self.db.cursor() as cur:
            if self.backend == "logical":
                cur.execute("SELECT pgshovel2_decoder.create_slot(%s)", (self.audit_slot,))
            else:
                cur.execute("SELECT pgq.register_consumer(%s, %s)", (self.queue, AUDIT))

    # -- comparison -------------------------------------------------------------
    def _set(self) -> SetRecord:
        with ClusterStore(self.stack.zk, self.cluster) as store:
            return store.get_set(self.set_name)[0]

    def _compare(self) -> None:
        record = self._set()
        tables, topics = record.tables, record.topics.tables
        if self._truth is None:  # the audit consumer can be drained once
            self._truth = self._expected(tables, topics)
        expected, txids = self._truth
        relayed, begins = self._relayed(list(topics.values()), record.topics.transactions)
        lost, dup = expected - relayed, relayed - expected
        r = self.report
        r.source_transactions, r.expected_messages = len(txids), sum(expected.values())
        r.relayed_messages, r.lost, r.duplicated = sum(relayed.values()), sum(lost.values()), sum(dup.values())
        r.first_lost = repr(min(lost)) if lost else None
        r.first_duplicated = repr(min(dup)) if dup else None
        r.transactions_lost = len(txids - set(begins))
        r.transactions_duplicated = sum(n - 1 for n in begins.values() if n > 1)
        reports = verify_set(record, self.stack.bootstrap, self.stack.registry)
        r.state_equal = all(rep.ok for rep in reports)

    def inject_duplicate(self) -> None:
        """Write a second copy of the first relayed data message (a detector self-check)."""
        record = self._set()
        topic = record.topic(record.tables[0])
        key, value, headers = next(m for m in read_topics(self.stack.bootstrap, [topic])[topic]
                                   if m[2]["pgshovel.op"] != "r")
        producer = Producer({"bootstrap.servers": self.stack.bootstrap, "partitioner": PARTITIONER})
        producer.produce(topic, value, key, headers=list(headers.items()))
        assert producer.flush(30) == 0

    def _expected(self, tables: tuple[Table, ...], topics: dict) -> tuple[Counter, set]:
        key_idx = {t.qualified: [[c.name for c in t.columns].index(k) for k in t.key] for t in tables}
        out: Counter = Counter()
        txids = set()
        if self.backend == "logical":
            changes = _drain_slot(self.stack.dsn, self.audit_slot, tables)
        else:
            changes = ((txid, op, json.loads(data), table, json.loads(before) if before else None)
                       for txid, op, data, table, before in _drain(self.stack.dsn, self.queue, AUDIT))
        for txid, op, row, table, before in changes:
            idx, topic = key_idx[table], topics[table]
            key = tuple(row[i] for i in idx)
            txids.add(txid)
            if op == "U" and before is not None:
                old = tuple(before[i] for i in idx)
                if old != key:
                    out[(topic, txid, old, "d")] += 1
                    out[(topic, txid, key, "c")] += 1
                    continue
            out[(topic, txid, key, {"I": "c", "U": "u", "D": "d"}[op])] += 1
        return out, txids

    def _relayed(self, topics: list[str], txn_topic: str) -> tuple[Counter, Counter]:
        decode = Decoder(self.stack.registry)
        data = read_topics(self.stack.bootstrap, [*topics, txn_topic])
        out: Counter = Counter()
        for topic in topics:
            for key, _value, h in data[topic]:
                if h["pgshovel.op"] != "r":
                    out[(topic, int(h["pgshovel.txid"]), tuple(decode(key).values()), h["pgshovel.op"])] += 1
        records = [(decode(v), h) for _, v, h in data[txn_topic]]
        begins = Counter(r["txid"] for r, _ in records if r["type"] == "BEGIN")
        twice = sorted(txid for txid, n in begins.items() if n > 1)
        if twice:
            self.report.first_duplicated_transaction = [repr(r) for r in records if r[0]["txid"] == twice[0]]
            self.report.duplicate_trace = _trace(self.stack, txn_topic, twice[0], decode)
        return out, begins


def _trace(stack, txn_topic: str, txid: int, decode, around: int = 4) -> list[str]:
    """Each BEGIN/END of txid in the transactions topic with its offset and the records around
    it, aborted ones (read_uncommitted only) marked: which Kafka transactions wrote the copies."""
    committed = {offset for _, offset, _, _ in read_offsets(stack.bootstrap, txn_topic)}
    records = [(offset, decode(value))
               for _, offset, _, value in read_offsets(stack.bootstrap, txn_topic, "read_uncommitted")]
    out = []
    for i, (offset, rec) in enumerate(records):
        if rec["txid"] == txid:
            for o, r in records[max(0, i - around):i + around + 1]:
                mark = "" if o in committed else " ABORTED"
                out.append(f"{'>' if o == offset else ' '} {o}{mark} {r['type']} txid {r['txid']} {r['position']} "
                           f"events {r['event_count']}")
            out.append("--")
    return out


def _drain_slot(dsn: str, slot: str, tables: tuple[Table, ...]):
    """Every change in the audit slot of our output plugin, consumed, then the slot dropped:
    (txid, op, row, table tag, old row or None), rows as lists."""
    decoder = RecordDecoder([t.qualified for t in tables], slot)
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            spec = []
            for t in tables:
                cur.execute("SELECT to_regclass(%s)::oid", (t.qualified,))
                spec.append(f"{cur.fetchone()[0]}:{','.join(str(c.attnum) for c in t.columns)}")
            cur.execute("SELECT data FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, 'format', %s, "
                        "'tables', %s)",
                        (slot, RECORD_FORMAT, ";".join(spec)))
            for record in (r for (data,) in cur.fetchall() for r in records(bytes(data))):
                rec = decoder.decode(record)
                if isinstance(rec, Change) and rec.op in "IUD":
                    yield rec.txid, rec.op, rec.row, rec.table, rec.before
            cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    finally:
        conn.close()


def _drain(dsn: str, queue: str, consumer: str):
    """Every event the consumer has not read yet: (txid, op, data, table tag, before)."""
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            while True:
                cur.execute("SELECT pgq.next_batch(%s, %s)", (queue, consumer))
                batch = cur.fetchone()[0]
                if batch is None:
                    return
                cur.execute("SELECT ev_txid, ev_type, ev_data, ev_extra1, ev_extra2 "
                            "FROM pgq.get_batch_events(%s)", (batch,))
                yield from cur.fetchall()
                cur.execute("SELECT pgq.finish_batch(%s)", (batch,))
    finally:
        conn.close()
