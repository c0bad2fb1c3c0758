"""``indexplug token add|list|revoke``: the named bearer tokens of ``serve --http``.

``add`` prints the token once (on stdout, alone on its line, so a script can capture it); only
its SHA-256 is kept, in ``INDEXPLUG_HOME/tokens.json`` (mode 0600).  ``list`` shows names,
scopes, limits and creation times, never a token or a hash.  ``revoke`` takes effect on a
running server at its next request.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated

import typer

from indexplug.cli.console import LazyConsole, escape

err = LazyConsole(stderr=True)
out = LazyConsole()
BAD_INPUT = 64

token_app = typer.Typer(
    name="token",
    help="Named bearer tokens of serve --http, with scopes and limits (see docs/security.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _fail(message: str, code: int = BAD_INPUT) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


@token_app.command("add")
def token_add(
    name: Annotated[str, typer.Argument(help="1-64 letters, digits, '.', '-' or '_'.")],
    scope: Annotated[
        str, typer.Option(help="read (only the ops that read) or write (every op allowed).")
    ] = "read",
    rpm: Annotated[
        int | None, typer.Option(help="Requests per minute (default: no limit).")
    ] = None,
    concurrent: Annotated[
        int | None, typer.Option(help="Requests at once (default: no limit).")
    ] = None,
) -> None:
    """Make a named token and print it once (only its hash is kept)."""
    from indexplug.errors import ConfigError, InvalidRequest
    from indexplug.tokens import add, tokens_path

    try:
        record, token = add(name, scope, rpm=rpm, concurrent=concurrent)
    except (InvalidRequest, ConfigError) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot write the tokens file: {exc.strerror or exc}") from None
    sys.stdout.write(token + "\n")
    limits = ", ".join(
        f"{v} {k}" for k, v in (("rpm", record.rpm), ("concurrent", record.concurrent)) if v
    )
    err.print(
        f"token '{record.name}' ({record.scope}{'; ' + limits if limits else ''}) added to "
        f"{escape(str(tokens_path()))}; this is the only time it is shown",
        highlight=False,
        soft_wrap=True,
    )


@token_app.command("list")
def token_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """Names, scopes, limits and creation times (never a token or its hash)."""
    from indexplug.errors import ConfigError
    from indexplug.tokens import load

    try:
        tokens = load()
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    for t in tokens:
        if as_json:
            sys.stdout.write(json.dumps(t.public(), sort_keys=True) + "\n")
            continue
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t.created))
        out.print(
            f"{t.name}  {t.scope}  rpm={t.rpm or '-'}  concurrent={t.concurrent or '-'}  "
            f"created {created} UTC",
            highlight=False,
            markup=False,
        )
    if not tokens and not as_json:
        err.print("no named tokens", highlight=False)


@token_app.command("revoke")
def token_revoke(name: Annotated[str, typer.Argument(help="The token's name.")]) -> None:
    """Delete a named token: a running server refuses it from its next request."""
    from indexplug.errors import ConfigError, InvalidRequest
    from indexplug.tokens import revoke

    try:
        found = revoke(name)
    except (InvalidRequest, ConfigError) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot write the tokens file: {exc.strerror or exc}") from None
    if not found:
        raise _fail(f"no token named '{name}'")
    err.print(f"token '{name}' revoked", highlight=False)
