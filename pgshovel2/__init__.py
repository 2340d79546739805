"""pgshovel2: change data capture from PostgreSQL to Kafka."""

__version__ = "0.2.0"
