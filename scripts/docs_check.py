"""The docs' internal link check (``make docs`` runs it after Sphinx): every repository path a page
names exists, every section a page names by title ('docs/wire.rst, "DDL on captured tables"', or
'see "Dropping a set cleanly"' within the page) exists, and no hyperlink leaves the repository by a
relative path. The pages write their cross references as text so that they read the same on
GitHub, in the repository and on the site; Sphinx checks its own references itself (-n -W).
External URLs are not fetched (this check must run without the internet).

Usage: ``python scripts/docs_check.py`` (exit 1 and one line per broken reference)."""

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = ["README.rst", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.rst")),
         *sorted(str(p.relative_to(REPO)) for p in (REPO / "sql").glob("*/README.rst"))]
TOP = r"(?:pgshovel2|tests|scripts|sql|monitoring|configs|docker|bench|spark|native|docs|\.ci)"
# A path in the repository: a top folder, then names; not part of a longer path or URL.
PATH = re.compile(rf"(?<![\w/.:-])({TOP}/[\w.*/-]*[\w*/]|README\.rst|Makefile|setup\.py|docker-compose\.yml)(?![\w<-])")
# 'docs/x.rst, "Title"' or 'docs/x.rst: "Title"' (a line break may fall anywhere in between).
SECTION_IN = re.compile(r"((?:docs/\w+|(?:sql/\w+/)?README)\.rst)(?:``)?[,:]\s+\"([^\"]+)\"")
# 'see "Title"' (this page) or 'see "Title" in docs/x.rst'.
SECTION_SEE = re.compile(r"\bsee\s+\"([^\"]+)\"(?:\s+in\s+(?:``)?((?:docs/\w+|(?:sql/\w+/)?README)\.rst))?")
LINK = re.compile(r"`[^`<]*<([^>`]+)>`__?")
UNDERLINE = re.compile(r"^([=\-~^\"'`#*+.:_])\1{2,}\s*$")
# Paths the pages name that are made at run time, not stored in the repository.
GENERATED = {"sql/capture/pgshovel2--*.sql"}


def sections(page: str, root: Path = REPO) -> set[str]:
    """The titles a page can be referred to by, without inline markup: its section titles (a line
    over a punctuation underline) and its top-level definition list terms (wire.rst's entries)."""
    lines = (root / page).read_text(encoding="utf-8").splitlines() + [""]
    titles = set()
    for line, below in zip(lines, lines[1:], strict=False):
        titled = UNDERLINE.match(below) and len(below.rstrip()) >= len(line.rstrip())
        term = line[:1].isalnum() and below[:1] == " " and below.strip()
        if line.strip() and (titled or term):
            titles.add(line.strip().replace("``", ""))
    return titles


def _has_section(page: str, title: str, root: Path) -> bool:
    """Whether the page has the section, named by its whole title or the title's part before a
    colon or a parenthesis ('Messages Kafka cannot take' for 'Messages Kafka cannot take: oversized')."""
    return any(found == title or found.startswith(title) and found[len(title):len(title) + 2] in (": ", " (")
               for found in sections(page, root))


def _path_exists(path: str, root: Path) -> bool:
    path = path.split("::")[0].rstrip("/.")
    if path in GENERATED:
        return True
    return any(root.glob(path)) if "*" in path else (root / path).exists()


def problems(page: str, root: Path = REPO) -> list[str]:
    """The broken references of one page (a path under root), as 'page: what' lines."""
    text = (root / page).read_text(encoding="utf-8")
    flat = re.sub(r"\s+", " ", text)
    found = [f"{page}: names {p}, which is not in the repository"
             for p in sorted(set(PATH.findall(text))) if not _path_exists(p, root)]
    named = SECTION_IN.findall(flat) + [(where or page, title) for title, where in SECTION_SEE.findall(flat)]
    for target, title in named:
        if (root / target).exists() and not _has_section(target, title.replace("``", ""), root):
            found.append(f'{page}: names section "{title}" of {target}, which has no such section')
    for url in LINK.findall(flat):
        if not re.match(r"[a-z]+://|mailto:", url) and not _path_exists(url.removeprefix("./"), root):
            found.append(f"{page}: links {url}, which is not in the repository")
    return found


def main() -> int:
    """Check every page; print each broken reference; 0 when there is none."""
    found = [line for page in PAGES for line in problems(page)]
    print("\n".join(found) or f"docs_check: {len(PAGES)} pages, every internal reference resolves")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
