"""The output plugin builds with the command its Makefile header documents (``make PG_CONFIG=...``),
on Debian's PostgreSQL 15, which was built with LLVM: PGXS then also makes the JIT bitcode of every
object, the two compiled from ../capture included (it used to stop at "No rule to make target
'capture_encode.bc'"; scripts/install.sh passes with_llvm=no and did not notice)."""

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PG_CONFIG = "/usr/lib/postgresql/15/bin/pg_config"


def test_decoder_builds_as_its_makefile_says(tmp_path):
    for part in ("decoder", "capture"):
        shutil.copytree(REPO / "sql" / part, tmp_path / "sql" / part,
                        ignore=shutil.ignore_patterns("*.o", "*.so", "*.bc"))
    built = subprocess.run(["make", f"PG_CONFIG={PG_CONFIG}"], cwd=tmp_path / "sql" / "decoder",
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    assert (tmp_path / "sql" / "decoder" / "pgshovel2_decoder.so").exists()
    llvm = subprocess.run([PG_CONFIG, "--configure"], capture_output=True, text=True).stdout
    if "--with-llvm" in llvm:
        assert {p.name for p in (tmp_path / "sql" / "decoder").glob("capture_*.bc")} == {
            "capture_encode.bc", "capture_encode_row.bc"}
