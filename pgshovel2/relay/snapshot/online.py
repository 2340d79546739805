"""Online snapshots: a running relay re-reads tables in key chunks between watermarks (DBLog).

The relay loop (:mod:`pgshovel2.relay.loop`) calls :meth:`OnlineSnapshot.step` between Kafka
transactions. With an active request (:mod:`pgshovel2.relay.snapshot.request`) and no chunk in
flight, a step (a) commits a LOW watermark into the set's stream, (b) reads the next chunk of the
table in a transaction of its own and keeps its rows, (c) commits a HIGH watermark
(:mod:`pgshovel2.backends.chunks`). From the step on, the loop passes every change (:meth:`touch`):
the Kafka keys a change of the chunk's table touched are noted. At the first complete Commit at or
after HIGH (:meth:`at_commit`: the end of HIGH's PgQ batch; the HIGH transaction itself for the
logical backend) the chunk's rows whose keys were not touched are emitted as op ``r`` and the
progress (``{id, table, last_key, chunk, rows, done}``) goes into the position the loop commits
next -- in the same Kafka transaction (the loop commits at that complete point before reading on).
Why this is exact: docs/internals.rst, "Online snapshots".

A table's chunk 0 reads no rows: it only places the table's SNAPSHOT_BEGIN before every window of
a chunk with rows, so a consumer starting there sees every change those chunks drop. Keys whose
last change in a window is an UPDATE with unlogged unchanged values are re-read at the emission.

A watermark of no chunk in memory (replayed after a restart, or of a discarded chunk) is ignored. A
schema change, a set version or a TRUNCATE of the table while a chunk is in flight discards the
chunk; the next step reads it again from the same last key in the layout then in effect.
"""

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg2

from pgshovel2 import failpoints
from pgshovel2.backends import chunks, where_expr
from pgshovel2.catalog import Table
from pgshovel2.codec.rows import as_values
from pgshovel2.db import outage
from pgshovel2.errors import KeyLayoutError, UnavailableError
from pgshovel2.relay.monitor import metrics
from pgshovel2.relay.snapshot.emission import Emission
from pgshovel2.relay.snapshot.request import ACTIVE, DEFAULT_CHUNK_SIZE, DONE, FAILED, PAUSED, SnapshotRequest
from pgshovel2.relay.source import SET_VERSION, Change, Commit, Control
from pgshovel2.setrecord import SetRecord
from pgshovel2.wire import Position

log = logging.getLogger(__name__)
POLL_INTERVAL = 0.5  # seconds between reads of the request while no chunk is due


@dataclass
class _Chunk:
    """The chunk in flight: token (in both watermarks), table, rows read, the last key read, the
    Kafka keys of the table touched since the step, whether HIGH was seen. after: the last key of
    the chunk before (None: the first). partial: Kafka key -> key values (table.key order) of the
    keys whose last change in the window left unlogged values unchanged (re-read at the emission).
    opening: the table's chunk 0, which reads nothing and only places its SNAPSHOT_BEGIN."""

    token: str
    table: Table
    rows: list[list]
    last_key: list[str] | None
    keys: Callable[[list], bytes | None]
    after: list[str] | None = None
    opening: bool = False
    touched: set[bytes] = field(default_factory=set)
    partial: dict[bytes, list] = field(default_factory=dict)
    high_seen: bool = False
    started: float = field(default_factory=time.monotonic)


