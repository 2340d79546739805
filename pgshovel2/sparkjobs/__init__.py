"""PySpark jobs: bootstrap (a parallel consistent snapshot of a set) and
materialize (bootstrap + change stream -> current state). The spark-submit
entry points are spark/bootstrap.py and spark/materialize.py."""
