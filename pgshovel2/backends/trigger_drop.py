"""Dropping a set's triggers without owning the table.

PostgreSQL lets only a table's owner (or a member of its role) ``DROP TRIGGER``, while creating
one takes the TRIGGER privilege only. Where the pgshovel2 extension (0.4, sql/capture) is
installed, ``pgshovel2.drop_trigger(regclass, name)`` -- SECURITY DEFINER, executable only by
the roles the DBA grants it to, dropping nothing but a set's own triggers on a table the
session's role holds TRIGGER on -- lets the admin role (set upgrade, set drop) and the relay role
(the partition watch) drop them; elsewhere the role must own the table
(``pgshovel set create --print-grants``).
"""

from psycopg2 import sql

from pgshovel2.errors import CaptureError

FUNCTION = "pgshovel2.drop_trigger(regclass,name)"


def drop_trigger(cur, name: str, table: str, if_exists: bool = False) -> bool:
    """Drop trigger name of table (a regclass text: a quoted qualified name); True when it was
    dropped, False when if_exists and there was none. Directly when cur's role owns table, else
    through pgshovel2.drop_trigger when cur's role may execute it. Raises CaptureError naming the
    role, table and trigger when neither; psycopg2 errors as PostgreSQL raises them."""
    # the function looked up in the catalog: naming it would want USAGE on schema pgshovel2
    cur.execute("SELECT pg_has_role(c.relowner, 'USAGE'), current_user, EXISTS (SELECT 1 FROM pg_trigger t "
                "WHERE t.tgrelid = c.oid AND t.tgname = %s), coalesce((SELECT has_function_privilege(p.oid, 'EXECUTE') "
                "AND has_schema_privilege(p.pronamespace, 'USAGE') FROM pg_proc p "
                "WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = 'pgshovel2') "
                "AND p.proname = 'drop_trigger'), false) FROM pg_class c WHERE c.oid = %s::regclass", (name, table))
    owner, role, exists, helper = cur.fetchone()
    if not exists:
        if if_exists:
            return False
        raise CaptureError(f"table {table} has no trigger {name}")
    if owner:
        cur.execute(sql.SQL("DROP TRIGGER {} ON {}").format(sql.Identifier(name), sql.SQL(table)))
        return True
    if not helper:
        raise CaptureError(f"role {role} may not drop trigger {name} of table {table}: only its owner may, or a "
                           f"role granted EXECUTE on {FUNCTION} (extension pgshovel2 0.4; pgshovel set create "
                           "--print-grants prints the grants)")
    cur.execute("SELECT pgshovel2.drop_trigger(%s::regclass, %s)", (table, name))
    return True
