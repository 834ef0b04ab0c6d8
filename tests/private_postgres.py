"""A private PostgreSQL server a test may stop and start (database outages).

``initdb`` into a temporary folder, listening on a free port of 127.0.0.1 only, with its socket
in that folder. PostgreSQL refuses to run as root, so when the tests run as root (CI, a
container) the server runs as the ``postgres`` OS user through ``runuser``, and the folder
belongs to that user. The shared server on 5432 is never touched.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from hub_harness import free_port


def server_binaries() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` with ``pg_ctl``, or ``$PATH``'s."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda path: int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0,
    )
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def unavailable() -> str | None:
    """Why a private server cannot be run here (None if it can)."""
    if server_binaries() is None:
        return "the PostgreSQL server binaries (initdb, pg_ctl) are not installed"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a 'postgres' OS user to run PostgreSQL as"
        if shutil.which("runuser") is None:
            return "running as root without runuser to drop to the 'postgres' user"
    return None


class PrivatePostgres:
    """``start()`` / ``stop()`` as often as a test likes; ``close()`` removes everything."""

    def __init__(self) -> None:
        self.bin = server_binaries()
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="gpubooking-pg-"))
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--no-sync", "--no-instructions",
        )  # fmt: skip
        self.running = False

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the server's ``postgres`` database."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            [*self._as_user, str(self.bin / program), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} "
            "-c fsync=off -c full_page_writes=off"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "start")
        self.running = True

    def stop(self) -> None:
        """Stop now: ``fast`` ends every open connection, as a crash or a restart would."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        self.running = False

    def close(self) -> None:
        try:
            if self.running:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

