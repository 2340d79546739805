"""pgshovel2.codec.jsonback: a column's JSON form read back gives the Avro datum the Avro encoding
writes for the same source value (trigger form -> to_json -> jsonback == trigger form -> to_avro)."""

import pytest

from pgshovel2.catalog import Column
from pgshovel2.codec import jsonback
from pgshovel2.codec.types import field_type
from pgshovel2.wire import INT32_MAX, INT64_MIN

CASES = [  # (kind, precision, scale, trigger forms)
    ("date", None, None, [0, -1, 8865, -740_000, 2_900_000, INT32_MAX]),
    ("timestamp", None, None, [0, 1, -63_000_000_000_000_000, 252_000_000_000_000_000, INT64_MIN]),
    ("timestamptz", None, None, [-1, 86_399_999_999, -80_000_000_000_000_000]),
    ("time", None, None, [0, 86_399_999_999]),
    ("bytea", None, None, ["", "00ff10"]),
    ("numeric", 12, 4, ["-12345678.1234", "0", "0.0001"]),
    ("float8", None, None, [0.1, "NaN", "-Infinity", -0.0]),
    ("jsonb", None, None, ['{"a": [1, null]}', "null", '"s"']),
    ("int8", None, None, [-(2**63), 5]),
    ("interval", None, None, [[14, -3, 4_000_000]]),
]


@pytest.mark.parametrize(("kind", "precision", "scale", "forms"), CASES, ids=[c[0] for c in CASES])
def test_json_forms_read_back_as_the_avro_datum(kind, precision, scale, forms):
    col = Column("c", 1, kind, kind, False, True, precision, scale)
    ftype = field_type(col)
    read = jsonback.datum_reader_of([col])
    for form in forms:
        json_value = form if ftype.to_json is None else ftype.to_json(form)
        avro = form if ftype.to_avro is None else ftype.to_avro(form)
        got = read({"c": _through_json(json_value)})[0]
        assert got == avro or (got != got and avro != avro) or str(got) == str(float(avro)), (form, json_value)


def _through_json(value):
    """value as a JSON message carries it (escapes decoded as the consumer decoder does)."""
    from pgshovel2.codec.jsonvalue import JsonValue, is_escape

    return JsonValue(value["pgshovel.json"]) if is_escape(value) else value


def test_a_bad_value_names_its_column():
    col = Column("when", 1, "date", "date", False, True)
    with pytest.raises(ValueError, match="column 'when'"):
        jsonback.datum_reader_of([col])({"when": "not a date"})


def test_arrays_map_element_by_element_and_keep_lower_bounds():
    col = Column("c", 1, "date[]", "date", True, True)
    read = jsonback.datum_reader_of([col])
    assert read({"c": [["2024-02-29", None], ["infinity", "1970-01-01"]]})[0] == [[19782, None], [INT32_MAX, 0]]
    assert read({"c": {"lower_bounds": [0], "elements": ["1970-01-02"]}})[0] == {"lower_bounds": [0], "elements": [1]}
