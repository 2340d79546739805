"""Read a file of Debezium JSON change events with Apache Flink's ``debezium-json``
format and print the changelog Flink derives, one JSON line per row:
``{"kind": "+I"|"-U"|"+U"|"-D", "row": [...]}``.

Run by tests/integration/test_debezium.py with a Python that has apache-flink
(``PGSHOVEL_TEST_PYFLINK``), not by pytest itself:
``python pyflink_changelog.py EVENTS_FILE '[["id", "INT"], ["v", "STRING"]]'``.
Every column is returned cast to STRING (timestamps in UTC).
"""

import json
import sys

from pyflink.table import EnvironmentSettings, TableEnvironment


def main(path: str, columns: list[list[str]]) -> None:
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", "1")
    env.get_config().set("table.local-time-zone", "UTC")
    env.execute_sql(f"""
        CREATE TABLE src ({", ".join(f"{n} {t}" for n, t in columns)}) WITH (
            'connector' = 'filesystem', 'path' = '{path}', 'format' = 'debezium-json',
            'debezium-json.timestamp-format.standard' = 'ISO-8601')""")
    select = ", ".join(f"CAST({n} AS STRING)" for n, _ in columns)
    with env.execute_sql(f"SELECT {select} FROM src").collect() as rows:
        for row in rows:
            print(json.dumps({"kind": str(row.get_row_kind()), "row": list(row)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
