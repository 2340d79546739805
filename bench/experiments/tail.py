"""``pgshovel tail`` time and memory: a set over one table of many column types
(odd column names included) gets ``changes`` changes in transactions of
``per_txn`` rows, relayed; then ``pgshovel tail --from-beginning --format F``
reads them all to /dev/null under ``/usr/bin/time -v`` (wall time, max RSS).

    .venv/bin/python -m bench.experiments.tail [--changes 200000] [--per-txn 1000] [--encoding avro] [--format pretty]
    .venv/bin/python -m bench.experiments.tail --set NAME [--format pretty]     # time the tail of a kept set again

The tail runs with this environment, so PYTHONPATH=<another checkout> times
that checkout's ``pgshovel tail`` on the same set.
"""

import argparse
import json
import re
import subprocess

from bench.peer.common import BIN, DSN, ENV, create_set, drop_set, prepare, relay_running, unique
from pgshovel2.backends.trigger import wait_caught_up

COLUMNS = ('id int PRIMARY KEY, "person.name/sur" text, flag bool, r real, d float8, n numeric(12,4), '
           "nu numeric, ts timestamp, tz timestamptz, dt date, b bytea, j jsonb, ia int[], u uuid")
ROW = ("g, 'name ' || g, mod(g, 2) = 0, (g * 1.1)::real, g / 7.0, g / 3.0, g::numeric / 9, "
       "'2024-02-29 12:34:56.789012'::timestamp + g * interval '1 s', now(), '2024-02-29'::date + mod(g, 1000), "
       "'\\x00ff'::bytea, jsonb_build_object('g', g), ARRAY[g, NULL, 3], gen_random_uuid()")


def time_v(argv: list[str]) -> dict:
    """Run argv (stdout to /dev/null) under /usr/bin/time -v: {"wall_s", "cpu_s", "max_rss_mib"}.

    cpu_s: user + system CPU seconds (steadier than wall time on a shared machine). Raises on failure.
    """
    proc = subprocess.run(["/usr/bin/time", "-v", *argv], env=ENV, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", proc.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", proc.stderr))
    h, m, s = wall.groups()
    return {"wall_s": round(int(h or 0) * 3600 + int(m) * 60 + float(s), 1), "cpu_s": round(cpu, 1),
            "max_rss_mib": round(int(rss.group(1)) / 1024, 1)}


def time_tail(name: str, fmt: str) -> dict:
    """{"wall_s", "max_rss_mib"} of ``pgshovel tail NAME --from-beginning --format fmt`` to /dev/null."""
    return time_v([str(BIN / "pgshovel"), "tail", name, "--from-beginning", "--format", fmt])


def measure(changes: int, per_txn: int, encoding: str, fmt: str, keep: bool = False) -> dict:
    """Relay the workload, then time the tail; returns the numbers (the set is dropped unless keep)."""
    cur = prepare()
    name = unique("tail")
    queue = create_set(cur, name, encoding, COLUMNS)
    with relay_running(name):
        for start in range(1, changes + 1, per_txn):
            end = min(changes, start + per_txn - 1)
            cur.execute(f"INSERT INTO bench_relay.{name} SELECT {ROW} FROM generate_series(%s, %s) g",
                        (start, end))
        wait_caught_up(DSN, queue, "pgshovel2_relay", timeout=3600)
    result = {"changes": changes, "per_txn": per_txn, "encoding": encoding, "format": fmt, "set": name,
              **time_tail(name, fmt)}
    if not keep:
        drop_set(cur, name)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--per-txn", type=int, default=1000)
    parser.add_argument("--encoding", choices=["avro", "json"], default="avro")
    parser.add_argument("--format", choices=["pretty", "json"], default="pretty")
    parser.add_argument("--keep", action="store_true", help="keep the set (to time the tail again)")
    parser.add_argument("--set", help="only time the tail of this kept set")
    args = parser.parse_args()
    if args.set:
        print(json.dumps({"set": args.set, "format": args.format, **time_tail(args.set, args.format)}))
        return
    print(json.dumps(measure(args.changes, args.per_txn, args.encoding, args.format, args.keep)))


if __name__ == "__main__":
    main()
