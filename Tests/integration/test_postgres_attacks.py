"""Several daemons on PostgreSQL attacked as a careless operator and an unlucky
environment would: bad `--db` values, another application's database, a newer schema,
daemons started together, tokens made offline, a leader frozen by SIGSTOP, the database
server killed under load. Each test uses real daemons on a real PostgreSQL server."""
import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import threading
import time

import httpx
import pytest

from conftest import HEADWAYD, ROOT, free_port, run_headwayd, wait_for_port
from pgserver import PostgresServer

# How the advisory lock of the leader shows in pg_locks (Leadership.lockKey in two halves).
LEADER_LOCK = ("select count(*) from pg_locks where locktype = 'advisory' and granted "
               "and classid::bigint = 1214603620 and objid::bigint = 2002876674")


def database_name(url):
    return url.split("?")[0].rsplit("/", 1)[1]


def start_refused(url, *arguments, timeout=60):
    """Runs headwayd on `url`, which it must refuse at start; returns its stderr."""
    completed = subprocess.run([HEADWAYD, "--listen", "127.0.0.1:0", "--db", url, *arguments], capture_output=True,
                               text=True, timeout=timeout)
    assert completed.returncode == 1, completed.stderr
    return completed.stderr


def wait_until(condition, what, attempts=400, pause=0.05):
    """Polls `condition` until it is true (bounded); fails naming `what` otherwise."""
    for _ in range(attempts):
        if condition():
            return
        time.sleep(pause)
    pytest.fail(f"never happened: {what}")


def database_contents(server, database):
    """Every table of `database` with its rows, to compare before and after."""
    return server.psql("select table_name from information_schema.tables where table_schema = 'public' "
                       "order by 1; select * from tasks order by 1", database)


# -- bad --db values

@pytest.mark.parametrize("secret, location, said", [
    ("sec%zzret", "postgresql://postgres:sec%zzret@/postgres?{socket}", "invalid percent-encoded token"),
    ("hunter%zz2", "postgresql://postgres@/postgres?{socket}&password=hunter%zz2", "invalid percent-encoded token"),
    ("se/cret", "postgresql://postgres:se/cret@/postgres?{socket}", "does not exist"),
])
def test_a_password_is_never_shown_even_when_libpq_quotes_it_or_it_holds_a_slash(postgres, secret, location, said):
    socket_parameters = f"host={postgres.directory}&port={postgres.port}"
    error = start_refused(location.format(socket=socket_parameters))
    assert said in error
    assert secret not in error and secret[:3] not in error.replace("postgres", "")


def test_a_server_that_never_answers_fails_the_start_within_the_connect_timeout(tmp_path):
    with socket.socket() as silent:  # accepts connections (the kernel does) and never speaks
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        # Not waited for (a start waits --db-start-wait for a server that does not answer).
        error = start_refused(f"postgresql://postgres@127.0.0.1:{port}/headway?connect_timeout=2",
                              "--db-start-wait", "0", timeout=30)
    assert "takes no connections: the server does not answer" in error


def test_another_applications_tasks_table_is_refused_and_left_untouched(postgres, postgres_url):
    database = database_name(postgres_url)
    postgres.psql("create table tasks (id serial primary key, title text); insert into tasks (title) values ('buy milk')",
                  database)
    before = database_contents(postgres, database)
    error = start_refused(postgres_url)
    assert "tables Headway did not create (tasks)" in error
    assert database_contents(postgres, database) == before == "tasks\n1|buy milk\n"


def test_a_database_migrated_by_a_newer_build_is_refused_and_left_untouched(tmp_path, postgres, postgres_url):
    database = database_name(postgres_url)
    with run_headwayd(tmp_path, db=postgres_url) as base:
        assert httpx.post(f"{base}/v1/tasks", json={"id": "kept", "name": "Kept"}).status_code == 201
    postgres.psql("insert into schema_migrations (version, name) values (99, 'future')", database)
    dump = "select version, name from schema_migrations order by 1; select id, state from tasks"
    before = postgres.psql(dump, database)
    assert "newer Headway (schema version 99" in start_refused(postgres_url)
    assert postgres.psql(dump, database) == before


