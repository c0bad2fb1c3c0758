"""Imports point down: CLI -> orchestration -> guard and discovery -> protocols and models.

The contracts live in ``[tool.importlinter]`` of the root ``pyproject.toml``; import-linter
checks them on the installed ``indexplug``.  A module that imports one above it, a new circle,
core importing a backend library or a plugin, or a new module placed in no layer fails here.

A constant a higher layer needs from a lower one without importing it at start is written in
both places; the tests here hold the copies equal.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import indexplug
from indexplug import config, fusion

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
LINT = (
    "import sys; from importlinter.cli import lint_imports_command; "
    "sys.exit(lint_imports_command())"
)


def lint_imports(config_file: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports CONFIG_FILE`` in a fresh interpreter, without a cache on disk."""
    return subprocess.run(
        [sys.executable, "-c", LINT, str(config_file), "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def layers_contract() -> dict[str, object]:
    settings = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    (contract,) = [c for c in settings["contracts"] if c["id"] == "core-layers"]
    return contract


def test_imports_point_down() -> None:
    """Every contract of the root pyproject.toml is kept by the code as it stands."""
    done = lint_imports(PYPROJECT, ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout, done.stdout


def test_every_core_module_is_placed_in_a_layer() -> None:
    """A new module under ``indexplug`` must be given its layer; the message names it."""
    placed = {
        name.strip()
        for layer in layers_contract()["layers"]  # type: ignore[attr-defined]
        for name in layer.replace(":", "|").split("|")
    }
    modules = {m.name for m in pkgutil.iter_modules(indexplug.__path__)}
    unplaced = sorted(modules - placed)
    assert not unplaced, (
        f"indexplug modules placed in no layer: {', '.join(unplaced)}.  Add each to the line of "
        f"its layer in the core-layers contract of {PYPROJECT} (CLI -> orchestration -> guard "
        "and discovery -> protocols and models)."
    )
    assert not placed - modules, f"layers name modules that do not exist: {placed - modules}"


def with_layers(layers: list[str]) -> str:
    """The root pyproject.toml with the core-layers contract's list replaced by ``layers``."""
    text = PYPROJECT.read_text()
    at = text.index('id = "core-layers"')
    begin = text.index("layers = [", at)
    end = text.index("\n]\n", begin) + 3
    listed = "".join(f'    "{layer}",\n' for layer in layers)
    return text[:begin] + "layers = [\n" + listed + "]\n" + text[end:]


def layers_without(module: str) -> list[str]:
    out = []
    for layer in layers_contract()["layers"]:  # type: ignore[attr-defined]
        sep = ":" if ":" in layer else "|"
        kept = [m.strip() for m in layer.split(sep) if m.strip() != module]
        if kept:
            out.append(f" {sep} ".join(kept))
    return out


def test_an_unplaced_module_fails_lint_imports(tmp_path: Path) -> None:
    """The contract is exhaustive: import-linter itself refuses a module left out, by name."""
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text(with_layers(layers_without("targets")))
    done = lint_imports(cfg, tmp_path)
    assert done.returncode != 0
    assert "- indexplug.targets" in done.stdout, done.stdout


def test_an_import_pointing_up_fails_lint_imports(tmp_path: Path) -> None:
    """Had config stayed importing ``Target`` from the CLI, the contract would break: with the
    CLI placed at the bottom, every import of it points up, and the check names them."""
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text(with_layers([*layers_without("cli"), "cli"]))
    done = lint_imports(cfg, tmp_path)
    assert done.returncode != 0
    assert "indexplug.cli is not allowed to import" in done.stdout, done.stdout


def test_config_states_fusions_default_rrf_k() -> None:
    """The configuration's default k is fusion's, and a fusion index that names none gets it."""
    assert config.DEFAULT_RRF_K == fusion.DEFAULT_RRF_K
    ic = config.IndexConfig(kind="fusion", members=["a", "b"])
    assert ic.rrf_k == fusion.DEFAULT_RRF_K
