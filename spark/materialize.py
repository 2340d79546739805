"""spark-submit entry point of the materialize job (options: ``--help``).

    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 --py-files pgshovel2.zip \
        spark/materialize.py --bootstrap /shared/boot1 --output /shared/state --bootstrap-servers k:9092 \
        --schema-registry http://registry:8081
"""

from pgshovel2.cli.materialize import main

if __name__ == "__main__":
    main()
