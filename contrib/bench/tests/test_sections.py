"""``report`` keeps every section other commands wrote on the benchmarks page."""

from __future__ import annotations

from pathlib import Path

from indexplug_bench.sections import kept_sections, replace_section


def test_every_delimited_section_is_kept_in_order(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(
        "# Benchmarks\n\nrows\n\n"
        "<!-- cli-startup:begin -->\nstart-up\n<!-- cli-startup:end -->\n\ntext between\n\n"
        "<!-- embed-paths:begin -->\npaths\n<!-- embed-paths:end -->\n"
        "<!-- colbert-kernels:begin -->\nkernels\n<!-- unclosed:begin -->\n"
        "<!-- colbert-kernels:end -->\n<!-- dangling:begin -->\nno end\n",
        "utf-8",
    )
    assert kept_sections(page) == [
        "<!-- cli-startup:begin -->\nstart-up\n<!-- cli-startup:end -->",
        "<!-- embed-paths:begin -->\npaths\n<!-- embed-paths:end -->",
        "<!-- colbert-kernels:begin -->\nkernels\n<!-- unclosed:begin -->\n"
        "<!-- colbert-kernels:end -->",
    ]
    assert kept_sections(tmp_path / "absent.md") == []


def test_a_section_is_replaced_in_place_or_appended(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("top\n<!-- copy:begin -->\nold\n<!-- copy:end -->\nbottom\n", "utf-8")
    replace_section(page, "copy", "new figures")
    assert (
        page.read_text("utf-8")
        == "top\n<!-- copy:begin -->\nnew figures\n<!-- copy:end -->\nbottom\n"
    )
    replace_section(page, "mcp-concurrency", "\nconcurrent\n")
    text = page.read_text("utf-8")
    assert text.endswith(
        "<!-- mcp-concurrency:begin -->\nconcurrent\n<!-- mcp-concurrency:end -->\n"
    )
    assert text.count("new figures") == 1


def test_report_keeps_every_other_commands_section(tmp_path: Path) -> None:
    from indexplug_bench.report import merge, render

    page = tmp_path / "benchmarks.md"
    for name in ("cli-startup", "embed-paths", "colbert-kernels"):
        replace_section(page, name, f"## {name}\n\nmeasured by its own command")
    before = kept_sections(page)
    page.write_text("# Benchmarks\n\nstale tables\n\n" + "\n\n".join(before) + "\n", "utf-8")
    machine = {"cores": 2, "memory_gib": 1, "cpu": "x", "python": "3.11", "platform": "x"}
    results = {"machine": machine, "command": "run", "quality": [], "scale": [], "skipped": {}}
    render(merge([results]), page, tmp_path / "img")
    assert "stale tables" not in page.read_text("utf-8")
    assert kept_sections(page) == before and len(before) == 3
