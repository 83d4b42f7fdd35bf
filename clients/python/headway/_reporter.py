"""The background sender: one daemon thread per process that registers tasks, sends
their latest state in `POST /v1/progress` batches a few times a second, finishes them,
and keeps going when the server is away. The job's threads only write attributes of
their tasks; this thread reads them, so a loop never waits for the network."""
import atexit
import os
import re
import sys
import threading
import time

from . import _task
from ._http import Connection, Refused, Unreachable

DEFAULT_URL = "http://127.0.0.1:8080"
_ID_REFUSED = re.compile(r"[^A-Za-z0-9._~:-]")
#: Seconds between two rounds of sending (so a task is sent at most 4 times a second).
INTERVAL = 0.25
#: Items per batch request (the server takes up to 1,000 by default).
BATCH_ITEMS = 500
#: Longest wait between two attempts while the server is away.
MAX_BACKOFF = 5.0


class Settings:
    """Where and how to report, from the environment as the `headway` command reads it:
    `HEADWAY_URL` (default http://127.0.0.1:8080), `HEADWAY_TOKEN`, `HEADWAY_TASK_PREFIX`
    (put before every task id this process uses, unless the id starts with it already:
    the prefix of a token limited to one), `HEADWAY_DISABLE=1` (report nothing),
    `HEADWAY_TIMEOUT` (seconds per request, default 5) and `HEADWAY_EXIT_TIMEOUT`
    (seconds the process waits at exit to deliver the final state, default 10)."""

    def __init__(self, environment=None):
        environment = os.environ if environment is None else environment
        self.url = environment.get("HEADWAY_URL") or DEFAULT_URL
        self.token = environment.get("HEADWAY_TOKEN") or None
        self.prefix = environment.get("HEADWAY_TASK_PREFIX") or ""
        self.disabled = environment.get("HEADWAY_DISABLE", "") not in ("", "0")
        self.timeout = _seconds(environment.get("HEADWAY_TIMEOUT"), 5.0)
        self.exit_timeout = _seconds(environment.get("HEADWAY_EXIT_TIMEOUT"), 10.0)


def _seconds(text, default):
    try:
        return float(text) if text else default
    except ValueError:
        return default


