"""Every relative link in README.md and docs/*.md points to a file that exists, and an anchor
(``page.md#section``, ``#section``) to a heading of that page.

Anchors are GitHub's: the heading's text in lower case, punctuation dropped (letters, digits,
spaces, ``-`` and ``_`` kept), spaces turned into ``-``; a repeated heading gets ``-1``, ``-2``...
Fenced code blocks, inline code and HTML comments are not markdown, so neither their "links" nor
their ``#`` lines count. Links to other sites (``https://...``) are not checked: the test stays
offline.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:[ \t]+\"[^\"]*\")?\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, ...


def _markdown_only(text: str) -> str:
    """The page without fenced code, HTML comments and inline code."""
    text = FENCE.sub("", text)
    text = COMMENT.sub("", text)
    return INLINE_CODE.sub("", text)


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = COMMENT.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    found: set[str] = set()
    seen: dict[str, int] = {}
    for match in HEADING.finditer(text):
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(_markdown_only(page.read_text(encoding="utf-8")))]


def test_the_pages_exist() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert "README.md" in names
    assert len(names) > 1, "docs/*.md missing"


def test_slug_follows_github() -> None:
    assert slug("Worked example: TLS + token authentication") == "worked-example-tls--token-authentication"
    assert slug("Prometheus `/metrics`") == "prometheus-metrics"
    assert slug("Behind Apache Pulsar's proxy") == "behind-apache-pulsars-proxy"
    assert slug("Backlog quota: producer_exception / producer_request_hold") == (
        "backlog-quota-producer_exception--producer_request_hold")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        if EXTERNAL.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = ROOT / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for t in links(readme) if not EXTERNAL.match(t)}
    unlinked = [p.relative_to(ROOT).as_posix() for p in PAGES if p != readme and p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link to: {unlinked}"
