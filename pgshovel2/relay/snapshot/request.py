"""The online snapshot request of a set (ZooKeeper, :meth:`pgshovel2.cluster.ClusterStore.get_snapshot_request`).

JSON ``{id, tables, where, chunk_size, state, created_ms}``: tables are table tags
(``"schema"."table"``, Table.qualified) in the order they are read; where an SQL condition
every chunk adds (or null); state ``active`` (the set's relay reads chunks), ``paused``,
``cancelled`` (both set by ``pgshovel set snapshot``), ``done`` (set by the relay once the
last chunk is in Kafka) or ``failed`` (set by the relay when the database refuses a chunk's
query, e.g. a column --where names was dropped: ``error`` says why; the stream goes on).
A new request replaces the previous one (a new id).
"""

import time
import uuid
from dataclasses import asdict, dataclass, replace

from pgshovel2.backends import where_expr

ACTIVE, PAUSED, CANCELLED, DONE, FAILED = "active", "paused", "cancelled", "done", "failed"
STATES = (ACTIVE, PAUSED, CANCELLED, DONE, FAILED)
DEFAULT_CHUNK_SIZE = 4096


@dataclass(frozen=True)
class SnapshotRequest:
    """One online snapshot request (module docstring); chunk_size: rows per chunk (> 0)."""

    id: str
    tables: tuple[str, ...]
    where: str | None = None
    chunk_size: int = DEFAULT_CHUNK_SIZE
    state: str = ACTIVE
    created_ms: int = 0
    error: str | None = None

    @classmethod
    def new(cls, tables: list[str], where: str | None, chunk_size: int) -> "SnapshotRequest":
        """A new active request with a fresh id; raises ValueError for chunk_size < 1, no table, or a
        where that is not one SQL expression (pgshovel2.backends.where_expr.WhereError)."""
        if where:
            where = where_expr.check(where)
        if chunk_size < 1:
            raise ValueError(f"--chunk-size must be at least 1 (got {chunk_size})")
        if not tables:
            raise ValueError("an online snapshot needs at least one table")
        return cls(uuid.uuid4().hex[:12], tuple(tables), where or None, chunk_size, ACTIVE, int(time.time() * 1000))

    @classmethod
    def from_dict(cls, data: dict) -> "SnapshotRequest":
        """Parse the znode's JSON; raises ValueError naming what is wrong."""
        try:
            req = cls(str(data["id"]), tuple(data["tables"]), data.get("where"), int(data["chunk_size"]),
                      str(data["state"]), int(data.get("created_ms", 0)), data.get("error"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"unreadable online snapshot request {data!r}: {exc}") from exc
        if req.state not in STATES or req.chunk_size < 1:
            raise ValueError(f"unreadable online snapshot request {data!r}: state or chunk_size")
        return req

    def to_dict(self) -> dict:
        """The znode's JSON."""
        data = asdict(self)
        data["tables"] = list(self.tables)
        return data

    def with_state(self, state: str, error: str | None = None) -> "SnapshotRequest":
        """This request in state (error: why it failed)."""
        return replace(self, state=state, error=error)
