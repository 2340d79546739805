"""Our debezium envelope (JSON with Connect schemas) against the events Debezium 3.4.3 itself
recorded of a table of many types (issue #68, step 6).

tests/fixtures/debezium-3.4.3.Final-postgres.json's ``typed`` part (scripts/debezium/capture_fixture.py:
Debezium's PostgreSQL connector with its defaults, pgoutput, JsonConverter with schemas) holds the
table's columns, the SQL of its rows and changes, and Debezium's messages: two snapshot rows, an
INSERT and an UPDATE. The same table and statements run through a set on each capture path; every
event of ours must equal Debezium's, byte for byte after JSON parsing, in the key (schema and payload),
the row schema of ``before``/``after`` (each field: type, optional, name, version, parameters) and the
row values, except the difference docs/wire.rst documents (enum: WITHOUT), asserted here as such. The
table recorded with other value modes (decimal string, interval string, binary hex: the ``-modes``
fixture) is compared with a set given the same modes (``debezium: {decimal_handling_mode: ...}``).
"""

import json
import re
from pathlib import Path

import pytest

from pgshovel2 import names
from pgshovel2.ops.verify import read_topics
from tests.helpers import caught_up, pgshovel, write_config

FIXTURES = Path(__file__).parents[1] / "fixtures"
FIXTURE = json.loads((FIXTURES / "debezium-3.4.3.Final-postgres.json").read_text(encoding="utf-8"))["typed"]
# the same table recorded with other value modes (scripts/debezium/capture_fixture.py --mode ...)
MODES = json.loads((FIXTURES / "debezium-3.4.3.Final-postgres-modes.json").read_text(encoding="utf-8"))
RECORDED_SCHEMA = "dbzfix"
SET = "recorded"
# column -> the keys of Debezium's field schema ours lacks, as docs/wire.rst says: an enum is a plain
# string (Debezium's io.debezium.data.Enum names its labels, which the relay does not read); its values equal
WITHOUT = {"en": ("name", "version", "parameters")}


def _sql(statements: list[str], schema: str) -> list[str]:
    return [re.sub(rf"\b{RECORDED_SCHEMA}\.", f'"{schema}".', s) for s in statements]


def _events(messages: list[tuple]) -> dict[tuple, dict]:
    """(op, id) -> value of each data event (tombstones left out), JSON-parsed."""
    out = {}
    for key, value in messages:
        if value is None:
            continue
        event = json.loads(value) if isinstance(value, (bytes, str)) else value
        payload = event["payload"]
        row = payload["after"] or payload["before"]
        out[(payload["op"], row["id"])] = {"key": json.loads(key) if isinstance(key, (bytes, str)) else key,
                                           "value": event}
    return out


def _row_schema(event: dict) -> list[dict]:
    return next(f for f in event["schema"]["fields"] if f["field"] == "after")["fields"]


def _option(setting: str) -> tuple[str, str]:
    """A connector setting ("decimal.handling.mode=string") as the set's debezium option."""
    name, _, value = setting.partition("=")
    return name.replace(".", "_"), value


@pytest.mark.parametrize(("path", "recorded"), [("trigger", FIXTURE), ("logical", FIXTURE), ("pgoutput", FIXTURE),
                                                ("trigger", MODES["typed"])], ids=["trigger", "logical", "pgoutput",
                                                                                   "trigger-modes"])
def test_events_equal_debeziums_recorded_ones(stack, cluster, db, schema, tmp_path, relay_factory, path, recorded):
    modes = dict(map(_option, MODES["modes"])) if recorded is MODES["typed"] else {}
    with db.cursor() as cur:
        for statement in _sql(recorded["setup"], schema):
            cur.execute(statement)
    prefix = f"rec{path[0]}{len(modes)}{cluster}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "typed"}], encoding="json", backend=path,
                       envelope="debezium", topic_prefix=prefix, **({"debezium": modes} if modes else {}))
    pgshovel(stack, cluster, "set", "create", SET, str(cfg))
    relay = relay_factory(SET)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        for statement in _sql(recorded["changes"], schema):
            cur.execute(statement)
    caught_up(stack, cluster, SET)
    topic = names.table_topic(prefix, schema, "typed")
    ours = _events([(k, v) for k, v, _ in read_topics(stack.bootstrap, [topic])[topic]])
    renamed = json.dumps([(m["key"], m["value"]) for m in recorded["messages"]]).replace(
        f"{RECORDED_SCHEMA}.{RECORDED_SCHEMA}.typed", f"{prefix}.{schema}.typed")
    theirs = _events(json.loads(renamed))
    assert sorted(ours) == sorted(theirs) == [("c", 3), ("r", 1), ("r", 2), ("u", 1)]
    problems = []
    for event, mine in sorted(ours.items()):
        dbz = theirs[event]
        if mine["key"] != dbz["key"]:
            problems.append(f"{event} key: ours {mine['key']}, Debezium's {dbz['key']}")
        for ours_f, dbz_f in zip(_row_schema(mine["value"]), _row_schema(dbz["value"]), strict=True):
            dbz_f = {k: v for k, v in dbz_f.items() if k not in WITHOUT.get(dbz_f["field"], ())}
            if ours_f != dbz_f:
                problems.append(f"{event} schema of {dbz_f['field']}: ours {ours_f}, Debezium's {dbz_f}")
        for image in ("before", "after"):
            a, b = mine["value"]["payload"][image], dbz["value"]["payload"][image]
            if (a is None) != (b is None):
                problems.append(f"{event} {image}: ours {a}, Debezium's {b}")
                continue
            for column in (b or {}):
                if a[column] != b[column]:
                    problems.append(f"{event} {image}.{column}: ours {a[column]!r}, Debezium's {b[column]!r}")
            if a is not None and list(a) != list(b):
                problems.append(f"{event} {image} field order: ours {list(a)}, Debezium's {list(b)}")
    assert not problems, "\n".join(problems)
    assert relay.stop() == 0
