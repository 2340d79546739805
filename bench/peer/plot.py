"""One PNG per figure of a `make bench` result (matplotlib, no display needed)."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _bars(path: Path, title: str, ylabel: str, items: dict[str, dict], goal: float | None = None,
          goal_label: str = "goal") -> None:
    """Bars of median with min..max whiskers; items: label -> summary (min/median/max)."""
    labels = list(items)
    med = [items[k]["median"] for k in labels]
    err = [[m - items[k]["min"] for k, m in zip(labels, med, strict=True)],
           [items[k]["max"] - m for k, m in zip(labels, med, strict=True)]]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar(labels, med, yerr=err, capsize=4, color="#4c72b0")
    if goal is not None:
        ax.axhline(goal, color="#c44e52", linestyle="--", label=goal_label)
        ax.legend()
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot(result: dict, stem: Path) -> list[Path]:
    """Write <stem>-<figure>.png for each figure present in result; returns the paths."""
    out = []
    if "capture" in result:
        cap = result["capture"]
        path = stem.with_name(stem.name + "-capture.png")
        base = cap["none"]["median"]
        _bars(path, "Capture overhead (pgbench -N tps)", "tps",
              {k: cap[k] for k in ("none", "jsontriga", "pgshovel2")}, 0.9 * base, "goal: 90% of none")
        out.append(path)
    if "relay" in result:
        rel = result["relay"]
        path = stem.with_name(stem.name + "-relay.png")
        items = {k: v for k, v in rel.items() if isinstance(v, dict)}
        _bars(path, "Relay throughput (changes/s; ceiling: messages/s)", "per second", items, 100_000,
              "goal: 100k changes/s")
        out.append(path)
    if "latency" in result:
        lat = result["latency"]
        path = stem.with_name(stem.name + "-latency.png")
        qs = ["p50_ms", "p95_ms", "p99_ms", "max_ms"]
        _bars(path, f"Commit to read_committed visibility at {lat['tps_target']} tps (trigger backend)", "ms",
              {q: {"min": lat[q], "median": lat[q], "max": lat[q]} for q in qs}, 100, "goal: p99 100 ms")
        out.append(path)
    if "bootstrap" in result:
        boot = result["bootstrap"]
        path = stem.with_name(stem.name + "-bootstrap.png")
        items = {"COPY -> Parquet": boot["copy_parquet"],
                 **{f"Spark {m} ({k})": boot[f"spark_{m}"][k] for m in boot["ratio_to_copy"]
                    for k in ("copy", "command")}}
        _bars(path, f"Bootstrap of pgbench_accounts ({boot['rows']:,} rows)", "rows/s", items,
              boot["copy_parquet"]["median"], "COPY reference")
        out.append(path)
    if "profile" in result:
        prof = result["profile"]
        path = stem.with_name(stem.name + "-profile.png")
        fig, ax = plt.subplots(figsize=(9, 5))
        names = [f for f, _ in prof["self"][:12]][::-1]
        shares = [s * 100 for _, s in prof["self"][:12]][::-1]
        ax.barh(names, shares, color="#55a868")
        ax.set_xlabel("% of samples (own time)")
        ax.set_title("Relay hot path (py-spy)")
        ax.tick_params(axis="y", labelsize=7)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        out.append(path)
    return out
