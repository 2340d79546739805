"""The Spark jobs on the secured stack (issue #67 item 1, 2): the bootstrap reads its handoff offsets
and materialize reads the change stream through Spark's Kafka source over SASL_SSL as the consumer
user (the librdkafka settings translated for Java's client, pgshovel2.kafkajava), its executors
decoding Avro through the registry behind TLS, client certificates and basic auth."""

from pgshovel2.cluster import ClusterStore
from pgshovel2.sparkjobs import bootstrap, materialize
from tests.integration.bootstrap_helpers import TABLES, create_set, create_tables, parquet_rows, source_rows
from tests.integration.test_secure_kafka import consumer_settings, relay_env, start_relay, wait_caught_up
from tests.secure import TOPIC_PREFIX


def test_bootstrap_and_materialize_on_secured_kafka(stack, db, schema, cluster, spark, tmp_path, secure_kafka,
                                                    secure_registry):
    create_tables(db, schema, accounts=300)
    create_set(stack, cluster, tmp_path, schema, "smat", topic_prefix=f"{TOPIC_PREFIX}-smat-{cluster}")
    relay = start_relay(stack, cluster, "smat", tmp_path, relay_env(secure_kafka, secure_registry, tmp_path))
    kafka, registry = consumer_settings(secure_kafka), secure_registry.settings()
    wait_caught_up(stack, cluster, "smat", kafka)
    boot, out = tmp_path / "boot", tmp_path / "state"
    with ClusterStore(stack.zk, cluster) as store:
        bootstrap.run(spark, store, "smat", bootstrap.BootstrapOptions(str(boot), kafka, registry))
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".accounts SET abalance = abalance + aid WHERE aid % 7 = 0')
        cur.execute(f'DELETE FROM "{schema}".accounts WHERE aid > 280')
        cur.execute(f"INSERT INTO \"{schema}\".branches VALUES (99, 1, 'after the bootstrap')")
    wait_caught_up(stack, cluster, "smat", kafka)
    relay.stop()

    materialize.run(spark, materialize.MaterializeOptions(str(boot), str(out), kafka, registry))
    current = materialize.current_state(out)
    for table in TABLES:
        state = parquet_rows(current / "tables" / bootstrap.table_dir(schema, table), table)
        assert state == source_rows(stack.dsn, schema, table), table
