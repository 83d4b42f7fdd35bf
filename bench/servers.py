"""The servers the benchmarks measure, and the measurements they share.

Each server runs pinned to CPU 0 on a free loopback port with its own temporary state; the
load generators run in this process or in wrk, pinned to CPU 1. The HTTP servers are driven
with the same ~100-byte JSON body and read by the same clients; Redis receives the same
progress, as JSON, through BullMQ's updateProgress script (bench/redis-progress.c).
"""
import http.client
import json
import os
import resource
import selectors
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADWAYD = os.environ.get("HEADWAYD", os.path.join(ROOT, ".build/release/headwayd"))
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
STAMP_PREFIX = b'"label":"t='


def stamps(frames):
    """The send times (ns) stamped in the labels of `frames`, in order: found with
    `bytes.find`, which costs a subscriber loop about half what a regular expression
    costs, and more so on a server's larger frames (headwayd sends the whole task)."""
    found = []
    start = frames.find(STAMP_PREFIX)
    while start >= 0:
        first = start + len(STAMP_PREFIX)
        end = frames.find(b'"', first)
        digits = frames[first:end] if end > first else b""
        if digits.isdigit():
            found.append(int(digits))
        start = frames.find(STAMP_PREFIX, first)
    return found


def body(stamp_ns=None, counter=0):
    """The update every server receives: about 100 bytes of JSON."""
    label = f"t={stamp_ns}" if stamp_ns is not None else f"Copying photos to archive volume 3 (batch {counter:06d})"
    return f'{{"increment":1,"label":"{label}","unit":"files"}}'


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_certificate(directory):
    """A self-signed certificate for 127.0.0.1 (openssl); returns (cert, key, client SSLContext)."""
    cert, key = os.path.join(directory, "bench.crt"), os.path.join(directory, "bench.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=headway-bench",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
    context = ssl.create_default_context(cafile=cert)
    return cert, key, context


def wait_for_port(port, process):
    for _ in range(400):
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.025)
    raise RuntimeError("server did not listen")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    total = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
                total += int(stat.read().split()[0]) / 1e9
        except OSError:
            pass
    return total


# Open files this process and the servers it starts ask for: 50,000 subscribers and their
# servers' other files. Past the hard limit only a privileged process (CAP_SYS_RESOURCE) may go.
OPEN_FILES_WANTED = 131_072


