"""The private PostgreSQL server the tests start (pgserver.py): it starts, holds databases
that are written and read back through psql, and stops leaving no process behind, from
Python and from its command line."""
import os
import pathlib
import select
import subprocess
import sys
import urllib.parse

from pgserver import PostgresServer

PGSERVER = pathlib.Path(__file__).with_name("pgserver.py")


def postmaster_pid(server):
    """The server's process id, from the first line of its postmaster.pid."""
    return int((server.data_directory / "postmaster.pid").read_text().splitlines()[0])


def exits(pid, timeout=30):
    """Whether process `pid` is gone, or ends within `timeout` seconds (awaited on a pidfd;
    a process that ended and waits to be reaped counts as gone)."""
    try:
        descriptor = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([descriptor], [], [], timeout)[0])
    finally:
        os.close(descriptor)


def test_the_session_database_is_fresh_and_keeps_rows(postgres, postgres_url):
    database = urllib.parse.urlsplit(postgres_url).path.removeprefix("/")
    assert postgres_url.startswith("postgresql://postgres@/test_")
    assert postgres.psql("select count(*) from pg_tables where schemaname = 'public'", database) == "0\n"
    rows = postgres.psql("create table t (id int primary key, name text);"
                         "insert into t values (1, 'one'), (2, 'two');"
                         "select id, name from t order by id", database)
    assert rows == "1|one\n2|two\n"


def test_a_database_is_created_and_dropped_and_the_server_stops_without_a_process(tmp_path):
    server = PostgresServer(tmp_path / "state").start()
    try:
        pid = postmaster_pid(server)
        assert server.start().url() == server.url() and postmaster_pid(server) == pid, "a second start reuses it"
        server.create_database("kept rows")
        server.psql("create table t (n int); insert into t select generate_series(1, 3)", "kept rows")
        assert server.psql("select sum(n) from t", "kept rows") == "6\n"
        listed = "select count(*) from pg_database where datname = 'kept rows'"
        assert server.psql(listed) == "1\n"
        server.drop_database("kept rows")
        assert server.psql(listed) == "0\n"
        server.stop()
        assert not server.is_running()
        assert not (server.data_directory / "postmaster.pid").exists()
        assert exits(pid), "the server's process outlived pg_ctl stop"
        directory = server.directory
    finally:
        server.stop()
        server.remove()
    assert not directory.exists() and not (tmp_path / "state/server.json").exists()


def run_pgserver(*arguments):
    completed = subprocess.run([sys.executable, str(PGSERVER), *arguments], capture_output=True, text=True,
                               timeout=120)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_the_command_line_starts_once_and_stops(tmp_path):
    state = tmp_path / "pgtest"
    url = run_pgserver("start", str(state)).strip()
    try:
        assert run_pgserver("start", str(state)).strip() == url, "a second start reuses the running server"
        server = PostgresServer(state)
        pid = postmaster_pid(server)
        select_one = subprocess.run([str(server.bin / "psql"), "-X", "-A", "-t", url, "-c", "select 1"],
                                    capture_output=True, text=True, timeout=60)
        assert select_one.stdout == "1\n", select_one.stderr
    finally:
        run_pgserver("stop", str(state))
    assert exits(pid), "the server's process outlived `pgserver.py stop`"
    assert not server.directory.exists() and not (state / "server.json").exists()
    assert run_pgserver("stop", str(state)) == "", "stopping what is stopped does nothing"
