"""Runs the steps of docs/runbooks.rst verbatim: every ``.. code-block:: bash`` whose
first line is ``# step: RUNBOOK/STEP`` is one step, run with ``bash -euo pipefail``."""

import os
import re
import subprocess
from pathlib import Path

from tests.helpers import BIN

DOC = Path(__file__).resolve().parent.parent / "docs" / "runbooks.rst"
# The block's lines: those indented deeper than its directive (a block inside a list item is
# followed by the item's own paragraphs, indented like the directive).
BLOCK = re.compile(r"^([ \t]*)\.\. code-block:: bash\n\n((?:\1[ \t]+.*\n|\n)+)", re.MULTILINE)


def steps() -> dict[str, str]:
    """step name -> its shell text, from the doc."""
    out = {}
    for match in BLOCK.finditer(DOC.read_text(encoding="utf-8")):
        lines = [ln.strip() for ln in match.group(2).strip("\n").splitlines()]
        if lines and lines[0].startswith("# step: "):
            out[lines[0][len("# step: "):]] = "\n".join(ln for ln in lines[1:] if ln)
    return out


def run_step(name: str, env: dict, timeout: float = 600) -> str:
    """Run one step; returns its stdout; fails with its output when a command fails."""
    script = steps()[name]
    env = {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', os.environ['PATH'])}"}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, \
        f"runbook step {name} failed ({proc.returncode}):\n{script}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout
