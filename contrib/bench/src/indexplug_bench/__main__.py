"""``python -m indexplug_bench run``: every available system, then the report.

``run`` measures (each system in its own subprocess) and writes the results JSON; ``paired``
measures each indexplug system against its raw library in one process, in turns query by query
(the framework's own work per search), and ``steps`` does the same with the steps of each side
timed in place (where that work goes); ``report`` renders ``docs/benchmarks.md`` and the charts from
results files.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from indexplug_bench import machine, startup
from indexplug_bench.paired import combine_pairs
from indexplug_bench.replay import EVICT_MB, LIBRARY_CALLS, Replay
from indexplug_bench.report import drift, merge, render
from indexplug_bench.systems import MINILM, SCALE_SYSTEMS, SYSTEMS, System, by_name
from indexplug_bench.warm import warm

REPO = Path(__file__).resolve().parents[4]


def available(system: System, ctx: dict[str, Any]) -> str | None:
    """``None`` when the system can run here, else the reason it cannot."""
    from indexplug import get_registry

    reg = get_registry()
    for need in system.needs:
        if need.startswith("backend:"):
            name = need.split(":", 1)[1]
            if name not in reg.backend_names():
                return f"backend {name} is not installed"
        elif need.startswith("embedder:"):
            spec = need.split(":", 1)[1]
            try:
                r = reg.embedder(spec).readiness()
            except Exception as exc:
                return f"embedder {spec}: {exc}"
            if not r.ready:
                return f"embedder {spec}: {r.reason}"
        elif need == "elastic-url":
            if not ctx.get("elastic_url"):
                return "no Elasticsearch node (start one or pass --elastic-url)"
        elif importlib.util.find_spec(need) is None:
            return f"{need} is not installed"
    return None


def _worker(args: list[str], timeout: float) -> dict[str, Any] | str:
    """Run one worker process.  Its indexes and its result live in a folder made and removed
    here: a worker stopped at ``timeout`` is killed (SIGKILL), and could not clean up itself."""
    with tempfile.TemporaryDirectory(prefix="ipbench-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            "-m",
            "indexplug_bench.worker",
            *args,
            "--out",
            str(out),
            "--workdir",
            str(Path(tmp) / "work"),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"stopped after {timeout:.0f} s"
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return "failed: " + " | ".join(tail)
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def _expensive(system: System) -> bool:
    """Indexing it means running a model (minutes), so it is indexed once, not per repeat."""
    return any(n.startswith("embedder:") or n == "ragatouille" for n in system.needs)


def groups(chosen: list[System], *, interleave: bool, embed_cache: bool) -> list[list[System]]:
    """The order of the run: each system alone, except an indexplug system and the systems it
    is compared with (its raw library, ``versus``), which form a group measured
    :func:`_interleaved` (when ``interleave`` and indexing them is cheap: no model, or its
    vectors come from the cache)."""
    by_name = {s.name: s for s in chosen}
    grouped: set[str] = set()
    out: list[list[System]] = []
    for s in chosen:
        if s.name in grouped:
            continue
        if s.kind == "indexplug" and interleave:
            others = [
                by_name[n]
                for n in (s.raw_of, *s.versus)
                if n in by_name and n not in grouped and n != s.name
            ]
            members = [s, *others]
            if others and (embed_cache or not any(_expensive(m) for m in members)):
                out.append(members)
                grouped |= {m.name for m in members}
                continue
        out.append([s])
        grouped.add(s.name)
    return out


def _interleaved(
    group: list[System], a: argparse.Namespace, extra: list[str]
) -> dict[str, dict[str, Any] | str]:
    """A framework system and the systems it is compared with, one repeat (a fresh index,
    every query) per worker process, in turns whose order reverses each repeat (A B C, C B A,
    A B C ...), so that none always runs on the warmer server or at the quieter moment: a JVM
    compiling its search path, or the host lending our cores to another machine, would
    otherwise favour whichever ran later.  The repeats of each are merged into one row."""
    parts: dict[str, list[dict[str, Any]]] = {s.name: [] for s in group}
    failed: dict[str, str] = {}
    for rep in range(a.repeats):
        order = group if rep % 2 == 0 else group[::-1]
        for system in order:
            if system.name in failed:
                continue
            res = _worker(
                [
                    system.name,
                    str(a.scifact),
                    "--repeats",
                    "1",
                    "--index-repeats",
                    "1",
                    "--top-k",
                    str(a.top_k),
                    *extra,
                ],
                timeout=a.timeout,
            )
            if isinstance(res, str):
                failed[system.name] = res
            else:
                parts[system.name].append(res)
    return {
        s.name: failed.get(s.name) or combine(parts[s.name], group=[o.name for o in group])
        for s in group
    }


def combine(rows: list[dict[str, Any]], *, group: list[str]) -> dict[str, Any]:
    """One row from single-repeat rows of the same system (see :func:`_interleaved`): the
    per-repeat figures side by side (the page reports their median and spread), quality from
    the last (every system here is deterministic), the largest peak memory."""
    last = rows[-1]
    lat: dict[str, list[float]] = {}
    for row in rows:
        for key, values in row["latency_ms"].items():
            lat.setdefault(key, []).extend(values)
    failures: dict[str, int] = {}
    for row in rows:
        for key, n in (row.get("failures") or {}).items():
            failures[key] = failures.get(key, 0) + n
    return {
        **last,
        "repeats": len(rows),
        "index_repeats": len(rows),
        "index_passages_per_s": [x for row in rows for x in row["index_passages_per_s"]],
        "latency_ms": lat,
        "peak_rss_mb": max(row["peak_rss_mb"] for row in rows),
        "failures": failures,
        "load_avg": [rows[0]["load_avg"][0], last["load_avg"][-1]],
        "cpu_s": round(sum(row["cpu_s"] for row in rows), 1),
        "steal_pct": max((row.get("steal_pct") or 0.0 for row in rows), default=None),
        "interleaved": group,
    }


@contextmanager
def _elastic(a: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """The measurements' context (``elastic_url``, and ``elastic_url_list`` for a runner built
    in this process) while the block runs, with a node started for it and stopped after (when
    neither ``--elastic-url`` nor ``--no-elastic`` was given)."""
    ctx: dict[str, Any] = {"elastic_url": a.elastic_url}
    cluster = None
    if not ctx["elastic_url"] and not a.no_elastic:
        try:
            from indexplug_elastic.testing.server import EsCluster

            cluster = EsCluster(nodes=1)
            cluster.start()
            cluster.wait_for("green", timeout=180)
            ctx["elastic_url"] = cluster.urls[0]
        except Exception as exc:
            print(f"elastic: not started ({exc})", file=sys.stderr)
    ctx["elastic_url_list"] = [ctx["elastic_url"]] if ctx["elastic_url"] else None
    try:
        yield ctx
    finally:
        if cluster is not None:
            cluster.stop()


def _elastic_args(ctx: dict[str, Any]) -> list[str]:
    """The worker's arguments naming the node, if there is one."""
    return ["--elastic-url", ctx["elastic_url"]] if ctx.get("elastic_url") else []


