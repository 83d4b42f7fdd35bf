"""A headwayd started on a fresh loopback port, and runner threads that keep it writing:
shared by the scripts that measure the daemon under a steady write load
(wal-reader.py, backup-under-load.py, sizing.py)."""
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daemon(binary, database, log=None, flags=()):
    """Starts `binary` on `database` with `flags`, its stderr to `log`; returns the process
    and its base URL once it listens (exits the script if it does not)."""
    port = free_port()
    daemon = subprocess.Popen([binary, "--listen", f"127.0.0.1:{port}", "--db", database, *flags], stderr=log)
    for _ in range(500):
        if daemon.poll() is not None:
            sys.exit(f"headwayd exited with {daemon.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return daemon, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.02)
    daemon.kill()
    sys.exit("headwayd did not listen")


def stop_daemon(daemon):
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=60)


class ProgressLoad:
    """`runners` threads, each registering a task, reporting 100 progress updates on it
    (with a label of `label_bytes` more bytes) without pause, then the next task; counts
    the updates acknowledged and keeps the writes that failed (path, status)."""

    def __init__(self, base, runners, label_bytes=0):
        self.base = base
        self.label = "x" * label_bytes
        self.lock = threading.Lock()
        self.updates = 0
        self.failures = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(index,), daemon=True) for index in range(runners)]

    def start(self):
        for thread in self.threads:
            thread.start()

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def post(self, path, body, expected):
        request = urllib.request.Request(self.base + path, method="POST", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                status = reply.status
        except urllib.error.HTTPError as error:
            status = error.code
        except OSError as error:
            status = repr(error)
        if status != expected:
            with self.lock:
                self.failures.append((path, status))
            return False
        return True

    def run(self, index):
        task = 0
        while not self.stopping.is_set():
            task += 1
            task_id = f"runner-{index}-{task}"
            if not self.post("/v1/tasks", {"id": task_id, "name": f"Runner {index}", "total": 10**9}, 201):
                continue
            for completed in range(1, 101):
                if self.stopping.is_set():
                    break
                body = {"completed": completed, "label": f"step {completed} {self.label}"}
                if self.post(f"/v1/tasks/{task_id}/progress", body, 200):
                    with self.lock:
                        self.updates += 1
