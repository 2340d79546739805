"""Messages Kafka cannot take, and the set's ``oversized`` policy for them (docs/wire.rst,
"Messages Kafka cannot take"; docs/operations.rst).

A message fits a topic when its key, value and headers take at most the topic's usable size:
the smaller of the topic's ``max.message.bytes`` and the producer's ``message.max.bytes``
(KafkaSink.message_limit), less LZ4's worst-case growth (1/255 + 16 bytes: the broker checks the
compressed batch, and a lone large message is a batch of its own) and FRAMING bytes of record and
batch framing. The emitter checks every message of a change against it *before* producing any
(so the Kafka transaction is never poisoned by a broker's MESSAGE_TOO_LARGE), then by policy:

- ``fail``: :class:`OversizedError`, an EncodeError -- the relay stops naming set, table, key,
  message size, limit and (the loop adds it) the position; ``pgshovel set skip`` leaves it out.
- ``dead-letter``: the message's value goes to the set's dead-letter topic in chunks that fit it,
  keyed and headed as the message was (plus ``pgshovel.dead_letter.topic`` / ``.chunk``), in the
  same Kafka transaction; in its place on its own topic a placeholder: same key and headers, empty
  value, header ``pgshovel.dead_letter``.
- ``truncate``: the named text/varchar/char/citext/bytea columns of the row (and of a debezium
  event's before image) longer than a cap are cut to it, the cap chosen so every message fits;
  header ``pgshovel.truncated`` names them with their lengths before. Still too large with them
  empty: as ``fail``.
"""

import json
from collections.abc import Callable
from typing import Any

from pgshovel2 import wire
from pgshovel2.catalog import TRUNCATABLE, Table
from pgshovel2.codec.controls import ColumnControls
from pgshovel2.codec.rows import as_values
from pgshovel2.config import OversizedConfig
from pgshovel2.errors import EncodeError
from pgshovel2.relay.emit.envelopes import Message

FRAMING = 1024  # bytes kept free of a limit for record and batch framing
FIXED_HEADERS = 4096  # bytes the six pgshovel.* headers of a message take at most (set name <= 40 bytes)
KEY_TEXT = 200  # characters of a key shown in an error
TRUNCATE_ROUNDS = 16  # re-encodings truncate tries (a search for the cap of the cut values)

Headers = list[tuple[str, str]]


class OversizedError(EncodeError):
    """A change has a message larger than its topic takes, and the policy does not place it."""


def usable(limit: int) -> int:
    """Bytes of key, value and headers a message may take to fit a limit of limit bytes, compressed
    or not (LZ4's worst case, framing)."""
    return limit - limit // 255 - 16 - FRAMING


def message_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """Bytes of a message's key, value and headers (names and values, UTF-8)."""
    return (len(key or b"") + len(value or b"")
            + sum(len(n.encode()) + len(v.encode()) for n, v in headers))


def readable_key(table: Table, row: Any, controls: ColumnControls | None = None) -> str:
    """The key columns of a row (capture form, JSON text or list) as JSON text, cut at KEY_TEXT
    characters, with the table's column controls applied (a hashed key column shows its hash: the
    text goes into errors, the relay's last error in ZooKeeper and skip records); ``(unkeyed)`` for a
    table without a key."""
    if not table.key:
        return "(unkeyed)"
    values = as_values(row) if controls is None else controls.apply(as_values(row))
    index = {c.name: i for i, c in enumerate(table.columns)}
    try:
        text = json.dumps({k: values[index[k]] for k in table.key}, ensure_ascii=False, default=str)
    except (IndexError, KeyError, TypeError):
        text = "(unreadable)"
    return text if len(text) <= KEY_TEXT else text[:KEY_TEXT] + "..."


