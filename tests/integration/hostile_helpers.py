"""Helpers of test_hostile_values and test_oversized_messages: the four capture paths, a set's relay run over an initial
snapshot and a stream, and the rows the consumer library rebuilds, compared in PostgreSQL."""

from pathlib import Path

from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer import SetReader
from pgshovel2.replica.values import adapter
from tests.helpers import RelayProcess, caught_up, pgshovel, write_config

# The four capture paths: (backend for write_config, extra config)
PATHS = {
    "trigger-c": ("trigger", {"capture": "c"}),
    "trigger-plpgsql": ("trigger", {"capture": "plpgsql"}),
    "logical-pgshovel2": ("logical", {"decoder": "pgshovel2"}),
    "logical-pgoutput": ("logical", {"decoder": "pgoutput"}),
}
DEEP_STACK = "SET max_stack_depth = '60MB'"  # PostgreSQL parses jsonb recursively (scripts/stack.sh)


def create_set(stack, cluster: str, tmp_path: Path, name: str, schema: str, table: str, path: str,
               encoding: str, **extra) -> None:
    """pgshovel set create name for schema.table on path ("trigger-c", ...) with encoding."""
    backend, options = PATHS[path]
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": table}], encoding=encoding, backend=backend,
                       topic_prefix=f"{name}{cluster}", **options, **extra)
    pgshovel(stack, cluster, "set", "create", name, str(cfg))


def relay_snapshot_then_stream(stack, cluster: str, tmp_path: Path, name: str, write) -> RelayProcess:
    """Start the set's relay (initial snapshot of what the table holds), run write() once the
    snapshot is in Kafka, wait until it is relayed; returns the relay, stopped."""
    relay = RelayProcess(stack, cluster, name, log_path=tmp_path / f"{name}.log")
    try:
        relay.wait_for("snapshot done", timeout=300)
        write()
        caught_up(stack, cluster, name, timeout=300)
    finally:
        relay.stop()
    return relay


def set_table(stack, cluster: str, name: str) -> Table:
    """The (only) table of set name, as its record holds it."""
    with ClusterStore(stack.zk, cluster) as store:
        return store.get_set(name)[0].tables[0]


def rebuilt(stack, cluster: str, name: str, envelope: str = "row") -> dict:
    """id -> the last (after-)image of each row the consumer library reads from the set's topics,
    with the Change (None: deleted)."""
    with ClusterStore(stack.zk, cluster) as store:
        reader = SetReader.for_set(store, name, stack.bootstrap, stack.registry, timeout=120)
    rows: dict = {}
    with reader:
        for txn in reader.transactions(until_caught_up=True):
            for change in txn.changes:
                value = change.value
                if envelope == "debezium" and value is not None:
                    value = value["after"]
                key = change.key["id"]
                rows[key] = (value, change) if value is not None else None
    return rows


def compare_in_postgres(db, schema: str, table: Table, rows: dict, encoding: str) -> list[str]:
    """For each rebuilt row (id -> (value, change)): every column's decoded value, as replicate
    sends it (pgshovel2.replica.values), cast to the column's type in PostgreSQL, is the source
    row's value (json: as jsonb). Returns the differences."""
    failures = []
    cols = [c for c in table.columns if c.name != "id"]
    with db.cursor() as cur:
        cur.execute(DEEP_STACK)
        for row_id, got in sorted(rows.items()):
            if got is None:
                failures.append(f"row {row_id}: deleted in Kafka")
                continue
            value, _ = got
            tests, params = [], []
            for col in cols:
                cast = "jsonb" if col.kind in ("json", "jsonb") and not col.is_array else col.pg_type
                left = f"t.{col.name}::jsonb" if cast == "jsonb" else f"t.{col.name}"
                tests.append(f"{left} IS NOT DISTINCT FROM %s::{cast}")
                params.append(adapter(col, encoding == "json")(value[col.name]))
            cur.execute(f'SELECT ARRAY[{", ".join(tests)}] FROM "{schema}"."{table.name}" t WHERE id = %s',
                        (*params, row_id))
            found = cur.fetchone()
            if found is None:
                failures.append(f"row {row_id}: not in the source")
                continue
            failures += [f"row {row_id} column {c.name} ({c.pg_type}): differs"
                         for c, ok in zip(cols, found[0], strict=True) if not ok]
        cur.execute("RESET max_stack_depth")
    return failures
