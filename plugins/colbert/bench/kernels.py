"""Time each MaxSim kernel on one product, and say which one ``auto`` picks on this processor.

The product is the exact stage's: ``--rows`` stored token codes (128 SciFact candidates with
MiniLM are about 31,600 rows) against ``--query`` query-token codes, int8, ``--dim`` components.
Every kernel of :mod:`indexplug_colbert.kernels` that can run here is timed (median of
``--repeats``), and so is ``torch._int_mm`` itself even where the kernel module would refuse it
(no VNNI or AMX), with whether its integers were exact.  Each row carries the processor, the
instruction sets torch, oneDNN's cap, OpenBLAS and numpy report, and the load average, so an
emulated AVX2-only run says so::

    python plugins/colbert/bench/kernels.py --rows 31600 --repeats 15
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell \\
      NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" \\
      python plugins/colbert/bench/kernels.py --rows 31600 --repeats 15

``--block`` repeats the float32 kernels for several block sizes (``BLOCK_ROWS``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch  # loaded first, as a sentence-transformers embedder has it loaded
from indexplug_colbert import cpu, kernels

EMULATION_VARS = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "OPENBLAS_CORETYPE",
    "NPY_DISABLE_CPU_FEATURES",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
)


def processor() -> dict[str, Any]:
    """Model, the flags that decide the kernels, and what each library says it uses."""
    model = "unknown"
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
        lines = fh.read().splitlines()
    for line in lines:
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    flags = cpu.cpu_flags()
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "avx512_bf16")
    blas = "unknown"
    try:
        import threadpoolctl  # type: ignore[import-not-found,unused-ignore]

        for info in threadpoolctl.threadpool_info():
            if info.get("internal_api") == "openblas":
                blas = f"openblas {info.get('version')} {info.get('architecture')}"
    except ImportError:
        pass
    from numpy._core._multiarray_umath import (  # type: ignore[import-not-found,unused-ignore]
        __cpu_features__ as npf,
    )

    return {
        "model": model,
        "machine": platform.machine(),
        "flags": [f for f in wanted if f in flags],
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "numpy_x86_v4": bool(npf.get("X86_V4")),
        "blas": blas,
        "int8_instructions": list(cpu.this_int8_instructions()),
        "env": {k: os.environ[k] for k in EMULATION_VARS if k in os.environ},
        "torch_threads": torch.get_num_threads(),
    }


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=31_600)
    ap.add_argument("--query", type=int, default=32)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--block", type=int, nargs="*", default=[])
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    if not 1 <= args.repeats <= 1000 or not 1 <= args.rows <= 10_000_000:
        ap.error("--repeats must be 1..1000 and --rows 1..10,000,000")

    rng = np.random.default_rng(0)
    a = rng.integers(-127, 128, size=(args.rows, args.dim), dtype=np.int8)
    b = rng.integers(-127, 128, size=(args.query, args.dim), dtype=np.int8)
    want = (a.astype(np.int64) @ b.astype(np.int64).T).astype(np.float32)
    load_before = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []

    def record(name: str, fn: Callable[[], Any], block: int | None = None) -> None:
        got = np.asarray(fn(), dtype=np.float32)
        rows.append(
            {
                "kernel": name,
                "block_rows": block,
                "ms": round(median_ms(fn, args.repeats), 2),
                "exact": bool(np.array_equal(got, want)),
            }
        )

    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    record("torch._int_mm (raw)", lambda: torch._int_mm(ta, tb.T).numpy())
    auto = kernels.kernel_name()
    blocks = args.block or [kernels.BLOCK_ROWS]
    for name in kernels.available():
        os.environ["INDEXPLUG_COLBERT_KERNEL"] = name
        for block in blocks if name.startswith("float32") else [None]:
            if block is not None:
                kernels.BLOCK_ROWS = block
            record(name, lambda: kernels.int8_dots(a, b), block)
    os.environ.pop("INDEXPLUG_COLBERT_KERNEL")
    record("float32 numpy, widened at once", lambda: a.astype(np.float32) @ b.astype(np.float32).T)
    report: dict[str, Any] = {
        "shape": [args.rows, args.query, args.dim],
        "auto_picks": auto,
        "processor": processor(),
        "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "rows": rows,
    }
    print(json.dumps(report["processor"]))
    print(f"auto picks: {auto}; load {report['load'][0]} -> {report['load'][1]}")
    print("| kernel | block rows | ms (median) | exact |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['kernel']} | {r['block_rows'] or '-'} | {r['ms']} | {r['exact']} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)


if __name__ == "__main__":
    main()
