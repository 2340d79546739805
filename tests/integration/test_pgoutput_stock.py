"""decoder pgoutput on every server (pg15 and the stock servers of PGSHOVEL2_TEST_STOCK, as the
non-superuser app there): set create picks pgoutput where our extension is missing and says why,
then the operations contract (snapshot, insert, update, delete, key update, truncate) holds.

The stock servers keep max_prepared_transactions = 0: set create and drop commit without PREPARE
(pgshovel2.ops.twophase)."""



from pgshovel2 import names
from tests.helpers import assert_verified, caught_up, messages, pgshovel, verify, write_config
from tests.stock import on_every_server as stack  # noqa: F401  (the one-line switch)


def test_operations_on_every_server(stack, cluster, db, schema, tmp_path, relay_factory):  # noqa: F811
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY, v text, hidden text)')
        cur.execute(f'INSERT INTO "{schema}".t VALUES (1, \'existing\', \'h\')')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t", "columns": ["id", "v"]}],
                       backend="logical", topic_prefix=f"ops{cluster}")
    out = pgshovel(stack, cluster, "set", "create", "ops", str(cfg)).stdout
    expected = "pgshovel2_decoder" if stack.stock is None else "pgoutput (the pgshovel2_decoder extension is not"
    assert f"decoder: {expected}" in out, out
    relay = relay_factory("ops")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".t VALUES (2, \'two\', \'h\'), (3, \'three\', \'h\')')
        cur.execute(f'UPDATE "{schema}".t SET v = \'TWO\' WHERE id = 2')
        cur.execute(f'UPDATE "{schema}".t SET hidden = \'not captured\' WHERE id = 2')
        cur.execute(f'DELETE FROM "{schema}".t WHERE id = 3')
        cur.execute(f'UPDATE "{schema}".t SET id = 20 WHERE id = 2')
        cur.execute(f'TRUNCATE "{schema}".t')
    caught_up(stack, cluster, "ops")
    topic = names.table_topic(f"ops{cluster}", schema, "t")
    got = [(k["id"], v and v["v"], h["pgshovel.op"]) for k, v, h in messages(stack, topic)]
    assert got == [(1, "existing", "r"), (2, "two", "c"), (3, "three", "c"), (2, "TWO", "u"),
                   (3, None, "d"), (2, None, "d"), (20, "TWO", "c")]
    kinds = [v["type"] for _, v, _ in messages(stack, names.transactions_topic(f"ops{cluster}"))]
    assert kinds.count("TRUNCATE") == 1
    assert_verified(verify(stack, cluster, "ops"))
    assert relay.stop() == 0
    dropped = pgshovel(stack, cluster, "set", "drop", "ops").stdout
    assert ("publication" in dropped) == (stack.stock is not None), dropped