class Reporter:
    """Sends the state of this process's tasks from a thread of its own."""

    def __init__(self, settings=None, interval=INTERVAL):
        self.settings = settings or Settings()
        self.interval = interval
        self._connection = None
        self._tasks = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._round_done = threading.Condition()
        self._rounds = 0
        self._thread = None
        self._stopping = False
        self._away = False
        self._backoff = 0.0
        self._warned = set()
        self.accepts_output = True
        #: Requests sent, by kind (for tests and the benchmark).
        self.sent = {"register": 0, "batch": 0, "items": 0, "finish": 0}
        if not self.settings.disabled:
            try:
                self._connect()
            except ValueError as error:
                self._warn("url", f"{error}; nothing is reported")
                self.settings.disabled = True

    def task_id(self, id):
        """`id` as the server takes it: with the prefix, characters outside
        `[A-Za-z0-9._~:-]` as `-`, at most 128 characters."""
        id = str(id)
        prefix = self.settings.prefix
        id = id if id.startswith(prefix) else prefix + id
        id = _ID_REFUSED.sub("-", id)[:128]
        return "-" if id in ("", ".", "..") else id

    def add(self, task):
        if self.settings.disabled:
            task._done = True
            return
        with self._lock:
            self._tasks.append(task)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="headway-reporter", daemon=True)
                self._thread.start()
        self._wake.set()

    def wake(self):
        self._wake.set()

    def flush(self, timeout=None):
        """Waits until everything recorded so far is sent (or `timeout` seconds pass);
        returns whether it was."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.idle():
                return True
            with self._round_done:
                seen = self._rounds
                self._wake.set()
                while self._rounds < seen + 1:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return self.idle()
                    self._round_done.wait(left if left is None else min(left, 1.0))

    def idle(self):
        with self._lock:
            tasks = list(self._tasks)
        return all(not self._has_work(task) for task in tasks)

    def settle_all(self):
        """Finishes every task still open, as the process ends."""
        with self._lock:
            tasks = list(self._tasks)
        for task in tasks:
            task.settle_at_exit()
        self._wake.set()

    def close(self, timeout):
        self.settle_all()
        delivered = self.flush(timeout)
        if not delivered:
            self._warn("exit", f"could not deliver the final state to {self._shown_url()} "
                       f"within {timeout:g} s (HEADWAY_EXIT_TIMEOUT); the task will show as stalled")
        return delivered

    # -- the thread ------------------------------------------------------------------

    def _wait(self):
        """Sleeps until the next round: `interval`, or less when woken (a new task, a
        finish, a flush); while the server is away, the whole backoff, unless the process
        is ending."""
        if not self._away:
            self._wake.wait(self.interval)
        else:
            deadline = time.monotonic() + self._backoff
            while not self._stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
                self._wake.clear()
        self._wake.clear()

    def _run(self):
        while True:
            self._wait()
            try:
                self._round()
                if self._away:
                    self._away = False
                    self._backoff = 0.0
            except Unreachable as error:
                if not self._away:
                    self._backoff = 0.25
                else:
                    self._backoff = min(MAX_BACKOFF, self._backoff * 2)
                if error.retry_after:
                    self._backoff = min(MAX_BACKOFF * 2, max(self._backoff, error.retry_after))
                self._away = True
                self._warn("away", f"cannot reach {self._shown_url()} ({error}); the job goes on, "
                           "and its latest progress is sent when the server is back")
            except Exception as error:  # never let a bug here end the job's reports silently
                self._warn("bug:" + type(error).__name__, f"reporting failed: {error!r}")
                self._away = True
                self._backoff = MAX_BACKOFF
            with self._round_done:
                self._rounds += 1
                self._round_done.notify_all()

    def _shown_url(self):
        return self._connect().shown_url

    def _connect(self):
        if self._connection is None:
            self._connection = Connection(self.settings.url, self.settings.token, self.settings.timeout)
        return self._connection

    def _warn(self, key, message):
        if key in self._warned:
            return
        self._warned.add(key)
        try:
            sys.stderr.write(f"headway: {message}\n")
            sys.stderr.flush()
        except Exception:
            pass

    def _has_work(self, task):
        if task._done:
            return False
        if not task._registered or task._inflight is not None or task._heartbeat or task._output:
            return True
        if task._finish is not None or task._deferred_since is not None:
            return True
        return bool(self._changes(task))

    def _changes(self, task):
        """What the task holds that the server does not yet (a partial item)."""
        item = {}
        bar = task._bar
        if bar is not None:
            completed = _integer(getattr(bar, "n", 0))
            total = _count_or_none(getattr(bar, "total", None))
            label = bar_label(bar)
        else:
            completed, total, label = task._completed, task._total, task._label
        if total is not None and completed > total:
            # More done than announced (tqdm lets n pass its total): the total was an
            # underestimate, and the server never holds completed above total.
            total = completed
        delta = completed - task._sent
        if delta > 0:
            item["increment"] = delta
        if total is not None and total != task._sent_total:
            item["total"] = total
        label = _task.clean(label)[:500] if label is not None else None
        if label is not None and label.strip() and label != task._sent_label:
            item["label"] = label
        unit = task._unit[:64] if task._unit is not None else None
        if unit is not None and unit.strip() and unit != task._sent_unit:
            item["unit"] = unit
        return item

    def _round(self):
        with self._lock:
            tasks = [task for task in self._tasks if not task._done]
            self._tasks = tasks
        if not tasks:
            return
        connection = self._connect()
        now = time.monotonic()
        for task in tasks:
            task.settle_deferred(now, force=self._stopping)
        for task in tasks:
            if not task._registered and not task._done:
                self._register(connection, task)
        items = []
        for task in tasks:
            if task._done or not task._registered:
                continue
            if task._inflight is None:
                task._inflight = self._next_item(task)
            if task._inflight is not None:
                items.append(task)
        for start in range(0, len(items), BATCH_ITEMS):
            self._send_batch(connection, items[start:start + BATCH_ITEMS])
        # A finished parent takes no new children: its finish waits for the children
        # made before it to be registered.
        with self._lock:
            waiting = {id(task.parent) for task in self._tasks if not task._registered and not task._done}
        for task in tasks:
            if (task._finish is not None and not task._done and task._registered and id(task) not in waiting
                    and task._inflight is None and not self._changes(task) and not task._output):
                self._send_finish(connection, task)

    def _next_item(self, task):
        item = self._changes(task)
        with task._lock:
            lines, task._output = task._output[:100], task._output[100:]
        if lines and self.accepts_output:
            item["output"] = lines
        heartbeat = task._heartbeat
        task._heartbeat = False
        if not item and not heartbeat:
            return None
        task._seq += 1
        item["task_id"] = task.id
        item["seq"] = task._seq
        return item

    def _register(self, connection, task):
        parent = task.parent
        body = {"id": task.id, "name": _text(task.name) or "task"}
        if isinstance(parent, _task.Task):
            if not parent._done or parent._registered:
                body["parent_id"] = parent.id
        elif parent is not None:
            body["parent_id"] = self.task_id(parent)
        for key, value in (("total", task.initial["total"]), ("unit", task.initial["unit"]),
                           ("label", task.initial["label"]), ("weight", task.weight),
                           ("metadata", task.metadata), ("stall_timeout_seconds", task.stall_timeout),
                           ("progress_timeout_seconds", task.progress_timeout),
                           ("expected_seconds", task.expected), ("deadline", task.deadline),
                           ("min_seconds", task.minimum)):
            if isinstance(value, str):
                value = _text(value)
            if value is not None:
                body[key] = value
        if task.pending:
            body["state"] = "pending"
        self.sent["register"] += 1
        try:
            reply = connection.request("POST", "/v1/tasks", body)
        except Refused as refusal:
            if refusal.code == "task_conflict":
                try:
                    reply = connection.request("GET", f"/v1/tasks/{task.id}")
                except Refused as second:
                    return self._give_up(task, second)
            else:
                return self._give_up(task, refusal)
        task._registered = True
        self._adopt(task, reply, registering=True)

    def _adopt(self, task, reply, registering=False):
        if not isinstance(reply, dict):
            return
        task._server = reply
        if registering:
            task._seq = max(task._seq, reply.get("seq") or 0)
            task._sent_total = reply.get("total")
            task._sent_label = reply.get("label")
            task._sent_unit = reply.get("unit")
        if reply.get("cancel_requested"):
            task._cancel = True
        if reply.get("state") in ("succeeded", "failed", "canceled") and task._finish is None:
            self._warn("finished:" + task.id, f"task {task.id} is already finished on the server "
                       f"({reply.get('state')}); its progress is not reported")
            task._done = True

    def _give_up(self, task, refusal):
        self._warn(f"refused:{refusal.code}", f"the server refused task {task.id}: {refusal}; "
                   "the job goes on without reporting it")
        task._done = True

    def _send_batch(self, connection, tasks):
        body = {"updates": [task._inflight for task in tasks]}
        self.sent["batch"] += 1
        self.sent["items"] += len(tasks)
        try:
            reply = connection.request("POST", "/v1/progress", body)
        except Refused as refusal:
            # The whole batch refused (a token without the report scope, for one):
            # the same items would be refused again.
            for task in tasks:
                task._inflight = None
                self._give_up(task, refusal)
            return
        results = (reply or {}).get("results") or []
        for task, result in zip(tasks, results):
            item = task._inflight
            status = result.get("status", 0)
            if status == 200:
                task._inflight = None
                task._sent += item.get("increment", 0)
                task._sent_total = item.get("total", task._sent_total)
                task._sent_label = item.get("label", task._sent_label)
                task._sent_unit = item.get("unit", task._sent_unit)
                self._adopt(task, result.get("task"))
            elif status == 429 or status >= 500:
                pass  # the same item (same seq) goes again next round
            else:
                self._item_refused(task, item, Refused(status, result.get("problem")))

    def _item_refused(self, task, item, refusal):
        task._inflight = None
        if "output" in item and refusal.names_field("output", prefix=True):
            # Lines refused (by a server older than the output tail: then never sent
            # again): the lines are dropped, and the rest of the item goes again under a
            # new seq (nothing of it was applied).
            if refusal.names_field("output"):
                self.accepts_output = False
            return
        if refusal.code == "task_finished":
            task._done = True
            return
        if refusal.code == "not_found":
            # The task is gone (a fresh database, or deleted): registered again.
            task._registered = False
            task._sent = 0
            return
        # A rule the update breaks (more than the total, say): dropped, so that it is not
        # sent forever; the next change is sent as usual.
        self._warn(f"item:{refusal.code}", f"the server refused an update of {task.id}: {refusal}")
        task._sent += item.get("increment", 0)
        task._sent_total = item.get("total", task._sent_total)
        task._sent_label = item.get("label", task._sent_label)
        task._sent_unit = item.get("unit", task._sent_unit)

    def _send_finish(self, connection, task):
        outcome, message, lines = task._finish
        body = {"outcome": outcome}
        if lines and not self.accepts_output:
            message = "\n".join([message or outcome, *lines])
        message = _text(message) if message else None
        if message:
            body["message"] = message[:4000]
        if lines and self.accepts_output:
            body["output"] = lines[-100:]
        self.sent["finish"] += 1
        try:
            reply = connection.request("POST", f"/v1/tasks/{task.id}/finish", body)
        except Refused as refusal:
            if "output" in body and refusal.names_field("output", prefix=True):
                if refusal.names_field("output"):
                    self.accepts_output = False
                task._finish = (outcome, message, [] if self.accepts_output else lines)
                return self._send_finish(connection, task)
            if refusal.code not in ("outcome_conflict", "task_finished", "not_found"):
                self._warn(f"finish:{refusal.code}", f"the server refused to finish {task.id}: {refusal}")
            task._done = True
            return
        task._server = reply
        task._done = True


def bar_label(bar):
    """A tqdm bar's label: its description when changed after it was made
    (`set_description`), and its postfix (`set_postfix`)."""
    parts = []
    description = (getattr(bar, "desc", None) or "").rstrip(": ").strip()
    if description and description != getattr(bar, "_hw_name_desc", None):
        parts.append(description)
    postfix = getattr(bar, "postfix", None)
    if postfix:
        parts.append(str(postfix).strip())
    text = " · ".join(part for part in parts if part)
    return text or None


def _text(value):
    """`value` without NULs, or None when nothing but blanks is left (the server refuses
    blank texts)."""
    value = _task.clean(value)
    return value if value.strip() else None


def _integer(value):
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return 0


def _count_or_none(value):
    return _task._count(value)


_shared = None
_shared_lock = threading.Lock()


def shared_reporter():
    """The process's reporter, made (and its exit hook installed) at first use."""
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = Reporter()
                _install_hooks()
    return _shared


_hooks_installed = False


def _install_hooks():
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(_at_exit)
    previous = sys.excepthook

    def excepthook(kind, error, tb):
        _task.record_failure(error, uncaught=True)
        previous(kind, error, tb)

    sys.excepthook = excepthook
    if hasattr(os, "register_at_fork"):
        # A forked worker (Celery's prefork pool, multiprocessing) has no sender thread:
        # it gets a reporter of its own at its first task.
        os.register_at_fork(after_in_child=_forget_after_fork)


def _forget_after_fork():
    global _shared
    _shared = None
    with _task._open_lock:
        del _task._open_bars[:]


def _at_exit():
    reporter = _shared
    if reporter is not None and reporter._thread is not None:
        reporter._stopping = True
        reporter.close(reporter.settings.exit_timeout)


def flush(timeout=None):
    """Waits until everything this process recorded is sent (or `timeout` seconds pass);
    returns whether it was."""
    return shared_reporter().flush(timeout)
