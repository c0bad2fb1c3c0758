"""Checks of concurrent writers, in threads and in processes."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from indexplug.guard import MAX_TOP_K
from indexplug.outcomes import (
    Indexed,
    IndexEmpty,
    NoMatch,
    Searched,
)
from indexplug.passages import Passage
from indexplug.testing.checks.helpers import (
    _add,
    _by_id,
    _check_hits,
    _count,
    _describe,
    _Problems,
    _search,
    _show,
    kit_passage,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import KitSettings, Subject, fail


def _concurrent_batches(writers: int, st: KitSettings, tag: str) -> list[list[list[Passage]]]:
    """Each writer's batches: passages of its own plus two shared by several writers, so that
    the same passage is added concurrently and must still be stored (and counted) once."""
    shared = [
        kit_passage(
            f"concur shared passage {i} that several writers add", 500 + i, tag=f"{tag}-shared"
        )
        for i in range(writers + st.batches_per_thread)
    ]
    return [
        [
            [
                *(
                    kit_passage(f"concur writer {w} passage {j} ctok{w}x{j}", j, tag=f"{tag}-{w}")
                    for j in range(b * st.batch_size, (b + 1) * st.batch_size)
                ),
                shared[w + b],
                shared[(w + b + 1) % len(shared)],
            ]
            for b in range(st.batches_per_thread)
        ]
        for w in range(writers)
    ]


def _distinct(batches: list[list[list[Passage]]]) -> list[Passage]:
    return list(_by_id([p for writer in batches for batch in writer for p in batch]).values())


def _verify_concurrent(
    s: Subject, index: str, expected: list[Passage], added_total: int, what: str
) -> None:
    want = _by_id(expected)
    count = _count(s, index, f"status after {what}")
    if count != len(want):
        fail(
            f"after {what}, status reports {count} passages for {len(want)} distinct ones "
            f"({'lost' if count < len(want) else 'duplicated'})"
        )
    out = _search(s, index, "concur", f"search after {what}", top_k=min(MAX_TOP_K, len(want)))
    ids = _check_hits(s, out, len(want), want, f"search after {what}", count=len(want))
    if set(ids) != set(want):
        fail(
            f"after {what}, search returns {len(set(ids))} of {len(want)} passages: "
            f"{len(set(want) - set(ids))} lost"
        )
    if added_total != len(want):
        fail(
            f"{what} reported {added_total} passages added for {len(want)} distinct ones: "
            "some were counted as added twice"
            if added_total > len(want)
            else f"{what} reported only {added_total} of {len(want)} passages as added"
        )


@_check(
    "concurrency.threads",
    "Several threads adding and searching at once lose no passage and duplicate none",
    claim="concurrent_writers",
)
def _threads(s: Subject) -> None:
    st = s.settings
    index = s.index("threads")
    batches = _concurrent_batches(st.threads, st, "t")
    barrier = threading.Barrier(st.threads)
    problems = _Problems()
    added: list[int] = []

    def writer(w: int) -> None:
        barrier.wait()
        for b, chunk in enumerate(batches[w]):
            try:
                out = s.guard.add(index, chunk, deadline_s=st.op_deadline_s)
            except Exception as exc:
                problems.add(f"thread {w} add raised {_describe(exc)}")
                return
            if not isinstance(out, Indexed):
                problems.add(f"concurrent add (thread {w}, batch {b}) returned {_show(out)}")
                return
            added.append(out.added)  # list.append is atomic

    with _Readers(s, index, problems), ThreadPoolExecutor(max_workers=st.threads) as pool:
        for f in [pool.submit(writer, w) for w in range(st.threads)]:
            f.result()
    problems.raise_first()
    expected = _distinct(batches)
    _verify_concurrent(s, index, expected, sum(added), f"{st.threads} threads added at once")


class _Readers:
    """Threads that keep searching an index while writers work on it: every answer must be
    typed, and no answer may hold a passage twice."""

    def __init__(self, s: Subject, index: str, problems: _Problems, n: int = 2) -> None:
        self.s, self.index, self.problems = s, index, problems
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._read, daemon=True) for _ in range(n)]

    def __enter__(self) -> _Readers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        for t in self.threads:
            t.join()

    def _read(self) -> None:
        s = self.s
        while not self.done.is_set():
            try:
                out = s.guard.search(
                    self.index, "concur", top_k=100, deadline_s=s.settings.op_deadline_s
                )
            except Exception as exc:
                self.problems.add(f"concurrent search raised {_describe(exc)}")
                return
            if not isinstance(out, (Searched, NoMatch, IndexEmpty)):
                self.problems.add(f"concurrent search returned {_show(out)}")
                return
            if isinstance(out, Searched):
                ids = [h.passage.id for h in out.hits]
                if len(set(ids)) != len(ids):
                    self.problems.add("a concurrent search returned the same passage twice")
                    return
            time.sleep(0.002)


def _run_writers(jobs: list[Any], timeout_s: float) -> list[list[Any]]:
    """Start one writer process per job, let them all go at once, collect their results."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for job in jobs:
            proc = subprocess.Popen(
                [sys.executable, "-m", "indexplug.testing._writer"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
            procs.append(proc)
            assert proc.stdin is not None
            proc.stdin.write(pickle.dumps(job))
            proc.stdin.flush()
        until = time.monotonic() + timeout_s
        for w, proc in enumerate(procs):
            assert proc.stdout is not None
            line = proc.stdout.readline().decode("utf-8", "replace").strip()
            if line != "ready":
                why = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
                detail = line or (why.strip().splitlines() or ["no output"])[-1]
                if line.startswith("{"):
                    detail = json.loads(line).get("error", line)
                fail(f"writer process {w} could not open the backend: {detail}")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        results = []
        for w, proc in enumerate(procs):
            try:
                out, err = proc.communicate(timeout=max(0.1, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                fail(f"the writer processes did not finish within {timeout_s:g}s")
            text = out.decode("utf-8", "replace").strip()
            if proc.returncode != 0 or not text:
                last = (err.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
                fail(f"writer process {w} exited with status {proc.returncode}: {last}")
            results.append(json.loads(text.splitlines()[-1]))
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@_check(
    "concurrency.processes",
    "Several processes adding at once lose no passage and duplicate none",
    claim="multiprocess_writers",
    needs=("factory",),
)
def _processes(s: Subject) -> None:
    st = s.settings
    factory = s.factory
    assert factory is not None
    try:
        pickle.dumps(factory)
    except Exception as exc:
        fail(f"backend_factory cannot be sent to another process: {_describe(exc)}")
    index = s.index("procs")
    # Create the index first from this process, then race the children on it.
    first = kit_passage("concur seed passage written before the processes start", 999)
    _add(s, index, [first], "add before starting the writer processes")
    batches = _concurrent_batches(st.processes, st, "p")
    jobs = [
        (factory, index, [[p.model_dump_json() for p in chunk] for chunk in mine], st.op_deadline_s)
        for mine in batches
    ]
    problems = _Problems()
    with _Readers(s, index, problems):
        results = _run_writers(jobs, st.process_timeout_s)
    problems.raise_first()
    total = 1
    for w, res in enumerate(results):
        for b, (code, n, shown) in enumerate(res):
            if code != "INDEXED":
                fail(f"concurrent add (process {w}, batch {b}) returned {shown}")
            total += n
    expected = [first, *_distinct(batches)]
    _verify_concurrent(s, index, expected, total, f"{st.processes} processes added at once")
