"""CLI commands for deployments: ``config check``, ``config show``, ``invoke`` and ``serve``.

``invoke`` prints the op's JSON answer and exits with the outcome's code (0 for a result or a
listing, 1 no match, 2 empty, 3-5 failures, 6 over budget, 64 bad request, 77 not allowed).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from indexplug.cli.console import LazyConsole, escape
from indexplug.errors import ConfigError

out = LazyConsole()
err = LazyConsole(stderr=True)
BAD_INPUT = 64
NOT_READY = 5
"""``EXIT_CODES["INDEX_UNAVAILABLE"]``, written out so that starting needs no outcome models (a
test holds the two equal)."""

config_app = typer.Typer(
    name="config",
    help="Check and show indexplug.toml (see docs/configuration.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="indexplug.toml (default: INDEXPLUG_CONFIG, ./, user folder)."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (stable shape).")]


def _fail(message: str, code: int = BAD_INPUT) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def _load(config: Path | None) -> Any:
    from indexplug.config import find_config_file, load_config

    try:
        path = find_config_file(config)
        if path is None:
            raise ConfigError(
                "no indexplug.toml found (looked at --config, INDEXPLUG_CONFIG, "
                "./indexplug.toml and the user config folder)"
            )
        return load_config(path)
    except ConfigError as exc:
        raise _fail(str(exc)) from None


def env_warnings(cfg: Any) -> list[str]:
    """``*_env`` settings naming variables that are not set."""
    found: list[str] = []

    def walk(name: str, settings: dict[str, Any], prefix: str) -> None:
        for key, value in settings.items():
            if isinstance(value, dict):
                walk(name, value, f"{prefix}{key}.")
            elif str(key).endswith("_env") and isinstance(value, str) and value not in os.environ:
                found.append(
                    f"{cfg.path}: [indexes.{name}] key 'settings.{prefix}{key}': "
                    f"environment variable {value} is not set"
                )

    for name, ic in cfg.indexes.items():
        walk(name, ic.settings, "")
    return found


@config_app.command("check")
def config_check(config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Validate a config file and report each index's backend readiness."""
    from indexplug.invocation import Invoker

    cfg = _load(config)
    with Invoker(cfg) as inv:
        rows = inv.readiness()
    warnings = env_warnings(cfg)
    ready = all(r.ready for r in rows)
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "config": str(cfg.path),
                    "valid": True,
                    "ready": ready,
                    "indexes": [r.model_dump(mode="json") for r in rows],
                    "warnings": warnings,
                }
            )
        )
    else:
        from rich.table import Table

        out.print(f"[green]valid[/] {escape(str(cfg.path))}", highlight=False)
        table = Table(title="indexes")
        for col in ("index", "kind", "backend", "ready", "remove"):
            table.add_column(col)
        for r in rows:
            backend = r.backend if r.kind == "index" else "fusion of " + ", ".join(r.members)
            state = "[green]yes[/]" if r.ready else f"[red]no[/]: {escape(r.reason or '')}"
            if r.ready and r.reason:
                state += f" (degraded: {escape(r.reason)})"
            table.add_row(
                escape(r.name), r.kind, escape(backend), state, "allowed" if r.allow_remove else "-"
            )
        out.print(table)
        for w in warnings:
            err.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
    raise typer.Exit(0 if ready else NOT_READY)


@config_app.command("show")
def config_show(config: ConfigOpt = None) -> None:
    """Print the effective configuration (defaults applied) as JSON, secrets masked."""
    cfg = _load(config)
    out.print_json(json.dumps(cfg.masked()))


