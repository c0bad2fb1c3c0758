"""An indexplug system and its raw library in one process, taking turns query by query.

Why a second way of measuring the framework's own work per search: the quality table runs
every system in a process of its own, which is what peak memory needs, but two fresh processes
of the *same* system on a small shared machine differ by more than that work (where each
process's memory lands in the caches, which core it gets, what the host lends away meanwhile).
A difference or ratio of two such medians measures those accidents as much as the framework.

Here both systems live in one process, each with its own index built as in the quality table,
and every query is asked of both, one right after the other, the order alternating from query to
query.  Whatever the machine does, it does to both within milliseconds; what is left between
them is the work each does.  Each repeat is a fresh process (both indexes built again), so the
spread of the ratio across repeats shows how far it still moves.  The price: each side runs
right after the other's work, with the CPU's caches cooler than in a process of its own, so
absolute latencies come out higher than in the quality table, and the difference is that of
this regime, the harder one for a framework whose own cost is Python touching objects per hit.

The answers are compared too: each side's doc ids per query are kept, and the row says on how
many queries the two returned the same top hit, so a side that got fast by answering something
else (or nothing: failures are counted by outcome code) cannot pass unnoticed.
"""

from __future__ import annotations

import os
import statistics
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

from indexplug_bench import machine
from indexplug_bench.datasets import load
from indexplug_bench.replay import Replay
from indexplug_bench.steps import Steps
from indexplug_bench.systems import Runner, by_name, fresh
from indexplug_bench.timing import index_all, pct


class Forgetful(dict[str, Any]):
    """A guard's memory of checked passages that keeps none (``paired --no-guard-memory``):
    every hit's passage is then hashed and copied as if the guard had never seen it."""

    def __setitem__(self, key: str, value: Any) -> None:
        pass


def forget_checked(runner: Runner) -> None:
    """``runner``'s guard remembers no checked passage from now on (a diagnostic: what the
    guard's one memory, :data:`indexplug.guard.CHECKED_PASSAGES`, buys a search)."""
    guard = getattr(runner, "guard", None)
    if not isinstance(getattr(guard, "_checked", None), dict):
        raise ValueError(f"{type(runner).__name__} has no guard memory to switch off")
    guard._checked = Forgetful()  # type: ignore[union-attr]


def _summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(samples), 3),
        "p95": round(pct(samples, 0.95), 3),
        "mean": round(statistics.fmean(samples), 3),
    }


