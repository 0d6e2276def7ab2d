"""A real PostgreSQL server for the tests: Debian's postgresql 15 binaries, started in a temporary folder.

:func:`start_server` runs ``initdb`` and ``postgres`` as an unprivileged user (PostgreSQL refuses root: as
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


def start_server() -> PgServer:
    """initdb and start a server in a new temporary folder; wait until it answers."""
    folder = Path(tempfile.mkdtemp(prefix="nsightwrap-pg-", dir="/tmp" if os.path.isdir("/tmp") else None))
    try:
        data, pwfile = folder / "data", folder / "pw"
        pwfile.write_text(SUPER_PASSWORD + "\n")
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            for p in (folder, pwfile):
                os.chown(p, nobody.pw_uid, nobody.pw_gid)
        folder.chmod(0o700)
        subprocess.run(_as_user([str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--pwfile", str(pwfile),
                                 "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync",
                                 "--locale=C"]), check=True, capture_output=True, timeout=120)
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