class Guard:
    """The oversized policy of a set version, for the emitter.

    limit(topic): (bytes, why) as KafkaSink.message_limit; produce(topic, key, value, headers):
    the sink's produce (dead-letter chunks); dead_letter: the set's dead-letter topic.
    """

    def __init__(self, set_name: str, config: OversizedConfig, limit: Callable[[str], tuple[int, str]],
                 produce: Callable[[str, bytes | None, bytes | None, Headers], None], dead_letter: str):
        self.set_name, self.config, self._limit, self._produce = set_name, config, limit, produce
        self.dead_letter = dead_letter
        self._quick: dict[str, int] = {}

    def quick(self, topic: str) -> int:
        """Bytes of key and value (and unchanged header) a message of topic may surely take
        (its usable size less FIXED_HEADERS): above it, :meth:`over` decides exactly."""
        q = self._quick.get(topic)
        if q is None:
            q = self._quick[topic] = usable(self._limit(topic)[0]) - FIXED_HEADERS
        return q

    def lane_limit(self, topics: list[str | None]) -> int | None:
        """The most key and value bytes the native lane may write in one message of these topics
        (None entries: tables without a lane); None when there is no topic."""
        named = [self.quick(t) for t in topics if t is not None]
        return min(named) if named else None

    def over(self, topic: str, msgs: list[Message], headers: Callable[[str], Headers]) -> bool:
        """True when some message of msgs, with its headers(op), does not fit topic."""
        room = usable(self._limit(topic)[0])
        return any(message_size(m.key, m.value, headers(m.op)) > room for m in msgs)

    def handle(self, table: Table, topic: str, msgs: list[Message], headers: Callable[[str], Headers],
               redo: Callable[[Any, Any], list[Message]], row: Any, before: Any, replaying: bool,
               controls: ColumnControls | None = None) -> list[tuple[Message, Headers]]:
        """msgs (some of which do not fit topic) as the policy places them: [(message, extra
        headers)] to produce on topic instead. redo(row, before): the change's messages again from
        other rows (truncate); replaying: produce nothing (dead-letter chunks included); controls:
        the table's column controls (for the key an error names). Raises OversizedError (policy
        fail, or truncation not enough)."""
        policy = self.config.policy
        if policy == "dead-letter":
            return [self._dead_letter(topic, m, headers(m.op), replaying) for m in msgs]
        if policy == "truncate":
            return self._truncate(table, topic, msgs, headers, redo, row, before, readable_key(table, row, controls))
        raise self._error(table, topic, msgs, headers, readable_key(table, row, controls), "")

    def _error(self, table: Table, topic: str, msgs: list[Message], headers: Callable[[str], Headers], key: str,
               note: str) -> OversizedError:
        limit, why = self._limit(topic)
        biggest = max(msgs, key=lambda m: message_size(m.key, m.value, headers(m.op)))
        size = message_size(biggest.key, biggest.value, headers(biggest.op))
        return OversizedError(
            f"set {self.set_name!r}, table {table.qualified}, key {key}: its message to topic "
            f"{topic!r} (op {biggest.op}) takes {size} bytes, more than the {usable(limit)} a message may take there "
            f"({why}; less LZ4's worst-case growth and framing); oversized policy {self.config.policy!r}{note}")

    def _dead_letter(self, topic: str, msg: Message, headers: Headers, replaying: bool) -> tuple[Message, Headers]:
        """A message that fits as it is, or its placeholder after its value went to the dead-letter
        topic in chunks."""
        room = usable(self._limit(topic)[0])
        if message_size(msg.key, msg.value, headers) <= room:
            return msg, []
        value = msg.value or b""
        own = [(wire.DEAD_LETTER_TOPIC, topic), (wire.DEAD_LETTER_CHUNK, "0000000000/0000000000")]
        step = usable(self._limit(self.dead_letter)[0]) - message_size(msg.key, None, headers + own)
        if step <= 0:
            raise OversizedError(f"set {self.set_name!r}: a message of topic {topic!r} has a key of "
                                 f"{len(msg.key or b'')} bytes, too large for the dead-letter topic "
                                 f"{self.dead_letter!r}")
        chunks = max(1, -(-len(value) // step))
        if not replaying:
            for i in range(chunks):
                chunk = [(wire.DEAD_LETTER_TOPIC, topic), (wire.DEAD_LETTER_CHUNK, f"{i + 1}/{chunks}")]
                self._produce(self.dead_letter, msg.key, value[i * step:(i + 1) * step], headers + chunk)
        note = json.dumps({"topic": self.dead_letter, "chunks": chunks, "bytes": len(value)})
        return Message(msg.key, b"", msg.op), [(wire.DEAD_LETTER, note)]

    def _truncate(self, table: Table, topic: str, msgs: list[Message], headers: Callable[[str], Headers],
                  redo: Callable[[Any, Any], list[Message]], row: Any, before: Any, key: str
                  ) -> list[tuple[Message, Headers]]:
        """The change's messages again with the named columns cut until they fit topic (key: the
        row's readable key, for the error when they do not): every named
        value longer than a cap is cut to it (characters; bytea: bytes), shorter ones stay whole;
        the cap is found by re-encoding (the encoded size grows with it; escapes and base64 make it
        uneven), aiming at 90-100 % of the room."""
        cols = [i for i, c in enumerate(table.columns) if c.name in self.config.columns
                and c.kind in TRUNCATABLE and not c.is_array and c.name not in table.key]
        if not cols:
            raise self._error(table, topic, msgs, headers, key, " (no column of oversized.columns in this table)")
        room = usable(self._limit(topic)[0])
        new, old = list(as_values(row)), list(as_values(before)) if before is not None else None
        lengths = {table.columns[i].name: _length(table.columns[i].kind, new[i]) for i in cols
                   if isinstance(new[i], str)}
        top = max([_length(table.columns[i].kind, image[i]) for image in (new, old) if image is not None
                   for i in cols] or [0])

        def size_of(out: list[Message]) -> int:
            return max(message_size(m.key, m.value, headers(m.op)) for m in out)

        def cut(cap: int) -> list[Message]:
            return redo(_capped(table, new, cols, cap), _capped(table, old, cols, cap) if old is not None else None)

        lo, hi, best = 0, top, None  # caps: lo fits (assumed until tried), hi does not
        cap = int(top * room / size_of(msgs))
        for _ in range(TRUNCATE_ROUNDS):
            out = cut(cap)
            size = size_of(out)
            if size <= room:
                lo, best = cap, (out, cap)
                if size >= 0.9 * room:
                    break
            else:
                hi = cap
            guess = int(cap * room / size * 0.98)
            cap = guess if lo < guess < hi else (lo + hi) // 2
            if hi - lo <= 1:
                break
        if best is None:
            out = cut(0)
            if size_of(out) > room:
                names = ", ".join(table.columns[i].name for i in cols)
                raise self._error(table, topic, out, headers, key, f" (even with {names} cut to nothing)")
            best = (out, 0)
        out, cap = best
        cut_cols = {c: n for c, n in lengths.items() if n > cap}
        extra = [(wire.TRUNCATED, json.dumps(cut_cols, ensure_ascii=False, separators=(",", ":")))]
        return [(m, extra if m.value is not None else []) for m in out]


def _length(kind: str, value: Any) -> int:
    """A truncatable value's length: characters, or bytes of a bytea (capture form: hex digits)."""
    if not isinstance(value, str):
        return 0
    return len(value) // 2 if kind == "bytea" else len(value)


def _capped(table: Table, image: list, cols: list[int], cap: int) -> list:
    """A copy of image whose values of cols are cut to at most cap characters (a bytea, in capture
    form hex digits, to cap bytes)."""
    out = list(image)
    for i in cols:
        value = out[i]
        if isinstance(value, str):
            out[i] = value[:2 * cap if table.columns[i].kind == "bytea" else cap]
    return out
