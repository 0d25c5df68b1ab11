"""The README is for users: short, every command shown, and every link it (or a page of docs/) gives
leads to a file and a heading that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.cli import COMMANDS

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
MAX_README_LINES = 200
# [text](target) with a relative target: no scheme, not a bare anchor.
LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:)([^)#\s]+)(?:#([^)\s]+))?\)")


def heading_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors_of(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # no headings in code
    return {heading_anchor(m.group(1)) for m in re.finditer(r"^#+\s+(.+)$", text, flags=re.M)}


def test_the_readme_is_at_most_200_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_readme_shows_every_command(command):
    assert re.search(rf"\bfleetbench {command}\b", README.read_text(encoding="utf-8")), (
        f"README.md never shows `fleetbench {command}`"
    )


def test_the_readme_links_to_docs():
    targets = {target for target, _ in LINK.findall(README.read_text(encoding="utf-8"))}
    assert {t for t in targets if t.startswith("docs/")}, "README.md links to no page of docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page):
    broken = []
    for target, anchor in LINK.findall(page.read_text(encoding="utf-8")):
        path = (page.parent / target).resolve()
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors_of(path):
            broken.append(f"{target}#{anchor}: no such heading")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_heading_anchors_are_githubs():
    assert (
        heading_anchor("A host that stops answering; a run that stops short")
        == "a-host-that-stops-answering-a-run-that-stops-short"
    )
    assert heading_anchor("`diff RUN --across-hosts`") == "diff-run---across-hosts"