def _finished(a: argparse.Namespace, results: dict[str, Any]) -> None:
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    a.out.write_text(json.dumps(results, indent=1))


def _results() -> dict[str, Any]:
    return {
        "machine": machine.describe(),
        "command": "python -m indexplug_bench " + " ".join(shlex.quote(x) for x in sys.argv[1:]),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "quality": [],
        "scale": [],
        "skipped": {},
    }


def _warm_cache(
    a: argparse.Namespace, ctx: dict[str, Any], names: list[str], results: dict[str, Any]
) -> None:
    """With ``--embed-cache``: every worker (a subprocess) reads passage vectors from it (see
    :mod:`indexplug_bench.warm`); SciFact is embedded into it first, timed, for the dense
    systems among ``names``."""
    if not a.embed_cache:
        return
    os.environ["INDEXPLUG_EMBED_CACHE"] = str(a.embed_cache)
    results["embedding"] = []
    dense = [
        s
        for s in SYSTEMS
        if s.name in names and f"embedder:{MINILM}" in s.needs and available(s, ctx) is None
    ]
    for tokens in (False, True):
        these = [s for s in dense if ("tokens" in s.name) == tokens]
        if these:
            print(f"warm {MINILM} for {len(these)} systems (tokens: {tokens})", file=sys.stderr)
            results["embedding"].append(warm(a.scifact, MINILM, a.embed_cache, tokens=tokens))
            a.out.write_text(json.dumps(results, indent=1))


