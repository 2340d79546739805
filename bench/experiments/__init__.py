"""One-off micro-experiments and probes: A/B comparisons of two relay versions, in-process CPU
costs of one piece (codec, lane, producer, decoder, reader), and studies behind a finding in
docs/internals.rst or docs/operations.rst. ``make bench`` runs none of them; each runs alone
(``.venv/bin/python -m bench.experiments.<module> --help``) and uses bench.peer's shared helpers.
bench/README.rst says what lives where.
"""
