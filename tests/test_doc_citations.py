"""Every design or protocol document the code cites ships with the repository: comments and
docstrings cite ``docs/…md`` pages that exist (and the section they name, when they name one in
quotes right after the page), never a specification outside the checkout or a README section that
moved into the docs."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("benchmark", "methods", "metrics", "reports", "slurm", "tests")

#: citations of documents that do not ship with the repository (the former spec files, the
#: README's sections before they moved into docs/)
OUTSIDE = re.compile(r"shared/spec|\.\./shared|spec/\w+\.md|(?<![\w/])(?:architecture|methods|metrics|protocol)\.md"
                     r"|README,? [\"'](?!s\b)")
CITED_PAGE = re.compile(r"docs/[\w./-]+\.md(?:,\s+\"([^\"]+)\")?")


def _sources() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", *PACKAGES], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / f for f in listed.stdout.split() if f.endswith((".py", ".toml"))]


def _headings(page: Path) -> set[str]:
    return {line.lstrip("#").strip() for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")}


def test_no_comment_cites_a_document_outside_the_repository():
    this = Path(__file__).resolve()
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in _sources() if p.resolve() != this
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if OUTSIDE.search(line)]
    assert found == [], "cite the docs page that holds it (docs/design, docs/protocol, docs/guides):\n" + "\n".join(found)


def test_every_cited_docs_page_and_section_exists():
    cited = 0
    broken = []
    for path in _sources():
        text = " ".join(path.read_text(encoding="utf-8").split())  # a citation may wrap over lines
        for match in CITED_PAGE.finditer(text):
            cited += 1
            page = REPO / match.group(0).split(",")[0]
            if not page.is_file():
                broken.append(f"{path.relative_to(REPO)}: {match.group(0)} (no such page)")
            elif match.group(1) and not any(h.startswith(match.group(1)) for h in _headings(page)):
                broken.append(f"{path.relative_to(REPO)}: {match.group(0)} (no such section)")
    assert cited >= 50 and broken == [], broken
