"""A real, throwaway PostgreSQL cluster from Debian's ``postgresql`` package, for the tests of ``raydp serve --db``
and for ``jobs/serve_throughput.py --postgres auto``.

PostgreSQL refuses to run as root, so when this process is root the cluster runs as the ``postgres`` system user
(``runuser -u postgres --``); its data directory and Unix socket directory are in a fresh temporary directory that
user owns. It listens on 127.0.0.1 alone, on a free port, with trust authentication for local and loopback
connections only. :meth:`Postgres.stop` stops it and removes the directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

INSTALL = ("PostgreSQL's server binaries are missing (/usr/lib/postgresql/*/bin/initdb): install Debian's postgresql "
           "(apt-get install postgresql); the tests of raydp serve on a shared database need a real one")


def bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise RuntimeError(INSTALL)
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Postgres:
    root: Path
    port: int
    bin: Path
    as_user: list[str]

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def sql(self, statement: str, database: str = "postgres", params=None):
        """Run one statement (autocommit) as the cluster's superuser; the rows, if it returns any."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=database,
                             autocommit=True) as c:
            cur = c.execute(statement, params)
            return cur.fetchall() if cur.description else None

    def new_database(self, name: str) -> str:
        """A new, empty database; its ``postgresql://`` URL."""
        self.sql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                            "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


def start(*, fsync: bool = True, max_connections: int = 200) -> Postgres:
    """Start a cluster (``fsync`` off: faster, for tests that never crash the database itself)."""
    bin_ = bindir()
    root = Path(tempfile.mkdtemp(prefix="raydp-pg-"))
    as_user: list[str] = []
    try:
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(root, pw.pw_uid, pw.pw_gid)
            as_user = ["runuser", "-u", "postgres", "--"]
        (root / "sock").mkdir()
        if as_user:
            os.chown(root / "sock", pw.pw_uid, pw.pw_gid)
        p = subprocess.run([*as_user, str(bin_ / "initdb"), "-D", str(root / "data"), "-U", "postgres", "-A", "trust",
                            "-E", "UTF8", "--no-sync"], capture_output=True, text=True, timeout=120, cwd=str(root))
        if p.returncode != 0:
            raise RuntimeError(f"initdb failed: {p.stderr[-2000:]}")
        hba = root / "data" / "pg_hba.conf"
        hba.write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
        if as_user:
            os.chown(hba, pw.pw_uid, pw.pw_gid)
        for attempt in range(5):
            port = _free_port()
            opts = (f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={root / 'sock'} "
                    f"-c max_connections={max_connections} -c fsync={'on' if fsync else 'off'} "
                    f"-c synchronous_commit={'on' if fsync else 'off'} -c full_page_writes={'on' if fsync else 'off'}")
            p = subprocess.run([*as_user, str(bin_ / "pg_ctl"), "-D", str(root / "data"), "-l", str(root / "log"),
                                "-o", opts, "-w", "-t", "60", "start"], capture_output=True, text=True, timeout=90,
                               cwd=str(root))
            if p.returncode == 0:
                break
            time.sleep(0.2)  # the port was taken meanwhile: another one
        else:
            log = (root / "log").read_text(errors="replace")[-2000:] if (root / "log").exists() else ""
            raise RuntimeError(f"PostgreSQL did not start: {p.stdout[-500:]} {p.stderr[-1000:]} {log}")
        return Postgres(root=root, port=port, bin=bin_, as_user=as_user)
    except BaseException:
        if (root / "data" / "postmaster.pid").exists():
            subprocess.run([*as_user, str(bin_ / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "stop"],
                           capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
        raise
