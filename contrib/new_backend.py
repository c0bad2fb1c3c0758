"""Copy the backend template and rename it: ``python contrib/new_backend.py NAME DEST``.

NAME is the backend name users will type (``my-store``); the distribution becomes
``indexplug-NAME`` and the package ``indexplug_NAME`` (dashes to underscores).  CI runs this
script and the copy's conformance test, so the template cannot rot.
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "backend-template"


def create(name: str, dest: Path) -> Path:
    if not re.fullmatch(r"[a-z][a-z0-9-]{1,40}", name):
        raise SystemExit(f"backend name {name!r}: use lower-case letters, digits and '-'")
    if dest.exists():
        raise SystemExit(f"{dest} already exists")
    package = "indexplug_" + name.replace("-", "_")
    shutil.copytree(
        TEMPLATE, dest, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build")
    )
    (dest / "src" / "indexplug_template_backend").rename(dest / "src" / package)
    replacements = {
        "indexplug_template_backend": package,
        "indexplug-template-backend": f"indexplug-{name}",
        "template-backend": name,
        "TemplateBackend": "".join(w.capitalize() for w in name.split("-")) + "Backend",
    }
    for path in dest.rglob("*"):
        if path.is_file() and path.suffix in {".py", ".toml", ".md"}:
            text = path.read_text("utf-8")
            for old, new in replacements.items():
                text = text.replace(old, new)
            path.write_text(text, "utf-8")
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("name")
    parser.add_argument("dest", type=Path)
    args = parser.parse_args()
    print(create(args.name, args.dest))


if __name__ == "__main__":
    main()