def pin_this_process_to_cpu1():
    """Pins this process to CPU 1 and raises its open-file limit (which the servers and
    clients it starts inherit): to OPEN_FILES_WANTED where it may, else to the hard limit."""
    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {1})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(hard, OPEN_FILES_WANTED),) * 2)
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def open_file_limit():
    """This process's soft limit of open files (what a server started now inherits)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def headway_load_flags():
    """Flags that let one benchmark client be many clients: every connection of a benchmark
    comes from 127.0.0.1, which a build with a cap per client address would refuse past
    its default (1,000) — an attack's limit, not a load's. Older builds lack the flag."""
    usage = subprocess.run([HEADWAYD, "--help"], capture_output=True, text=True).stdout
    return ["--max-connections-per-address", "100000"] if "--max-connections-per-address" in usage else []


class Headway:
    """headwayd with a fresh database."""
    name = "headway"

    def __init__(self, durability="full", extra=(), stderr=None, many_clients_from_one_address=True, tls=False,
                 database=None):
        """Starts headwayd; `stderr` (a file) receives its log instead of this process's
        stderr; `many_clients_from_one_address` lifts the cap per client address (see
        `headway_load_flags`), which an attack benchmark keeps; `tls` serves HTTPS with a
        fresh self-signed certificate (`ssl_context` is then the clients' context);
        `database` is its `--db` (a PostgreSQL URL), a fresh SQLite file when None."""
        self.durability = durability
        self.name = f"headway ({durability}{', TLS' if tls else ''})"
        self.work = tempfile.mkdtemp()
        self.ssl_context = None
        if tls:
            cert, key, self.ssl_context = make_certificate(self.work)
            extra = ("--tls-cert", cert, "--tls-key", key, *extra)
        self.port = free_port()
        self.process = subprocess.Popen(
            ["taskset", "-c", "0", HEADWAYD, "--listen", f"127.0.0.1:{self.port}", "--db", database or f"{self.work}/h.db",
             "--durability", durability, "--log-level", "warn", "--max-subscribers", "60000",
             *(headway_load_flags() if many_clients_from_one_address else []), *extra],
            stderr=stderr)
        wait_for_port(self.port, self.process)
        self.pid = self.process.pid

    def prepare_channels(self, names):
        api = connection(self)
        for name in names:
            api.request("POST", "/v1/tasks", body=f'{{"id":"{name}","name":"Benchmark {name}"}}',
                        headers={"Content-Type": "application/json"})
            response = api.getresponse()
            response.read()
            assert response.status in (200, 201), response.status
        api.close()

    def publish_path(self, channel):
        return f"/v1/tasks/{channel}/progress"

    def subscribe_request(self, channel):
        return f"GET /v1/events?task={channel} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode()

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.work, ignore_errors=True)


class Nchan:
    """nginx with the nchan module, one process, bench/nchan/nginx.conf.template."""
    name = "nginx+nchan"

    def __init__(self):
        self.work = tempfile.mkdtemp()
        self.port = free_port()
        template = open(os.path.join(ROOT, "bench/nchan/nginx.conf.template")).read()
        with open(f"{self.work}/nginx.conf", "w") as conf:
            conf.write(template.replace("{PREFIX}", self.work).replace("{PORT}", str(self.port)))
        self.process = subprocess.Popen(["taskset", "-c", "0", NGINX, "-p", self.work, "-c", f"{self.work}/nginx.conf"],
                                        stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.process)
        self.pid = self.process.pid

    def prepare_channels(self, names):
        pass

    def publish_path(self, channel):
        return f"/pub?id={channel}"

    def subscribe_request(self, channel):
        return f"GET /sub/{channel} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n".encode()

    def stop(self):
        self.process.send_signal(signal.SIGQUIT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.work, ignore_errors=True)


def wrk_publish(server, connections=50, seconds=10, channels=50):
    """Updates (publishes) per second over keep-alive with wrk; returns (rate, p50 ms, p99 ms, errors)."""
    names = [f"bench-{i}" for i in range(channels)]
    server.prepare_channels(names)
    env = dict(os.environ, BENCH_TASKS=str(channels), BENCH_PATH=server.publish_path("CHANNEL"))
    output = subprocess.run(
        ["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s",
         os.path.join(ROOT, "bench/progress.lua"), f"http://127.0.0.1:{server.port}"],
        env=env, capture_output=True, text=True, check=True).stdout
    line = next(l for l in output.splitlines() if l.startswith("RESULT"))
    fields = dict(part.split("=") for part in line.split()[1:])
    if int(fields["errors"]):
        print(f"wrk saw errors: {line}", file=sys.stderr, flush=True)
    return float(fields["rps"]), float(fields["p50_ms"]), float(fields["p99_ms"]), int(fields["errors"])


def wrk_publish_batches(server, connections=50, seconds=10, tasks=200, batch=200):
    """Progress items per second sent in batches (`POST /v1/progress`, bench/progress-batch.lua:
    `batch` items a request over `tasks` tasks) over keep-alive with wrk; checks afterwards
    that every item acknowledged is stored (the tasks' increments add up to at least the
    items of the 2xx replies). Returns (items/s, p50 ms, p99 ms, errors) of the requests."""
    names = [f"bench-{i}" for i in range(tasks)]
    server.prepare_channels(names)
    env = dict(os.environ, BENCH_TASKS=str(tasks), BENCH_BATCH=str(batch))
    output = subprocess.run(
        ["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s",
         os.path.join(ROOT, "bench/progress-batch.lua"), f"http://127.0.0.1:{server.port}"],
        env=env, capture_output=True, text=True, check=True).stdout
    line = next(l for l in output.splitlines() if l.startswith("RESULT"))
    fields = dict(part.split("=") for part in line.split()[1:])
    api = connection(server)
    api.request("GET", f"/v1/tasks?page_size={tasks}")
    stored = sum(task["completed"] for task in json.loads(api.getresponse().read())["tasks"])
    api.close()
    acknowledged = int(fields["requests"]) * batch
    assert stored >= acknowledged, f"{acknowledged - stored} acknowledged items are not stored"
    return float(fields["items_per_s"]), float(fields["p50_ms"]), float(fields["p99_ms"]), int(fields["errors"])


def connection(server):
    """A client connection to `server`'s API (HTTPS when it has a client `ssl_context`)."""
    context = getattr(server, "ssl_context", None)
    if context is not None:
        return http.client.HTTPSConnection("127.0.0.1", server.port, context=context)
    return http.client.HTTPConnection("127.0.0.1", server.port)


class Subscribers:
    """N event-stream subscribers on one epoll loop; counts stamped events and their latency.
    With `ssl_context` each opens with a (blocking) TLS handshake. `add` opens more, to
    another server too: each subscriber's state names its server's `port`. With
    `keep_arrivals` each state also keeps (stamp, arrival) in ns of every stamped event;
    `spread` maps each stamp to its earliest and latest arrival over all subscribers."""

    def __init__(self, port, count, request, ssl_context=None, keep_arrivals=False):
        self.selector = selectors.EpollSelector()
        self.states = []
        self.keep_arrivals = keep_arrivals
        # Each stamp's earliest and latest arrival (ns) over all subscribers.
        self.spread = {}
        self.connect_seconds = 0.0
        self.add(port, count, request, ssl_context)

    def add(self, port, count, request, ssl_context=None):
        """Opens `count` more subscribers on `port` with `request`, and waits for their response heads."""
        started = time.monotonic()
        for first in range(0, count, 500):
            for _ in range(first, min(first + 500, count)):
                sock = socket.create_connection(("127.0.0.1", port))
                if ssl_context is not None:
                    sock = ssl_context.wrap_socket(sock, server_hostname="127.0.0.1")
                sock.sendall(request)
                sock.setblocking(False)
                state = {"sock": sock, "port": port, "buffer": b"", "open": False, "ready": False, "events": 0,
                         "frames": 0, "latencies": [], "arrivals": []}
                self.states.append(state)
                self.selector.register(sock, selectors.EVENT_READ, state)
            deadline = time.monotonic() + 30
            while sum(s["open"] for s in self.states) < len(self.states) and time.monotonic() < deadline:
                self.pump(0.05)
        self.connect_seconds += time.monotonic() - started

    @property
    def connected(self):
        return sum(s["open"] for s in self.states)

    def wait_until_ready(self, seconds=60):
        """Reads until every open subscriber has had a whole first event (its catch-up)."""
        deadline = time.monotonic() + seconds
        while any(s["open"] and not s["ready"] for s in self.states) and time.monotonic() < deadline:
            self.pump(0.05)

    def pump(self, timeout):
        """Reads every socket that is ready, each stamped with its own arrival time, then
        parses what came: parsing one subscriber's bytes (a bigger frame takes longer)
        does not delay the arrival time of the next."""
        arrived = []
        for key, _ in self.selector.select(timeout):
            state = key.data
            try:
                chunk = state["sock"].recv(65536)
                # A TLS socket may hold more decrypted bytes than one recv returned, which
                # epoll cannot tell: read them now.
                pending = getattr(state["sock"], "pending", lambda: 0)()
                while pending:
                    chunk += state["sock"].recv(pending)
                    pending = state["sock"].pending()
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self.selector.unregister(state["sock"])
                continue
            arrived.append((state, chunk, time.time_ns()))
        for state, chunk, now in arrived:
            state["open"] = True  # the response head (and a first frame) came
            data = state["buffer"] + chunk if state["buffer"] else chunk
            end = data.rfind(b"\n\n")
            if end < 0:
                state["buffer"] = data[-4096:]
                continue
            complete, state["buffer"] = data[:end + 2], data[end + 2:]
            state["ready"] = True
            state["frames"] += complete.count(b"\n\n")
            for stamp in stamps(complete):
                state["events"] += 1
                state["latencies"].append((now - stamp) / 1e6)
                first, last = self.spread.get(stamp, (now, now))
                self.spread[stamp] = (min(first, now), max(last, now))
                if self.keep_arrivals:
                    state["arrivals"].append((stamp, now))

    def summary(self):
        """What the subscribers received: as `SubscriberProcess.finish` returns it."""
        latencies = sorted(l for s in self.states for l in s["latencies"])
        firsts = [(first - stamp) / 1e6 for stamp, (first, _) in self.spread.items()]
        lasts = [(last - stamp) / 1e6 for stamp, (_, last) in self.spread.items()]
        nan = float("nan")
        return {
            "connected": self.connected, "delivered": sum(s["events"] for s in self.states),
            "p50_ms": statistics.median(latencies) if latencies else nan,
            "p90_ms": latencies[int(len(latencies) * 0.90) - 1] if latencies else nan,
            "p99_ms": latencies[int(len(latencies) * 0.99) - 1] if latencies else nan,
            "first_arrival_ms": statistics.median(firsts) if firsts else nan,
            "last_arrival_ms": statistics.median(lasts) if lasts else nan,
        }

    def close(self):
        for state in self.states:
            state["sock"].close()


def fanout(server, subscribers=10_000, rate=5.0, seconds=30.0, channel="fanout", python_client=False):
    """N subscribers of one channel, `rate` stamped updates per second: delivery, latency, RSS, CPU.
    Over plain HTTP the subscribers are bench/sse-subscribers.c (`SubscriberProcess`), which
    measures the server's delivery; over TLS, or with `python_client` (to compare with TLS
    through the same client), they are the Python `Subscribers`."""
    server.prepare_channels([channel])
    time.sleep(0.5)
    rss_before = rss_kib(server.pid)
    ssl_context = getattr(server, "ssl_context", None)
    in_c = ssl_context is None and not python_client
    if in_c:
        clients = SubscriberProcess(server.port, subscribers, server.subscribe_request(channel))
    else:
        clients = Subscribers(server.port, subscribers, server.subscribe_request(channel), ssl_context=ssl_context)
    try:
        return measure_fanout(server, clients, in_c, rss_before, subscribers, rate, seconds, channel)
    finally:
        clients.close()


def measure_fanout(server, clients, in_c, rss_before, subscribers, rate, seconds, channel):
    """`fanout`'s measurement, with its subscribers connected."""
    def wait(seconds):
        if in_c:
            return time.sleep(seconds)
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            clients.pump(0.05)

    wait(1)
    rss_after = rss_kib(server.pid)
    cpu_start, idle_start = cpu_seconds(server.pid), time.monotonic()
    wait(3)
    idle_cpu = 100 * (cpu_seconds(server.pid) - cpu_start) / (time.monotonic() - idle_start)

    acknowledged = []

    def drive():
        api = connection(server)
        next_time = time.monotonic()
        for _ in range(int(seconds * rate)):
            next_time += 1.0 / rate
            api.request("POST", server.publish_path(channel), body=body(stamp_ns=time.time_ns()),
                        headers={"Content-Type": "application/json"})
            response = api.getresponse()
            response.read()
            if 200 <= response.status < 300:
                acknowledged.append(1)
            time.sleep(max(0.0, next_time - time.monotonic()))

    driver = threading.Thread(target=drive)
    cpu_start, drive_start = cpu_seconds(server.pid), time.monotonic()
    driver.start()
    if in_c:
        driver.join()
    else:
        while driver.is_alive():
            clients.pump(0.05)
    busy_cpu = 100 * (cpu_seconds(server.pid) - cpu_start) / (time.monotonic() - drive_start)
    wait(3)
    received = clients.finish() if in_c else clients.summary()
    result = {
        "requested": subscribers, "connected": received["connected"], "connect_seconds": clients.connect_seconds,
        "acknowledged": len(acknowledged), "expected": len(acknowledged) * received["connected"],
        "delivered": received["delivered"],
        "p50_ms": received["p50_ms"], "p90_ms": received["p90_ms"], "p99_ms": received["p99_ms"],
        # Each update's first and last arrival among the subscribers (medians over the
        # updates): the first is the server's path from request to the first write (for
        # headwayd the commit too), the spread from first to last one round of writes.
        "first_arrival_ms": received["first_arrival_ms"], "last_arrival_ms": received["last_arrival_ms"],
        "rss_before_kib": rss_before, "rss_after_kib": rss_after,
        "rss_per_subscriber_kib": (rss_after - rss_before) / max(1, received["connected"]),
        "idle_cpu_percent": idle_cpu, "busy_cpu_percent": busy_cpu,
    }
    return result


class SubscriberProcess:
    """`count` event-stream subscribers of `port` in bench/sse-subscribers.c (on this
    process's CPU), reading from the start; `finish` ends them and returns what
    `Subscribers.summary` returns; `close` ends them at once."""

    def __init__(self, port, count, request):
        self.process = subprocess.Popen([subscriber_client(), str(port), str(count), request.decode()],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        words = self.process.stdout.readline().split()
        if not words or words[0] != "connected":
            self.close()
            raise RuntimeError(f"sse-subscribers did not connect: {words}")
        self.connected, self.connect_seconds = int(words[1]), float(words[2])

    def finish(self):
        self.process.stdin.close()
        summary = json.loads(self.process.stdout.readline())
        self.process.wait()
        return {key: (float("nan") if value == -1 else value) for key, value in summary.items()}

    def close(self):
        """Ends the subscribers at once if `finish` did not."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def subscriber_client():
    """bench/sse-subscribers.c, compiled."""
    return compiled_client("sse-subscribers")


def compiled_client(name):
    """bench/NAME.c compiled (again when the source is newer) under .build/bench."""
    source = os.path.join(ROOT, f"bench/{name}.c")
    binary = os.path.join(ROOT, f".build/bench/{name}")
    if not os.path.exists(binary) or os.path.getmtime(binary) < os.path.getmtime(source):
        os.makedirs(os.path.dirname(binary), exist_ok=True)
        subprocess.run(["cc", "-O2", "-Wall", "-o", binary, source], check=True)
    return binary


def publish_while_subscribed(server, subscribers=10_000, connections=50, seconds=10):
    """headwayd's updates per second with wrk while N subscribers of every task receive;
    also how many events each subscriber received per second meanwhile."""
    server.prepare_channels([f"bench-{i}" for i in range(50)])
    clients = Subscribers(server.port, subscribers,
                          b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
    # Measure the steady state: every subscriber has its snapshot before updates start.
    clients.wait_until_ready()
    for state in clients.states:
        state["frames"] = 0
    env = dict(os.environ, BENCH_TASKS="50", BENCH_PATH=server.publish_path("CHANNEL"))
    wrk = subprocess.Popen(
        ["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s",
         os.path.join(ROOT, "bench/progress.lua"), f"http://127.0.0.1:{server.port}"],
        env=env, stdout=subprocess.PIPE, text=True)
    started = time.monotonic()
    while wrk.poll() is None:
        clients.pump(0.05)
    elapsed = time.monotonic() - started
    output = wrk.stdout.read()
    connected = clients.connected
    events_per_subscriber = sum(s["frames"] for s in clients.states) / max(1, connected) / elapsed
    clients.close()
    line = next(l for l in output.splitlines() if l.startswith("RESULT"))
    fields = dict(part.split("=") for part in line.split()[1:])
    return float(fields["rps"]), connected, events_per_subscriber


class Redis:
    """redis-server with an append-only file in a fresh directory, `appendfsync` `always`
    (every write on disk before its reply) or `everysec`; otherwise Redis' defaults, RDB
    snapshots off. The queue `bench` holds the jobs BullMQ's progress calls update."""

    queue = "bench"

    def __init__(self, appendfsync="always"):
        import redis  # the client the bullmq package installs
        self.appendfsync = appendfsync
        self.name = f"redis (appendfsync {appendfsync})"
        self.work = tempfile.mkdtemp()
        self.port = free_port()
        with open(f"{self.work}/redis.conf", "w") as conf:
            conf.write(f"bind 127.0.0.1\nport {self.port}\ndir {self.work}\nlogfile {self.work}/redis.log\n"
                       f"save \"\"\nappendonly yes\nappendfsync {appendfsync}\n")
        self.process = subprocess.Popen(["taskset", "-c", "0", REDIS_SERVER, f"{self.work}/redis.conf"],
                                        stdout=subprocess.DEVNULL)
        wait_for_port(self.port, self.process)
        self.pid = self.process.pid
        self.client = redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True)
        self.client.ping()

    def version(self):
        return self.client.info("server")["redis_version"]

    def prepare_jobs(self, names):
        """Adds one job per name to the queue with BullMQ's own Queue.add (the job hash
        bull:bench:<name> with the fields BullMQ writes, the queue's meta hash and event stream)."""
        import asyncio
        from bullmq import Queue

        async def add():
            queue = Queue(self.queue, {"connection": f"redis://127.0.0.1:{self.port}"})
            for name in names:
                await queue.add("progress", {"task": name}, {"jobId": name})
            await queue.close()
        asyncio.run(add())

    def events_added(self):
        """Entries ever added to the queue's event stream (trimming to BullMQ's
        `opts.maxLenEvents` removes entries, not this count)."""
        return self.client.xinfo_stream(f"bull:{self.queue}:events")["entries-added"]

    def stop(self):
        self.client.close()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.work, ignore_errors=True)