def _picked(a: argparse.Namespace, system: System) -> bool:
    return not a.only or any(o in system.name for o in a.only)


def run(a: argparse.Namespace) -> None:
    results = _results()
    with _elastic(a) as ctx:
        extra = _elastic_args(ctx)
        if a.warmup:
            extra += ["--warmup", str(a.warmup)]
        _warm_cache(a, ctx, [s.name for s in SYSTEMS if _picked(a, s)], results)
        chosen: list[System] = []
        for system in SYSTEMS:
            if not _picked(a, system):
                continue
            why = available(system, ctx)
            if why:
                results["skipped"][system.name] = why
                print(f"skip {system.name}: {why}", file=sys.stderr)
                continue
            chosen.append(system)
        for group in groups(chosen, interleave=a.interleave, embed_cache=a.embed_cache is not None):
            names = " and ".join(s.name for s in group)
            print(f"run  {names} on {a.scifact}", file=sys.stderr)
            if len(group) == 1:
                system = group[0]
                res = _worker(
                    [
                        system.name,
                        str(a.scifact),
                        "--repeats",
                        str(a.repeats),
                        "--index-repeats",
                        str(1 if _expensive(system) else a.repeats),
                        "--top-k",
                        str(a.top_k),
                        *extra,
                    ],
                    timeout=a.timeout,
                )
                outcomes = {system.name: res}
            else:
                outcomes = _interleaved(group, a, extra)
            for system in group:
                res = outcomes[system.name]
                if isinstance(res, str):
                    results["skipped"][system.name] = res
                    print(f"     {system.name}: {res}", file=sys.stderr)
                    continue
                res["raw_of"] = system.raw_of
                res["kind"] = system.kind
                if a.embed_cache and any(n.startswith("embedder:") for n in system.needs):
                    res["vectors_from_cache"] = True
                results["quality"].append(res)
            a.out.write_text(json.dumps(results, indent=1))
        for size in a.sizes:
            for name in SCALE_SYSTEMS:
                if a.only and not any(o in name for o in a.only):
                    continue
                system = next(s for s in SYSTEMS if s.name == name)
                why = available(system, ctx)
                if why:
                    results["skipped"][f"{name} @ {size}"] = why
                    continue
                print(f"run  {name} on synthetic:{size}", file=sys.stderr)
                res = _worker(
                    [
                        name,
                        f"synthetic:{size}",
                        "--repeats",
                        str(a.repeats),
                        "--index-repeats",
                        str(a.scale_index_repeats),
                        "--top-k",
                        "10",
                        *extra,
                    ],
                    timeout=a.timeout,
                )
                if isinstance(res, str):
                    results["skipped"][f"{name} @ {size}"] = res
                    print(f"     {res}", file=sys.stderr)
                else:
                    results["scale"].append(res)
                a.out.write_text(json.dumps(results, indent=1))
    _finished(a, results)
    if a.markdown:
        render(results, a.markdown, a.markdown.parent / "img")


def _pairs(
    a: argparse.Namespace, ctx: dict[str, Any], results: dict[str, Any]
) -> list[tuple[System, System]]:
    """The chosen indexplug systems with their raw libraries (the embedding cache warmed for
    them); a pair that cannot run here is left out, with why in ``results["skipped"]``."""
    pairs = [
        (s, by_name(s.raw_of))
        for s in SYSTEMS
        if s.kind == "indexplug" and s.raw_of and _picked(a, s)
    ]
    _warm_cache(a, ctx, [n for s, r in pairs for n in (s.name, r.name)], results)
    runnable = []
    for system, raw in pairs:
        label = f"{system.name} with {raw.name}"
        why = available(system, ctx) or available(raw, ctx)
        if why is None and not a.embed_cache and (_expensive(system) or _expensive(raw)):
            why = "needs --embed-cache (each process would embed the corpus twice)"
        if why:
            results["skipped"][label] = why
            print(f"skip {label}: {why}", file=sys.stderr)
        else:
            runnable.append((system, raw))
    return runnable


