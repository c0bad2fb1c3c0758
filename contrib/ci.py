"""What CI checks in contrib/ (the tox env ``contrib`` runs this).

1. The third-party usearch backend is discovered by ``indexplug backends`` and passes the
   conformance kit; its committed report card matches a fresh one.
2. The backend template, copied and renamed by ``new_backend.py``, installs and passes the kit
   under its new name, so the template cannot rot.
3. Their cards match the kit's snapshot (tests/kit/test_kit_split.py), so a change to the kit
   that changes a contrib backend's card is seen.

The LangChain, LlamaIndex and Haystack adapters have a tox env of their own (``adapters``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sh(*args: str, cwd: Path | None = None) -> str:
    print("+", " ".join(args), flush=True)
    proc = subprocess.run(args, cwd=cwd, text=True, capture_output=True)
    print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n", flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(args)}")
    return proc.stdout


def card_statuses(card: dict) -> dict[str, str]:
    return {c["id"]: c["status"] for c in card["checks"]}


def main(extra: list[str]) -> None:
    py = sys.executable
    listed = json.loads(sh(py, "-m", "indexplug.cli.app", "backends", "--json"))
    names = {b["name"]: b for b in listed["backends"]}
    assert "usearch" in names and names["usearch"]["ready"], "usearch backend not discovered"

    sh(
        py,
        "-m",
        "pytest",
        "-q",
        *extra,
        str(HERE / "indexplug-usearch" / "tests"),
        str(HERE / "backend-template" / "tests"),
        # the kit's cards of these backends, against the snapshot of the kit's own tests
        str(HERE.parent / "tests" / "kit" / "test_kit_split.py"),
    )

    fresh = json.loads(
        sh(
            py,
            "-m",
            "indexplug.cli.app",
            "conformance",
            "usearch",
            "--json",
            "--option",
            "embedder=hashing:default",
        )
    )
    committed = json.loads((HERE / "indexplug-usearch" / "CONFORMANCE.json").read_text())
    if card_statuses(fresh) != card_statuses(committed):
        raise SystemExit("contrib/indexplug-usearch/CONFORMANCE.json is stale: regenerate it")

    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "indexplug-acme-store"
        sh(py, str(HERE / "new_backend.py"), "acme-store", str(dest))
        sh(py, "-m", "pip", "install", "-q", "-e", str(dest))
        try:
            sh(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(dest / "tests"), cwd=dest)
            card = json.loads(
                sh(py, "-m", "indexplug.cli.app", "conformance", "acme-store", "--json")
            )
            failed = [c for c in card["checks"] if c["status"] != "PASSED"]
            failed = [c for c in failed if c["status"] != "NOT_CLAIMED"]
            if failed or not card["summary"]["ok"]:
                raise SystemExit(f"the template's card is not ok: {failed or card['summary']}")
        finally:
            sh(py, "-m", "pip", "uninstall", "-q", "-y", "indexplug-acme-store")
    print("contrib: all checks passed")


if __name__ == "__main__":
    main(sys.argv[1:])
