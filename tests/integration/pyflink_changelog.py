"""Read Debezium change events with Apache Flink's own Debezium formats and print the
changelog Flink derives, one JSON line per row: ``{"kind": "+I"|"-U"|"+U"|"-D", "row": [...]}``.

Run by tests/integration/test_debezium_flink.py with a Python that has apache-flink
(``PGSHOVEL_TEST_PYFLINK`` or ``$FLINK_VENV``), not by pytest itself:
``python pyflink_changelog.py SPEC`` where SPEC is JSON:
``{"columns": [["id", "INT"], ...], "options": {<the source table's WITH options>}, "jars": [paths]}``,
e.g. options ``{"connector": "filesystem", "path": ..., "format": "debezium-json"}`` or a
``kafka`` connector with ``"format": "debezium-avro-confluent"`` (bounded at the latest offsets).
Every column is returned cast to STRING (timestamps in UTC).
"""

import json
import sys
from pathlib import Path

from pyflink.table import EnvironmentSettings, TableEnvironment


def main(spec: dict) -> None:
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", "1")
    config.set("table.local-time-zone", "UTC")
    if spec.get("jars"):
        config.set("pipeline.jars", ";".join(Path(j).absolute().as_uri() for j in spec["jars"]))
    columns = spec["columns"]
    options = ", ".join(f"'{k}' = '{v}'" for k, v in spec["options"].items())
    env.execute_sql(f"CREATE TABLE src ({', '.join(f'{n} {t}' for n, t in columns)}) WITH ({options})")
    select = ", ".join(f"CAST({n} AS STRING)" for n, _ in columns)
    with env.execute_sql(f"SELECT {select} FROM src").collect() as rows:
        for row in rows:
            print(json.dumps({"kind": str(row.get_row_kind()), "row": list(row)}), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
