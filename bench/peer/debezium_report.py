"""The printed table and the plots of bench/peer/debezium.py's result: every pgshovel2 figure as a ratio to
Debezium's in the same run (drain and tps kept: higher is better; CPU and latency: lower is better)."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REFERENCES = ("debezium", "debezium_eos")


def _ratio(value: float, reference: float) -> str:
    return f"{value / reference:.2f}x" if reference else "-"


def drain_lines(drain: dict) -> list[str]:
    """Per workload and variant: changes/s (median, min..max), ratio to Debezium at-least-once and
    exactly-once, tool and broker CPU µs per change with their ratios to Debezium's (at-least-once)."""
    lines = [f"{'drain (changes/s; CPU µs/change)':<40} {'median':>9} {'min..max':>19} {'/dbz':>6} {'/dbz eos':>8}"
             f" {'tool µs':>8} {'/dbz':>6} {'kafka µs':>8} {'/dbz':>6}"]
    for workload, variants in drain.items():
        ref, eos = variants["debezium"], variants.get("debezium_eos")
        for name, s in variants.items():
            rate = s["rate"]
            kafka = s.get("kafka_us", {"median": 0.0})["median"]
            ref_kafka = ref.get("kafka_us", {"median": 0.0})["median"]
            tool, ref_tool = s["tool_us"]["median"], ref["tool_us"]["median"]
            lines.append(f"{workload + ' ' + name:<40} {rate['median']:>9,.0f}"
                         f" {rate['min']:>9,.0f}..{rate['max']:<9,.0f}"
                         f" {_ratio(rate['median'], ref['rate']['median']):>6}"
                         f" {_ratio(rate['median'], eos['rate']['median']) if eos else '-':>8}"
                         f" {tool:>8.1f} {_ratio(tool, ref_tool):>6} {kafka:>8.1f} {_ratio(kafka, ref_kafka):>6}")
    return lines


def _pressure(figures: dict) -> str:
    """The run's CPU pressure as a percentage; '-' for results from before it was recorded."""
    return f"{figures['cpu_pressure']:.0%}" if "cpu_pressure" in figures else "-"


def latency_lines(lat: dict) -> list[str]:
    ref = lat["debezium"]
    label = f"latency ms at {ref['tps_target']:.0f} tps"
    lines = [f"{label:<40} {'p50':>7} {'p99':>7} {'max':>7}"
             f" {'p99/dbz':>8} {'p99/dbz eos':>11} {'CPU pressure':>12}"]
    for name, s in lat.items():
        eos = lat.get("debezium_eos")
        to_eos = _ratio(s["p99_ms"], eos["p99_ms"]) if eos else "-"
        lines.append(f"{name:<40} {s['p50_ms']:>7.1f} {s['p99_ms']:>7.1f} {s['max_ms']:>7.1f}"
                     f" {_ratio(s['p99_ms'], ref['p99_ms']):>8} {to_eos:>11} {_pressure(s):>12}")
    return lines


def tps_lines(tps: dict) -> list[str]:
    """Per variant: pgbench -N tps (median), its ratio to none's and that minus Debezium's
    (at-least-once), the same-round difference (kept_minus_debezium); the host's and the
    database's CPU µs per pgbench transaction, each with what it adds to none's as a ratio to what
    Debezium adds; the broker's CPU µs per pgbench transaction and its ratio to Debezium's; CPU s."""
    ratios, broker = tps["ratio_to_none"], tps.get("kafka_us_per_txn", {})
    paired = tps.get("kept_minus_debezium", {})
    host, db = tps.get("host_us_per_txn", {}), tps.get("database_us_per_txn", {})
    lines = [f"{'pgbench -N tps while streaming':<40} {'median':>9} {'of none':>8} {'- dbz':>7} {'by round':>8} "
             f"{'host µs/txn':>11} {'+ vs dbz':>8} {'db µs/txn':>9} {'+ vs dbz':>8} "
             f"{'broker µs/txn':>13} {'vs dbz':>7}  CPU s (median)"]
    for name, ratio in ratios.items():
        us = broker.get(name)
        lines.append(f"{name:<40} {tps[name]['median']:>9,.0f} {ratio:>8.3f} {ratio - ratios['debezium']:>+7.3f} "
                     f"{_signed(paired.get(name)):>8} {_number(host.get(name)):>11} {_added(host, name):>8} "
                     f"{_number(db.get(name)):>9} {_added(db, name):>8} "
                     f"{_number(us):>13} {'-' if us is None else _ratio(us, broker.get('debezium', 0)):>7}"
                     f"  {tps['cpu_s'].get(name, {})}")
    return lines


