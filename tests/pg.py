"""A real PostgreSQL server for the tests: Debian's postgresql 15 binaries, started in a temporary folder.

:func:`start_server` runs ``initdb`` (or copies a session's template: conftest.pg_server) and ``postgres``, in
/dev/shm where it has room, as an unprivileged user (PostgreSQL refuses root: as
root the server runs as ``nobody`` through ``setpriv``), listening on 127.0.0.1 on a free port, no unix
socket. The postmaster is our child with ``--pdeathsig KILL``: if the test session dies, so does the server
(its backends follow their postmaster), and :meth:`PgServer.stop` stops it and removes its folder.

Roles: ``postgres`` (superuser, password auth over TCP), ``team`` (owns each test's database; the "team's
password" :data:`TEAM_PASSWORD`, which nsightwrap must never write anywhere) and ``reader`` (SELECT only).
:meth:`PgServer.new_database` makes an empty database per test (a few ms): tests never see each other's
records. ``NSIGHTWRAP_TEST_PG_BIN`` names another folder of binaries.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

PG_BIN = Path(os.environ.get("NSIGHTWRAP_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
SUPER_PASSWORD = "pg-super-Zq81"
#: The team database's password in the tests: it must appear nowhere nsightwrap writes.
TEAM_PASSWORD = "T3am-s3cret-Kx9v"
READER_PASSWORD = "r3ader-pw-Lm2"
STARTUP_S = 60.0


def missing() -> Optional[str]:
    """Why no server can be started here (None: one can)."""
    for tool in ("initdb", "postgres"):
        if not os.access(PG_BIN / tool, os.X_OK):
            return (f"no PostgreSQL server binaries ({PG_BIN / tool} is missing): install Debian's postgresql "
                    "package (apt-get install postgresql), or set NSIGHTWRAP_TEST_PG_BIN")
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        return "running as root, and setpriv (util-linux) is missing to start PostgreSQL as an unprivileged user"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: pip install 'nsightwrap[postgres]'"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PgServer:
    folder: Path
    port: int
    process: subprocess.Popen
    databases: list = field(default_factory=list)

    def url(self, database: str, user: str = "team", password: Optional[str] = TEAM_PASSWORD) -> str:
        secret = f":{password}" if password else ""
        return f"postgresql://{user}{secret}@127.0.0.1:{self.port}/{database}"

    def admin(self, database: str = "postgres"):
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", password=SUPER_PASSWORD,
                               dbname=database, autocommit=True, connect_timeout=10)

    def new_database(self) -> str:
        """An empty database owned by ``team``, that ``reader`` may read (tables made later included)."""
        name = f"t{len(self.databases)}_{os.getpid()}"
        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {name} OWNER team")
        with self.admin(name) as conn:
            conn.execute(f"GRANT CONNECT ON DATABASE {name} TO reader")
            conn.execute("GRANT USAGE ON SCHEMA public TO reader")
            conn.execute("ALTER DEFAULT PRIVILEGES FOR ROLE team IN SCHEMA public GRANT SELECT ON TABLES TO reader")
        self.databases.append(name)
        return name

    def stop(self) -> None:
        """Stop the server (fast shutdown, then SIGKILL) and remove its folder."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
                try:
                    self.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=15)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def _as_user(argv: list[str]) -> list[str]:
    """argv run as nobody when we are root (PostgreSQL refuses root), dying with its parent either way."""
    if os.geteuid() != 0:
        return ["setpriv", "--pdeathsig", "KILL", *argv] if shutil.which("setpriv") else argv
    return ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "--pdeathsig", "KILL", *argv]


def start_server(template: Optional[Path] = None) -> PgServer:
    """initdb and start a server in a new temporary folder (_scratch); wait until it answers. With `template`
    (a folder the server's user may write, shared by the session's processes), the data folder is a copy of
    the one initdb made there once: initdb costs ~1.3 s of CPU on a disk, the copy into memory 0.06 s (each
    xdist worker starts a server of its own: issue 20)."""
    folder = Path(tempfile.mkdtemp(prefix="nsightwrap-pg-", dir=_scratch()))
    try:
        data = folder / "data"
        _own(folder)
        folder.chmod(0o700)
        if template is None:
            _initdb(folder, data)
        else:
            subprocess.run(_as_user(["cp", "-a", str(_template_data(template)), str(data)]), check=True,
                           capture_output=True, timeout=120)
        port = _free_port()
        log = open(folder / "server.log", "wb")
        proc = subprocess.Popen(_as_user([str(PG_BIN / "postgres"), "-D", str(data), "-p", str(port),
                                          "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
                                          "-c", "fsync=off", "-c", "max_connections=100"]),
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        server = PgServer(folder, port, proc)
        try:
            _wait_ready(server)
            _roles(server)
        except BaseException:
            server.stop()
            raise
        return server
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _scratch() -> Optional[str]:
    """Where a server's folder goes: /dev/shm (memory) where it has room, else /tmp. Its data folder (~30 MB)
    written on a disk cost ~1 s of CPU (initdb, or the copy of a template), 0.06 s in memory."""
    from helpers import memory_folder

    return memory_folder() or ("/tmp" if os.path.isdir("/tmp") else None)


def _own(path: Path) -> None:
    """`path` belongs to the server's user (nobody, when we are root)."""
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(path, nobody.pw_uid, nobody.pw_gid)


def _initdb(folder: Path, data: Path) -> None:
    """A new cluster in `data` (`folder`, the server's user's, keeps its password file)."""
    pwfile = folder / "pw"
    pwfile.write_text(SUPER_PASSWORD + "\n")
    _own(pwfile)
    subprocess.run(_as_user([str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--pwfile", str(pwfile),
                             "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync",
                             "--locale=C"]), check=True, capture_output=True, timeout=120)


def _template_data(template: Path) -> Path:
    """The template's data folder, made by the first process to ask (the others wait on its lock)."""
    import fcntl

    data = template / "data"
    with open(template / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (data / "PG_VERSION").exists():
            shutil.rmtree(data, ignore_errors=True)  # a process killed in initdb left it half made
            _initdb(template, data)
    return data


def _wait_ready(server: PgServer) -> None:
    import psycopg

    deadline = time.monotonic() + STARTUP_S
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"postgres exited ({server.process.returncode}): "
                               f"{(server.folder / 'server.log').read_text(errors='replace')[-2000:]}")
        try:
            server.admin().close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _roles(server: PgServer) -> None:
    with server.admin() as conn:
        conn.execute(f"CREATE ROLE team LOGIN PASSWORD '{TEAM_PASSWORD}'")
        conn.execute(f"CREATE ROLE reader LOGIN PASSWORD '{READER_PASSWORD}'")
