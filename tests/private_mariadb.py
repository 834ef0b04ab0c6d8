"""A private MariaDB server a test may stop and start (database outages), like
``private_postgres.py`` for PostgreSQL.

``mariadb-install-db`` into a temporary folder, ``mariadbd`` listening on a free port of
127.0.0.1 only, with its socket and its temporary files in that folder and ``root`` without a
password. Run as root (CI,
a container), the server drops to the ``mysql`` OS user (its own ``--user``), and the folder
belongs to that user. The shared server on 3306 is never touched.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pymysql
from hub_harness import free_port

#: what the tests' URL names: made at the first start, in the server's utf8mb4
DATABASE = "gpubooking"
#: a safety net for a server that never comes up or never goes down
SECONDS = 60
#: for both the install and the server: a small redo log (the default is 100 MB a server)
SERVER_OPTIONS = ("--innodb-log-file-size=8M",)


def unavailable() -> str | None:
    """Why a private server cannot be run here (None if it can)."""
    missing = [program for program in ("mariadb-install-db", "mariadbd")
               if shutil.which(program, path=f"{os.environ.get('PATH', '')}:/usr/sbin") is None]
    if missing:
        return f"the MariaDB server programs are not installed: {', '.join(missing)}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("mysql")
        except KeyError:
            return "running as root without a 'mysql' OS user to run MariaDB as"
    return None


class PrivateMariaDB:
    """``start()`` / ``stop()`` as often as a test likes; ``close()`` removes everything."""

    def __init__(self) -> None:
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="gpubooking-mariadb-"))
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        # Its own temporary folder: a starting mariadbd deletes every "#sql*" file in its tmpdir,
        # so with the default /tmp a server starting elsewhere (the other test set in CI) deleted
        # this one's temporary tables mid-statement.
        temporary = self.folder / "tmp"
        temporary.mkdir()
        self._options = [*SERVER_OPTIONS, f"--tmpdir={temporary}"]
        self._user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("mysql")
            for path in (self.folder, temporary):
                os.chown(path, user.pw_uid, user.pw_gid)
            self._user = ["--user=mysql"]
        done = subprocess.run(
            [self._program("mariadb-install-db"), "--no-defaults", f"--datadir={self.data}",
             *self._user, *self._options, "--auth-root-authentication-method=normal",
             "--skip-test-db"],
            capture_output=True, text=True, timeout=SECONDS, check=False)
        if done.returncode != 0:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise RuntimeError(f"mariadb-install-db failed: {done.stdout}{done.stderr}")
        self.process: subprocess.Popen | None = None
        self._made = False

    @staticmethod
    def _program(name: str) -> str:
        return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin") or name

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the server's test database."""
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{DATABASE}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self._program("mariadbd"), "--no-defaults", f"--datadir={self.data}", *self._user,
             f"--port={self.port}", "--bind-address=127.0.0.1",
             f"--socket={self.folder / 'server.sock'}", f"--pid-file={self.folder / 'server.pid'}",
             f"--log-error={self.log}", *self._options, "--innodb-flush-log-at-trx-commit=0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + SECONDS
        while True:
            try:
                connection = pymysql.connect(host="127.0.0.1", port=self.port, user="root",
                                             connect_timeout=2)
                break
            except pymysql.err.OperationalError as error:
                if not self.running or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"mariadbd did not start ({error}); see {self.log}: "
                                       f"{self._log_tail()}") from error
                time.sleep(0.2)
        with connection:
            if not self._made:
                connection.cursor().execute(
                    f"CREATE DATABASE IF NOT EXISTS {DATABASE} CHARACTER SET utf8mb4")
                self._made = True

    def stop(self) -> None:
        """Stop now: SIGTERM, a normal shutdown that ends every open connection, as a restart
        would."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(SECONDS)
        self.process = None

    def close(self) -> None:
        try:
            if self.process is not None:
                self.process.kill()
                self.process.wait(SECONDS)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