def invoke_command(
    op: Annotated[str, typer.Argument(help="Op name (`indexplug invoke ops` lists them).")],
    args: Annotated[
        str | None,
        typer.Option(
            "--args", "-a", help="Arguments: a JSON object, @FILE to read one, or - for stdin."
        ),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Run an op from a JSON object and print its JSON answer."""
    # bytes, not text: invoke answers BAD_REQUEST for input that is not UTF-8 JSON
    from indexplug.cli.inputs import read_input
    from indexplug.errors import InvalidRequest
    from indexplug.invocation import exit_code, invoke

    text: str | bytes | None = args
    if args == "-" or (args is not None and args.startswith("@")):
        try:
            text = read_input("-" if args == "-" else args[1:])
        except InvalidRequest as exc:  # more than one command reads
            raise _fail(str(exc)) from None
        except (OSError, ValueError) as exc:  # missing, a folder, a NUL in the name
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise _fail(f"cannot read {args[1:]!r}: {why}") from None
    answer = invoke(op, text, config=config, caller="cli")
    sys.stdout.write(json.dumps(answer, indent=2, ensure_ascii=False) + "\n")
    raise typer.Exit(exit_code(answer))


def serve_command(
    config: ConfigOpt = None,
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP on 127.0.0.1 instead of stdio.")
    ] = False,
    port: Annotated[
        int, typer.Option(help="Port for --http, 1-65535 (0: any free port, printed).")
    ] = 8765,
    read_only: Annotated[
        bool,
        typer.Option(
            "--read-only",
            help="Offer only the ops that read (search, batch_search, pack, status, backends, "
            "ops); add, index_folder and remove answer NOT_ALLOWED.",
        ),
    ] = False,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            help="Serve --http without a bearer token: any local user or program can call every "
            "tool offered.  Prints a warning.",
        ),
    ] = False,
) -> None:
    """Run the MCP server (stdio by default) with the ops as tools.

    Over --http every request needs a bearer token: a named token (indexplug token add, with
    its scope and limits) or the server token (config [server] token_env, else INDEXPLUG_TOKEN,
    else INDEXPLUG_HOME/server-token, made at the first start with mode 0600 unless named
    tokens exist); where tokens are is printed, never a token.
    """
    import importlib.util

    if not 0 <= port <= 65535:
        raise _fail(f"--port must be from 1 to 65535 (or 0: any free port), not {port}")
    if importlib.util.find_spec("mcp") is None:
        raise _fail("the MCP server needs the mcp extra: pip install 'indexplug[mcp]'")
    from indexplug.invocation import Invoker
    from indexplug.mcp_server import HTTP_HOST, legacy_token, listen_socket, serve_http, serve_stdio
    from indexplug.tokens import TokenBook, load, tokens_path

    try:
        invoker = Invoker.from_source(config)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    with invoker:
        if not http:
            serve_stdio(invoker, read_only=read_only)
            return
        token = None
        book = None
        named = 0
        if not no_auth:
            try:
                named = len(load())  # a tokens file that cannot be trusted stops the start
                token = legacy_token(invoker.config.server.token_env, named=named > 0)
            except ConfigError as exc:
                raise _fail(str(exc)) from None
            book = TokenBook()
        try:
            sock = listen_socket(port)
        except OSError as exc:
            raise _fail(f"cannot listen on {HTTP_HOST}:{port}: {exc.strerror or exc}") from None
        bound = int(sock.getsockname()[1])
        mode = " (read-only)" if read_only else ""
        err.print(
            f"indexplug MCP server on http://{HTTP_HOST}:{bound}/mcp{mode}",
            highlight=False,
            soft_wrap=True,
        )
        if no_auth:
            err.print(
                "[bold yellow]warning:[/] --no-auth: no bearer token is required; any local user "
                "or program that can reach this port can call every tool offered",
                highlight=False,
                soft_wrap=True,
            )
        if token is not None:
            made = " (made now)" if token.made else ""
            err.print(
                f"bearer token{made}: {escape(token.where)}; send it as 'Authorization: Bearer "
                "TOKEN'",
                highlight=False,
                soft_wrap=True,
            )
        if book is not None:
            err.print(
                f"named tokens: {named} in {escape(str(tokens_path()))} (indexplug token add "
                "NAME; reread when it changes)",
                highlight=False,
                soft_wrap=True,
            )
        serve_http(
            invoker,
            sock=sock,
            token=token.value if token else None,
            read_only=read_only,
            tokens=book,
        )
