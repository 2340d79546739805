"""Sphinx configuration of the docs site: ``make docs`` builds docs/_build/html with warnings as
errors, then checks the pages' cross references (scripts/docs_check.py)."""

from pathlib import Path

project = "pgshovel2"
author = "pgshovel2 authors"
copyright = "pgshovel2 authors"
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = "pgshovel2"
highlight_language = "none"
nitpicky = True

# Pages listed in index.rst's toctree only when present (the generated config reference).
OPTIONAL_PAGES = ("config",)


def _add_optional_pages(app, docname: str, source: list[str]) -> None:
    """Append the optional pages that exist to the root document's toctree (its last lines)."""
    if docname != root_doc:
        return
    for page in OPTIONAL_PAGES:
        if (Path(app.srcdir) / f"{page}.rst").exists():
            source[0] = source[0].rstrip("\n") + f"\n   {page}\n"


def setup(app) -> dict:
    """Sphinx's hook: registers the optional pages of the toctree."""
    app.connect("source-read", _add_optional_pages)
    return {"parallel_read_safe": True}
