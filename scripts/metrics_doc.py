"""Write docs/metrics.rst, the reference of every Prometheus metric the relay exports, from the
metric objects themselves (pgshovel2.relay.monitor.metrics), so the page cannot drift from the code
(tests/unit/test_metrics_doc.py fails when it does): ``python scripts/metrics_doc.py``."""

import sys
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from pgshovel2.relay import metrics

OUT = Path(__file__).resolve().parents[1] / "docs" / "metrics.rst"
HEADER = """Relay metrics
=============

``pgshovel-kafka-relay --metrics-port N`` serves these at ``/metrics`` (Prometheus text format;
HTTPS and basic auth: docs/security.rst). Every one carries the label ``set``. How each is
measured: the docstring of ``pgshovel2/relay/monitor/metrics.py``. This page is generated from the metric
objects by ``python scripts/metrics_doc.py``; a unit test fails when it is out of date.

"""


def _samples(metric: MetricWrapperBase) -> str:
    name, kind = metric._name, metric._type
    if kind == "counter":
        return f"``{name}_total``"
    if kind == "histogram":
        return f"``{name}_bucket`` (+ ``_sum``, ``_count``)"
    return f"``{name}``"


def _unit(name: str) -> str:
    return next((unit for suffix, unit in (("_seconds", "seconds"), ("_bytes", "bytes")) if name.endswith(suffix)),
                "0 or 1" if name.endswith(("_active", "_up")) else "count")


def reference() -> str:
    """The page's text: one table row per metric of pgshovel2.relay.monitor.metrics, in name order."""
    found = sorted((m for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)), key=lambda m: m._name)
    rows = [(_samples(m), m._type, _unit(m._name), ", ".join(f"``{label}``" for label in m._labelnames),
             m._documentation) for m in found]
    head = ("Samples", "Type", "Unit", "Labels", "Meaning")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    rule = " ".join("=" * w for w in widths)
    line = lambda r: " ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()  # noqa: E731
    return HEADER + "\n".join([rule, line(head), rule, *map(line, rows), rule]) + "\n"


if __name__ == "__main__":
    OUT.write_text(reference(), encoding="utf-8")
    print(f"wrote {OUT}", file=sys.stderr)
