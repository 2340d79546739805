"""Render monitoring/grafana-dashboard.json's panels from a live Prometheus, without Grafana: each
panel's queries evaluated over a time range through Prometheus's HTTP API (query_range) and drawn
with matplotlib into one PNG, laid out as the dashboard's grid. For checking the dashboard against
real metrics where no Grafana runs.

    .venv/bin/python scripts/dashboard_preview.py --prometheus http://127.0.0.1:9090 \\
        [--minutes 10] [--set 'pgbench|shop'] [--out dashboard.png]

Grafana's variables are replaced as Grafana would: ``$set`` by --set (a regex, default ``.*``),
``$__rate_interval`` by four scrape steps. Exits 1 naming the panel when Prometheus refuses a query.
"""

import argparse
import json
import math
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DASHBOARD = Path(__file__).resolve().parent.parent / "monitoring" / "grafana-dashboard.json"


def query_range(prometheus: str, expr: str, start: float, end: float, step: float) -> list[dict]:
    """Prometheus's query_range result (a list of {metric, values}) for expr. Raises RuntimeError
    with Prometheus's error for a refused query, OSError when it does not answer."""
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{params}", timeout=30) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(body.get("error", body))
    return body["data"]["result"]


def legend(template: str, labels: dict[str, str]) -> str:
    """A series' name from Grafana's legendFormat ({{label}} replaced)."""
    for key, value in labels.items():
        template = template.replace("{{" + key + "}}", value)
    return template


def render(prometheus: str, minutes: float, set_regex: str, out: Path) -> int:
    """Draw every panel into out; returns how many series were drawn in all."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    end = time.time()
    start, step = end - minutes * 60, max(2.0, minutes * 60 / 300)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) // 8
    fig, axes = plt.subplots(rows, 2, figsize=(16, 3.2 * rows), squeeze=False)
    drawn = 0
    for panel in panels:
        ax = axes[panel["gridPos"]["y"] // 8][panel["gridPos"]["x"] // 12]
        ax.set_title(panel["title"], fontsize=9)
        for target in panel["targets"]:
            expr = target["expr"].replace("$set", set_regex).replace("$__rate_interval", f"{int(step * 4)}s")
            try:
                series = query_range(prometheus, expr, start, end, step)
            except RuntimeError as exc:
                raise SystemExit(f"panel {panel['title']!r}: Prometheus refused {expr!r}: {exc}") from exc
            for s in series:
                points = [(float(t) - end, float(v)) for t, v in s["values"] if math.isfinite(float(v))]
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot([x / 60 for x in xs], ys, label=legend(target.get("legendFormat", ""), s["metric"]))
                    drawn += 1
        ax.set_xlabel(f"minutes ({panel['fieldConfig']['defaults'].get('unit', '')})", fontsize=7)
        ax.tick_params(labelsize=7)
        if ax.lines:
            ax.legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prometheus", required=True, help="Prometheus base URL")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--set", default=".*", help="regex for the dashboard's $set variable")
    parser.add_argument("--out", type=Path, default=Path("dashboard.png"))
    args = parser.parse_args()
    drawn = render(args.prometheus.rstrip("/"), args.minutes, args.set, args.out)
    print(f"{args.out}: {drawn} series")
    if not drawn:
        sys.exit("no series: is Prometheus scraping a relay?")


if __name__ == "__main__":
    main()
