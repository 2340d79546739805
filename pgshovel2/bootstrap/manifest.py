"""The bootstrap manifest: what a bootstrap copied and where the stream takes over.

Written last, as ``manifest.json`` in the bootstrap's output directory; its
presence means the output is complete. Fields::

    format            1
    set, cluster      the replication set and its cluster
    set_version       the set record's version the copy was made with
    record            the set record ({config (DSN without password), tables, ...})
    output            "parquet" (one dataset per table under tables[].path) or "kafka"
    tables            [{schema, name, topic, path, rows, checksum, partitions}]
    handoff           {backend: "trigger", txid_snapshot: "xmin:xmax:xip"} or
                      {backend: "logical", lsn: "X/Y", slot: name} (the consistent point)
    kafka_offsets     {topic: {partition: offset}}: read_committed end offsets of
                      the set's data and transactions topics, read BEFORE the
                      snapshot was exported
    created_at        ISO 8601 UTC

checksum (Parquet): sum of Spark's xxhash64 over every row's columns, as a
decimal string; (Kafka): sum of the first 8 bytes (big-endian) of SHA-256 of
each message value, mod 2**64.
"""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pgshovel2.errors import PgshovelError
from pgshovel2.setrecord import SetRecord
from pgshovel2.txids import ConsistentPoint, TxidSnapshot, handoff_point

FORMAT = 1
FILENAME = "manifest.json"


class BootstrapError(PgshovelError):
    """A bootstrap cannot be taken or its output cannot be used."""


@dataclass(frozen=True)
class TableCopy:
    """One table of a bootstrap: where its rows are and how many."""

    schema: str
    name: str
    topic: str
    path: str | None
    rows: int
    checksum: str
    partitions: int


@dataclass(frozen=True)
class Manifest:
    """A bootstrap manifest (see the module docstring for the fields)."""

    set: str
    cluster: str
    set_version: int
    record: dict[str, Any]
    output: str
    tables: list[TableCopy]
    handoff: dict[str, Any]
    kafka_offsets: dict[str, dict[str, int]]
    created_at: str
    format: int = FORMAT
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def txid_snapshot(self) -> TxidSnapshot:
        """The handoff txid snapshot (trigger backend): transactions visible in it are in the copy.

        Raises BootstrapError for a logical set's bootstrap (its handoff is an LSN: handoff_point).
        """
        if self.handoff.get("backend") == "logical":
            raise BootstrapError(f"the bootstrap of set {self.set!r} hands off at LSN {self.handoff['lsn']} "
                                 "(logical backend): this consumer supports trigger sets' bootstraps only")
        return TxidSnapshot.parse(self.handoff["txid_snapshot"])

    @property
    def set_record(self) -> SetRecord:
        """The set record the copy was made with (its DSN without password)."""
        return SetRecord.from_dict(self.record)

    @property
    def handoff_point(self) -> TxidSnapshot | ConsistentPoint:
        """The handoff rule for either backend (``covers(txid, position)``)."""
        return handoff_point(self.handoff)

    def offsets(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> offset to start the stream at."""
        return {(t, int(p)): o for t, parts in self.kafka_offsets.items() for p, o in parts.items()}

    def to_json(self) -> str:
        """The manifest as indented JSON text."""
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    def write(self, directory: Path) -> Path:
        """Write manifest.json into directory; returns its path."""
        path = Path(directory) / FILENAME
        path.write_text(self.to_json() + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Manifest":
        """Read a manifest from a bootstrap directory or a manifest.json path.

        Raises BootstrapError when it is missing (an incomplete or failed
        bootstrap has none), unreadable or of another format.
        """
        path = Path(path)
        if path.is_dir():
            path = path / FILENAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise BootstrapError(f"no bootstrap manifest at {path}: the bootstrap did not complete "
                                 "(its manifest is written last)") from exc
        except (OSError, ValueError) as exc:
            raise BootstrapError(f"cannot read the bootstrap manifest {path}: {exc}") from exc
        if data.get("format") != FORMAT:
            raise BootstrapError(f"{path}: manifest format {data.get('format')!r}, expected {FORMAT}")
        tables = [TableCopy(**t) for t in data.pop("tables")]
        return cls(tables=tables, **data)

    def table_path(self, base: str | Path, table: TableCopy) -> str:
        """Absolute location of a table's Parquet dataset (paths are relative to the bootstrap dir)."""
        if table.path is None:
            raise BootstrapError(f"bootstrap of set {self.set!r} went to Kafka: it has no Parquet files")
        base = Path(base)
        return str((base if base.is_dir() else base.parent) / table.path)
