"""What ``make bench`` runs: pgshovel2's GOALS.md figures, each beside its reference in the same run
(Debezium, no capture, the librdkafka ceiling, a COPY), and the helpers every benchmark shares.

``bench.peer.run`` is the entry point (``make bench``, ``QUICK=1``, ``ONLY=section,...``); every
section's module also runs alone (``.venv/bin/python -m bench.peer.<module> --help``). Nothing here
imports ``bench.experiments`` (.importlinter). bench/README.rst says what lives where.
"""
