"""Obtain and run a real Elasticsearch for tests and CI.

Why this module exists: the Elasticsearch backend is only worth testing against
the real server.  Mocks drift from real behaviour exactly where it matters
(analysis, scoring, refresh semantics, replication, node loss).  So this module

* fetches the small ``integ-test-zip`` distribution from Maven Central (the one
  artifact host reachable from our CI), verifies it against the published
  checksum and unpacks it once into a user cache;
* starts one or more nodes on 127.0.0.1 with throw-away data directories and
  free ports, waits for the cluster health you ask for, and lets tests stop and
  restart single nodes to exercise fail-over;
* makes sure no stray ``java`` survives the Python process (``atexit`` plus a
  tiny watchdog process that also covers ``SIGKILL`` of the test runner).

It deliberately imports only the standard library so that it works before any
Elasticsearch client (or the indexplug backend) is installed, e.g. in a CI step
that warms the cache::

    python -m indexplug_elastic.testing.server fetch
    python -m indexplug_elastic.testing.server run --nodes 2

Things worth knowing about the integ-test-zip (checked against 8.19.21):

* It ships **no JDK**; a JDK 17+ must be installed (``ES_JAVA_HOME``,
  ``JAVA_HOME`` or ``java`` on ``PATH``, in that order).
* It contains only the modules ``apm``, ``transport-netty4``, ``x-pack-core``
  and ``x-pack-security``.  Hence ``xpack.security.enabled`` is accepted (and
  needed), but there is no painless scripting, no ``_delete_by_query`` /
  ``_update_by_query`` / ``_reindex``, no ``analysis-common`` (no ``english``
  analyzer, no ``porter_stem``/``asciifolding`` filters), no ``rank_features``
  and not even ``GET /`` (``rest-root`` module).  ``dense_vector``/kNN,
  ``sparse_vector``, BM25 ``match`` queries and ``_bulk`` work.
* Elasticsearch refuses to run as root.  As root we run the node as the
  unprivileged system user ``indexplug-es`` (created on demand).

Unix only: it relies on process groups, ``fcntl`` locks and ``setuid``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import warnings
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

__all__ = [
    "DEFAULT_VERSION",
    "ES_USER",
    "DistributionError",
    "EsCluster",
    "EsError",
    "EsNode",
    "EsStartError",
    "EsTimeoutError",
    "cache_dir",
    "distribution_url",
    "ensure_distribution",
    "ensure_es_user",
    "find_java_home",
    "main",
    "runnable_home",
]

DEFAULT_VERSION = "8.19.21"
"""The Elasticsearch version tests run against unless told otherwise."""

ES_USER = "indexplug-es"
"""Unprivileged system user the nodes run as when we are root."""

MAVEN_BASE = (
    "https://repo1.maven.org/maven2/org/elasticsearch/distribution/integ-test-zip/elasticsearch"
)
# Strongest first; Maven Central publishes .sha1 for everything, .sha512 for most.
_DIGESTS = ("sha512", "sha1")
_DIGEST_LENGTHS = {"sha512": 128, "sha1": 40}
_DEFAULT_RUNTIME_DIR = "/var/cache/indexplug-es"
NO_PERF_DATA = "-XX:-UsePerfData"
"""Keeps a JVM from writing /tmp/hsperfdata_<user> (only jstat and the like read it)."""
_HEALTH_STATUSES = ("red", "yellow", "green")
_BIND_ERROR = re.compile(
    r"BindException|BindTransportException|BindHttpException|Address already in use"
)

HealthStatus = Literal["green", "yellow", "red"]


class EsError(RuntimeError):
    """Base class for everything this module raises on purpose."""


class DistributionError(EsError):
    """The distribution could not be downloaded, verified or unpacked."""


class EsStartError(EsError):
    """A node did not come up; the message carries the tail of its log."""


class EsTimeoutError(EsError, TimeoutError):
    """The cluster did not reach the requested health in time."""


# --------------------------------------------------------------------------------------
# Distribution
# --------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where downloads and unpacked trees live: ``${INDEXPLUG_CACHE:-~/.cache/indexplug}``.

    Outside the repository on purpose: the zip is ~100 MB and is shared by every
    checkout and every test run on the machine.
    """
    configured = os.environ.get("INDEXPLUG_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "indexplug"


def distribution_url(version: str = DEFAULT_VERSION) -> str:
    """Maven Central URL of the integ-test-zip for ``version``."""
    return f"{MAVEN_BASE}/{version}/elasticsearch-{version}.zip"


def ensure_distribution(version: str = DEFAULT_VERSION, *, cache: Path | None = None) -> Path:
    """Return the home of an unpacked Elasticsearch ``version``, fetching it if needed.

    The fast path (already unpacked) touches neither the network nor a lock, so
    calling this from every test session costs nothing.  Otherwise, under an
    exclusive file lock (parallel test workers may race here):

    1. the checksum (``.sha512``, else ``.sha1``) is taken from a sidecar file in
       the cache or fetched from Maven Central and stored as that sidecar;
    2. a cached zip is reused when it matches, else it is (re)downloaded through a
       temporary file that is verified and then atomically renamed into place;
    3. the zip is unpacked into a temporary directory, file modes are normalised
       (``zipfile`` ignores them, and a restrictive umask must not make the tree
       unreadable for the unprivileged node user) and the directory is renamed to
       ``elasticsearch-<version>`` -- so a half-unpacked tree is never visible.

    When the checksum cannot be fetched (offline) but a zip is cached, the zip
    is used after a CRC check and a warning.
    """
    cache = (cache or cache_dir()).expanduser().resolve()
    home = cache / f"elasticsearch-{version}"
    if _is_unpacked(home):
        return home
    cache.mkdir(parents=True, exist_ok=True)
    with _file_lock(cache / f".elasticsearch-{version}.lock"):
        if _is_unpacked(home):
            return home
        zip_path = cache / f"elasticsearch-{version}.zip"
        _ensure_zip(distribution_url(version), zip_path)
        _unpack(zip_path, home)
    return home


def _is_unpacked(home: Path) -> bool:
    return (home / "bin" / "elasticsearch").is_file() and (home / "lib").is_dir()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock, released when the block ends or the process dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _http_get(url: str, timeout: float = 60.0) -> bytes | None:
    """GET ``url``; ``None`` on 404, exceptions for everything else that fails."""
    request = urllib.request.Request(url, headers={"User-Agent": "indexplug-testing"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data: bytes = response.read()
            return data
    except urllib.error.HTTPError as exc:
        if exc.code == HTTPStatus.NOT_FOUND:
            return None
        raise


def _parse_digest(text: str, algorithm: str) -> str:
    # Maven checksum files hold either "<hex>" or "<hex>  <filename>".
    token = text.strip().split()[0].lower() if text.strip() else ""
    if len(token) != _DIGEST_LENGTHS[algorithm] or not re.fullmatch(r"[0-9a-f]+", token):
        raise DistributionError(f"malformed {algorithm} checksum: {text[:200]!r}")
    return token


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _expected_digest(url: str, zip_path: Path) -> tuple[str, str] | None:
    """``(algorithm, hexdigest)`` from a cached sidecar or Maven Central, or None."""
    for algorithm in _DIGESTS:
        sidecar = zip_path.with_name(f"{zip_path.name}.{algorithm}")
        if sidecar.is_file():
            return algorithm, _parse_digest(sidecar.read_text(), algorithm)
    for algorithm in _DIGESTS:
        body = _http_get(f"{url}.{algorithm}")
        if body is not None:
            digest = _parse_digest(body.decode("ascii", "replace"), algorithm)
            _atomic_write(
                zip_path.with_name(f"{zip_path.name}.{algorithm}"),
                f"{digest}\n".encode(),
            )
            return algorithm, digest
    return None


def _file_digest(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _check_zip(path: Path) -> None:
    """CRC-check every member: the fallback when there is no checksum to compare."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError) as exc:
        raise DistributionError(f"{path} is not a valid zip: {exc}") from exc
    if bad is not None:
        raise DistributionError(f"{path} is corrupt (first bad member: {bad})")


def _download(url: str, dest: Path, expected: tuple[str, str] | None) -> None:
    """Stream ``url`` into a temp file beside ``dest``, verify, rename into place."""
    print(f"downloading {url}", file=sys.stderr)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        digest = hashlib.new(expected[0]) if expected else None
        request = urllib.request.Request(url, headers={"User-Agent": "indexplug-testing"})
        with (
            os.fdopen(fd, "wb") as out,
            urllib.request.urlopen(request, timeout=60) as response,
        ):
            while chunk := response.read(1 << 20):
                out.write(chunk)
                if digest is not None:
                    digest.update(chunk)
        if expected and digest is not None and digest.hexdigest() != expected[1]:
            raise DistributionError(
                f"{url}: {expected[0]} mismatch (got {digest.hexdigest()}, want {expected[1]})"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _ensure_zip(url: str, zip_path: Path) -> None:
    try:
        expected = _expected_digest(url, zip_path)
    except (urllib.error.URLError, OSError) as exc:
        if not zip_path.is_file():
            raise DistributionError(f"cannot fetch checksum for {url}: {exc}") from exc
        warnings.warn(
            f"could not fetch the checksum of {url} ({exc}); using the cached "
            f"{zip_path} after a CRC check only",
            stacklevel=3,
        )
        _check_zip(zip_path)
        return
    if zip_path.is_file():
        if expected is None:
            _check_zip(zip_path)
            return
        if _file_digest(zip_path, expected[0]) == expected[1]:
            return
        warnings.warn(
            f"cached {zip_path} does not match its {expected[0]}; downloading again",
            stacklevel=3,
        )
        zip_path.unlink()
    try:
        _download(url, zip_path, expected)
    except (urllib.error.URLError, OSError) as exc:
        raise DistributionError(f"cannot download {url}: {exc}") from exc
    if expected is None:
        _check_zip(zip_path)


def _unpack(zip_path: Path, home: Path) -> None:
    if home.exists():  # leftovers of a manual or foreign unpack; ours appear atomically
        shutil.rmtree(home)
    staging = Path(tempfile.mkdtemp(dir=home.parent, prefix=f".{home.name}.", suffix=".unpack"))
    try:
        with zipfile.ZipFile(zip_path) as archive:
            prefix = f"{home.name}/"
            for info in archive.infolist():
                if not info.filename.startswith(prefix):
                    raise DistributionError(f"unexpected entry {info.filename!r} in {zip_path}")
                if stat.S_ISLNK(info.external_attr >> 16):
                    raise DistributionError(f"unexpected symlink {info.filename!r} in {zip_path}")
                target = archive.extract(info, staging)
                executable = info.is_dir() or (info.external_attr >> 16) & 0o111
                os.chmod(target, 0o755 if executable else 0o644)
        os.replace(staging / home.name, home)
    except zipfile.BadZipFile as exc:
        raise DistributionError(f"cannot unpack {zip_path}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --------------------------------------------------------------------------------------
# User, Java and a home directory the node user can read
# --------------------------------------------------------------------------------------


def _which_admin_tool(name: str) -> str | None:
    # Non-login root shells often lack /usr/sbin in PATH.
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
    return shutil.which(name, path=path)


def ensure_es_user(name: str = ES_USER) -> tuple[int, int]:
    """``(uid, gid)`` of the unprivileged node user, created if missing (root only).

    Elasticsearch exits with "can not run elasticsearch as root", and CI
    containers usually run as root, hence a dedicated system user without home
    directory or login shell.
    """
    with contextlib.suppress(KeyError):
        entry = pwd.getpwnam(name)
        return entry.pw_uid, entry.pw_gid
    if os.geteuid() != 0:
        raise EsError(f"user {name!r} does not exist and only root can create it")
    nologin = next(
        (p for p in ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false") if os.path.exists(p)),
        "/bin/false",
    )
    useradd, adduser, addgroup = (_which_admin_tool(t) for t in ("useradd", "adduser", "addgroup"))
    if useradd:
        options = ["--system", "--no-create-home", "--home-dir", "/nonexistent", "--user-group"]
        commands = [[useradd, *options, "--shell", nologin, name]]
    elif adduser and addgroup:  # busybox (Alpine)
        options = ["-S", "-D", "-H", "-h", "/nonexistent"]
        commands = [[addgroup, "-S", name], [adduser, *options, "-s", nologin, "-G", name, name]]
    else:
        raise EsError(f"cannot create user {name!r}: neither useradd nor adduser found")
    errors = []
    for command in commands:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            errors.append(f"{' '.join(command)}: {result.stderr.strip()}")
    try:  # a concurrent creator may have won the race; that is fine
        entry = pwd.getpwnam(name)
    except KeyError:
        raise EsError(f"cannot create user {name!r}: {'; '.join(errors)}") from None
    return entry.pw_uid, entry.pw_gid


def find_java_home() -> Path:
    """The JDK to run with: ``ES_JAVA_HOME``, ``JAVA_HOME`` or ``java`` on ``PATH``.

    The integ-test-zip has no bundled JDK, so one must come from the machine.
    Elasticsearch 8 needs Java 17 or newer; its launcher checks and says so.
    """
    for variable in ("ES_JAVA_HOME", "JAVA_HOME"):
        value = os.environ.get(variable)
        if value:
            if (Path(value) / "bin" / "java").is_file():
                return Path(value)
            raise EsError(f"{variable}={value} has no bin/java")
    java = shutil.which("java")
    if java is None:
        raise EsError(
            "no Java found: the Elasticsearch integ-test-zip ships without a JDK; "
            "install JDK 17+ or set ES_JAVA_HOME"
        )
    return Path(java).resolve().parent.parent


def _traversable_by(path: Path, uid: int, gid: int) -> bool:
    """Whether ``uid``/``gid`` may search every directory from ``/`` to ``path``."""
    for directory in (path, *path.parents):
        info = directory.stat()
        if info.st_uid == uid:
            bit = stat.S_IXUSR
        elif info.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return False
    return True


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:  # other file system, or hard links not permitted
        shutil.copy2(source, destination)


def runnable_home(home: Path, uid: int, gid: int) -> Path:
    """A path to the distribution ``home`` that ``uid``/``gid`` can actually reach.

    The cache normally sits in root's home, which is mode 0700, so the node user
    cannot open the jars there.  Rather than loosening root's home directory we
    mirror the (immutable, versioned) tree with hard links -- nearly free, copies
    only across file systems -- into a root-owned, world-readable directory,
    ``${INDEXPLUG_ES_RUNTIME_DIR:-/var/cache/indexplug-es}``.
    """
    if _traversable_by(home, uid, gid):
        return home
    runtime = Path(os.environ.get("INDEXPLUG_ES_RUNTIME_DIR") or _DEFAULT_RUNTIME_DIR)
    target = runtime / home.name
    if not _is_unpacked(target):
        runtime.mkdir(mode=0o755, parents=True, exist_ok=True)
        info = runtime.stat()
        if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            # Others could swap jars under us: refuse rather than run their code.
            raise EsError(
                f"{runtime} must be owned by uid {os.geteuid()} and not be group/world writable"
            )
        os.chmod(runtime, 0o755)
        with _file_lock(runtime / f".{home.name}.lock"):
            if not _is_unpacked(target):
                if target.exists():
                    shutil.rmtree(target)
                staging = Path(
                    tempfile.mkdtemp(dir=runtime, prefix=f".{home.name}.", suffix=".mirror")
                )
                try:
                    shutil.copytree(
                        home,
                        staging / home.name,
                        symlinks=True,
                        copy_function=_link_or_copy,
                    )
                    os.replace(staging / home.name, target)
                finally:
                    shutil.rmtree(staging, ignore_errors=True)
    if not _traversable_by(target, uid, gid):
        raise EsError(f"uid {uid} cannot reach {target}; set INDEXPLUG_ES_RUNTIME_DIR elsewhere")
    return target


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid)
    for directory, subdirs, files in os.walk(root):
        for name in (*subdirs, *files):
            os.chown(os.path.join(directory, name), uid, gid, follow_symlinks=False)


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free right now (all held open until all are chosen)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# --------------------------------------------------------------------------------------
# Process hygiene: atexit and a watchdog for when atexit cannot run
# --------------------------------------------------------------------------------------

# The watchdog is a separate process in its own session.  It learns node process
# groups ("+ pgid" / "- pgid") and throw-away directories ("+d path" / "-d path")
# through a pipe; when the pipe reaches EOF -- our process exited, however it died,
# SIGKILL included -- it terminates what is left and deletes the directories.
_WATCHDOG_SOURCE = r"""
import os, shutil, signal, sys, time
groups, dirs = set(), set()
for line in sys.stdin:
    op, _, arg = line.rstrip("\n").partition(" ")
    if op == "+":
        groups.add(int(arg))
    elif op == "-":
        groups.discard(int(arg))
    elif op == "+d":
        dirs.add(arg)
    elif op == "-d":
        dirs.discard(arg)
def alive(group):
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
    for group in list(groups):
        try:
            os.killpg(group, sig)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(g) for g in groups):
        time.sleep(0.2)
for path in dirs:
    shutil.rmtree(path, ignore_errors=True)
"""

_lock = threading.RLock()
_watchdog: subprocess.Popen[bytes] | None = None
_watchdog_owner = 0  # pid that started it; a forked child must not use or reap it
_live_clusters: set[EsCluster] = set()


def _watchdog_send(message: str) -> None:
    global _watchdog, _watchdog_owner
    with _lock:
        if _watchdog is None or _watchdog_owner != os.getpid() or _watchdog.poll() is not None:
            if not sys.executable:
                return
            try:
                _watchdog = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _WATCHDOG_SOURCE],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError:
                return
            _watchdog_owner = os.getpid()
        assert _watchdog.stdin is not None
        with contextlib.suppress(OSError):
            _watchdog.stdin.write(f"{message}\n".encode())
            _watchdog.stdin.flush()


def _shutdown_all() -> None:
    """atexit hook: stop every cluster still running, then release the watchdog."""
    with _lock:
        # After os.fork() the child inherits this hook and the registry; only the
        # process that started a cluster may stop it.
        clusters = [c for c in _live_clusters if c._owner_pid == os.getpid()]
    for cluster in clusters:  # signal everything first so nodes shut down in parallel
        for node in cluster.nodes:
            node._signal(signal.SIGTERM)
    for cluster in clusters:
        cluster.stop()
    with _lock:
        if _watchdog is not None and _watchdog.stdin is not None and _watchdog_owner == os.getpid():
            with contextlib.suppress(OSError):
                _watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                _watchdog.wait(timeout=5)


atexit.register(_shutdown_all)


# --------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------


def _http(method: str, url: str, body: Any = None, *, timeout: float = 30.0) -> tuple[int, Any]:
    """Minimal JSON-over-HTTP; returns ``(status, parsed body)`` for every HTTP status.

    ``body`` may be a ``str`` (sent as is, e.g. NDJSON for ``_bulk``) or anything
    JSON-serialisable.  Connection errors propagate as ``OSError``/``URLError``.
    """
    data = None
    headers = {"Accept": "application/json"}
    if body is not None:
        if isinstance(body, str):
            data = body.encode()
            headers["Content-Type"] = (
                "application/x-ndjson" if "_bulk" in url else "application/json"
            )
        else:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def _answers_http(node: EsNode) -> bool:
    """Whether the node's HTTP port serves requests (``local``: needs no master)."""
    try:
        code, _ = _http("GET", f"{node.url}/_cluster/health?local=true", timeout=10)
    except OSError:
        return False
    return code == HTTPStatus.OK


# --------------------------------------------------------------------------------------
# Nodes and clusters
# --------------------------------------------------------------------------------------


class EsNode:
    """One Elasticsearch process: its ports, its private directory and its log.

    The directory holds ``config/`` (a copy of the distribution's config with our
    ``elasticsearch.yml``), ``data/``, ``logs/``, ``tmp/`` and ``console.log``
    (stdout+stderr, which also catches failures that happen before logging is
    set up, such as an unknown setting or a wrong Java version).  It survives
    :meth:`EsCluster.stop_node` so that a restarted node recovers its shards.
    """

    def __init__(self, name: str, http_port: int, transport_port: int, directory: Path) -> None:
        self.name = name
        self.http_port = http_port
        self.transport_port = transport_port
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None
        self.wanted = False
        """True from launch to an intentional stop; wanted but not running = crashed."""
        self.started_seconds: float | None = None
        """Seconds from (last) launch until the node had joined a healthy cluster."""
        # Once the process group is gone its pid may be reused: never signal it again.
        self._group_gone = True

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EsNode({self.name!r}, {self.url}, {state})"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def console_log(self) -> Path:
        return self.directory / "console.log"

    def log_tail(self, lines: int = 40, max_chars: int = 6000) -> str:
        """Last lines of the console log, plus earlier ERROR/exception lines."""
        try:
            text = self.console_log.read_text(errors="replace")
        except OSError as exc:
            return f"<no log: {exc}>"
        all_lines = text.splitlines()
        tail = all_lines[-lines:]
        earlier = [
            line
            for line in all_lines[:-lines]
            if re.search(r"\]\[(ERROR|FATAL)\]|^\S*(Exception|Error)\b|^ERROR:", line)
        ][-5:]
        parts = [*earlier, "..."] if earlier else []
        result = "\n".join([*parts, *tail])
        return result[-max_chars:]

    def _launch(
        self, command: list[str], env: Mapping[str, str], run_as: tuple[int, int] | None
    ) -> None:
        credentials: dict[str, Any] = {}
        if run_as is not None:
            # extra_groups=[] drops root's supplementary groups as well.
            credentials = {"user": run_as[0], "group": run_as[1], "extra_groups": []}
        with open(self.console_log, "ab") as console:
            banner = f"\n=== indexplug: starting {self.name} at {time.ctime()} ===\n"
            console.write(banner.encode())
            console.flush()
            # A new session keeps a terminal's Ctrl-C away from java (we stop the node
            # ourselves, gracefully) and makes the CLI JVM and the server JVM one
            # process group that can be signalled as a whole.
            self.process = subprocess.Popen(
                command,
                cwd=self.directory,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **credentials,
            )
        self._group_gone = False
        self.wanted = True
        _watchdog_send(f"+ {self.process.pid}")

    def _signal(self, signum: int) -> None:
        if self.process is None or self._group_gone:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)

    def _group_alive(self) -> bool:
        if self.process is None or self._group_gone:
            return False
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _terminate(self, timeout: float, kill: bool) -> int | None:
        """SIGTERM (SIGKILL) the process group, escalate after ``timeout``, reap it."""
        process = self.process
        self.wanted = False
        if process is None or self._group_gone:
            return None if process is None else process.returncode
        self._signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            process.wait()
        # The server JVM is a child of the CLI JVM; make sure it is gone too.
        deadline = time.monotonic() + timeout
        while self._group_alive():
            if time.monotonic() > deadline:
                self._signal(signal.SIGKILL)
                deadline = time.monotonic() + 10.0
            time.sleep(0.1)
        self._group_gone = True
        _watchdog_send(f"- {process.pid}")
        return process.returncode


class EsCluster:
    """``n`` real Elasticsearch nodes on 127.0.0.1, for tests.

    Example::

        with EsCluster(nodes=2) as cluster:      # starts and waits for green
            client = Elasticsearch(cluster.urls)
            ...
            cluster.stop_node(1)                 # fail-over
            cluster.wait_for("yellow")
            cluster.start_node(1)
            cluster.wait_for("green")

    Every node gets ``ES_JAVA_OPTS=-Xms<heap> -Xmx<heap>``, security disabled,
    the disk-threshold allocator and the merge scheduler's disk check disabled (a
    nearly full CI disk must neither turn indices read-only nor hold every merge,
    a force merge included, back indefinitely) and a random cluster name, so that
    concurrent test runs cannot join each other.  One node uses ``discovery.type=single-node``;
    several nodes list each other in ``discovery.seed_hosts`` and
    ``cluster.initial_master_nodes``.  ``settings`` is merged over all of that.

    Node directories live in a fresh temporary directory (under ``workdir`` if
    given) that :meth:`stop` deletes unless ``keep_data``.  Started clusters are
    stopped at interpreter exit.
    """

    def __init__(
        self,
        nodes: int = 1,
        *,
        version: str = DEFAULT_VERSION,
        heap: str = "512m",
        http_ports: Sequence[int] | None = None,
        transport_ports: Sequence[int] | None = None,
        settings: Mapping[str, Any] | None = None,
        java_home: str | os.PathLike[str] | None = None,
        java_opts: Sequence[str] = (),
        workdir: str | os.PathLike[str] | None = None,
        keep_data: bool = False,
        cluster_name: str | None = None,
        start_timeout: float = 180.0,
    ) -> None:
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        for label, ports in (
            ("http_ports", http_ports),
            ("transport_ports", transport_ports),
        ):
            if ports is not None and len(ports) != nodes:
                raise ValueError(f"{label} needs exactly {nodes} entries")
        self.size = nodes
        self.version = version
        self.heap = heap
        self.settings = dict(settings or {})
        self.java_opts = list(java_opts)
        self.keep_data = keep_data
        self.cluster_name = cluster_name or f"indexplug-test-{uuid.uuid4().hex[:8]}"
        self.start_timeout = start_timeout
        self.nodes: list[EsNode] = []
        self.workdir: Path | None = None
        """Directory holding ``node-<i>/``; set by :meth:`start`, ``None`` once gone."""
        self.home: Path | None = None
        """The Elasticsearch home the nodes run from; set by :meth:`start`."""
        self._fixed_http = list(http_ports) if http_ports else None
        self._fixed_transport = list(transport_ports) if transport_ports else None
        self._java_home = Path(java_home) if java_home else None
        self._workdir_parent = Path(workdir) if workdir else None
        self._run_as: tuple[int, int] | None = None
        self._bootstrapped = False
        self._excluded = False
        self._owner_pid = os.getpid()

    def __repr__(self) -> str:
        return f"EsCluster({self.cluster_name!r}, nodes={self.nodes!r})"

    # ---- public -----------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        """HTTP URLs of all nodes, stopped ones included, so indices stay stable."""
        return [node.url for node in self.nodes]

    @property
    def url(self) -> str:
        """URL of the first running node."""
        return self._running()[0].url

    def start(self, timeout: float | None = None) -> Self:
        """Launch all nodes at once and wait until they form a green cluster.

        Free ports are picked here unless given.  Losing a port race to another
        process shows up as a bind error in the node log; then the nodes are
        started again on fresh ports (up to three attempts).
        """
        if any(node.wanted for node in self.nodes):
            raise EsError("cluster already started; use start_node() to restart single nodes")
        timeout = self.start_timeout if timeout is None else timeout
        self._bootstrapped = False
        self._excluded = False
        self._owner_pid = os.getpid()
        self._prepare()
        with _lock:
            _live_clusters.add(self)
        attempts = 1 if (self._fixed_http and self._fixed_transport) else 3
        try:
            for attempt in range(1, attempts + 1):
                self._create_nodes()
                started = time.monotonic()
                try:
                    for index in range(self.size):
                        self._launch(index)
                    self.wait_for("green", timeout=timeout)
                except EsError as exc:
                    if attempt < attempts and _BIND_ERROR.search(str(exc)):
                        self._stop_processes()
                        continue
                    raise
                elapsed = time.monotonic() - started
                for node in self.nodes:
                    node.started_seconds = elapsed
                self._bootstrapped = True
                return self
        except BaseException:
            self.stop()
            raise
        raise AssertionError("unreachable")

    def wait_for(self, status: HealthStatus = "green", timeout: float = 60.0) -> dict[str, Any]:
        """Poll ``/_cluster/health`` until ``status`` (or better) with all nodes in.

        Requiring exactly the nodes that should be running (``wait_for_nodes``)
        makes the call meaningful around :meth:`stop_node`/:meth:`start_node`:
        "yellow" after a stop means the node has really left, "green" after a
        start means it has really rejoined and its shards recovered.  A node
        joins through its transport port before it opens its HTTP port, so we
        also wait until every node answers HTTP -- callers may use any of
        :attr:`urls` right away.  A node process that dies while we wait fails
        fast with its log tail instead of running into the timeout.  Returns the
        health response.
        """
        if status not in _HEALTH_STATUSES:
            raise ValueError(f"status must be one of {_HEALTH_STATUSES}")
        expected = [node for node in self.nodes if node.wanted]
        if not expected:
            raise EsError(f"no node of cluster {self.cluster_name} is running")
        deadline = time.monotonic() + timeout
        last: Any = "no answer yet"
        while True:
            self._raise_if_crashed(expected)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                tails = "\n".join(
                    f"--- {n.name} ({n.console_log}):\n{n.log_tail(15)}" for n in expected
                )
                raise EsTimeoutError(
                    f"cluster {self.cluster_name} not {status} with "
                    f"{len(expected)} node(s) "
                    f"after {timeout:.0f}s; last health: {last}\n{tails}"
                )
            server_wait = max(1, min(5, int(remaining)))
            query = urllib.parse.urlencode(
                {
                    "wait_for_status": status,
                    "wait_for_nodes": str(len(expected)),
                    "timeout": f"{server_wait}s",
                    "master_timeout": f"{server_wait}s",
                }
            )
            answered = False
            for node in expected:
                try:
                    code, body = _http(
                        "GET",
                        f"{node.url}/_cluster/health?{query}",
                        timeout=server_wait + 10,
                    )
                except OSError as exc:  # connection refused while the node boots
                    last = f"{node.name}: {exc}"
                    continue
                answered = True
                if code == HTTPStatus.OK and isinstance(body, dict) and not body.get("timed_out"):
                    silent = [n.name for n in expected if not _answers_http(n)]
                    if not silent:
                        return body
                    answered = False
                    last = f"{status} reached, HTTP not up yet on {', '.join(silent)}"
                else:
                    last = body
                break  # that node already waited server-side; re-check processes
            if not answered:
                time.sleep(0.25)

    def health(self) -> dict[str, Any]:
        """Current ``/_cluster/health`` from a running node."""
        status, body = self.request("GET", "/_cluster/health")
        if status != HTTPStatus.OK or not isinstance(body, dict):
            raise EsError(f"cluster health failed with HTTP {status}: {body}")
        return body

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        node: int | None = None,
        timeout: float = 30.0,
    ) -> tuple[int, Any]:
        """Send one REST request (stdlib only) to ``node`` or the first running one.

        Returns ``(HTTP status, parsed JSON body)``; ``body`` may be a dict or,
        for ``_bulk``, an NDJSON string.  Meant for fixtures and smoke checks
        that must work before any client library is installed.
        """
        target = self.nodes[node] if node is not None else self._running()[0]
        return _http(method, f"{target.url}{path}", body, timeout=timeout)

    def stop_node(self, index: int, *, timeout: float = 30.0, kill: bool = False) -> None:
        """Stop node ``index``: SIGTERM, SIGKILL after ``timeout``, wait for its JVMs.

        With two master-eligible nodes Elasticsearch keeps only one of them in
        the voting configuration; stopping that one leaves the survivor without
        a master (health then answers 503, writes are blocked).  So, like
        Elasticsearch's own rolling-restart procedure, a graceful stop first adds
        a voting-config exclusion for the node; :meth:`start_node` clears it.
        ``kill=True`` simulates a crash: immediate SIGKILL, no exclusion.
        """
        node = self.nodes[index]
        others = [other for other in self.nodes if other.running and other is not node]
        if node.running and others and not kill:
            query = urllib.parse.urlencode({"node_names": node.name, "timeout": f"{int(timeout)}s"})
            try:
                code, body = _http(
                    "POST",
                    f"{others[0].url}/_cluster/voting_config_exclusions?{query}",
                    timeout=timeout + 10,
                )
            except OSError as exc:
                code, body = None, exc
            if code == HTTPStatus.OK:
                self._excluded = True
            else:
                warnings.warn(
                    f"voting exclusion for {node.name} failed ({code}): {body}",
                    stacklevel=2,
                )
        node._terminate(timeout=timeout, kill=kill)

    def stop_nodes(
        self, indices: Iterable[int] | None = None, *, timeout: float = 30.0, kill: bool = False
    ) -> None:
        """Stop several nodes (default: all) -- a full outage when they are all of them.

        When no node stays up they are signalled at once and shut down in parallel:
        nobody is left to reallocate shards or to need a voting exclusion, so every
        copy stays as it was and :meth:`start_nodes` brings the same cluster back.
        When some node stays up they are stopped one by one with :meth:`stop_node`.
        """
        chosen = sorted(set(range(self.size) if indices is None else indices))
        survivors = [n for i, n in enumerate(self.nodes) if i not in chosen and n.running]
        if survivors:
            for index in chosen:
                self.stop_node(index, timeout=timeout, kill=kill)
            return
        signum = signal.SIGKILL if kill else signal.SIGTERM
        for index in chosen:
            if self.nodes[index].running:
                self.nodes[index]._signal(signum)
        for index in chosen:
            self.nodes[index]._terminate(timeout=timeout, kill=kill)

    def start_node(self, index: int, *, timeout: float | None = None) -> None:
        """Restart stopped node ``index`` on its ports and data; wait until it rejoined.

        Waits for "yellow" with all wanted nodes present (the restarted node's
        replicas may still be recovering); call ``wait_for("green")`` for more.
        Starting one node at a time is only right while some node with a copy of
        every shard is already up: after a full outage use :meth:`start_nodes`,
        since a node alone may hold no in-sync copy of a shard (red) or not be in
        the voting configuration (no master).
        """
        if self.nodes[index].running:
            return
        self.start_nodes([index], status="yellow", timeout=timeout)

    def start_nodes(
        self,
        indices: Iterable[int] | None = None,
        *,
        status: HealthStatus = "green",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """(Re)start nodes (default: every one not running) together; wait for ``status``.

        All of them are launched before anything is waited for, so after an outage
        the nodes holding the voting configuration and the in-sync shard copies
        are back however they were spread; then we wait until the cluster has
        ``status`` with every wanted node in.  A node that crashed (wanted, but its
        process is gone) is reaped and relaunched.  Once every node runs, voting
        exclusions left by graceful :meth:`stop_node` calls are cleared.  Returns
        the health response.
        """
        chosen = sorted(
            {i for i, n in enumerate(self.nodes) if not n.running}
            if indices is None
            else {i for i in indices if not self.nodes[i].running}
        )
        timeout = self.start_timeout if timeout is None else timeout
        started = time.monotonic()
        for index in chosen:
            if self.nodes[index].wanted:  # crashed: reap what is left of its group
                self.nodes[index]._terminate(timeout=10.0, kill=True)
            self._launch(index)
        health = self.wait_for(status, timeout=timeout)
        for index in chosen:
            self.nodes[index].started_seconds = time.monotonic() - started
        if self._excluded and all(node.running for node in self.nodes):
            self._clear_voting_exclusions()
        return health

    def heal(self, status: HealthStatus = "green", timeout: float | None = None) -> dict[str, Any]:
        """Back to full strength: every node running and joined, ``status`` reached,
        no voting exclusions left.  Costs one health request when nothing is wrong;
        meant for fixtures that share a cluster between tests that stop nodes."""
        return self.start_nodes(status=status, timeout=timeout)

    def _clear_voting_exclusions(self) -> None:
        try:
            code, body = self.request(
                "DELETE", "/_cluster/voting_config_exclusions?wait_for_removal=false"
            )
        except OSError as exc:
            code, body = None, exc
        if code == HTTPStatus.OK:
            self._excluded = False
        else:
            warnings.warn(f"clearing voting exclusions failed ({code}): {body}", stacklevel=3)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop all nodes (in parallel); delete their directories unless ``keep_data``.

        Idempotent; also called by ``__exit__`` and at interpreter exit.
        """
        self._stop_processes(timeout)
        with _lock:
            _live_clusters.discard(self)
        if self.workdir is not None and not self.keep_data:
            shutil.rmtree(self.workdir, ignore_errors=True)
            _watchdog_send(f"-d {self.workdir}")
            self.workdir = None

    def __enter__(self) -> Self:
        if not any(node.wanted for node in self.nodes):
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- internals --------------------------------------------------------------

    def _running(self) -> list[EsNode]:
        running = [node for node in self.nodes if node.running]
        if not running:
            raise EsError(f"no node of cluster {self.cluster_name} is running")
        return running

    def _raise_if_crashed(self, nodes: Sequence[EsNode]) -> None:
        for node in nodes:
            if node.wanted and not node.running:
                code = node.process.returncode if node.process else None
                raise EsStartError(
                    f"node {node.name} ({node.url}) exited with code {code}; "
                    f"log tail ({node.console_log}):\n{node.log_tail()}"
                )

    def _prepare(self) -> None:
        home = ensure_distribution(self.version)
        if os.geteuid() == 0:
            self._run_as = ensure_es_user()
            home = runnable_home(home, *self._run_as)
        self.home = home
        if self._java_home is None:
            self._java_home = find_java_home()
        if self._workdir_parent is not None:
            self._workdir_parent.mkdir(parents=True, exist_ok=True)
        self.workdir = Path(
            tempfile.mkdtemp(prefix=f"{self.cluster_name}-", dir=self._workdir_parent)
        )
        if not self.keep_data:
            _watchdog_send(f"+d {self.workdir}")
        if self._run_as is not None:
            os.chown(self.workdir, *self._run_as)
            if not _traversable_by(self.workdir, *self._run_as):
                raise EsError(f"user {ES_USER} cannot reach {self.workdir}; pass another workdir")

    def _create_nodes(self) -> None:
        assert self.workdir is not None and self.home is not None
        http, transport = self._fixed_http, self._fixed_transport
        if http is None or transport is None:
            free = _free_ports(2 * self.size)
            http = http or free[: self.size]
            transport = transport or free[self.size :]
        self.nodes = []
        for index in range(self.size):
            directory = self.workdir / f"node-{index}"
            if directory.exists():
                shutil.rmtree(directory)
            shutil.copytree(self.home / "config", directory / "config")
            for sub in ("data", "logs", "tmp"):
                (directory / sub).mkdir()
            self.nodes.append(EsNode(f"node-{index}", http[index], transport[index], directory))

    def _node_settings(self, node: EsNode) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "cluster.name": self.cluster_name,
            "node.name": node.name,
            "network.host": "127.0.0.1",
            "http.port": node.http_port,
            "transport.port": node.transport_port,
            "path.data": str(node.directory / "data"),
            "path.logs": str(node.directory / "logs"),
            "xpack.security.enabled": False,
            "cluster.routing.allocation.disk.threshold_enabled": False,
            # Elasticsearch 8.19 starts no merge while the disk is fuller than its merge watermark
            # (95%); on a nearly full CI disk a force merge then waits forever.  0s disables it.
            "indices.merge.disk.check_interval": "0s",
        }
        if self.size == 1:
            settings["discovery.type"] = "single-node"
        else:
            settings["discovery.seed_hosts"] = [f"127.0.0.1:{n.transport_port}" for n in self.nodes]
            if not self._bootstrapped:
                # Only for the very first election; a restarted node must not carry it.
                settings["cluster.initial_master_nodes"] = [n.name for n in self.nodes]
        settings.update(self.settings)
        return settings

    def _launch(self, index: int) -> None:
        assert self.home is not None and self._java_home is not None
        node = self.nodes[index]
        # JSON values are valid YAML flow scalars/sequences and quote safely.
        settings = self._node_settings(node)
        config = "".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items())
        (node.directory / "config" / "elasticsearch.yml").write_text(config)
        if self._run_as is not None:
            _chown_tree(node.directory, *self._run_as)
        # Inherited ES_* / JAVA_* variables would silently change what runs.
        dropped = {
            "JAVA_HOME",
            "JAVA_OPTS",
            "JAVA_TOOL_OPTIONS",
            "_JAVA_OPTIONS",
            "CLI_JAVA_OPTS",
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith("ES_") and k not in dropped}
        tmp = node.directory / "tmp"
        # Nothing of a node is left in /tmp: the launcher's JVM probes the server's options
        # with a JVM run in a "final-flags*" folder of its own java.io.tmpdir, where that JVM's
        # gc.log stays, so that tmpdir is the node's too (removed with it); and the JVMs write
        # no per-process hsperfdata file (left behind by a node that is killed).
        env.update(
            ES_JAVA_HOME=str(self._java_home),
            ES_PATH_CONF=str(node.directory / "config"),
            ES_JAVA_OPTS=" ".join(
                [f"-Xms{self.heap}", f"-Xmx{self.heap}", NO_PERF_DATA, *self.java_opts]
            ),
            CLI_JAVA_OPTS=f"-Djava.io.tmpdir={tmp} {NO_PERF_DATA}",
            ES_TMPDIR=str(tmp),
            HOME=str(node.directory),
        )
        node._launch([str(self.home / "bin" / "elasticsearch")], env, self._run_as)

    def _stop_processes(self, timeout: float = 30.0) -> None:
        for node in self.nodes:  # signal all first: they shut down in parallel
            if node.running:
                node._signal(signal.SIGTERM)
        for node in self.nodes:
            node._terminate(timeout=timeout, kill=False)


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``fetch`` prepares and prints the home; ``run`` starts a cluster."""
    parser = argparse.ArgumentParser(
        prog="python -m indexplug_elastic.testing.server",
        description="Obtain and run a real Elasticsearch for indexplug tests.",
    )
    parser.add_argument("--version", default=DEFAULT_VERSION, help="Elasticsearch version")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="download and unpack the distribution, print its home")
    run = commands.add_parser("run", help="start nodes, print their URLs, stay until Ctrl-C")
    run.add_argument("--nodes", type=int, default=1)
    run.add_argument("--heap", default="512m")
    run.add_argument(
        "--http-port",
        type=int,
        action="append",
        help="once per node (default: free ports)",
    )
    run.add_argument("--keep-data", action="store_true", help="keep the node directories on exit")
    args = parser.parse_args(argv)

    if args.command == "fetch":
        home = ensure_distribution(args.version)
        if os.geteuid() == 0:
            runtime = runnable_home(home, *ensure_es_user())
            if runtime != home:
                print(f"node user {ES_USER} runs it from {runtime}", file=sys.stderr)
        print(home)
        return 0

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if args.http_port and len(args.http_port) != args.nodes:
        parser.error("give --http-port once per node")
    signal.signal(signal.SIGTERM, interrupt)
    cluster = EsCluster(
        args.nodes,
        version=args.version,
        heap=args.heap,
        http_ports=args.http_port,
        keep_data=args.keep_data,
    )
    started = time.monotonic()
    try:
        cluster.start()
        print(
            f"Elasticsearch {args.version} cluster {cluster.cluster_name} green after "
            f"{time.monotonic() - started:.1f}s; Ctrl-C stops it",
            file=sys.stderr,
        )
        for url in cluster.urls:
            print(url, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
