"""``pgshovel set status NAME``: how far a set's relay is, from every place that knows.

- the capture's lag: the trigger set's queue (pgq.get_consumer_info of the relay's consumer,
  and who ticks it: pgqd or the relay, pgshovel2.backends.pgq_ticker.who_ticks)
  or the logical set's slot (pgshovel2_decoder.slot_lag), from the set's database
  (pgshovel2.backends.lag; ``error`` says why when the database does not answer);
- the active relay and standbys: the election znodes (pgshovel2.relay.election.status);
- the last committed position: the set's positions topic (pgshovel2.wire.read_position);
- the relay's last error (ZooKeeper ``relay/last_error``), marked recovered when the relay
  committed after it;
- the relay's connection state to Kafka, PostgreSQL and the schema registry: up or down since
  when, with the last error and its time (ZooKeeper ``relay/connections``, written by the relay
  on each change of state: pgshovel2.relay.monitor.connections);
- read_committed end offsets of the set's topics (Kafka);
- a logical set's slot: whether it survives a failover (pgshovel2.backends.slot_failover:
  a failover slot on PostgreSQL 17+, synced to the standby given with ``--standby``);
- partitioned tables: the partitions (and tables) lacking the set's TRUNCATE trigger
  (pgshovel2.backends.partitions.lacking), whose TRUNCATE would not reach Kafka, and the
  partitions that joined or left without their rows relayed where no event trigger does it
  (ZooKeeper ``relay/partitions``, pgshovel2.relay.ddl.partition_moves).
"""

import shlex
import time
from typing import Any

from pgshovel2 import backends, kafkaconf, redact
from pgshovel2.backends import logical, partitions, slot_failover, trigger
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer.offsets import end_offsets, partition_counts
from pgshovel2.db import connect
from pgshovel2.errors import PgshovelError, RelayError, UnavailableError
from pgshovel2.kafkaconf import Kafka
from pgshovel2.ops import resnapshot
from pgshovel2.relay import connections, ddl_gate, election, partition_moves
from pgshovel2.setrecord import SetRecord
from pgshovel2.wire import Position
from pgshovel2.wire.positions import read_position


def wait_caught_up(store: ClusterStore, set_name: str, bootstrap: Kafka, timeout: float = 120.0) -> None:
    """Wait until the set's relay has relayed everything committed before the call.

    Trigger set: its PgQ consumer finished every event queued before the call (it acknowledges
    a batch only after its Kafka commit). Logical set: a heartbeat is written into the WAL and
    the relay's committed position in Kafka must reach it -- not the slot's confirmed position,
    which a relay re-creating its slot (first start, --snapshot) moves past the heartbeat before
    its snapshot is committed. Raises RelayError after timeout seconds, ClusterError for no set.
    """
    record, _ = store.get_set(set_name)
    if not record.logical:
        trigger.wait_caught_up(record.dsn, record.queue, record.capture.consumer, timeout)
        return
    conn = connect(record.dsn, f"set {set_name!r}", RelayError)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            target = logical.emit_heartbeat(cur, record.slot)
    finally:
        conn.close()
    deadline, key = time.monotonic() + timeout, f"{store.cluster}/{set_name}"
    while True:
        committed = _committed(bootstrap, record.topics.positions, key)
        if isinstance(committed, Position) and committed.reaches(target, 0, True):
            return
        if time.monotonic() > deadline:
            seen = committed.describe() if isinstance(committed, Position) else committed
            raise RelayError(f"the relay of set {set_name!r} did not commit past {target} within {timeout:g}s "
                             f"(committed: {seen}): is it running?")
        time.sleep(0.2)


def _committed(bootstrap: Kafka, topic: str, key: str) -> Position | str:
    """The relay's committed position, or why there is none yet: 'nothing', or Kafka's error --
    a relay that has not yet created its positions topic (first start) makes that topic unknown,
    which is a reason to wait, not to fail."""
    try:
        return read_position(bootstrap, topic, key, timeout=10) or "nothing"
    except UnavailableError as exc:
        return str(exc)


def kafka_status(record: SetRecord, bootstrap: Kafka) -> dict[str, Any]:
    """{end_offsets: {topic: {partition: offset}}} of the set's data and transactions topics,
    or {error} when Kafka does not answer."""
    topics = record.topics
    admin = kafkaconf.admin(bootstrap)
    names_ = [*topics.tables.values(), topics.transactions]
    try:
        counts = partition_counts(admin, names_, bootstrap, f"of set {record.name!r}", 10)
        offsets = end_offsets(admin, [[(t, p) for t in names_ for p in range(counts[t])]], bootstrap, 10)
    except PgshovelError as exc:
        return {"error": str(exc), "end_offsets": {}}
    nested: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        nested.setdefault(t, {})[str(p)] = o
    return {"end_offsets": nested, "positions_topic": topics.positions}


