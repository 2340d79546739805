"""pgshovel2: change data capture from PostgreSQL to Kafka."""

from setuptools import find_packages, setup

setup(
    name="pgshovel2",
    version="0.2.0",
    description="Change data capture for PostgreSQL (PgQ triggers, logical decoding) into Kafka",
    long_description=open("README.rst", encoding="utf-8").read(),
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=find_packages(include=["pgshovel2", "pgshovel2.*"]),
    package_data={"pgshovel2.backends": ["sql/pgshovel2_pl/*.sql"]},  # the PL/pgSQL capture (sql/capture_pl)
    install_requires=[
        "click>=8.1,<9",
        "kazoo>=2.9,<3",
        "pure-sasl>=0.6,<1",  # kazoo's SASL (--zookeeper-auth sasl:...)
        "psycopg2-binary>=2.9,<3",
        "confluent-kafka[schemaregistry]>=2.4,<3",
        "fastavro>=1.9,<2",
        "PyYAML>=6,<7",
        "prometheus_client>=0.20,<1",
    ],
    extras_require={
        "test": ["pytest>=8,<10", "pytest-xdist>=3.6,<4", "ruff>=0.5", "import-linter>=2,<3"],
        "sentry": ["sentry-sdk>=2,<3"],
        "bench": ["matplotlib>=3.8,<4", "py-spy>=0.3,<1"],
        # 4.0.x: newer releases' spark-token-provider-kafka (a dependency of the Kafka
        # connector) is missing from Maven Central. pandas: PySpark's mapInArrow insists on it.
        "spark": ["pyspark>=4.0,<4.1", "pyarrow>=15", "pandas>=2.0,<3"],
        # PyIceberg: the second engine reading the Iceberg tables materialize writes (tests, audit).
        "iceberg": ["pyiceberg>=0.9,<1"],
        # The docs site (make docs).
        "docs": ["sphinx>=8,<10"],
    },
    entry_points={
        "console_scripts": [
            "pgshovel=pgshovel2.cli.admin:main",
            "pgshovel-kafka-relay=pgshovel2.cli.relay:entry",
        ],
    },
)