def paired(a: argparse.Namespace) -> None:
    """Every chosen indexplug system against its raw library in one process, query by query in
    turns (:mod:`indexplug_bench.paired`), ``--repeats`` processes each."""
    results = {**_results(), "paired": []}
    with _elastic(a) as ctx:
        extra = [
            *_elastic_args(ctx),
            "--warmup",
            str(a.warmup),
            *(["--replay"] if a.replay else []),
            *([] if a.guard_memory else ["--no-guard-memory"]),
        ]
        for system, raw in _pairs(a, ctx, results):
            label = f"{system.name} with {raw.name}"
            print(f"pair {label} on {a.scifact}", file=sys.stderr)
            rows = []
            for _ in range(a.repeats):
                res = _worker(
                    [
                        system.name,
                        str(a.scifact),
                        "--top-k",
                        str(a.top_k),
                        "--paired-with",
                        raw.name,
                        *extra,
                    ],
                    timeout=a.timeout,
                )
                if isinstance(res, str):
                    results["skipped"][label] = res
                    print(f"     {res}", file=sys.stderr)
                    break
                rows.append(res)
            else:
                results["paired"].append(combine_pairs(rows))
            a.out.write_text(json.dumps(results, indent=1))
    _finished(a, results)


def _pairs_in_process(
    a: argparse.Namespace,
    key: str,
    more: Callable[[System, System], dict[str, Any] | str],
    show: Callable[[dict[str, Any]], None],
) -> None:
    """``measure_pair`` for each chosen pair in this process, a row each under ``key`` (for
    ``steps`` and ``replay``): ``more(system, raw)`` gives its further arguments, or why the
    pair is left out; ``show`` prints a row."""
    from indexplug_bench.paired import measure_pair

    results = {**_results(), key: []}
    with _elastic(a) as ctx:
        for system, raw in _pairs(a, ctx, results):
            label = f"{system.name} with {raw.name}"
            arguments = more(system, raw)
            if isinstance(arguments, str):
                results["skipped"][label] = arguments
                print(f"skip {label}: {arguments}", file=sys.stderr)
                continue
            print(f"{key}: {label} on {a.scifact}", file=sys.stderr)
            with tempfile.TemporaryDirectory(prefix=f"indexplug-{key}-") as tmp:
                row = measure_pair(
                    system.name,
                    raw.name,
                    str(a.scifact),
                    top_k=a.top_k,
                    ctx=ctx,
                    workdir=Path(tmp),
                    **{"warmup": a.warmup, **arguments},
                )
            results[key].append(row)
            show(row)
            a.out.write_text(json.dumps(results, indent=1))
    _finished(a, results)


def steps(a: argparse.Namespace) -> None:
    """Each chosen indexplug system against its raw library in this process, in the turns of
    ``paired``, with their steps timed in place (:mod:`indexplug_bench.steps`)."""
    from indexplug_bench.steps import for_pair

    def show(row: dict[str, Any]) -> None:
        lat = row["latency_ms"]
        for side in ("system", "raw"):
            print(f"  {row[side]}: p50 {lat[side]['p50']} ms", file=sys.stderr)
            for step, ms in row["steps_ms"].get(side, {}).items():
                print(f"    {step}: {ms} ms", file=sys.stderr)

    _pairs_in_process(a, "steps", lambda s, r: {"steps": for_pair(s.name, r.name)}, show)


def replay(a: argparse.Namespace) -> None:
    """Each chosen indexplug system against its raw library in this process, in the turns of
    ``paired``, then the system's searches again with the library's answers replayed from
    memory (:mod:`indexplug_bench.replay`): the framework's own work, warm and after a wait."""

    def more(system: System, raw: System) -> dict[str, Any] | str:
        calls = LIBRARY_CALLS.get(system.name)
        if calls is None:
            return "its library calls are not named for a replay"
        return {"warmup": max(2, a.warmup), "replay": Replay(calls, evict_mb=a.evict_mb)}

    def show(row: dict[str, Any]) -> None:
        lat, raw_p50 = row["latency_ms"], row["latency_ms"]["raw"]["p50"]
        print(
            f"  in place: {row['system']} p50 {lat['system']['p50']} ms, "
            f"{row['raw']} p50 {raw_p50} ms",
            file=sys.stderr,
        )
        for regime, ms in row["replayed_p50_ms"].items():
            share = f"{100 * ms / raw_p50:.1f}% of the raw p50" if raw_p50 else ""
            print(f"  replayed {regime}: p50 {ms} ms ({share})", file=sys.stderr)
        print(f"  mismatched answers: {row['replay_mismatches']}", file=sys.stderr)

    _pairs_in_process(a, "replayed", more, show)