def _added(per_txn: dict[str, float], name: str) -> str:
    """What name adds to none's CPU µs per transaction, as a ratio to what Debezium adds ('-': not
    measured, or none itself)."""
    if name == "none" or not {name, "none", "debezium"} <= set(per_txn):
        return "-"
    return _ratio(per_txn[name] - per_txn["none"], per_txn["debezium"] - per_txn["none"])


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(result: dict) -> list[str]:
    """The human summary of a bench/peer/debezium.py result."""
    settings = result["settings"]
    head = (f"pgshovel2 vs Debezium {settings['at_least_once']['debezium']} (Kafka Connect "
            f"{settings['at_least_once']['kafka_connect']}, pgoutput, JSON with schemas), "
            f"{settings['changes']:,} changes x {settings['rounds']} rounds; pgshovel2 exactly-once")
    return [head, *(drain_lines(result["drain"]) if "drain" in result else []),
            *(latency_lines(result["latency"]) if "latency" in result else []),
            *(tps_lines(result["tps"]) if "tps" in result else [])]


def _bars(path: Path, title: str, ylabel: str, items: dict[str, float], reference: float) -> Path:
    fig, ax = plt.subplots(figsize=(10, 5))
    labels = list(items)
    colors = ["#c44e52" if k.startswith("debezium") else "#4c72b0" for k in labels]
    ax.bar(labels, [items[k] for k in labels], color=colors)
    ax.axhline(reference, color="#c44e52", linestyle="--", label="Debezium (at-least-once)")
    ax.legend()
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot(result: dict, stem: Path) -> list[Path]:
    """<stem>-vs-debezium-<figure>.png per figure; returns the paths."""
    out = []
    for workload, variants in result.get("drain", {}).items():
        for key, title, unit in (("rate", "drain", "changes/s"), ("tool_us", "tool CPU per change", "µs"),
                                 ("kafka_us", "broker CPU per change", "µs")):
            if all(key in s for s in variants.values()):
                items = {name: s[key]["median"] for name, s in variants.items()}
                out.append(_bars(stem.with_name(f"{stem.name}-vs-debezium-{workload}-{key}.png"),
                                 f"{title}, {workload} table", unit, items, items["debezium"]))
    if "latency" in result:
        lat = result["latency"]
        out.append(_bars(stem.with_name(f"{stem.name}-vs-debezium-latency-p99.png"),
                         f"p99 latency at {lat['debezium']['tps_target']} tps", "ms",
                         {k: v["p99_ms"] for k, v in lat.items()}, lat["debezium"]["p99_ms"]))
    if "tps" in result:
        ratios = result["tps"]["ratio_to_none"]
        out.append(_bars(stem.with_name(f"{stem.name}-vs-debezium-tps-kept.png"),
                         "pgbench -N tps kept while streaming", "of none", ratios, ratios["debezium"]))
        for key, title in (("host_us_per_txn", "host CPU per pgbench -N transaction while streaming"),
                           ("database_us_per_txn", "database CPU per pgbench -N transaction while streaming")):
            per_txn = result["tps"].get(key, {})
            if "debezium" in per_txn:
                out.append(_bars(stem.with_name(f"{stem.name}-vs-debezium-tps-{key.split('_')[0]}.png"),
                                 title, "µs", per_txn, per_txn["debezium"]))
        broker = {k: v for k, v in result["tps"].get("kafka_us_per_txn", {}).items() if k != "none"}
        if "debezium" in broker:
            out.append(_bars(stem.with_name(f"{stem.name}-vs-debezium-tps-broker.png"),
                             "broker CPU per pgbench -N transaction while streaming", "µs", broker,
                             broker["debezium"]))
    return out
