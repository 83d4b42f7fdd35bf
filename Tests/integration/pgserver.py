"""A private, throwaway PostgreSQL server for the tests (Debian's `postgresql` package).

`PostgresServer(state_directory)` runs `initdb` into a fresh directory under /tmp and
starts the server there with `pg_ctl`: no TCP listener, only a Unix socket in that
directory on a free port number, trust authentication for the superuser `postgres`.
`initdb` refuses to run as root, so as root the server runs as the `postgres` user (on a
directory that user owns, which it can reach even when the repository lies under a
directory only root may enter); otherwise it runs as the current user. The state
directory only records where the server lives (`server.json`), so that another process
can find it again: the command line below, or a run after an interrupted one.

    python3 Tests/integration/pgserver.py start DIR   # prints the admin URL, leaves it running
    python3 Tests/integration/pgserver.py stop DIR

`start` is idempotent (a server already running for DIR is reused); `stop` stops the
server and removes its files, and does nothing when none is recorded.
"""
import contextlib
import glob
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.parse

# Every command gets this long at most (`pg_ctl -w` waits for the server itself).
COMMAND_TIMEOUT = 120

# Appended to postgresql.conf at initdb. fsync stays on: the tests kill daemons with
# SIGKILL and check that what was acknowledged was really committed.
SERVER_SETTINGS = """
listen_addresses = ''
max_connections = 300
shared_buffers = 16MB
fsync = on
synchronous_commit = on
"""


def bin_directory():
    """The directory of the newest installed server's programs: the highest version of
    /usr/lib/postgresql/*/bin (Debian), else the one of `initdb` on PATH."""
    def version(path):
        return [int(part) for part in re.findall(r"\d+", path.split("/")[-3])]
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    initdb = candidates[-1] if candidates else shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("PostgreSQL's initdb not found: install the server (Debian: apt-get install postgresql)")
    return pathlib.Path(initdb).parent


