"""Print what went wrong in a tox run, from its ``--result-json`` file, for the end of CI's log.

CI logs are long (pip's install output alone runs to thousands of lines) and a log viewer may
keep only the head and the tail, so the line that says *why* an env failed can be lost in the
middle.  This prints, for each failed env, the commands that failed with the tail of their
output, plus the disk and memory left, so the reason is at the end of the log where it is read.

``--failed-setup FILE`` / ``--failed-test FILE`` print the envs that failed while being set up
(installing) or in their tests, comma-separated, for ``.ci/run``'s one retry of installs.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

TAIL_LINES = 40


def tail(text: str, lines: int = TAIL_LINES) -> str:
    kept = [line[:400] for line in (text or "").rstrip().splitlines()[-lines:]]
    return "\n".join("    " + line for line in kept)


def main(path: str) -> int:
    print("\n==== CI digest ====")
    for where in (".", tempfile.gettempdir(), str(Path.home())):
        usage = shutil.disk_usage(where)
        free, total = usage.free / 2**30, usage.total / 2**30
        print(f"disk at {where}: {free:.1f} GiB free of {total:.1f} GiB")
    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()[:3]
        print("memory:", "; ".join(" ".join(line.split()) for line in meminfo))
    except OSError:
        pass
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        print(f"no tox result file to read ({exc})")
        return 0
    envs = result.get("testenvs", {})
    for name, env in envs.items():
        outcome = env.get("result", {})
        if outcome.get("success", True):
            continue
        print(f"\n--- {name}: failed (exit {outcome.get('exit_code')}) ---")
        shown = False
        for phase in ("setup", "test"):
            for cmd in env.get(phase, []):
                if cmd.get("retcode", 0) == 0:
                    continue
                shown = True
                print(f"  {phase}: {' '.join(map(str, cmd.get('command', [])))[:300]}")
                print(f"  exit {cmd.get('retcode')}; stdout tail:\n{tail(cmd.get('output', ''))}")
                if (cmd.get("err") or "").strip():
                    print(f"  stderr tail:\n{tail(cmd.get('err', ''))}")
        if not shown:
            print("  (no failing command recorded: the env failed before running one)")
    print("==== end of CI digest ====")
    return 0


def failed(path: str, phase: str) -> list[str]:
    """Envs that failed, and where: ``setup`` (a command before the tests failed: installing
    the env) or ``test`` (the env got as far as its tests)."""
    try:
        envs = json.loads(Path(path).read_text()).get("testenvs", {})
    except (OSError, ValueError):
        return []
    out = []
    for name, env in envs.items():
        if env.get("result", {}).get("success", True):
            continue
        in_setup = any(c.get("retcode", 0) != 0 for c in env.get("setup", []))
        if (phase == "setup") == in_setup:
            out.append(name)
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("--failed-setup", "--failed-test"):
        print(",".join(failed(sys.argv[2], sys.argv[1].removeprefix("--failed-"))))
        raise SystemExit(0)
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else ".tox/result.json"))