def set_status(store: ClusterStore, set_name: str, bootstrap: Kafka, standby_dsn: str | None = None) -> dict[str, Any]:
    """Everything above as one JSON-able dict; ``failover`` (logical sets: slot_failover.slot_failover,
    with the standby at standby_dsn when given; None for trigger sets). Raises ClusterError for
    no such set."""
    record, _ = store.get_set(set_name)
    out: dict[str, Any] = {"set": set_name, "version": record.version, "backend": record.backend,
                           "capture": record.capture.describe(), "database": redact.dsn(record.dsn),
                           "lag": backends.lag(record), "relays": election.status(store, set_name)}
    out["kafka"] = kafka_status(record, bootstrap)
    out["failover"] = None
    if record.logical:
        out["failover"] = slot_failover.slot_failover(record.dsn, record.slot, standby_dsn)
    try:
        position = read_position(bootstrap, record.topics.positions, f"{store.cluster}/{set_name}", timeout=10)
        out["position"] = None if position is None else {**position.__dict__, "text": position.describe()}
    except PgshovelError as exc:
        out["position"], out["position_error"] = None, str(exc)
    error = store.get_relay_record(set_name, "last_error")
    if error is not None:
        committed_ms = (out["position"] or {}).get("committed_at_ms", 0)
        error["recovered"] = committed_ms > error["at"] * 1000
    out["last_error"] = error
    out["connections"] = store.get_relay_record(set_name, connections.RECORD)
    out["ddl_stop"] = store.get_relay_record(set_name, ddl_gate.STOP)
    out["ended_tables"] = [r for r in record.retired if r.get("why") == "dropped"]
    out["skips"] = store.get_relay_record(set_name, "skips")
    out["online_snapshot"] = resnapshot.show(store, set_name)
    out["partitions"] = {**partitions.lacking(record),
                         "relay": store.get_relay_record(set_name, "partitions") or {}}
    return out


def _lag_text(lag: dict[str, Any]) -> str:
    if lag.get("error"):
        return lag["error"]
    if lag["kind"] == "slot":
        safe = lag.get("safe_wal_size")
        retained = (f"the slot retains {lag['retained_bytes']} bytes of WAL ({lag['lag_bytes']} after its confirmed "
                    f"position, not all of it the set's), WAL {lag['wal_status']}"
                    + (f", invalidated after {safe} more bytes (max_slot_wal_keep_size)" if safe is not None else ""))
        if not lag.get("active"):
            since = f" since {lag['inactive_since']}" if lag.get("inactive_since") else ""
            return f"no relay streaming from the slot{since}: lag unknown; {retained}"
        return f"{retained}, flush lag {lag['lag_seconds'] or 0:.1f}s"
    unticked, pending = lag.get("unticked_events") or 0, lag["pending_events"]
    if not pending and not unticked:
        return f"caught up (0 events queued; last tick {lag['last_tick']})"
    if not pending:  # a batch holds them only once a ticker ticks: the ticks line says who and when
        return f"not caught up: {unticked} events queued since the last tick (tick {lag['last_tick']})"
    text = f"{pending} events, {lag['lag_seconds'] or 0:.1f}s behind (tick {lag['last_tick']})"
    return text + (f"; {unticked} more since the last tick" if unticked else "")


def lines(info: dict[str, Any]) -> list[str]:
    """set_status's dict as a short table for the terminal."""
    active = (info["relays"]["active"] or {}).get("identity", "none")
    kafka, pos = info["kafka"], info.get("position")
    committed = info.get("position_error", "nothing committed yet")
    if pos:
        committed = f"{pos['text']} (set version {pos['set_version']}, {_ago(pos['committed_at_ms'] / 1000)})"
    out = [f"set {info['set']} (version {info['version']}, {info['backend']}, {info['capture']}, {info['database']})",
           f"  lag:              {_lag_text(info['lag'])}",
           *([f"  ticks:            {_ticking_text(info['lag']['ticking'])}"] if "ticking" in info["lag"] else []),
           f"  active relay:     {active} ({len(info['relays']['contenders'])} contending)",
           f"  committed at:     {committed}"]
    if info.get("failover") is not None:
        out.append(f"  failover:         {failover_text(info['failover'])}")
    if kafka.get("error"):
        out.append(f"  kafka:            {kafka['error']}")
    out += connections.lines(info.get("connections"), (info["relays"]["active"] or {}).get("identity"))
    if err := info.get("last_error"):
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(err["at"]))
        state = "recovered, the relay committed since" if err.get("recovered") else "not recovered"
        out.append(f"  last relay error: {when} ({state}) {err['kind']} ({err['relay']}): {err['message'][:300]}")
    out += _ddl_lines(info)
    skips = info.get("skips") or {}
    for position, request in skips.get("requested", {}).items():
        row = (request.get("table"), request.get("key"))  # a snapshot row, met at another position
        done = skips.get("skipped", {}).get(position) or next(
            (s for s in skips.get("skipped", {}).values() if row[0] and (s.get("table"), s.get("key")) == row), None)
        state = (f"left out: {done['op']} of txid {done['txid']} on {done['table']}" if done
                 else "requested, not met yet")
        out.append(f"  skip {position}: {state} (asked by {request['by']}: {request['reason']})")
    if info.get("online_snapshot") is not None:
        out += ["  " + line for line in resnapshot.lines(info["online_snapshot"])]
    out += _partition_lines(info.get("partitions") or {})
    for topic, parts in kafka.get("end_offsets", {}).items():
        out.append(f"  {topic}: " + ", ".join(f"[{p}] {o}" for p, o in parts.items()))
    return out


