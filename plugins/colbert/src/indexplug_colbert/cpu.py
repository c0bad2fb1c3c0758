"""Which int8 dot-product instructions this processor offers to torch's int8 product.

``torch._int_mm`` runs on oneDNN, which multiplies int8 exactly and fast only with VNNI
(``avx512_vnni``, ``avx_vnni``) or AMX (``amx_int8``).  Without them oneDNN falls back to AVX2's
``vpmaddubsw``, which adds pairs of products into *saturating* 16-bit lanes: slower than a
float32 product, and not exact (``bench/kernels.py`` shows both).  So the kernel choice
(:mod:`.kernels`) asks this module, once per process, whether such instructions exist.

The answer comes from the kernel's own report of the processor (``/proc/cpuinfo`` flags on
Linux; on any other system none are assumed, which only costs speed), narrowed by oneDNN's own
cap ``ONEDNN_MAX_CPU_ISA`` (or its older name ``DNNL_MAX_CPU_ISA``): a cap below the VNNI ISAs
means oneDNN will not use them, which is also how an AVX2-only machine is emulated.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

INT8_FLAGS = ("amx_int8", "avx512_vnni", "avx_vnni")
"""Processor flags under which oneDNN's int8 product is exact and fast, best first."""

ONEDNN_CAPS_WITHOUT_VNNI = frozenset({"SSE41", "AVX", "AVX2", "AVX512_CORE"})
"""``ONEDNN_MAX_CPU_ISA`` values that keep oneDNN off every VNNI and AMX instruction."""


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The processor's feature flags as the kernel reports them (empty where unreadable)."""
    try:
        text = cpuinfo.read_text(encoding="ascii", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def int8_instructions(flags: frozenset[str], onednn_cap: str | None) -> tuple[str, ...]:
    """The :data:`INT8_FLAGS` present in ``flags`` that oneDNN may use under ``onednn_cap``."""
    if onednn_cap is not None and onednn_cap.strip().upper() in ONEDNN_CAPS_WITHOUT_VNNI:
        return ()
    return tuple(f for f in INT8_FLAGS if f in flags)


def onednn_cap() -> str | None:
    """oneDNN's instruction-set cap from the environment, if one is set."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or None


@lru_cache(maxsize=1)
def this_int8_instructions() -> tuple[str, ...]:
    """:func:`int8_instructions` of this processor and environment, read once per process."""
    return int8_instructions(cpu_flags(), onednn_cap())
