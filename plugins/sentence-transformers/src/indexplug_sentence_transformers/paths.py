"""Which computation embeds a text: the *path* (``fp32``, ``bf16``, ``int8``, ``cuda``).

* ``fp32``: the model as it ships, in float32 torch.  The reference every other path is held to.
* ``bf16``: a bfloat16 copy of the model in torch.  Fast only on a processor that multiplies
  bfloat16 natively (x86 ``avx512_bf16`` or ``amx_bf16``); elsewhere torch emulates it, slower
  than float32 but giving the same vectors, so an index built with it stays searchable.
* ``int8``: the transformer exported locally (:mod:`.onnx_export`) and its MatMul weights
  quantised per channel (``onnxruntime.quantization.quantize_dynamic``), run by ONNX Runtime.
  Needs the ``[onnx]`` extra; without it the path is unavailable (a typed error), since no
  other path reproduces its vectors closely enough.
* ``cuda``: the float32 model on a GPU; with no GPU it runs on the CPU in float32, which gives
  the same vectors within float rounding.

``auto`` measures nothing when it runs: :func:`choose_paths` decides from the processor's flags,
per granularity, keeping a path only where the benchmark (``bench/embed_paths.py``) found it
both faster than fp32 on that class of processor and within the quality rule (nDCG@10 on
SciFact within 0.005 of fp32).  The decision is a pair: one path for text vectors, one for
token vectors, and it is part of the embedder's name, so an index records how it was built.
"""

from __future__ import annotations

import glob
import importlib.util
from collections.abc import Iterable
from functools import lru_cache

PATHS = ("fp32", "bf16", "int8", "cuda")
"""The concrete paths; ``auto`` resolves to one of them per granularity."""
AUTO = "auto"
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
INT8_TEXT_OK = False
"""Whether int8 keeps text vectors within the quality rule: no (SciFact nDCG@10 fell by more
than 0.005; docs/embedders.md)."""
INT8_TOKENS_OK = True
"""Whether int8 keeps token vectors within the quality rule: yes (docs/embedders.md)."""


class PathSpecError(ValueError):
    """A path (or ``TEXT,TOKEN`` pair) that is not one of :data:`PATHS` or ``auto``."""


def parse_path(value: str) -> tuple[str, str] | str:
    """``auto``, one path for both granularities, or ``TEXT,TOKEN``; refuses anything else."""
    text = value.strip().lower()
    if text == AUTO:
        return AUTO
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (1, 2) or any(p not in PATHS for p in parts):
        raise PathSpecError(
            f"path must be auto, one of {', '.join(PATHS)}, or TEXT,TOKEN of those; got {value!r}"
        )
    return (parts[0], parts[-1])


def path_suffix(pair: tuple[str, str]) -> str:
    """The embedder-name suffix for a resolved pair: none for fp32 (the names indexes built
    before paths existed carry), ``@P`` when both agree, ``@TEXT,TOKEN`` otherwise."""
    text, token = pair
    if text == token:
        return "" if text == "fp32" else f"@{text}"
    return f"@{text},{token}"


def choose_paths(flags: Iterable[str], *, gpu: bool = False, onnx: bool = True) -> tuple[str, str]:
    """``auto``'s decision, from what the processor offers (a pure function).

    * a GPU present: ``cuda`` for both;
    * native bfloat16 (``avx512_bf16``/``amx_bf16``): ``bf16`` for both (several times faster
      than fp32 there, quality within the rule);
    * otherwise, with ONNX Runtime installed: ``int8`` where it kept the quality rule
      (:data:`INT8_TEXT_OK`, :data:`INT8_TOKENS_OK`), ``fp32`` elsewhere;
    * otherwise ``fp32``.
    """
    have = set(flags)
    if gpu:
        return ("cuda", "cuda")
    if have & BF16_FLAGS:
        return ("bf16", "bf16")
    if onnx and have & {"avx2", "avx512_vnni", "avx_vnni", "asimd"}:
        return ("int8" if INT8_TEXT_OK else "fp32", "int8" if INT8_TOKENS_OK else "fp32")
    return ("fp32", "fp32")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The processor's feature flags from ``/proc/cpuinfo`` (empty where it is not readable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def gpu_present() -> bool:
    """Whether an NVIDIA GPU device node exists (cheap: no torch import)."""
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def onnx_installed() -> bool:
    """Whether the ``[onnx]`` extra (onnxruntime, onnx and onnxscript) is importable (specs
    only)."""
    return all(
        importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx", "onnxscript")
    )


def resolve(requested: tuple[str, str] | str) -> tuple[str, str]:
    """A parsed path resolved for this machine (``auto`` via :func:`choose_paths`)."""
    if requested == AUTO:
        return choose_paths(cpu_flags(), gpu=gpu_present(), onnx=onnx_installed())
    assert isinstance(requested, tuple)
    return requested