def free_port():
    """A port number no one listens on; the server does not listen on TCP, but its
    socket is named after the port and it stays the usual way to tell servers apart."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """A PostgreSQL server of its own, recorded in `state_directory`; `start()` it (or use
    it in a `with` block), then `url()`, `create_database()`, `psql()`; `stop()` stops it,
    `remove()` deletes its files."""

    def __init__(self, state_directory):
        self.state_directory = pathlib.Path(state_directory)
        self.bin = bin_directory()
        self.as_root = os.geteuid() == 0
        self.directory = None  # data directory's parent, holding the socket and the log
        self.port = None
        self._load_state()

    # -- where it lives

    @property
    def state_file(self):
        return self.state_directory / "server.json"

    @property
    def data_directory(self):
        return self.directory / "data"

    @property
    def log_file(self):
        return self.directory / "postgres.log"

    def _load_state(self):
        if self.state_file.exists():
            state = json.loads(self.state_file.read_text())
            self.directory, self.port = pathlib.Path(state["directory"]), state["port"]

    def _save_state(self):
        self.state_directory.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps({"directory": str(self.directory), "port": self.port}) + "\n")

    # -- running its programs

    def _server_command(self, program, *arguments):
        """Runs a server program (initdb, pg_ctl) as the user owning the data: `postgres`
        when root, else the current user; returns the completed process."""
        command = [str(self.bin / program), *arguments]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        # The working directory is one the server's user can enter (initdb fails in one it cannot).
        return subprocess.run(command, cwd=self.directory, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT, env=self._environment())

    def _environment(self):
        """The environment without PG* variables that could point the programs elsewhere."""
        environment = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        environment["LC_ALL"] = "C"
        return environment

    def _check(self, completed, what):
        """Returns the stdout of `completed`; raises with its output and the server log's end if it failed."""
        if completed.returncode != 0:
            log = self.log_file.read_text(errors="replace")[-2000:] if self.directory and self.log_file.exists() else ""
            raise RuntimeError(f"{what} failed ({completed.returncode}): {completed.stdout}{completed.stderr}{log}")
        return completed.stdout

    # -- life cycle

    def is_running(self):
        """Whether the recorded server is running (`pg_ctl status`)."""
        if self.directory is None or not self.data_directory.exists():
            return False
        return self._server_command("pg_ctl", "status", "-D", str(self.data_directory)).returncode == 0

    def start(self):
        """Creates the cluster in a fresh directory under /tmp and starts the server; does
        nothing if the recorded one runs already. Returns self."""
        if self.is_running():
            return self
        self.remove()  # what a stopped or vanished server left
        self.directory = pathlib.Path(tempfile.mkdtemp(prefix="headway-pg-", dir="/tmp" if self.as_root else None))
        self.directory.chmod(0o755)  # the socket's directory: every local client enters it
        if self.as_root:
            shutil.chown(self.directory, user="postgres")
        self.port = free_port()
        self._save_state()
        try:
            self._check(self._server_command(
                "initdb", "-D", str(self.data_directory), "--auth=trust", "-U", "postgres",
                "--no-sync", "--encoding=UTF8", "--locale=C"), "initdb")
            settings = SERVER_SETTINGS + f"unix_socket_directories = '{self.directory}'\nport = {self.port}\n"
            with open(self.data_directory / "postgresql.conf", "a") as conf:
                conf.write(settings)
            self._check(self._server_command(
                "pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data_directory), "-l", str(self.log_file)),
                "pg_ctl start")
        except BaseException:
            # Nothing half made is left behind (a server that came up late is stopped first).
            with contextlib.suppress(Exception):
                self.stop()
            self.remove()
            raise
        return self

    def stop(self):
        """Stops the server (`pg_ctl -m fast`: clients are disconnected, what they committed
        stays), its files stay until `remove()`; does nothing if it is not running."""
        if not self.is_running():
            return
        self._check(self._server_command("pg_ctl", "stop", "-w", "-t", "60", "-m", "fast",
                                         "-D", str(self.data_directory)), "pg_ctl stop")

    def remove(self):
        """Deletes the stopped server's directory and the record of it."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        self.state_file.unlink(missing_ok=True)
        self.directory = self.port = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exception):
        self.stop()
        self.remove()

    # -- using it

    def url(self, database="postgres"):
        """A libpq URI for `database` as the superuser, through the server's socket."""
        host = urllib.parse.quote(str(self.directory), safe="/")
        return f"postgresql://postgres@/{urllib.parse.quote(database)}?host={host}&port={self.port}"

    def _client(self, program, *arguments, input=None):
        """Runs a client program (psql, createdb, dropdb) as the current user through the
        socket; returns its stdout, raises with its stderr when it fails."""
        completed = subprocess.run([str(self.bin / program), *arguments], input=input, capture_output=True,
                                   text=True, timeout=COMMAND_TIMEOUT, env=self._environment())
        if completed.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(arguments)} failed ({completed.returncode}): {completed.stderr}")
        return completed.stdout

    def _connection_options(self):
        return ["-h", str(self.directory), "-p", str(self.port), "-U", "postgres", "--no-password"]

    def create_database(self, name):
        """Creates the empty database `name`."""
        self._client("createdb", *self._connection_options(), "--", name)

    def drop_database(self, name):
        """Drops the database `name` (if it exists), disconnecting whoever is still on it."""
        self._client("dropdb", *self._connection_options(), "--if-exists", "--force", "--", name)

    def psql(self, sql, database="postgres"):
        """Runs `sql` (one or more statements, stopping at the first error) in `database`;
        returns the rows printed, one a line, columns separated by `|`."""
        return self._client("psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "--no-password",
                            "-d", self.url(database), "-f", "-", input=sql)


def main(arguments):
    if len(arguments) != 2 or arguments[0] not in ("start", "stop"):
        print("usage: pgserver.py start|stop DIR", file=sys.stderr)
        return 2
    command, state_directory = arguments
    server = PostgresServer(state_directory)
    if command == "start":
        print(server.start().url())
    else:
        server.stop()
        server.remove()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except RuntimeError as error:
        print(f"pgserver.py: {error}", file=sys.stderr)
        sys.exit(1)
