"""Write docs/config.rst, the reference of every field of a set config, from the declarative model
the parser itself uses (pgshovel2.configmodel.FIELDS), so the page cannot drift from the code
(tests/unit/test_config_doc.py fails when it does): ``python scripts/config_doc.py``."""

import sys
from pathlib import Path

from pgshovel2.configmodel import FIELDS, Field

OUT = Path(__file__).resolve().parents[1] / "docs" / "config.rst"
HEADER = """Set configuration reference
===========================

A replication set is described by a YAML file given to ``pgshovel set create NAME FILE`` and
``pgshovel set upgrade NAME FILE`` (examples: ``configs/``). Every field is below with its type,
default, allowed values and an example; fields marked *required* have no default. A field the
reference does not list is refused, and every such field of a file is reported at once, each with
its path (``tables[2].colums``); nothing is changed while a config has an error. The fields marked
"cannot change on upgrade" are fixed at ``set create``. This page is generated from the model the
parser uses (``pgshovel2/configmodel.py``) by ``python scripts/config_doc.py``; a unit test fails
when it is out of date.

A minimal set::

    database:
      dsn: "host=db1 dbname=shop user=cdc_admin"
    tables:
      - public.customers
      - name: sales.orders
        columns: [id, status, total]

Table names
-----------

A table is named the same way in a config's ``tables:`` entries and on the command line
(``pgshovel set snapshot --table``, ``pgshovel set accept-ddl``, ``pgshovel tail --table``, the
consumer library's ``tables``):

- ``schema.table``, both parts exact identifiers (no case folding, as PostgreSQL stores them);
- a part holding a ``.`` or a ``"`` in double quotes, a quote doubled: ``sales."my.table"``,
  ``"a""b"``; the quoted form ``set inspect`` prints (``"sales"."orders"``) is the same;
- a table name alone: in a config, the table of schema ``public``; on the command line, the set's
  table of that name when only one schema of the set has it. When several do, the error lists
  them; a name that is not in the set is refused naming the set and its tables.

In a config entry that gives ``schema:``, ``name`` is the exact identifier as it is (dots
included), as before ``schema.table`` was understood.

"""


def _literal(text: str) -> str:
    return f"``{text}``"


def _example(parents: list[Field], fld: Field) -> str:
    """fld's example placed under its parents' keys (a list of mappings as ``- ``)."""
    lines = fld.example.splitlines()
    for parent in reversed(parents):
        if parent.kind == "list":
            lines = [("- " if i == 0 else "  ") + line for i, line in enumerate(lines)]
        else:
            lines = ["  " + line for line in lines]
        lines.insert(0, f"{parent.name}:")
    return "\n".join("   " + line for line in lines)


def _path(parents: list[Field], fld: Field) -> str:
    return "".join(p.name + ("[]." if p.kind == "list" else ".") for p in parents) + fld.name


def _entry(parents: list[Field], fld: Field) -> str:
    path = _path(parents, fld)
    default = "*required*" if fld.default is None else (
        fld.default if fld.default.startswith("(") else _literal(fld.default))
    facts = [f"Type: {fld.kind}.", f"Default: {default}."]
    if fld.choices:
        facts.append("Allowed: " + ", ".join(_literal(c) for c in fld.choices) + ".")
    title = _literal(path)
    return "\n".join([title, "~" * len(title), "", " ".join(facts), "", fld.doc, "", ".. code-block:: yaml", "",
                      _example(parents, fld), "", ""])


def _section(parents: list[Field], fields: tuple[Field, ...]) -> list[str]:
    out = [_entry(parents, f) for f in fields]
    for f in fields:
        if f.fields:
            title = f"Fields of ``{_path(parents, f)}``" + (" (each entry)" if f.kind == "list" else "")
            out.append("\n".join([title, "-" * len(title), "", ""]))
            out += _section([*parents, f], f.fields)
    return out


def reference() -> str:
    """The page's text: the header, then every field of configmodel.FIELDS in model order, the
    fields of each mapping (and of each tables entry) in a section after the top-level ones."""
    top = "Top-level fields\n----------------\n\n"
    return (HEADER + top + "".join(_section([], FIELDS))).rstrip() + "\n"


if __name__ == "__main__":
    OUT.write_text(reference(), encoding="utf-8")
    print(f"wrote {OUT}", file=sys.stderr)
