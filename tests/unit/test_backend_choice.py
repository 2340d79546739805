"""A set's backend is picked in pgshovel2.backends only (#72): no module outside backends/ (and
setrecord.py, which defines the capture types) tests which capture a record has."""

import ast
import pathlib

from pgshovel2.setrecord import PGOUTPUT, SetRecord, SlotCapture, TriggerCapture

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "pgshovel2"
CAPTURES = {"SlotCapture", "TriggerCapture", "Capture"}


def _capture_tests(path: pathlib.Path) -> list[str]:
    """Lines of path that call isinstance(..., <a capture type>)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if any(getattr(k, "id", getattr(k, "attr", None)) in CAPTURES for k in kinds):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def test_no_capture_isinstance_outside_backends():
    outside = [p for p in PACKAGE.rglob("*.py")
               if PACKAGE / "backends" not in p.parents and p != PACKAGE / "setrecord.py"]
    assert len(outside) > 100  # the walk found the package
    assert [line for p in outside for line in _capture_tests(p)] == []


def test_the_check_finds_a_capture_test(tmp_path):
    probe = PACKAGE / "backends" / "lifecycle.py"
    assert _capture_tests(probe)  # the backends' own choices are found: the check above can fail


def test_record_properties_follow_the_capture():
    from pgshovel2.config import SetConfig  # noqa: PLC0415 (only this test builds records)

    base = SetRecord("s", "c", 1, SetConfig.__new__(SetConfig), (), TriggerCapture("q", "t", why="no C"), 0.0)
    assert (base.logical, base.plugin, base.capture.chosen()) == (False, None, "capture c: no C")
    slot = base.replace(capture=SlotCapture("slot_a", PGOUTPUT))
    assert (slot.logical, slot.plugin, slot.capture.chosen()) == (True, PGOUTPUT, "")