def test_daemons_started_together_on_an_empty_database_create_the_schema_once(tmp_path, postgres, postgres_url):
    ports = [free_port() for _ in range(3)]
    logs = [open(tmp_path / f"headwayd-{n}.log", "w") for n in range(3)]
    processes = [subprocess.Popen([HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", postgres_url], stderr=log)
                 for port, log in zip(ports, logs)]
    try:
        for port, process in zip(ports, processes):
            wait_for_port(port, process, "headwayd")
        for n, port in enumerate(ports):
            assert httpx.post(f"http://127.0.0.1:{port}/v1/tasks", json={"id": f"t{n}", "name": "T"}).status_code == 201
        database = database_name(postgres_url)
        versions = "".join(f"{n}\n" for n in range(1, len(list((ROOT / "migrations/postgres").glob("*.sql"))) + 1))
        assert postgres.psql("select version from schema_migrations order by version; select count(*) from stream_state",
                             database) == versions + "1\n"
        migrated = [(tmp_path / f"headwayd-{n}.log").read_text().count("database.migrated") for n in range(3)]
        assert sorted(migrated) == [0, 0, 1]
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        assert [process.wait(timeout=20) for process in processes] == [0, 0, 0]
        for log in logs:
            log.close()


# The advisory lock a migrating daemon holds (PostgresDialect.migrationLockKey).
MIGRATION_LOCK = 0x4865_6164_7761_7901


def test_a_daemon_waiting_for_another_daemons_migration_stops_at_once_on_sigterm(tmp_path, postgres, postgres_url):
    """A migration, and the wait for another daemon's, have no time limit (an index built
    over a large table may take long): SIGTERM meanwhile ends the start (status 0), and the
    other daemon's migration is left to it."""
    holder = subprocess.Popen([str(postgres.bin / "psql"), "-X", "-q", "-d", postgres_url], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, text=True, env=postgres._environment())
    try:
        holder.stdin.write(f"SELECT pg_advisory_lock({MIGRATION_LOCK});\n")
        holder.stdin.flush()
        held = ("select count(*) from pg_locks where locktype = 'advisory' and granted "
                f"and objid::bigint = {MIGRATION_LOCK & 0xffffffff}")
        wait_until(lambda: postgres.psql(held).strip() == "1", "the migration lock is held by hand")
        with open(tmp_path / "headwayd.log", "w") as log:
            daemon = subprocess.Popen([HEADWAYD, "--listen", f"127.0.0.1:{free_port()}", "--db", postgres_url], stderr=log)
            try:
                waiting = ("select count(*) from pg_stat_activity where wait_event_type = 'Lock' "
                           f"and datname = '{database_name(postgres_url)}'")
                wait_until(lambda: postgres.psql(waiting).strip() == "1", "the daemon waits for the migration lock",
                           attempts=600)
                signalled_at = time.monotonic()
                daemon.send_signal(signal.SIGTERM)
                assert daemon.wait(timeout=10) == 0
                print(f"stopped {time.monotonic() - signalled_at:.2f} s after SIGTERM")
            finally:
                if daemon.poll() is None:
                    daemon.kill()
                    daemon.wait(timeout=20)
        log = (tmp_path / "headwayd.log").read_text()
        assert "stopped while waiting for the database server" in log, log
        assert "database.migrated" not in log
        # Nothing of the schema was made, and the server ended the daemon's session.
        assert postgres.psql("select count(*) from pg_tables where tablename = 'tasks'", database_name(postgres_url)) == "0\n"
    finally:
        holder.stdin.close()
        holder.wait(timeout=20)


# -- tokens made offline

def bytes_until_closed_or(stream, needle):
    """What `stream` sends until the daemon closes it (aborted: an incomplete chunked
    body) or `needle` arrives."""
    received = b""
    with contextlib.suppress(httpx.RemoteProtocolError):
        for chunk in stream.iter_raw():
            received += chunk
            if needle in received:
                break
    return received


def test_a_token_made_offline_and_its_revocation_reach_both_daemons_and_close_open_anonymous_streams(
        tmp_path, postgres_url):
    with run_headwayd(tmp_path / "a", db=postgres_url) as a, run_headwayd(tmp_path / "b", db=postgres_url) as b:
        anonymous = httpx.Client(timeout=httpx.Timeout(10.0, read=20.0))
        with anonymous.stream("GET", f"{b}/v1/events") as stream:
            assert stream.status_code == 200
            made = subprocess.run([HEADWAYD, "token", "create", "--scope", "admin", "--db", postgres_url],
                                  capture_output=True, text=True, timeout=30)
            assert made.returncode == 0, made.stderr
            admin = {"Authorization": f"Bearer {made.stdout.strip()}"}
            for base in (a, b):
                wait_until(lambda: httpx.get(f"{base}/v1/tasks").status_code == 401, f"{base} requires the token")
                assert httpx.get(f"{base}/v1/tasks", headers=admin).status_code == 200
            # The stream opened while no token existed is closed: it sees nothing made since.
            assert httpx.post(f"{a}/v1/tasks", json={"id": "private", "name": "Private"}, headers=admin).status_code == 201
            assert b"private" not in bytes_until_closed_or(stream, b"private")
        anonymous.close()

        made = subprocess.run([HEADWAYD, "token", "create", "--scope", "read", "--name", "reader", "--db", postgres_url],
                              capture_output=True, text=True, timeout=30)
        reader = {"Authorization": f"Bearer {made.stdout.strip()}"}
        for base in (a, b):
            wait_until(lambda: httpx.get(f"{base}/v1/tasks", headers=reader).status_code == 200, f"{base} knows the reader")
        reader_id = [token["id"] for token in httpx.get(f"{a}/v1/tokens", headers=admin).json()["tokens"]
                     if token["name"] == "reader"][0]
        assert httpx.delete(f"{b}/v1/tokens/{reader_id}", headers=admin).status_code == 204
        for base in (a, b):
            wait_until(lambda: httpx.get(f"{base}/v1/tasks", headers=reader).status_code == 401, f"{base} refuses it")


# -- a frozen leader

def leader_locks(server, database):
    return int(server.psql(LEADER_LOCK, database))


@contextlib.contextmanager
def bare_headwayd(directory, url, *arguments):
    """headwayd on `url` as a process of the test's own (to signal it); yields (base, process)."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with open(directory / "headwayd.log", "w") as log:
        process = subprocess.Popen([HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", url, *arguments], stderr=log)
        try:
            wait_for_port(port, process, "headwayd")
            yield f"http://127.0.0.1:{port}", process
        finally:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0


def test_a_leader_frozen_by_sigstop_hands_the_lead_over_and_takes_it_back_never_twice(tmp_path, postgres,
                                                                                         postgres_url):
    database = database_name(postgres_url)
    with bare_headwayd(tmp_path / "a", postgres_url) as (a, first):
        wait_until(lambda: "leadership.acquired" in (tmp_path / "a/headwayd.log").read_text(), "a leads")
        with run_headwayd(tmp_path / "b", db=postgres_url) as b:
            first.send_signal(signal.SIGSTOP)
            # The frozen leader's session ends once idle for 10 s; b takes the lead.
            wait_until(lambda: "leadership.acquired" in (tmp_path / "b/headwayd.log").read_text(), "b leads",
                       attempts=600)
            assert leader_locks(postgres, database) == 1
            first.send_signal(signal.SIGCONT)
            wait_until(lambda: "leadership.lost" in (tmp_path / "a/headwayd.log").read_text(), "a sees it lost the lead")
            assert httpx.post(f"{a}/v1/tasks", json={"id": "after", "name": "After"}).status_code == 201
            assert httpx.get(f"{b}/v1/tasks/after").status_code == 200
            assert leader_locks(postgres, database) == 1
            assert (tmp_path / "b/headwayd.log").read_text().count("leadership.acquired") == 1


# -- the database server killed under load

def kill_server(server):
    """SIGKILL to the postmaster and every process of the server, as a crash would."""
    pid = int((server.data_directory / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    for process in [pid, *map(int, children)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process, signal.SIGKILL)
    wait_until(lambda: subprocess.run(["pgrep", "-P", str(pid)], capture_output=True).returncode != 0
               and not pathlib.Path(f"/proc/{pid}").exists(), "the server's processes are gone")


def restart_after_crash(server):
    """Starts the killed server again on its data (it recovers from its WAL)."""
    (server.data_directory / "postmaster.pid").unlink(missing_ok=True)
    (server.directory / f".s.PGSQL.{server.port}.lock").unlink(missing_ok=True)
    server._check(server._server_command("pg_ctl", "start", "-w", "-t", "60", "-D", str(server.data_directory),
                                         "-l", str(server.log_file)), "pg_ctl start")


def test_the_database_server_killed_under_load_loses_nothing_acknowledged_and_the_daemons_recover(tmp_path):
    with PostgresServer(tmp_path / "server") as server:
        server.create_database("attacked")
        url = server.url("attacked")
        acknowledged, refusals, stop = {}, [], threading.Event()

        def runner(base, task):
            with httpx.Client(timeout=30) as client:
                assert client.post(f"{base}/v1/tasks", json={"id": task, "name": task, "total": 10**9}).status_code == 201
                seq = 0
                while not stop.is_set():
                    seq += 1
                    while not stop.is_set():
                        reply = client.post(f"{base}/v1/tasks/{task}/progress", json={"increment": 1, "seq": seq})
                        if reply.status_code == 200:
                            acknowledged[task] = seq
                            break
                        refusals.append((reply.status_code, reply.headers.get("Retry-After"),
                                         reply.json().get("code")))
                        time.sleep(0.1)

        with run_headwayd(tmp_path / "a", "--durability", "full", db=url) as a, \
                run_headwayd(tmp_path / "b", "--durability", "full", db=url) as b:
            watchers = [Watcher(a), Watcher(b)]
            runners = [threading.Thread(target=runner, args=(a if n % 2 else b, f"t{n}")) for n in range(4)]
            for thread in runners:
                thread.start()
            try:
                wait_until(lambda: len(acknowledged) == 4 and min(acknowledged.values()) > 20, "the runners run")
                kill_server(server)
                wait_until(lambda: len(refusals) >= 4, "writes are refused while the server is down")
                restart_after_crash(server)
                counts = dict(acknowledged)
                wait_until(lambda: all(acknowledged[task] > counts[task] + 5 for task in counts), "the runners go on",
                           attempts=600)
            finally:
                stop.set()
                for thread in runners:
                    thread.join(timeout=60)
            assert set(refusals) == {(503, "2", "database_unavailable")}
            stored = {task: int(completed) for task, completed in
                      (line.split("|") for line in server.psql("select id, completed from tasks", "attacked").split())}
            assert {task: stored[task] for task in acknowledged} == acknowledged
            wait_until(lambda: leader_locks(server, "attacked") == 1, "one daemon leads again")
            # Every subscriber, on either daemon, ends with what is stored, and gets what is
            # written after (each daemon listens again).
            assert httpx.post(f"{a}/v1/tasks", json={"id": "after-crash", "name": "After"}).status_code == 201
            stored["after-crash"] = 0
            for watcher in watchers:
                wait_until(lambda: watcher.view == stored, f"{watcher.base}'s subscriber sees what is stored")
                watcher.stop.set()
            assert [watcher.ids == sorted(set(watcher.ids)) for watcher in watchers] == [True, True]


class Watcher:
    """A subscriber of `base`'s event stream on a thread of its own, resuming with
    Last-Event-ID whenever the stream ends: `view` holds each task's `completed` as the
    events tell it, `ids` the event ids in arrival order."""

    def __init__(self, base):
        self.base, self.view, self.ids, self.stop = base, {}, [], threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self.stop.is_set():
            headers = {"Last-Event-ID": str(self.ids[-1])} if self.ids else {}
            with contextlib.suppress(httpx.HTTPError), httpx.Client(timeout=httpx.Timeout(10.0, read=10.0)) as client, \
                    client.stream("GET", f"{self.base}/v1/events", headers=headers) as stream:
                for line in stream.iter_lines():
                    if self.stop.is_set():
                        return
                    if line.startswith("id:"):
                        self.ids.append(int(line[3:]))
                    elif line.startswith("data:") and '"completed"' in line:
                        data = json.loads(line[5:])
                        for task in data.get("tasks", [data]):
                            self.view[task["id"]] = task["completed"]
