"""Generate the reference pages from the code, so they cannot drift from it.

* ``docs/reference/cli.md`` from the typer application (every command, argument and option);
* ``docs/reference/config.md`` from the pydantic models of ``indexplug.toml``;
* ``docs/reference/ops.md`` from the ``invoke`` ops and their argument/result models.

``python docs/gen_reference.py`` rewrites them; ``--check`` fails (exit 1) when a committed page
differs from what the code generates, which is how CI keeps them current.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

HERE = Path(__file__).resolve().parent
REF = HERE / "reference"


def _cli() -> str:
    from indexplug.cli.app import PIPE_CLOSED, app
    from indexplug.outcomes import EXIT_CODES

    root = typer.main.get_command(app)
    lines = [
        "# CLI reference",
        "",
        "Generated from the command line itself by `docs/gen_reference.py`.",
        "",
        "## Exit codes",
        "",
        "| exit | meaning |",
        "|---|---|",
    ]
    by_code: dict[int, list[str]] = {}
    for name, code in EXIT_CODES.items():
        by_code.setdefault(code, []).append(f"`{name}`")
    for code, names in sorted(by_code.items()):
        usage = ", or a usage error (one `error:` line)" if "`BAD_REQUEST`" in names else ""
        lines.append(f"| {code} | {', '.join(names)}{usage} |")
    lines += [
        "| 130 | interrupted |",
        f"| {PIPE_CLOSED} | the reader of the output went away (`\\| head -1`) |",
        "",
    ]

    def walk(cmd: Any, path: list[str]) -> None:
        # typer may carry its own copy of click: a group is whatever has subcommands
        commands = getattr(cmd, "commands", None)
        if isinstance(commands, dict):
            for name in sorted(commands):
                walk(commands[name], [*path, name])
            return
        lines.append(f"## `{' '.join(path)}`")
        lines.append("")
        if cmd.help:
            lines.append(cmd.help.strip().split("\n\n")[0])
            lines.append("")
        lines.append("| parameter | kind | default | help |")
        lines.append("|---|---|---|---|")
        for p in cmd.params:
            if p.name == "help":
                continue
            if getattr(p, "param_type_name", "") == "option":
                name = ", ".join(f"`{o}`" for o in p.opts)
                kind = "flag" if p.is_flag else "option"
                helptext = (p.help or "").replace("|", "\\|")
                default = "" if p.default in (None, False, ()) else f"`{p.default}`"
            else:
                name = f"`{(p.name or '').upper()}`"
                kind = "argument"
                helptext = ""
                default = ""
            lines.append(f"| {name} | {kind} | {default} | {helptext} |")
        lines.append("")

    walk(root, ["indexplug"])
    return "\n".join(lines)


def _model_table(model: Any) -> list[str]:
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    schema = model.model_json_schema()
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        prop = schema.get("properties", {}).get(name, {})
        kind = prop.get("type") or " \\| ".join(
            str(x.get("type", x.get("$ref", "?")).split("/")[-1]) for x in prop.get("anyOf", [])
        )
        if "enum" in prop:
            kind = " \\| ".join(json.dumps(v) for v in prop["enum"])
        default = field.get_default(call_default_factory=True)
        shown = "" if default in (None, {}, []) else f"`{json.dumps(default, default=str)}`"
        rows.append(f"| `{name}` | {kind} | {shown} | {field.description or ''} |")
    return rows


def _config() -> str:
    from indexplug.config import (
        AuditSettings,
        Defaults,
        HistorySettings,
        IndexConfig,
        ServerSettings,
    )

    lines = [
        "# Configuration reference",
        "",
        "Generated from the pydantic models in `indexplug.config` by `docs/gen_reference.py`.",
        "Unknown keys are errors.  See [configuration](../configuration.md) for a guide.",
        "",
        "## `[defaults]`",
        "",
        *_model_table(Defaults),
        "",
        "## `[indexes.NAME]`",
        "",
        *_model_table(IndexConfig),
        "",
        "## `[server]`",
        "",
        *_model_table(ServerSettings),
        "",
        "## `[audit]`",
        "",
        *_model_table(AuditSettings),
        "",
        "## `[history]`",
        "",
        *_model_table(HistorySettings),
        "",
    ]
    return "\n".join(lines)


def _schema_type(prop: dict[str, Any]) -> str:
    """A short, readable type for one JSON Schema property ("integer", "string \\| null")."""
    if "enum" in prop:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    if "$ref" in prop:
        return f"`{prop['$ref'].split('/')[-1]}` (below)"
    if "anyOf" in prop:
        return " \\| ".join(_schema_type(x) for x in prop["anyOf"])
    kind = str(prop.get("type", "any"))
    if kind == "array" and "items" in prop:
        return f"array of {_schema_type(prop['items'])}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"object of {_schema_type(prop['additionalProperties'])}"
    return kind


_LIMITS = (
    ("minimum", "≥ {}"),
    ("exclusiveMinimum", "> {}"),
    ("maximum", "≤ {}"),
    ("exclusiveMaximum", "< {}"),
    ("minLength", "length ≥ {}"),
    ("maxLength", "length ≤ {}"),
    ("minItems", "items ≥ {}"),
    ("maxItems", "items ≤ {}"),
    ("pattern", "matches `{}`"),
)


def _schema_limits(prop: dict[str, Any]) -> str:
    """The constraints of one property and of its non-null alternatives."""
    found: list[str] = []
    for alt in [prop, *prop.get("anyOf", []), prop.get("items", {})]:
        for key, fmt in _LIMITS:
            if key in alt:
                text = fmt.format(str(alt[key]).replace("|", "\\|"))
                if text not in found:
                    found.append(text)
    return ", ".join(found)


def _schema_table(schema: dict[str, Any]) -> list[str]:
    """One row per property: name, type, required or default, constraints, description."""
    required = set(schema.get("required", []))
    rows = ["| argument | type | default | limits | description |", "|---|---|---|---|---|"]
    for name, prop in sorted(schema.get("properties", {}).items()):
        if name in required:
            default = "required"
        elif "default" in prop and prop["default"] not in (None, {}, []):
            default = f"`{json.dumps(prop['default'])}`"
        else:
            default = ""
        description = str(prop.get("description", "")).replace("|", "\\|").replace("\n", " ")
        rows.append(
            f"| `{name}` | {_schema_type(prop)} | {default} | {_schema_limits(prop)} "
            f"| {description} |"
        )
    return rows


def _ops() -> str:
    from indexplug.ops import op_catalogue

    lines = [
        "# Ops reference",
        "",
        "Generated from the `invoke` op models by `docs/gen_reference.py`.  The full JSON Schemas",
        "are what `indexplug invoke ops` and the MCP server publish; this page shows the same",
        "arguments as tables.",
        "",
    ]
    for op in op_catalogue():
        schema = op["arguments"]
        lines.append(f"## `{op['name']}`")
        lines.append("")
        lines.append(op.get("description", ""))
        if op.get("sensitive"):
            lines.append("")
            lines.append("*Sensitive: runs only where the configuration allows removal.*")
        lines.append("")
        if not schema.get("properties"):
            lines.append("No arguments.")
            lines.append("")
            continue
        lines.append("Arguments:")
        lines.append("")
        lines.extend(_schema_table(schema))
        lines.append("")
        for name, sub in sorted(schema.get("$defs", {}).items()):
            lines.append(f"### {name}")
            lines.append("")
            if sub.get("description"):
                lines.append(str(sub["description"]))
                lines.append("")
            lines.extend(_schema_table(sub) if sub.get("properties") else [f"{_schema_type(sub)}"])
            lines.append("")
    return "\n".join(lines)


PAGES = {"cli.md": _cli, "config.md": _config, "ops.md": _ops}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    REF.mkdir(exist_ok=True)
    stale = []
    for name, make in PAGES.items():
        text = make().rstrip() + "\n"
        path = REF / name
        if check:
            if not path.exists() or path.read_text("utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, "utf-8")
    if stale:
        print(f"stale reference pages (run python docs/gen_reference.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
