"""The online snapshot's re-read by key (backends/chunks.py): which key types are looked up by key
(their capture value is the value's text), which by the chunk range only."""

from pgshovel2.backends.chunks import _text_key


def test_key_types_looked_up_by_their_text():
    assert all(_text_key(t) for t in ("integer", "bigint", "smallint", "text", "uuid", "character varying(20)"))
    assert not any(_text_key(t) for t in ("integer[]", "text[]", "character varying(5)[]", "numeric(10,2)",
                                          "timestamp with time zone", "bytea", "my_domain", "date"))
