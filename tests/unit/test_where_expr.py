"""--where is one SQL expression or nothing (pgshovel2.backends.where_expr)."""

import pytest

from pgshovel2.backends.where_expr import WhereError, check, condition

GOOD = ["id > 5", "name LIKE 'a%'", "v = 'it''s'", "x = E'a\\'b;'", "(a OR b) AND c", "v = $$;--)$$",
        "v = $t$ ) ; $t$", '"we;i)rd" = 1', "a IN (SELECT id FROM t WHERE id > 0)", "d >= date '2020-01-01'"]
BAD = [("true); COMMIT; CREATE TABLE x(id int", "closes a parenthesis"),
       ("true) OR (SELECT pg_sleep(0)) IS NULL --", "closes a parenthesis"),
       ("; DROP TABLE t", "';'"), ("id > 1; DELETE FROM t", "';'"),
       ("true /* ) ; x */", "comment"), ("id > 1 -- c", "comment"),
       ("v = 'a\\' ; DROP TABLE t ; --'", "backslash"), ("((a)", "left open"), ("a)", "closes"),
       ("'open", "never ends"), ("$$x", "never ends"), ('"x', "never ends"), ("", "empty"), ("  ", "empty"),
       ("a = 1 \\g", "backslash"), ("x" * 10_001, "characters long")]


@pytest.mark.parametrize("where", GOOD)
def test_one_expression_is_accepted(where):
    assert check(where) == where


@pytest.mark.parametrize(("where", "why"), BAD)
def test_anything_else_is_refused_saying_why(where, why):
    with pytest.raises(WhereError, match=why):
        check(where)


def test_condition_is_parenthesized_with_percent_doubled():
    assert [part.string for part in condition("name LIKE 'a%'").seq] == ["(", "name LIKE 'a%%'", ")"]
