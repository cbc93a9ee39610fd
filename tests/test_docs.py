"""The documents hold together: the README is short, CI runs the README's test command,
every link between README.md and docs/ leads to a file and a heading that exist, and
the documents cite only what a reader of this repository can open."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCUMENTS = [README, *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```$", re.S | re.M)


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", text, flags=re.S | re.M)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as -."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            base, n = slug(m.group(1)), 1
            name = base
            while name in found:
                name, n = f"{base}-{n}", n + 1
            found.add(name)
    return found


def test_the_readme_is_read_in_five_minutes():
    assert len(README.read_text().splitlines()) <= 200


def test_ci_runs_the_readme_test_command():
    """.ci/run's commands are the README's test block, line for line."""
    (block,) = [b for b in sh_blocks(README.read_text()) if "pytest" in b]
    script = (REPO / ".ci" / "run").read_text().splitlines()
    commands = [line for line in script
                if line and not line.startswith(("#", "set ", "cd "))]
    assert commands == block.splitlines()


def test_every_link_leads_to_a_file_and_heading_that_exist():
    broken = []
    for doc in DOCUMENTS:
        for target in LINK.findall(FENCE.sub("", doc.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # another site
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_documents_cite_only_what_is_in_the_repository():
    """No file outside the repository (the design notes); a document that names a seed
    links to concepts.md, which says what each seed requires."""
    for doc in DOCUMENTS:
        text = doc.read_text()
        assert "DESIGN.md" not in text, doc.name
        if re.search(r"\bseeds? 00\d", text) and doc.name not in ("concepts.md",
                                                                   "glossary.md"):
            assert "concepts.md" in text, f"{doc.name} names a seed without concepts.md"
