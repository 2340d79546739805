"""The pg_type sweep of test_types: every type a table column can have (base,
enum, domain, range, multirange, composite, and the arrays of each), one value
of each, and what the decoders need to know about each column."""

from tests.integration.type_decoding import Col

# Types to sweep: not array types (those come from their element), defined, of a kind a column can
# have; the system's and the extensions' types, and those the test creates in its schema
# (composites only from there: every table has one). Extensions: those the sweep installs (others
# other tests install in the same database would make the sweep depend on which ran before).
SWEEP_SQL = """
SELECT t.oid, format_type(t.oid, NULL), t.typname, t.typarray
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE t.typisdefined AND t.typtype IN ('b', 'e', 'd', 'r', 'm', 'c')
  AND NOT EXISTS (SELECT 1 FROM pg_type a WHERE a.typarray = t.oid)
  AND (n.nspname IN ('pg_catalog', 'information_schema') OR n.nspname = %(schema)s
       OR EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_type'::regclass AND d.objid = t.oid
                  AND d.deptype = 'e' AND d.refobjid IN (SELECT x.oid FROM pg_extension x
                                                         WHERE x.extname IN ('citext', 'hstore'))))
  AND (t.typtype <> 'c' OR (n.nspname = %(schema)s
                            AND (SELECT relkind FROM pg_class c WHERE c.oid = t.typrelid) = 'c'))
ORDER BY n.nspname, t.typname
"""

# The type after its domains, and its element when it is an array.
_DESCRIBE_SQL = """
WITH RECURSIVE b(oid, depth) AS (
    SELECT %s::oid, 0
  UNION ALL
    SELECT t.typbasetype, b.depth + 1 FROM b JOIN pg_type t ON t.oid = b.oid WHERE t.typtype = 'd'
)
SELECT bt.typname, bt.typcategory = 'A', format_type(e.oid, NULL), e.typname
FROM (SELECT oid FROM b ORDER BY depth DESC LIMIT 1) r JOIN pg_type bt ON bt.oid = r.oid
LEFT JOIN pg_type e ON bt.typcategory = 'A' AND e.oid = bt.typelem
"""

# The test schema's own types, one of each kind (and domains over types with forms of their own).
OWN_TYPES = """
CREATE TYPE mood AS ENUM ('happy', 'sad');
CREATE DOMAIN d_int AS integer CHECK (VALUE > 0);
CREATE DOMAIN d_date AS date;
CREATE DOMAIN d_float AS double precision;
CREATE DOMAIN d_json AS jsonb;
CREATE DOMAIN d_intarr AS integer[];
CREATE TYPE floatrange AS RANGE (subtype = float8);
CREATE TYPE comp AS (a integer, b text, c integer[], d jsonb);
CREATE TABLE stats_src (a integer, b integer, c integer DEFAULT 42);
INSERT INTO stats_src SELECT i % 10, i % 5 FROM generate_series(1, 200) i;
CREATE STATISTICS stats_src_ab (ndistinct, dependencies, mcv) ON a, b FROM stats_src;
ANALYZE stats_src;
"""

_STATS = ("(SELECT d.{} FROM pg_statistic_ext_data d JOIN pg_statistic_ext s ON s.oid = d.stxoid "
          "WHERE s.stxname = 'stats_src_ab' AND s.stxnamespace = current_schema()::regnamespace)")

