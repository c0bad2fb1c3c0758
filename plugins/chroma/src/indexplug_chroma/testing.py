"""A real Chroma server for tests: ``chroma run`` on 127.0.0.1, in a temporary data folder.

Why a real server: what the backend must get right in server mode (a connection refused, a
server that comes back on the same port with the same data, an HTTP client that must reconnect)
is exactly what a mock would get wrong.  The server is the ``chroma`` script of the *same*
environment as the running interpreter, so the server and the client are always the same
chromadb version.

Standard library only, so it can start a server before anything else is importable::

    with ChromaServer() as server:          # a free port, a temporary folder
        use(server.host, server.port)
        server.stop()                        # the unavailability checks
        server.start()                       # same port, same data: "it came back"

    python -m indexplug_chroma.testing      # run one in the foreground, print its address

Every server started here is stopped when the interpreter exits (``atexit``), and the
temporary folder it made is removed.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["ChromaServer", "ChromaServerError", "chroma_executable", "free_port"]

HEARTBEAT = "/api/v2/heartbeat"


class ChromaServerError(RuntimeError):
    """The server could not be started (the message ends with the tail of its log)."""


def chroma_executable() -> Path:
    """The ``chroma`` script next to this interpreter (a venv's ``bin``), else on ``PATH``."""
    scripts = Path(sys.executable).parent
    for name in ("chroma", "chroma.exe"):
        candidate = scripts / name
        if candidate.is_file():
            return candidate
    found = shutil.which("chroma")
    if found:
        return Path(found)
    raise ChromaServerError(
        f"no 'chroma' script next to {sys.executable} or on PATH; pip install chromadb"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


_live: weakref.WeakSet[ChromaServer] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for server in list(_live):
        server.close()


class ChromaServer:
    """One ``chroma run`` process; ``start``/``stop`` may be repeated (same port and data)."""

    def __init__(
        self,
        *,
        path: Path | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout_s: float = 90.0,
    ) -> None:
        self._own_dir: Path | None = None
        if path is None:
            self._own_dir = Path(tempfile.mkdtemp(prefix="indexplug-chroma-"))
            path = self._own_dir / "data"
        self.path = Path(path)
        self.host = host
        self.port = port or free_port(host)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = (self._own_dir or self.path.parent) / f"chroma-{self.port}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        _live.add(self)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def heartbeat(self, timeout_s: float = 1.0) -> bool:
        """True when the server answers its heartbeat."""
        try:
            with urllib.request.urlopen(self.url + HEARTBEAT, timeout=timeout_s) as resp:
                return bool(resp.status == 200)
        except (OSError, ValueError):
            return False

    def start(self) -> Self:
        """Start the server (if it is not running) and wait until its heartbeat answers."""
        if self.running:
            return self
        self.path.mkdir(parents=True, exist_ok=True)
        cmd = [
            str(chroma_executable()),
            "run",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--path",
            str(self.path),
        ]
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False", "NO_COLOR": "1"}
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: stop() reaches every child
            )
        until = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < until:
            if self._proc.poll() is not None:
                raise ChromaServerError(
                    f"chroma run exited with status {self._proc.returncode}:\n{self.log_tail()}"
                )
            if self.heartbeat(timeout_s=0.5):
                return self
            time.sleep(0.1)
        self.stop()
        raise ChromaServerError(
            f"chroma run did not answer {self.url}{HEARTBEAT} within "
            f"{self.startup_timeout_s:g}s:\n{self.log_tail()}"
        )

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and wait until the port is closed."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=timeout_s)
        until = time.monotonic() + timeout_s
        while time.monotonic() < until and self.heartbeat(timeout_s=0.2):
            time.sleep(0.05)

    def restart(self) -> Self:
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the server and remove the temporary folder this object made (if any)."""
        self.stop()
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None
        _live.discard(self)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def main() -> None:
    """Run a server in the foreground until interrupted (for trying the server mode)."""
    with ChromaServer() as server:
        print(f"Chroma server at {server.url} (data in {server.path}); Ctrl-C stops it")
        try:
            while server.running:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
