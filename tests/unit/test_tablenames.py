"""One way to name a set's table everywhere (pgshovel2.tablenames)."""

import pytest

from pgshovel2.tablenames import TableNameError, display, find, split

SET = [("public", "orders"), ("sales", "orders"), ("public", "customers"), ("odd", "a.b")]


def test_split():
    assert split("t") == (None, "t")
    assert split("s.t") == ("s", "t")
    assert split('"s"."t"') == ("s", "t")
    assert split('"a.b"') == (None, "a.b")
    assert split('s."x""y"') == ("s", 'x"y')


def test_display_reads_back():
    for schema, table in SET + [("S p", 'q"t')]:
        assert split(display(schema, table)) == (schema, table)


def test_find_by_every_form():
    assert find("customers", SET, "shop") == ("public", "customers")
    assert find("public.customers", SET, "shop") == ("public", "customers")
    assert find('"public"."customers"', SET, "shop") == ("public", "customers")
    assert find("sales.orders", SET, "shop") == ("sales", "orders")
    assert find('odd."a.b"', SET, "shop") == ("odd", "a.b")
    assert find("odd.a.b", SET, "shop") == ("odd", "a.b")  # unquoted, as written before
    assert find("a.b", SET, "shop") == ("odd", "a.b")


def test_ambiguous_short_name_lists_candidates():
    with pytest.raises(TableNameError) as err:
        find("orders", SET, "shop")
    assert "ambiguous in set 'shop'" in str(err.value) and "public.orders, sales.orders" in str(err.value)


def test_unknown_table_names_the_set():
    with pytest.raises(TableNameError) as err:
        find("nope", SET, "shop")
    assert "not a table of set 'shop'" in str(err.value) and 'odd."a.b"' in str(err.value)