def _pair_arguments(p: argparse.ArgumentParser) -> None:
    """What ``paired``, ``steps`` and ``replay`` take."""
    p.add_argument("--scifact", type=Path, default=REPO.parent / "shared/data/beir/scifact")
    p.add_argument("--top-k", type=int, default=100, help="hits per SciFact query")
    p.add_argument("--only", nargs="*", default=None, help="substrings of system names")
    p.add_argument("--elastic-url", default=None)
    p.add_argument("--no-elastic", action="store_true")
    p.add_argument("--embed-cache", type=Path, default=None, help="as for run (dense pairs)")
    p.add_argument(
        "--warmup", type=int, default=1, help="untimed passes over the queries, in turns"
    )
    p.add_argument("--out", type=Path, required=True)


def cli_startup(a: argparse.Namespace) -> None:
    """Each CLI command as a whole process (:mod:`indexplug_bench.startup`)."""
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    result = startup.measure(a.repeats, warmup=a.warmup)
    result["started"] = started
    info = machine.describe()
    command = "python -m indexplug_bench " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    section = startup.markdown(result, command, info)
    if a.out:
        a.out.write_text(
            json.dumps({"machine": info, "command": command, "cli_startup": result}, indent=1)
        )
    if a.no_page:
        print(section)
    else:
        startup.splice(a.markdown, section)
        print(f"wrote the CLI start-up section of {a.markdown}")


