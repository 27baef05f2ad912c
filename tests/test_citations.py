"""What the code cites is in the repository: docstrings and comments name documents of this tree
(docs/, README.md), and a section of docs/kafka-rules.md they name exists (its numbers are stable,
so a citation stays true)."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("tiering_core", "plugins", "spark_apps", "dags", "scripts", "bench", "tests")
#: A document named by its file, or by its name in capitals and a section number ("TIER_RULES 4").
DOCUMENT = re.compile(r"(?<![\w/.-])([\w./-]+\.md)\b|\b([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+) (?:sections? )?\d")
RULES = "docs/kafka-rules.md"
RULES_SECTIONS = re.compile(re.escape(RULES) + r",? sections? (\d+(?:(?:, | and )\d+)*)")
#: Comments and strings (an f-string's text is its own token from Python 3.12 on).
PROSE = {tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}


def prose(path: Path) -> list[tuple[int, str]]:
    """The comments and string literals of a Python file (docstrings among them), with their lines."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return [(t.start[0], t.string) for t in tokens if t.type in PROSE]


def code_files() -> list[Path]:
    here = Path(__file__).resolve()  # its own examples cite documents that are not there
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts and p != here)


def cited(text: str) -> list[str]:
    return [file or name for file, name in DOCUMENT.findall(text)]


def resolves(document: str, source: Path) -> bool:
    return document.endswith(".md") and any((base / document).is_file() for base in (ROOT, source.parent))


def test_every_cited_document_is_a_file_of_the_repository() -> None:
    outside = [
        f"{path.relative_to(ROOT)}:{line}: {document}"
        for path in code_files()
        for line, text in prose(path)
        for document in cited(text)
        if not resolves(document, path)
    ]
    assert outside == []


def test_every_cited_section_of_the_kafka_rules_exists() -> None:
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", (ROOT / RULES).read_text(), flags=re.MULTILINE)}
    missing = [
        f"{path.relative_to(ROOT)}:{line}: section {n}"
        for path in code_files()
        for line, text in prose(path)
        for numbers in RULES_SECTIONS.findall(" ".join(text.split()))
        for n in map(int, re.findall(r"\d+", numbers))
        if n not in sections
    ]
    assert missing == []


def test_every_relative_link_of_the_docs_is_a_file_of_the_repository() -> None:
    """README.md and docs/*.md link files and images (docs/images: the screenshots) by relative path."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in pages
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", page.read_text())
        if "://" not in target and not target.startswith("mailto:") and not (page.parent / target).exists()
    ]
    assert broken == []


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings as GitHub makes them (code blocks left out)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    titles = re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}


def test_every_anchor_a_page_links_is_a_heading_of_its_target() -> None:
    """A link to a section (``page.md#section``, ``#section``) names a heading that exists."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = [
        f"{page.relative_to(ROOT)}: {target}#{anchor}"
        for page in pages
        for target, anchor in re.findall(r"\]\(([^)\s#]*)#([^)\s]+)\)", page.read_text())
        if "://" not in target and anchor not in anchors(page.parent / target if target else page)
    ]
    assert broken == []


def test_the_citation_patterns_find_what_they_are_for() -> None:
    """The patterns above catch both forms a citation of a missing document takes."""
    assert cited("the rules (KAFKA_SEMANTICS 10.3) and (NOTES.md, section 2)") == ["KAFKA_SEMANTICS", "NOTES.md"]
    assert cited("(docs/kafka-rules.md section 4; docs/architecture.md)") == [
        "docs/kafka-rules.md",
        "docs/architecture.md",
    ]
    assert cited("SERIES_RESOLUTIONS and HOUR_MS, 7; os.O_CREAT, 0o644; LSO 17 > 12") == []
    assert RULES_SECTIONS.findall("docs/kafka-rules.md sections 3, 5, 6 and 10") == ["3, 5, 6 and 10"]