def _partition_lines(info: dict[str, Any]) -> list[str]:
    out = [f"  partitions:       {info['error']}"] if info.get("error") else []
    out += [f"  NO TRUNCATE TRIGGER: {what}: a TRUNCATE of it would not reach Kafka (the relay creates it when "
            "its role may; see its log)" for what in info.get("missing", [])]
    return out + partition_moves.lines(info.get("relay"))


RUNBOOK = "docs/runbooks.rst"


def _ddl_lines(info: dict[str, Any]) -> list[str]:
    """Where the relay waits for a decision on a DDL (relay/ddl_stop) and the tables that ended."""
    out = []
    if stop := info.get("ddl_stop"):
        table = stop["table"]
        flag = " --new-topic" if stop.get("key_change") else " [--new-topic]"
        out.append(f"  STOPPED AT DDL:   on {table} at {stop['position']} since {_ago(stop['since'])}: "
                   f"{stop['reason']}; run pgshovel set accept-ddl {info['set']} {_arg(table)}{flag} ({RUNBOOK}, "
                   "'Relay stopped on DDL')")
    for ended in info.get("ended_tables") or ():
        out.append(f"  dropped table:    {ended['table']} ended at unit {ended['tick']}, event {ended['ordinal']} "
                   f"(its topic {ended['topic']} keeps what came before)")
    return out


def _arg(tag: str) -> str:
    """A table tag as accept-ddl's argument: ``schema.table`` (quoted for the shell when needed)."""
    schema, _, name = tag.partition('"."')
    return shlex.quote(f"{schema[1:]}.{name[:-1]}".replace('""', '"'))


def failover_text(facts: dict[str, Any]) -> str:
    """One line on whether the slot survives a failover, from slot_failover.slot_failover's dict."""
    if facts.get("error"):
        return facts["error"]
    if facts["server_version"] < slot_failover.FAILOVER_VERSION:
        return f"the slot will not survive a failover: see {RUNBOOK} (PostgreSQL {facts['server_version'] // 10000})"
    if facts["failover"] is None:
        return "no slot yet (the relay creates it, with failover, on its first start)"
    if not facts["failover"]:
        return (f"the slot will not survive a failover: it was created without failover; see {RUNBOOK}")
    parts = ["failover slot"]
    if not facts["standby_slots"]:
        parts.append("synchronized_standby_slots is not set on the primary: the relay may get changes a "
                     "standby has not received, which a promotion then loses from the database but not from Kafka")
    else:
        parts.append(f"changes wait for standby slot(s) {', '.join(facts['standby_slots'])}")
    parts.append(_standby_text(facts.get("standby")))
    return "; ".join(parts)


def _standby_text(standby: dict[str, Any] | None) -> str:
    if standby is None:
        return "synced to a standby: not checked (give --standby DSN)"
    where = f"standby {standby['dsn']}"
    if standby.get("error"):
        return f"{where}: {standby['error']}"
    if not standby["in_recovery"]:
        return f"{where} is not a standby (not in recovery)"
    if not standby["exists"]:
        return (f"NOT synced to {where}: the slot is not there (sync_replication_slots = on, hot_standby_feedback "
                "= on, primary_slot_name and dbname in primary_conninfo on the standby?)")
    if not standby["synced"]:
        return f"NOT synced to {where}: a slot of that name there was not synced from the primary"
    if standby["temporary"]:
        return f"NOT yet synced to {where}: its copy is still temporary (a promotion now would drop it)"
    return f"synced to {where} (at {standby['confirmed_flush_lsn']})"


def _ticking_text(ticking: dict[str, Any]) -> str:
    if ticking.get("error"):
        return ticking["error"]
    who = {"relay": "the relay (no pgqd ticked recently)", "pgqd": "pgqd (or another ticker)",
           "nobody": "nobody yet"}[ticking["ticker"]]
    return f"{who}; last tick {ticking['last_tick']}, {ticking['last_tick_age_seconds'] or 0:.1f}s ago"


def _ago(at: float) -> str:
    return f"{max(time.time() - at, 0):.1f}s ago"
