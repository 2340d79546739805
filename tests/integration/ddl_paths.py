"""Helpers of the DDL remedy tests (test_ddl_remedies*.py): a set on each capture path, the state
rebuilt from Kafka (every message decoded with the schema it was written with), the source's rows,
and the relay's DDL stop record."""

import time
from decimal import Decimal

import psycopg2
import psycopg2.extras

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from tests.helpers import Decoder, pgshovel, read_topics, write_config

# The four capture paths: trigger with C capture, trigger with PL/pgSQL capture, logical with our
# plugin, logical with pgoutput.
PATHS = ["c", "plpgsql", "logical", "pgoutput"]


def path_config(path: str) -> dict:
    """write_config's arguments for a path."""
    if path in ("c", "plpgsql"):
        return {"backend": "trigger", "capture": path}
    return {"backend": path}


def make_set(stack, cluster: str, db, schema: str, tmp_path, set_name: str, path: str, tables: dict[str, str],
             encoding: str = "avro") -> dict[str, str]:
    """Create tables (name -> column list) in schema and a set on them; returns name -> topic."""
    with db.cursor() as cur:
        for name, columns in tables.items():
            cur.execute(f'CREATE TABLE "{schema}"."{name}" ({columns})')
    prefix = f"{set_name}{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": n} for n in tables], encoding=encoding,
                       topic_prefix=prefix, **path_config(path))
    pgshovel(stack, cluster, "set", "create", set_name, str(cfg))
    return {n: names.table_topic(prefix, schema, n) for n in tables}


def rebuild(stack, topics: list[str]) -> tuple[dict, list]:
    """(key tuple -> last value dict, every message as (topic, key, value, headers, raw key)) of the
    topics read in order (a table's topic generations, oldest first): each message decoded with the
    schema it names, a tombstone removing its key."""
    decode = Decoder(stack.registry)
    state, out = {}, []
    read = read_topics(stack.bootstrap, topics)
    for topic in topics:
        for key, value, headers in read[topic]:
            k, v = decode(key), decode(value)
            out.append((topic, k, v, headers, key))
            ident = tuple(sorted(k.items()))
            if v is None:
                state.pop(ident, None)
            else:
                state[ident] = v
    return state, out


def source_rows(db, table: str, key: str = "id") -> dict:
    """key tuple -> row dict of a table now (values as psycopg2 gives them)."""
    with db.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(f"SELECT * FROM {table}")
        return {((key, r[key]),): dict(r) for r in cur.fetchall()}


def normal(value):
    """A value as comparable between Kafka (Avro/JSON) and psycopg2: decimals and numbers as Decimal text."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        return str(Decimal(value).normalize())
    if isinstance(value, str) and value[:1] in "-0123456789" and value[-1:].isdigit():
        try:  # a numeric in the JSON encoding: its exact text
            return str(Decimal(value).normalize())
        except ArithmeticError:
            return value
    return value


def assert_same(kafka: dict, source: dict, rename: dict | None = None) -> None:
    """The rebuilt state equals the source rows (columns by name; rename: Kafka field -> column)."""
    rename = rename or {}

    def norm(rows: dict) -> dict:
        return {k: {rename.get(c, c): normal(v) for c, v in row.items()} for k, row in rows.items()}

    got, want = norm(kafka), norm(source)
    assert got.keys() == want.keys(), (sorted(got.keys() - want.keys())[:5], sorted(want.keys() - got.keys())[:5])
    for k in want:
        assert got[k] == want[k], (k, got[k], want[k])


def wait_stopped(stack, cluster: str, set_name: str, relay, timeout: float = 60) -> dict:
    """The relay's ``relay/ddl_stop`` record, once it waits at a DDL (the relay must stay up)."""
    deadline = time.monotonic() + timeout
    with ClusterStore(stack.zk, cluster) as store:
        while True:
            stop = store.get_relay_record(set_name, "ddl_stop")  # relay/ddl/gate.py STOP
            if stop is not None:
                return stop
            assert relay.proc.poll() is None, relay.log()
            assert time.monotonic() < deadline, f"the relay did not stop at the DDL:\n{relay.log()}"
            time.sleep(0.1)


def txn_records(stack, topic: str) -> list[dict]:
    """The decoded records of a set's transactions topic, with their headers."""
    decode = Decoder(stack.registry)
    return [{**decode(v), "headers": h} for _, v, h in read_topics(stack.bootstrap, [topic])[topic]]
