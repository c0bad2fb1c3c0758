"""Child process of the ``concurrency.processes`` check: ``python -m indexplug.testing._writer``.

Run as a module rather than through ``multiprocessing`` so that it never re-imports the
parent's ``__main__`` (a test runner, a script without a ``__main__`` guard, the CLI): the
check behaves the same however the kit was started.

Protocol, over stdin/stdout: the parent sends a pickled ``(factory, index, batches,
deadline_s)``; the child opens its own backend instance with ``factory()``, prints ``ready``,
waits for a line ``go`` (so that every writer starts at once), adds each batch, and prints one
JSON line: a list of ``[code, added, shown]`` per batch, or ``{"error": ...}``.
"""

from __future__ import annotations

import json
import pickle
import sys
from typing import Any


def main() -> int:
    job: Any = pickle.load(sys.stdin.buffer)
    factory, index, batches, deadline_s = job
    from indexplug.guard import Guard
    from indexplug.passages import Passage
    from indexplug.testing.checks.helpers import _show

    try:
        guard = factory()
        if not isinstance(guard, Guard):
            guard = Guard(guard)
    except Exception as exc:  # reported to the parent, which fails the check with it
        print(json.dumps({"error": f"the factory raised {type(exc).__name__}: {exc}"}), flush=True)
        return 0
    print("ready", flush=True)
    sys.stdin.buffer.readline()
    results: list[list[Any]] = []
    try:
        for batch in batches:
            passages = [Passage.model_validate_json(p) for p in batch]
            try:
                out = guard.add(index, passages, deadline_s=deadline_s)
            except Exception as exc:  # a guarded call must never raise; report it
                results.append(["RAISED", 0, f"raised {type(exc).__name__}: {exc}"])
                continue
            results.append([str(out.code), int(getattr(out, "added", 0)), _show(out)])
    finally:
        guard.close()
    print(json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
