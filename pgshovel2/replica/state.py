"""What a target holds of a set: ``pgshovel2_replica.position``, written in the same
target transaction as the changes it covers, so a replica restarted after any
crash resumes exactly after the last applied source transaction.

Table (one row per cluster and set)::

    cluster, set_name     text, primary key
    position              the relay position of the last applied transaction (sortable text;
                          '' right after a bootstrap)
    txid                  its source txid (0 after a bootstrap)
    set_version           the set version whose layout the target tables have
    offsets               {"topic": {"partition": next offset to read}} (JSON)
    txid_snapshot         the bootstrap's handoff (a txid snapshot; a logical set's: an LSN X/Y,
                          pgshovel2.txids.parse_handoff): transactions it covers are in
                          the copy and skipped (NULL for a bootstrap from Kafka snapshot rows)
    bootstrap             how the target was filled: 'copy', 'parquet' or 'kafka'
    bootstrap_version     the set version whose tables the bootstrap filled (NULL: unknown, a
                          target bootstrapped before it was recorded: every table counts as filled).
                          Snapshot rows of the other tables (added later, their rows sent by an
                          online snapshot) are applied, not skipped as in the copy
    transactions, changes applied so far (counters)
    applied_at            timestamptz of the last apply
"""

import json
from dataclasses import dataclass, field

from psycopg2 import sql

SCHEMA = "pgshovel2_replica"
DDL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.position (
    cluster text NOT NULL,
    set_name text NOT NULL,
    position text NOT NULL,
    txid bigint NOT NULL,
    set_version int NOT NULL,
    offsets jsonb NOT NULL,
    txid_snapshot text,
    bootstrap text NOT NULL,
    transactions bigint NOT NULL DEFAULT 0,
    changes bigint NOT NULL DEFAULT 0,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, set_name)
)"""
# columns added after the table's first form (run on every start: an older target gains them)
MIGRATE = f"ALTER TABLE IF EXISTS {SCHEMA}.position ADD COLUMN IF NOT EXISTS bootstrap_version int"

Partition = tuple[str, int]


@dataclass
class ReplicaState:
    """A target's row of pgshovel2_replica.position (see the module doc)."""

    cluster: str
    set_name: str
    position: str
    txid: int
    set_version: int
    offsets: dict[Partition, int]
    txid_snapshot: str | None
    bootstrap: str
    transactions: int = 0
    changes: int = 0
    extra: dict = field(default_factory=dict)
    bootstrap_version: int | None = None

    def offsets_json(self) -> str:
        nested: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(self.offsets.items()):
            nested.setdefault(topic, {})[str(partition)] = offset
        return json.dumps(nested, sort_keys=True)


def ensure_table(cur) -> None:
    """Create the position table if missing, or add the columns an older one lacks (in the caller's
    transaction)."""
    cur.execute(DDL)
    migrate(cur)


def migrate(cur) -> None:
    """Add the columns an older position table lacks; nothing when there is no table (in the
    caller's transaction)."""
    cur.execute(MIGRATE)


def load(cur, cluster: str, set_name: str) -> ReplicaState | None:
    """The target's state for the set, None when it was never bootstrapped (table may be missing)."""
    cur.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.position",))
    if cur.fetchone()[0] is None:
        return None
    # bootstrap_version through to_jsonb: a table of an older version may not have the column yet
    cur.execute(f"SELECT position, txid, set_version, offsets, txid_snapshot, bootstrap, transactions, changes, "
                f"(to_jsonb(p) ->> 'bootstrap_version')::int FROM {SCHEMA}.position p "
                f"WHERE cluster = %s AND set_name = %s", (cluster, set_name))
    row = cur.fetchone()
    if row is None:
        return None
    position, txid, version, offsets, snapshot, bootstrap, txns, changes, boot_version = row
    flat = {(t, int(p)): o for t, parts in offsets.items() for p, o in parts.items()}
    return ReplicaState(cluster, set_name, position, txid, version, flat, snapshot, bootstrap, txns, changes,
                        bootstrap_version=boot_version)


def save(state: ReplicaState) -> sql.Composed:
    """The upsert of state (to run in the transaction of the changes it covers)."""
    values = [state.cluster, state.set_name, state.position, state.txid, state.set_version,
              state.offsets_json(), state.txid_snapshot, state.bootstrap, state.transactions, state.changes,
              state.bootstrap_version]
    return sql.SQL(
        "INSERT INTO {}.position (cluster, set_name, position, txid, set_version, offsets, txid_snapshot, "
        "bootstrap, transactions, changes, bootstrap_version, applied_at) VALUES ({}, now()) "
        "ON CONFLICT (cluster, set_name) DO "
        "UPDATE SET position = EXCLUDED.position, txid = EXCLUDED.txid, set_version = EXCLUDED.set_version, "
        "offsets = EXCLUDED.offsets, txid_snapshot = EXCLUDED.txid_snapshot, bootstrap = EXCLUDED.bootstrap, "
        "transactions = EXCLUDED.transactions, changes = EXCLUDED.changes, "
        "bootstrap_version = EXCLUDED.bootstrap_version, applied_at = now()").format(
        sql.Identifier(SCHEMA), sql.SQL(", ").join(sql.Literal(v) for v in values))