def measure_pair(
    system: str,
    raw: str,
    dataset: str,
    *,
    top_k: int,
    ctx: dict[str, Any],
    warmup: int,
    workdir: Path,
    steps: Steps | None = None,
    replay: Replay | None = None,
    guard_memory: bool = True,
) -> dict[str, Any]:
    """``system`` against ``raw`` on ``dataset`` in this process (see the module docstring).

    ``warmup`` untimed passes over the queries come first, in the same turns.  Latencies are
    in milliseconds; ``ratio_p50`` is the median of ``system``'s latencies over the median of
    ``raw``'s, ``query_ratio_p50`` the median of the per-query ratios.  ``steps``: timers to
    run the searches under (:mod:`indexplug_bench.steps`; their medians come back as
    ``steps_ms``), installed once both indexes are built.  ``replay``: the system's library
    calls recorded in the last warm-up pass (the first warms the library's own caches, as a
    long-running process would have) and replayed after the timed pass (:mod:`indexplug_bench.replay`;
    its medians come back as ``replayed_p50_ms``).  ``guard_memory=False``: the system's
    guard remembers no checked passage (:func:`forget_checked`; the row says
    ``guard_memory: false``)."""
    if replay is not None and warmup < 2:
        raise ValueError(
            "a replay records the library's answers in the last of the warm-up passes, after "
            "one that warms its caches: warmup >= 2"
        )
    name, size, batches, queries, _qrels = load(dataset)
    load_before = os.getloadavg()[0]
    clock = machine.cpu_clock()
    cpu0 = time.process_time()
    sides = {"system": system, "raw": raw}
    replayed: dict[str, Any] = {}
    runners: dict[str, Runner] = {}
    index_s: dict[str, float] = {}
    try:
        for side, which in sides.items():
            runners[side] = by_name(which).make(fresh(workdir / side), ctx)
            index_s[side] = index_all(runners[side], batches)
        if not guard_memory:
            forget_checked(runners["system"])
        order = list(sides)
        times: dict[str, list[float]] = {side: [] for side in sides}
        answers: dict[str, list[list[str]]] = {side: [] for side in sides}
        backends = [r.guard.backend for r in runners.values() if hasattr(r, "guard")]
        with (
            steps.installed(backends) if steps is not None else nullcontext(),
            replay.installed() if replay is not None else nullcontext(),
        ):
            for pass_no in range(warmup + 1):
                timed = pass_no == warmup
                for i, (_qid, text) in enumerate(queries):
                    for side in order if i % 2 == 0 else order[::-1]:
                        runner = runners[side]
                        t = time.perf_counter()
                        search = partial(runner.search, text, top_k)
                        if replay is not None and pass_no == warmup - 1 and side == "system":
                            ids = replay.recorded(i, search)
                        elif steps is None:
                            ids = search()
                        else:
                            ids = steps.turn(side, search, timed=timed)
                        took = (time.perf_counter() - t) * 1000
                        if timed:
                            times[side].append(took)
                            answers[side].append(ids)
            # counted before any replay: a replayed search that went wrong is a mismatch there
            failures = {side: dict(getattr(r, "failures", {}) or {}) for side, r in runners.items()}
            if replay is not None:
                system_runner = runners["system"]
                replayed = replay.measure(
                    lambda i: system_runner.search(queries[i][1], top_k),
                    answers["system"],
                    wait_ms=statistics.median(times["raw"]),
                )
    finally:
        for r in runners.values():
            r.close()
    same_top = sum(
        1 for a, b in zip(answers["system"], answers["raw"], strict=True) if a[:1] == b[:1]
    )
    return {
        "system": system,
        "raw": raw,
        "dataset": name,
        "passages": size,
        "queries": len(queries),
        "top_k": top_k,
        "warmup": warmup,
        "latency_ms": {side: _summary(times[side]) for side in sides},
        "ratio_p50": round(statistics.median(times["system"]) / statistics.median(times["raw"]), 4),
        "query_ratio_p50": round(
            statistics.median(a / b for a, b in zip(times["system"], times["raw"], strict=True)),
            4,
        ),
        "same_top_hit": same_top,
        "answered": {side: sum(1 for ids in answers[side] if ids) for side in sides},
        "index_s": {side: round(s, 2) for side, s in index_s.items()},
        "failures": failures,
        "load_avg": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpu_s": round(time.process_time() - cpu0, 1),
        "steal_pct": machine.steal_pct(clock, machine.cpu_clock()),
        **({"steps_ms": steps.medians()} if steps is not None else {}),
        **({} if guard_memory else {"guard_memory": False}),
        **replayed,
    }


def combine_pairs(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from the repeats (one process each) of the same pair: every per-repeat figure
    side by side, so the page can give the median and the spread."""
    last = rows[-1]
    return {
        "system": last["system"],
        "raw": last["raw"],
        "dataset": last["dataset"],
        "passages": last["passages"],
        "queries": last["queries"],
        "top_k": last["top_k"],
        "warmup": last["warmup"],
        "repeats": len(rows),
        "p50_ms": {
            side: [r["latency_ms"][side]["p50"] for r in rows] for side in ("system", "raw")
        },
        "ratio_p50": [r["ratio_p50"] for r in rows],
        "query_ratio_p50": [r["query_ratio_p50"] for r in rows],
        "same_top_hit": min(r["same_top_hit"] for r in rows),
        "answered": {side: min(r["answered"][side] for r in rows) for side in ("system", "raw")},
        "failures": {
            side: {
                code: sum(r["failures"][side].get(code, 0) for r in rows)
                for code in {c for r in rows for c in r["failures"][side]}
            }
            for side in ("system", "raw")
        },
        "load_avg": [rows[0]["load_avg"][0], last["load_avg"][-1]],
        "steal_pct": max((r.get("steal_pct") or 0.0 for r in rows), default=None),
        **({"guard_memory": False} if last.get("guard_memory") is False else {}),
        **_combined_replays(rows),
    }


def _combined_replays(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The replayed medians of every repeat side by side (when every repeat replayed), and
    the mismatches summed."""
    if not rows or not all(r.get("replayed_p50_ms") for r in rows):
        return {}
    regimes = [
        g for g in rows[0]["replayed_p50_ms"] if all(g in r["replayed_p50_ms"] for r in rows)
    ]
    mismatches: dict[str, int] = {}
    for r in rows:
        for regime, n in r.get("replay_mismatches", {}).items():
            mismatches[regime] = mismatches.get(regime, 0) + n
    return {
        "replayed_p50_ms": {g: [r["replayed_p50_ms"][g] for r in rows] for g in regimes},
        "replay_mismatches": mismatches,
    }
