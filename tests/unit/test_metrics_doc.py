"""docs/metrics.rst is what scripts/metrics_doc.py makes of the relay's metric objects: a metric added,
renamed or re-described without regenerating the page fails here."""

from scripts.metrics_doc import OUT, reference


def test_metrics_page_is_generated_from_the_code():
    assert OUT.read_text(encoding="utf-8") == reference(), "run: python scripts/metrics_doc.py"


def test_every_metric_is_on_the_page():
    text = OUT.read_text(encoding="utf-8")
    for name in ("pgshovel2_relay_lag_seconds", "pgshovel2_relay_slot_retained_bytes", "pgshovel2_relay_changes_total",
                 "pgshovel2_relay_online_snapshot_rows_total", "pgshovel2_relay_kafka_commit_seconds_bucket"):
        assert f"``{name}``" in text
