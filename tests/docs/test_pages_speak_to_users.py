"""docs/ speaks to users: no issue numbers, and a date only beside a measured figure it dates.

A reader wants the current figure, its command and its machine, not the order in which the work
was done.  So a page names no issue of this project ("issue 27", "#12"; another project's
``owner/repo#123`` is a link to their tracker and stays), and a work date ("5 December 2026",
"2026-12-05") appears only where it dates a measurement: in a table row, or in a paragraph or
list item that states a measured figure (a number with its unit), introduces the table of
figures that follows it, or gives the command and the machine that measured one (a numbered
run of the benchmarks page).  Headings never carry dates.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(DOCS.rglob("*.md"))

ISSUE = re.compile(r"(?<![\w/-])(?:[Ii]ssues?\s+(?:\d+|#\d+)|#\d+\b)")
"""``issue 27``, ``issues 2 and 8``, ``#27``; not ``chroma-core/chroma#4212`` (another tracker)."""
MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
MONTHS = MONTHS + "|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
DATE = re.compile(
    rf"\b\d{{1,2}}\s+(?:{MONTHS})\b|\b(?:{MONTHS})\s+\d{{1,2}}\b|\b20\d\d-\d\d-\d\d\b"
)
FIGURE = re.compile(
    r"\d[\d,.]*\s*(?:ms|s|µs|min|passages/s|tokens/s|queries/s|MiB|GiB|MB|GB|%|x)(?![\w])"
    r"|nDCG@10[^.\n]*\d\.\d"
)
"""A measured figure: a number with its unit, or an nDCG@10 value."""
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
RUN = re.compile(r"(?:\d+\.|- run \d+:)\s+`[^`]+`")
"""A numbered run of a benchmarks page: its command, then when and where it ran."""


def blocks(text: str) -> list[tuple[int, str]]:
    """The page as (first line, text) blocks: each heading, table row and list item alone, each
    paragraph whole (a sentence may wrap); fenced code is left out."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    out: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        new_block = (
            not s
            or s.startswith(("#", "|", "- ", "* ", "<!--"))
            or re.match(r"\d+\.\s", s) is not None
        )
        if new_block and current:
            out.append((start, " ".join(current)))
            current = []
        if not s:
            continue
        if s.startswith(("#", "|")):
            out.append((n, s))
            continue
        if not current:
            start = n
        current.append(s)
    if current:
        out.append((start, " ".join(current)))
    return out


def dates_out_of_place(text: str) -> list[tuple[int, str]]:
    bad = []
    found = blocks(text)
    for i, (line, block) in enumerate(found):
        if not DATE.search(block):
            continue
        introduces_table = i + 1 < len(found) and found[i + 1][1].startswith("|")
        if block.startswith("|"):
            continue
        if block.startswith("#"):
            bad.append((line, block))
            continue
        measured = FIGURE.search(block) is not None
        provenance = RUN.match(block) is not None or (
            "`" in block and re.search(r"\bcores?\b", block) is not None
        )
        if not (measured or provenance or introduces_table):
            bad.append((line, block))
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_no_issue_numbers(page: Path) -> None:
    text = FENCE.sub("", page.read_text("utf-8"))
    found = [m.group(0) for m in ISSUE.finditer(text)]
    assert not found, f"{page.relative_to(DOCS)} names issues: {found}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_dates_only_beside_the_figures_they_date(page: Path) -> None:
    bad = dates_out_of_place(page.read_text("utf-8"))
    assert not bad, (
        f"{page.relative_to(DOCS)}: a date with no measured figure beside it:\n"
        + "\n".join(f"  line {n}: {b[:160]}" for n, b in bad)
    )


def test_the_checks_have_teeth() -> None:
    """What the page rules refuse and what they let through, on made-up text."""
    assert ISSUE.search("See issue 27 for the plan.")
    assert ISSUE.search("targets (issues 2 and 8)")
    assert ISSUE.search("fixed in #12")
    assert not ISSUE.search("chroma-core/chroma#4212 upstream")
    assert dates_out_of_place("## Kernels (measured 5 December 2026)\n")
    assert dates_out_of_place("**3 December 2026, evening.**  Passages are now built once.\n")
    assert dates_out_of_place("Since 6 December each backend has its own threads.\n")
    assert dates_out_of_place("Before 6 Dec one pool was shared.\n")
    assert not dates_out_of_place("On 5 December 2026, a search took 1.68 ms (load 1.1).\n")
    assert not dates_out_of_place("| run | 2026-12-03 | 4.2 |\n")
    assert not dates_out_of_place("Three runs on 2026-12-02, median per search:\n\n| a | b |\n")
    assert dates_out_of_place("Three runs on 2026-12-02, median per search.\n\nThen more.\n")
    assert not dates_out_of_place(
        "- run 1: `python -m indexplug_bench run` (2026-12-03 03:51; 2 cores)\n"
    )