def main() -> None:
    p = argparse.ArgumentParser(prog="indexplug_bench")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="measure every available system")
    r.add_argument("--scifact", type=Path, default=REPO.parent / "shared/data/beir/scifact")
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--scale-index-repeats", type=int, default=1)
    r.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    r.add_argument("--top-k", type=int, default=100, help="hits per SciFact query")
    r.add_argument("--only", nargs="*", default=None, help="substrings of system names")
    r.add_argument("--elastic-url", default=None)
    r.add_argument("--no-elastic", action="store_true")
    r.add_argument(
        "--embed-cache",
        type=Path,
        default=None,
        help="embed SciFact once into this shared cache (timed: the model's own row) and let "
        "every dense system read its passage vectors from it (queries are always embedded)",
    )
    r.add_argument(
        "--no-interleave",
        dest="interleave",
        action="store_false",
        help="run each indexplug system and its raw library one after the other (default: "
        "alternating repeat by repeat, each repeat in a fresh process)",
    )
    r.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="untimed passes over the queries before a worker's first timed one (steady-state "
        "latency: with systems in turns every repeat is a fresh process, whose first pass "
        "pays for every cache and a JVM's compilation)",
    )
    r.add_argument("--timeout", type=float, default=3600)
    r.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.json")
    r.add_argument("--markdown", type=Path, default=REPO / "docs" / "benchmarks.md")
    pr = sub.add_parser(
        "paired",
        help="each indexplug system against its raw library in one process, query by query in "
        "turns: the framework's overhead without the spread between processes",
    )
    _pair_arguments(pr)
    pr.add_argument("--repeats", type=int, default=5, help="processes per pair")
    pr.add_argument(
        "--replay",
        action="store_true",
        help="in each process, after the timed pass, also the system's searches with the "
        "library's answers replayed from memory (as `replay`; the page shows both)",
    )
    pr.add_argument(
        "--no-guard-memory",
        dest="guard_memory",
        action="store_false",
        help="the system's guard remembers no checked passage, so every hit is hashed and "
        "copied anew: what the guard's memory buys (the page shows both sets side by side)",
    )
    pr.add_argument("--timeout", type=float, default=3600)
    st = sub.add_parser(
        "steps",
        help="as paired (one process per pair), with the steps of each side timed in place: "
        "where the framework's share of a search goes",
    )
    _pair_arguments(st)
    rp = sub.add_parser(
        "replay",
        help="as steps, then the system's searches again with the library's answers replayed "
        "from memory: the framework's own work per search, warm and after a wait",
    )
    _pair_arguments(rp)
    rp.add_argument(
        "--evict-mb",
        type=int,
        default=EVICT_MB,
        help="MiB of memory written before each search after a wait",
    )
    w = sub.add_parser(
        "warm",
        help="fill an embedding cache with SciFact's vectors, timed, into a results file "
        "(the model's cold indexing rate; `report` merges it)",
    )
    w.add_argument("--scifact", type=Path, default=REPO.parent / "shared/data/beir/scifact")
    w.add_argument("--embed-cache", type=Path, required=True)
    w.add_argument("--tokens", action="store_true", help="per-token vectors (colbert)")
    w.add_argument("--out", type=Path, required=True)
    rep = sub.add_parser(
        "report",
        help="render the Markdown page and charts from one or more results files "
        "(several are merged: a later run's row replaces an earlier one's)",
    )
    rep.add_argument("results", type=Path, nargs="*", default=[REPO / "docs" / "benchmarks.json"])
    rep.add_argument("--markdown", type=Path, default=REPO / "docs" / "benchmarks.md")
    rep.add_argument("--out", type=Path, default=None, help="write the merged results here")
    rep.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when the page differs from what the results render to",
    )
    rep.add_argument(
        "--scale-note",
        action="append",
        default=[],
        metavar="SYSTEM=TEXT",
        help="why a system's scale rows stop where they do (kept in the results file)",
    )
    rep.add_argument(
        "--pair-note",
        action="append",
        default=[],
        metavar="SYSTEM=TEXT",
        help="a note under the table of pairs about a system's rows (kept in the results file)",
    )
    cs = sub.add_parser(
        "cli-startup",
        help="time each indexplug command as a whole process, in turns with `python -c pass`, "
        "and put the table on the benchmarks page",
    )
    cs.add_argument("--repeats", type=int, default=20, help="timed runs of each command")
    cs.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    cs.add_argument("--out", type=Path, default=None, help="also write the results JSON here")
    cs.add_argument("--markdown", type=Path, default=REPO / "docs" / "benchmarks.md")
    cs.add_argument("--no-page", action="store_true", help="print the section, leave the page")
    a = p.parse_args()
    if a.cmd == "cli-startup":
        cli_startup(a)
    elif a.cmd == "run":
        run(a)
    elif a.cmd == "paired":
        paired(a)
    elif a.cmd == "steps":
        steps(a)
    elif a.cmd == "replay":
        replay(a)
    elif a.cmd == "warm":
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        row = warm(a.scifact, MINILM, a.embed_cache, tokens=a.tokens)
        a.out.write_text(
            json.dumps(
                {
                    "machine": machine.describe(),
                    "command": "python -m indexplug_bench "
                    + " ".join(shlex.quote(x) for x in sys.argv[1:]),
                    "started": started,
                    "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "quality": [],
                    "scale": [],
                    "embedding": [row],
                    "skipped": {},
                },
                indent=1,
            )
        )
    else:
        results = merge([json.loads(f.read_text()) for f in a.results])
        if a.check:
            if drift(results, a.markdown, a.markdown.parent / "img"):
                print(
                    f"{a.markdown} is not what {', '.join(map(str, a.results))} render to: "
                    "run `python -m indexplug_bench report` and commit the page",
                    file=sys.stderr,
                )
                raise SystemExit(1)
            return
        for note in a.scale_note:
            system, _, why = note.partition("=")
            results.setdefault("scale_notes", {})[system.strip()] = why.strip()
        for note in a.pair_note:
            system, _, why = note.partition("=")
            results.setdefault("pair_notes", {})[system.strip()] = why.strip()
        if a.out:
            a.out.write_text(json.dumps(results, indent=1))
        render(results, a.markdown, a.markdown.parent / "img")


if __name__ == "__main__":
    main()

__all__ = ["MINILM", "main"]
