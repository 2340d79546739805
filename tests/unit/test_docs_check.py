"""scripts/docs_check.py, the docs' internal link check of ``make docs``: the repository's pages
pass it, and each kind of broken reference is reported."""

from pathlib import Path

from scripts.docs_check import PAGES, problems

PAGE = """Title
=====

Some section
------------

Rows (details)
    a definition list entry.

See ``docs/wire.rst``, "Some section" and docs/wire.rst, "Rows"; see "Some section".
"""


def _repo(tmp_path: Path, extra: str) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "wire.rst").write_text(PAGE + extra, encoding="utf-8")
    return tmp_path


def test_the_repository_pages_resolve() -> None:
    assert [line for page in PAGES for line in problems(page)] == []


def test_resolving_references_pass(tmp_path: Path) -> None:
    assert problems("docs/wire.rst", _repo(tmp_path, "")) == []


def test_each_broken_reference_is_named(tmp_path: Path) -> None:
    root = _repo(tmp_path, '\nA path ``pgshovel2/nowhere.py``, docs/wire.rst, "No such part", '
                           'see "Elsewhere", docs/gone.rst: "X", `design <../shared/design/WIRE.md>`_.\n')
    assert problems("docs/wire.rst", root) == [
        "docs/wire.rst: names docs/gone.rst, which is not in the repository",
        "docs/wire.rst: names pgshovel2/nowhere.py, which is not in the repository",
        'docs/wire.rst: names section "No such part" of docs/wire.rst, which has no such section',
        'docs/wire.rst: names section "Elsewhere" of docs/wire.rst, which has no such section',
        "docs/wire.rst: links ../shared/design/WIRE.md, which is not in the repository",
    ]