def bullmq_update_progress_script():
    """BullMQ's updateProgress script, verbatim as the bullmq package ships it (MIT
    licence, Taskforce.sh Inc.; its includes already inlined) — the script Job.updateProgress runs."""
    import bullmq
    with open(os.path.join(os.path.dirname(bullmq.__file__), "commands", "updateProgress-3.lua")) as script:
        return script.read()


def redis_load_client():
    """bench/redis-progress.c, compiled."""
    return compiled_client("redis-progress")


def redis_progress(server, connections=50, seconds=10):
    """BullMQ's progress calls per second on `server` (a Redis): `connections` connections
    (redis-progress on CPU 1), each updating its own job, for `seconds`. Then checks what
    Redis stored: the event stream grew by exactly the calls acknowledged, and each job's
    `progress` holds its connection's last value. Returns (rate, p50 ms, p99 ms, errors)."""
    import json
    names = [f"bench-{i}" for i in range(connections)]
    server.prepare_jobs(names)
    sha = server.client.script_load(bullmq_update_progress_script())
    events_before = server.events_added()
    output = subprocess.run(
        ["taskset", "-c", "1", redis_load_client(), str(server.port), sha, server.queue, "bench-", str(connections),
         str(seconds)], capture_output=True, text=True, check=True).stdout
    line = next(l for l in output.splitlines() if l.startswith("RESULT"))
    fields = dict(part.split("=") for part in line.split()[1:])
    acknowledged = {job: int(calls) for _, job, calls in (l.split() for l in output.splitlines() if l.startswith("JOB "))}
    grown = server.events_added() - events_before
    assert grown == int(fields["requests"]) - int(fields["errors"]) == sum(acknowledged.values()), \
        f"{server.name}: the event stream grew by {grown}, {fields['requests']} replies, {fields['errors']} errors"
    for job, calls in acknowledged.items():
        stored = json.loads(server.client.hget(f"bull:{server.queue}:{job}", "progress"))["completed"]
        assert stored == calls, f"{server.name}: {job} holds progress {stored}, {calls} calls were acknowledged"
    return float(fields["rps"]), float(fields["p50_ms"]), float(fields["p99_ms"]), int(fields["errors"])