# A value per type name: a text literal (cast to the type), or an expression when it starts with "(".
VALUES = {
    "aclitem": "postgres=r/postgres", "bit": "1", "bool": "t", "box": "(1,2),(0,0)", "bpchar": "ab ",
    "bytea": "\\x00ff00", "char": "c", "cid": "7", "cidr": "10.0.0.0/8", "circle": "<(1,2),3>",
    "date": "0044-03-15 BC", "datemultirange": "{[2024-01-01,2024-02-01),[2024-03-01,infinity)}",
    "daterange": "[2024-01-01,2024-02-01)", "float4": "-3.25e-10", "float8": "0.30000000000000004",
    "inet": "192.168.0.1/24", "int2": "-32768", "int4": "2147483647", "int8": "-9223372036854775808",
    "int4multirange": "{[1,3),[5,7)}", "int4range": "[1,3)", "int8multirange": "{[1,3)}", "int8range": "(,3)",
    "interval": "1 year 2 mons -3 days 04:05:06.789", "json": '{"a": [1, null], "b": "null"}',
    "jsonb": '{"k": {"pgshovel.json": "x"}}', "jsonpath": "$.a[*] ? (@ > 1)", "line": "{1,-1,0}",
    "lseg": "[(0,0),(1,1)]", "macaddr": "08:00:2b:01:02:03", "macaddr8": "08:00:2b:01:02:03:04:05",
    "money": "-12.34", "name": "a name", "numeric": "-1.000000000000000000000000000001",
    "nummultirange": "{[1.5,2.5]}", "numrange": "(1.5,2.5]", "oid": "4294967295",
    "path": "[(0,0),(1,1),(2,0)]", "pg_lsn": "16/B374D848", "pg_snapshot": "10:20:10,14,15",
    "point": "(1.5,-2)", "polygon": "((0,0),(1,1),(1,0))", "refcursor": "cur", "regclass": "pg_class",
    "regcollation": '"C"', "regconfig": "english", "regdictionary": "simple", "regnamespace": "pg_catalog",
    "regoper": "#<=#", "regoperator": "+(integer,integer)", "regproc": "now", "regprocedure": "now()",
    "regrole": "postgres", "regtype": "integer", "text": "h\u00e9llo \U0001F418 \"q\" \\ ,{}",
    "tid": "(1,2)", "time": "23:59:59.999999", "timestamp": "2024-02-29 12:34:56.123456",
    "timestamptz": "1999-12-31 23:59:59.999999+03", "timetz": "12:34:56.789+05:30",
    "tsmultirange": "{[2024-01-01 00:00,2024-01-02 00:00)}", "tsquery": "fat & (rat | !cat)",
    "tsrange": "[2024-01-01 00:00,2024-01-02 00:00)", "tstzmultirange": "{[2024-01-01 00:00+00,)}",
    "tstzrange": "[2024-01-01 00:00+00,2024-01-02 00:00+00)", "tsvector": "fat:2 cat:3",
    "txid_snapshot": "10:20:10,14,15", "uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "varbit": "101",
    "varchar": "x", "xid": "42", "xid8": "42", "xml": '<a b="1">t</a>', "int2vector": "1 2",
    "oidvector": "1 2",
    # information_schema's domains
    "cardinal_number": "1", "character_data": "x", "sql_identifier": "ident",
    "time_stamp": "2024-01-01 00:00:00+00", "yes_or_no": "YES",
    # extensions of the test database
    "citext": "MiXeD", "hstore": "a=>1, b=>NULL",
    # the test's own types
    "mood": "happy", "d_int": "5", "d_date": "2024-02-29", "d_float": "-0", "d_json": "null",
    "d_intarr": "[0:1][1:2]={{1,2},{3,NULL}}", "floatrange": "[1.5,2.5)", "floatmultirange": "{[1.5,2.5)}",
    "comp": '(1,"x, y","{1,2}","{""a"": null}")',
    # types whose input refuses every value: taken from the catalog
    "pg_node_tree": "(SELECT adbin FROM pg_attrdef WHERE adrelid = 'stats_src'::regclass)",
    "pg_ndistinct": _STATS.format("stxdndistinct"), "pg_dependencies": _STATS.format("stxddependencies"),
    "pg_mcv_list": _STATS.format("stxdmcv"),
}
TEXT_ONLY = frozenset({"pg_node_tree", "pg_ndistinct", "pg_dependencies", "pg_mcv_list"})
# Types no SQL expression gives a value of (index storage types: GiST and BRIN summaries).
NO_VALUE = frozenset({"gtsvector", "ghstore", "pg_brin_bloom_summary", "pg_brin_minmax_multi_summary"})


def value_sql(typname: str, pg_type: str) -> str:
    """SQL of the sweep's value of a type. Raises KeyError for a type without one."""
    value = VALUES[typname]
    if value.startswith("(SELECT"):
        return value
    return "'" + value.replace("'", "''") + f"'::{pg_type}"


def describe(cur, name: str, type_oid: int, pg_type: str, text_only: bool) -> Col:
    """The decoders' view of a column of a type (domains resolved; box[] travels as text)."""
    cur.execute(_DESCRIBE_SQL, (type_oid,))
    base, is_array, elem, elem_name = cur.fetchone()
    if is_array and elem_name != "box":
        return Col(name, pg_type, elem=elem, json=elem_name in ("json", "jsonb"), bytea=elem_name == "bytea",
                   vector=base in ("int2vector", "oidvector"))
    return Col(name, pg_type, json=base in ("json", "jsonb"), bytea=base == "bytea", text_only=text_only)


def sweep_columns(cur, schema: str) -> tuple[list[Col], dict[str, str], list[str]]:
    """(columns, column name -> value SQL, skipped types) of the sweep table, from pg_type."""
    cur.execute(SWEEP_SQL, {"schema": schema})
    cols, values, skipped = [], {}, []
    for i, (oid, pg_type, typname, array_oid) in enumerate(cur.fetchall()):
        if typname in NO_VALUE:
            skipped.append(pg_type)
            continue
        value = value_sql(typname, pg_type)
        cols.append(describe(cur, f"c{i}", oid, pg_type, typname in TEXT_ONLY))
        values[f"c{i}"] = value
        if array_oid:
            cur.execute("SELECT format_type(%s, NULL)", (array_oid,))
            array_type = cur.fetchone()[0]
            cols.append(describe(cur, f"a{i}", array_oid, array_type, False))
            values[f"a{i}"] = f"ARRAY[[{value}, NULL], [{value}, {value}]]::{array_type}"
    return cols, values, skipped
