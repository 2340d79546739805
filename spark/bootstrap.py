"""spark-submit entry point of the bootstrap job (same options as ``pgshovel bootstrap``).

    spark-submit --jars /usr/share/java/postgresql.jar --py-files pgshovel2.zip \
        spark/bootstrap.py SET --output /shared/boot1 --zookeeper-hosts zk:2181 --bootstrap-servers k:9092
"""

from pgshovel2.cli.bootstrap import standalone

if __name__ == "__main__":
    standalone()
