"""Shared by the Spark tests: pgbench-like tables, a writer thread, state readers."""

import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg2
import pyarrow.parquet as pq

from pgshovel2.consumer import SetReader
from tests.helpers import REPO, cli_env, pgshovel, write_config

TABLES = {"accounts": ["aid", "bid", "abalance", "filler"], "branches": ["bid", "bbalance", "note"]}


def create_tables(db, schema: str, accounts: int = 2000) -> None:
    """pgbench-like accounts (int key, char filler) and branches (text note), filled."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".accounts (aid int PRIMARY KEY, bid int NOT NULL, '
                    'abalance int NOT NULL, filler char(20))')
        cur.execute(f'CREATE TABLE "{schema}".branches (bid bigint PRIMARY KEY, bbalance int, note text)')
        cur.execute(f'INSERT INTO "{schema}".accounts SELECT g, g %% 10, 0, \'x\' FROM generate_series(1, %s) g',
                    (accounts,))
        cur.execute(f'INSERT INTO "{schema}".branches SELECT g, 0, \'branch \' || g FROM generate_series(1, 10) g')


def create_set(stack, cluster: str, tmp_path: Path, schema: str, name: str, backend: str = "trigger",
               **extra) -> None:
    """Set name over the two tables (Avro), on backend; extra: more set config (write_config)."""
    config = write_config(tmp_path, stack, [{"schema": schema, "name": t} for t in TABLES], backend=backend,
                          **extra)
    pgshovel(stack, cluster, "set", "create", name, str(config))


class Writer(threading.Thread):
    """pgbench-like writes until stopped: updates, inserts, deletes and primary-key updates, a few per
    transaction, committed one after another. transactions: how many committed."""

    def __init__(self, dsn: str, schema: str, seed: int = 1):
        super().__init__(daemon=True)
        self.dsn, self.schema, self.rng = dsn, schema, random.Random(seed)
        self.stop = threading.Event()
        self.transactions, self.error = 0, None
        self._next_id = 10_000_000 + seed * 100_000

    def run(self) -> None:
        conn = psycopg2.connect(self.dsn)
        try:
            while not self.stop.is_set():
                with conn, conn.cursor() as cur:
                    for _ in range(self.rng.randint(1, 4)):
                        self._statement(cur)
                self.transactions += 1
                time.sleep(0.002)
        except Exception as exc:  # reported by the test through .error
            self.error = exc
        finally:
            conn.close()

    def _statement(self, cur) -> None:
        s, r = self.schema, self.rng
        kind = r.choice("uuuiidkb")
        if kind == "u":
            cur.execute(f'UPDATE "{s}".accounts SET abalance = abalance + %s WHERE aid = '
                        f'(SELECT aid FROM "{s}".accounts ORDER BY random() LIMIT 1)', (r.randint(-500, 500),))
        elif kind == "i":
            self._next_id += 1
            cur.execute(f'INSERT INTO "{s}".accounts VALUES (%s, %s, 0, %s)', (self._next_id, r.randint(0, 9), "new"))
        elif kind == "d":
            cur.execute(f'DELETE FROM "{s}".accounts WHERE aid = (SELECT aid FROM "{s}".accounts ORDER BY random() '
                        'LIMIT 1)')
        elif kind == "k":
            self._next_id += 1
            cur.execute(f'UPDATE "{s}".accounts SET aid = %s WHERE aid = (SELECT aid FROM "{s}".accounts '
                        'ORDER BY random() LIMIT 1)', (self._next_id,))
        else:
            cur.execute(f'UPDATE "{s}".branches SET bbalance = bbalance + 1, note = %s WHERE bid = %s',
                        (f"note {r.random()} ✓", r.randint(1, 10)))

    def finish(self) -> None:
        """Stop and join; re-raise the writer's error."""
        self.stop.set()
        self.join(30)
        if self.error is not None:
            raise self.error


def source_rows(dsn: str, schema: str, table: str, cols: list[str] | None = None) -> dict:
    """key -> row tuple of a source table's cols (default TABLES[table]), now."""
    cols = cols or TABLES[table]
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(f'SELECT {", ".join(cols)} FROM "{schema}".{table}')
            return {row[0]: tuple(row) for row in cur.fetchall()}
    finally:
        conn.close()


def parquet_rows(path: str | Path, table: str) -> dict:
    """key -> row tuple of a Parquet dataset written by Spark (pyarrow)."""
    cols = TABLES[table]
    data = pq.read_table(str(path), columns=cols).to_pylist()
    return {row[cols[0]]: tuple(row[c] for c in cols) for row in data}


def apply_stream(state: dict, manifest_dir: Path, stack) -> SetReader:
    """Apply the stream after the bootstrap (SetReader.from_manifest) to state {table: {key: row}}."""
    with SetReader.from_manifest(str(manifest_dir), stack.bootstrap, stack.registry) as reader:
        for txn in reader.transactions(until_caught_up=True):
            for change in txn.changes:
                table = change.table.split(".", 1)[1]
                cols = TABLES[table]
                key = change.key[cols[0]]
                if change.op == "d":
                    state[table].pop(key, None)
                else:
                    state[table][key] = tuple(change.value[c] for c in cols)
        return reader


def merge_into_iceberg(stack, cluster: str, boot: Path, warehouse: Path, checkpoint: Path) -> None:
    """spark/materialize.py --format iceberg --available-now (local[2], its own JVM, as a user runs
    it) from bootstrap boot into the Hadoop catalog warehouse, on checkpoint; asserts it succeeded."""
    run = subprocess.run([sys.executable, "spark/materialize.py", "--bootstrap", str(boot), "--format", "iceberg",
                          "--catalog", f"hadoop:{warehouse}", "--stream", "--checkpoint", str(checkpoint),
                          "--available-now", "--master", "local[2]"],  # ZooKeeper: cli_env
                         cwd=REPO, env=cli_env(stack, cluster), capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-5000:]