class OnlineSnapshot:
    """The online snapshot of one set's relay (module docstring).

    set_name: for logs and metrics; load(): (the request's JSON or None, znode version);
    save(request, version): writes the request back (the relay only marks it done);
    report(stats): the progress record for ``set status`` (ZooKeeper, relay/online_snapshot);
    reader: a ChunkReader (reads chunks, commits watermarks); key_of(table): the function giving a
    capture row's Kafka key; reachable(): whether load can answer now (ZooKeeper connected), else
    the step polls later: a read would block the relay loop for the whole outage, then fail.
    load may raise UnavailableError (ZooKeeper went away during the read, or did not answer in
    time): the step then polls later too.
    """

    def __init__(self, set_name: str, load: Callable[[], tuple[dict | None, int]],
                 save: Callable[[dict, int], None], report: Callable[[dict], None],
                 reader: chunks.ChunkReader, key_of: Callable[[Table], Callable[[list], bytes | None]],
                 reachable: Callable[[], bool] = lambda: True):
        self.set_name, self.load, self.save, self.report = set_name, load, save, report
        self.reachable = reachable
        self.reader, self.key_of = reader, key_of
        self.progress: dict | None = None  # the committed progress, then what the next commit carries
        self.chunk: _Chunk | None = None
        self.request: SnapshotRequest | None = None
        self._znode_version = -1
        self._next_poll = 0.0
        self._stats: dict = {}
        self._last_report = self._last_wait_log = 0.0

    enabled = True  # False: NoOnlineSnapshot

    def resume(self, progress: dict | None) -> None:
        """Start from the committed position's progress (None: none)."""
        self.progress = progress

    def progress_of(self, position: Position) -> dict | None:
        """The online snapshot progress a Kafka commit at position carries: this relay's."""
        return self.progress

    def close(self) -> None:
        """Close the chunk reader's connection."""
        self.reader.close()

    def request_all(self, tables: tuple[Table, ...]) -> SnapshotRequest | None:
        """Write a new active request (default chunk size) for tables, replacing any previous
        one, as ``pgshovel set snapshot`` without options; None (nothing written) when a table
        has no key. Raises ConflictError when the request changed meanwhile."""
        if not tables or any(not t.key for t in tables):
            return None
        new = SnapshotRequest.new([t.qualified for t in tables], None, DEFAULT_CHUNK_SIZE)
        _, version = self.load()
        self.save(new.to_dict(), version)
        return new

    def request_more(self, table: Table) -> str | None:
        """Request an online snapshot of table (a new topic generation to fill), with the tables of a
        request still active or paused (a new request: their progress restarts; a table read twice is
        still exact); returns the request's id, None (nothing written) for a keyless table. Raises
        ConflictError when the request changed meanwhile."""
        if not table.key:
            return None
        data, version = self.load()
        running = SnapshotRequest.from_dict(data) if data is not None else None
        tags = [table.qualified]
        chunk_size = DEFAULT_CHUNK_SIZE
        if running is not None and running.state in (ACTIVE, PAUSED):
            tags = [t for t in running.tables if t != table.qualified] + tags
            chunk_size = running.chunk_size
        new = SnapshotRequest.new(tags, None, chunk_size)
        self.save(new.to_dict(), version)
        self.chunk, self._next_poll = None, 0.0
        return new.id

    # -- between Kafka transactions -----------------------------------------------------------

    def step(self, record: SetRecord) -> None:
        """Start the next chunk when one is due (module docstring); record: the set version in
        effect. Raises psycopg2.Error / the reader's error when the database fails."""
        if self.chunk is not None or time.monotonic() < self._next_poll:
            return
        if not self.reachable():  # ZooKeeper is away: the leadership check pauses the relay, not a read here
            self._next_poll = time.monotonic() + POLL_INTERVAL
            return
        try:
            request = self._poll()
        except UnavailableError as exc:  # it went away meanwhile: as above, the next poll reads it
            log.debug("online snapshot request not read: %s", exc)
            request = None
        if request is None or request.state != ACTIVE:
            self._next_poll = time.monotonic() + POLL_INTERVAL
            return
        progress = self._progress_of(request)
        if progress.get("done"):
            self._finish(request)
            return
        if request.where is not None:  # the znode is not trusted: whoever wrote it, one expression or nothing
            try:
                where_expr.check(request.where)
            except where_expr.WhereError as exc:
                self._fail(request, f"refused, nothing read: {exc}")
                return
        table = record.table(progress["table"])
        if table is None:  # added by an upgrade whose marker the stream has not reached yet
            self._next_poll = time.monotonic() + POLL_INTERVAL
            if time.monotonic() - self._last_wait_log >= 60:
                self._last_wait_log = time.monotonic()
                log.warning("online snapshot %s: waiting for the set version with table %s (stream at version %d); "
                            "cancel the request if the table left the set", request.id, progress["table"],
                            record.version)
            return
        self._start(request, table, progress)

    def _poll(self) -> SnapshotRequest | None:
        data, self._znode_version = self.load()
        if data is None:
            return None
        try:
            self.request = SnapshotRequest.from_dict(data)
        except ValueError as exc:
            log.warning("set %r: %s; ignored", self.set_name, exc)
            return None
        return self.request

    def _progress_of(self, request: SnapshotRequest) -> dict:
        if self.progress is not None and self.progress.get("id") == request.id:
            return self.progress
        return {"id": request.id, "table": request.tables[0], "last_key": None, "chunk": 0, "rows": 0,
                "done": False}

    def _start(self, request: SnapshotRequest, table: Table, progress: dict) -> None:
        token = uuid.uuid4().hex[:12]
        mark = {"id": request.id, "chunk": progress["chunk"], "token": token}
        opening = progress["chunk"] == 0
        self.chunk = _Chunk(token, table, [], progress["last_key"], self.key_of(table), progress["last_key"], opening)
        if opening or self._stats.get("table") != table.qualified:  # resumed mid-table: estimated anew
            self._stats = {"id": request.id, "table": table.qualified, "started": time.time(),
                           "estimate": self.reader.estimate(table), "rows": 0, "chunks": 0, "dropped": 0}
            metrics.SNAPSHOT_ESTIMATED.labels(self.set_name, table.qualified).set(self._stats["estimate"])
        if opening:
            log.info("online snapshot %s: reading %s in chunks of %d rows", request.id, table.qualified,
                     request.chunk_size)
        self.reader.watermark({**mark, "mark": "low"})
        try:
            read = chunks.Chunk([], None) if opening else self.reader.read(table, progress["last_key"], request.where,
                                                                           request.chunk_size)
        except psycopg2.Error as exc:
            self.chunk = None
            if outage(exc, self.reader.conn):
                raise UnavailableError(f"online snapshot: the database went away: {str(exc).strip()}") from exc
            self._fail(request, f"reading a chunk of {table.qualified} failed: {str(exc).strip()}")
            return
        self.chunk.rows, self.chunk.last_key = read.rows, read.last_key
        failpoints.hit("online_chunk_read")  # tests hold the window open here (pause)
        self.reader.watermark({**mark, "mark": "high"})

    # -- in the stream --------------------------------------------------------------------------

    def touch(self, item: Change) -> None:
        """Note the Kafka keys item (a change) touched, when it is of the chunk's table; a
        TRUNCATE of it discards the chunk. The new key of an UPDATE with unlogged unchanged values
        (item.unchanged) is noted as partial (re-read at the emission, :meth:`at_commit`); any
        other change of a key (an old key included) takes it out of partial again."""
        chunk = self.chunk
        if item.table != chunk.table.qualified:
            return
        if item.op == "T":
            self.discard("a TRUNCATE of the table")
            return
        for row in (item.before, item.row):
            if row is None:
                continue
            try:
                key = chunk.keys(row)
            except KeyLayoutError:  # a key the table's kept key layout cannot hold: its change stops the
                self.discard("a key beyond the table's kept key layout")  # stream (a new topic follows)
                return
            if key is None:
                continue
            chunk.touched.add(key)
            if row is item.row and item.op == "U" and item.unchanged:
                values = as_values(row)
                chunk.partial[key] = [values[i] for i in _key_positions(chunk.table)]
            else:
                chunk.partial.pop(key, None)

    def control(self, item: Control) -> bool:
        """True when item is a watermark (handled here: not a control event); a schema change of
        the chunk's table or a set version discards the chunk in flight."""
        mark = _watermark(item)
        if mark is None:
            if self.chunk is not None and (item.op == SET_VERSION or item.table == self.chunk.table.qualified):
                self.discard(f"a layout change ({item.op}) of the set")
            return False
        if self.chunk is not None and mark.get("token") == self.chunk.token and mark.get("mark") == "high":
            self.chunk.high_seen = True
        return True

    def discard(self, why: str) -> None:
        """Drop the chunk in flight (read again by the next step)."""
        if self.chunk is not None:
            log.info("online snapshot: chunk of %s discarded (%s); it is read again", self.chunk.table.qualified, why)
            self.chunk = None

    def at_commit(self, item: Commit) -> Emission | None:
        """At a complete Commit after HIGH: the chunk's untouched rows to emit there (the loop
        produces them), with the progress advanced for the next commit; None otherwise."""
        chunk = self.chunk
        if chunk is None or not chunk.high_seen or not item.complete:
            return None
        self.chunk = None
        request, progress = self.request, self._progress_of(self.request)
        keys = chunk.keys
        rows = [row for row in chunk.rows if keys(row) not in chunk.touched]
        try:
            rows += self._reread(chunk, request)
        except psycopg2.Error as exc:
            if outage(exc, self.reader.conn):
                raise UnavailableError(f"online snapshot: the database went away: {str(exc).strip()}") from exc
            self._fail(request, f"re-reading rows of {chunk.table.qualified} failed: {str(exc).strip()}")
            return None
        tag, sent = chunk.table.qualified, len(rows)
        metrics.SNAPSHOT_ROWS.labels(self.set_name, tag).inc(sent)
        metrics.SNAPSHOT_CHUNKS.labels(self.set_name, tag).inc()
        metrics.SNAPSHOT_DROPPED.labels(self.set_name, tag).inc(max(len(chunk.rows) - sent, 0))
        first = progress["chunk"] == 0
        progress = {**progress, "last_key": chunk.last_key, "chunk": progress["chunk"] + 1,
                    "rows": progress["rows"] + sent}
        last = not chunk.opening and len(chunk.rows) < request.chunk_size
        emission = Emission(chunk.table, rows, first, last, progress["rows"])
        if emission.last:
            log.info("online snapshot %s: %s done, %d rows in %d chunks", request.id, tag, progress["rows"],
                     progress["chunk"])
            progress = self._next_table(request, progress)
        self.progress = progress
        self._count(tag, sent, max(len(chunk.rows) - sent, 0), emission.last)
        return emission

    def _reread(self, chunk: _Chunk, request: SnapshotRequest) -> list[list]:
        """The current rows of chunk's partial keys in its key range (after its last key, up to
        its own; unbounded for the table's last chunk) matching the request's where, read now:
        docs/internals.rst "Unchanged values in the window" says why they are exact."""
        if not chunk.partial or chunk.opening:
            return []
        last = len(chunk.rows) < request.chunk_size
        found = self.reader.read_keys(chunk.table, chunk.after, None if last else chunk.last_key, request.where,
                                      list(chunk.partial.values()))
        rows = [row for row in found if chunk.keys(row) in chunk.partial]
        log.info("online snapshot %s: %d of %d row(s) of %s re-read (UPDATEs with unchanged values in the "
                 "window)", request.id, len(rows), len(chunk.partial), chunk.table.qualified)
        return rows

    def _next_table(self, request: SnapshotRequest, progress: dict) -> dict:
        index = request.tables.index(progress["table"]) + 1 if progress["table"] in request.tables else len(
            request.tables)
        if index >= len(request.tables):
            return {**progress, "done": True}
        return {"id": request.id, "table": request.tables[index], "last_key": None, "chunk": 0, "rows": 0,
                "done": False}

    def _fail(self, request: SnapshotRequest, error: str) -> None:
        """The database refused the request's query: mark it failed (the stream goes on)."""
        log.error("online snapshot %s failed: %s", request.id, error)
        try:
            self.save(request.with_state(FAILED, error).to_dict(), self._znode_version)
        except Exception as exc:  # changed meanwhile: read again next step
            log.info("online snapshot %s: not marked failed: %s", request.id, exc)
        self._next_poll = time.monotonic() + POLL_INTERVAL

    def _finish(self, request: SnapshotRequest) -> None:
        """The committed progress says the request is done: record it (once)."""
        if self.progress is None or self.progress.get("id") != request.id:
            return
        try:
            self.save(request.with_state(DONE).to_dict(), self._znode_version)
            log.info("online snapshot %s done", request.id)
        except Exception as exc:  # changed meanwhile (paused, replaced): read again next step
            log.info("online snapshot %s: not marked done yet: %s", request.id, exc)
        self._next_poll = time.monotonic() + POLL_INTERVAL

    def _count(self, tag: str, sent: int, dropped: int, last: bool) -> None:
        stats = self._stats
        stats["rows"] += sent
        stats["chunks"] += 1
        stats["dropped"] = stats.get("dropped", 0) + dropped
        now = time.monotonic()
        if now - self._last_report >= 2.0 or last:
            self._last_report = now
            elapsed = max(time.time() - stats["started"], 1e-6)
            log.info("online snapshot %s: %s: %d rows in %d chunks (%.0f rows/s, %d left out as changed)",
                     stats.get("id"), tag, stats["rows"], stats["chunks"], stats["rows"] / elapsed, stats["dropped"])
            self.report({**stats, "rate": stats["rows"] / elapsed, "updated": time.time()})


def _key_positions(table: Table) -> list[int]:
    """The positions of table's key columns in its columns, in table.key order."""
    names = [c.name for c in table.columns]
    return [names.index(k) for k in table.key]


def _watermark(item: Control) -> dict | None:
    """The watermark an item is (PgQ event W, or a version message with a watermark), else None."""
    if item.op == chunks.WATERMARK_EVENT:
        return item.row or {}
    if item.op == SET_VERSION and isinstance(item.row, dict) and "version" not in item.row \
            and not {"dropped", "renamed"} & item.row.keys():  # the drop watch's markers (relay/ddl/drop_watch.py)
        return item.row.get("watermark") or {}
    return None
