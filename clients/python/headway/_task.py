"""Tasks as the job sees them: `Task`, `track`, `Canceled`, and which task a new one
nests under. Everything here only records state in memory; the reporter's thread
(`_reporter`) sends it."""
import itertools
import os
import sys
import threading
import time
import traceback
import uuid

#: Most lines of a traceback sent as a failed task's output.
TRACEBACK_LINES = 20


class Canceled(BaseException):
    """Raised by the next `update()`/`progress()` (or iteration of `track`) after the
    server said someone asked to cancel the task. Like `KeyboardInterrupt` it is not an
    `Exception`, so `except Exception:` blocks let it through; a job may catch it to
    clean up. A task whose `Canceled` ends its block or loop finishes `canceled`."""

    def __init__(self, task_id):
        super().__init__(f"task {task_id} was asked to cancel")
        self.task_id = task_id


_process_token = uuid.uuid4().hex[:10]
_numbers = itertools.count(1)
_failure = None  # (time, message, output lines): the last exception that ended a block
_uncaught = None  # the same for the exception that is ending the program
_local = threading.local()
_default_parent = None  # the task of `python -m headway run`, when there is one
_open_lock = threading.Lock()
_open_bars = []  # [(position, task)] of open bars and `track` loops, oldest first


def _generated_id():
    return f"py-{_process_token}-{next(_numbers)}"


def _reporter():
    from ._reporter import shared_reporter
    return shared_reporter()


def exception_summary(error):
    """A failed task's message and output for `error`: its type and text, and the last
    lines of its traceback."""
    text = str(error)
    message = f"{type(error).__name__}: {text}" if text else type(error).__name__
    lines = []
    for chunk in traceback.format_exception(type(error), error, error.__traceback__):
        lines.extend(line for line in chunk.rstrip("\n").split("\n"))
    return message, lines[-TRACEBACK_LINES:]


def record_failure(error, uncaught=False):
    """Remembers the exception that is ending a block (`uncaught`: the program), so that
    loops closed while it unwound finish `failed` with it rather than as stopped early."""
    global _failure, _uncaught
    if isinstance(error, (Canceled, KeyboardInterrupt)) or (isinstance(error, SystemExit) and not error.code):
        return
    message, lines = exception_summary(error)
    _failure = (time.monotonic(), message, lines)
    if uncaught:
        _uncaught = _failure


def recent_failure(since):
    """The failure recorded at `since` or later, if any."""
    if _failure is not None and _failure[0] >= since - 0.05:
        return _failure
    return None


def current_parent():
    """The task a new task nests under when none is named: the innermost `with Task(...)`
    of this thread, else the task of `python -m headway run`."""
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    return _default_parent


def set_default_parent(task):
    global _default_parent
    _default_parent = task


def open_bar(position, fallback_parent):
    """Registers an open bar (or `track` loop) at `position` (None: the smallest free
    one, as tqdm places bars); returns (position, its parent task): the open bar
    with the highest position below it (the newest of those), else `fallback_parent`."""
    with _open_lock:
        if position is None:
            taken = {p for p, _ in _open_bars}
            position = next(p for p in itertools.count() if p not in taken)
        parent = None
        best = -1
        for p, task in _open_bars:
            if best <= p < position:
                best, parent = p, task
        return position, parent or fallback_parent


def add_open_bar(position, task):
    with _open_lock:
        _open_bars.append((position, task))


def close_bar(task):
    with _open_lock:
        for index, (_, open_task) in enumerate(_open_bars):
            if open_task is task:
                del _open_bars[index]
                break


class Task:
    """A task of Headway, reported from this process.

    Creating one never waits for the server: registration (idempotent: the same `id`
    again adopts the task) and every later change are sent by a background thread,
    coalesced to a few requests a second. `progress`, `heartbeat` and `finish` only
    record what to send. As a context manager the task finishes `succeeded`, or `failed`
    with the exception's text as message and its traceback's last lines as output, or
    `canceled` when `Canceled` ended the block; tasks made inside the block (`Task`,
    `track`, `headway.tqdm`) become its children.
    """

    def __init__(self, name, *, id=None, total=None, unit=None, label=None, parent=None,
                 weight=None, metadata=None, stall_timeout=None, progress_timeout=None,
                 expected=None, deadline=None, minimum=None, pending=False, _bar=None, _position=None):
        reporter = _reporter()
        if parent is None and _bar is None:
            parent = current_parent()
        self.name = str(name)[:200] or "task"
        self.id = reporter.task_id(id if id is not None else _generated_id())
        self.parent = parent
        self.weight = weight
        self.metadata = metadata
        self.stall_timeout = stall_timeout
        self.progress_timeout = progress_timeout
        # The run-time rules: seconds from the start, a time to be done by, the shortest
        # believable run (`expected_seconds`, `deadline`, `min_seconds` to the server).
        self.expected = expected
        self.deadline = _rfc3339(deadline)
        self.minimum = minimum
        self.pending = pending
        self.initial = {"total": _count(total), "unit": unit, "label": label}
        # What the job wants the server to hold; read by the sender's thread.
        self._completed = 0
        self._total = _count(total)
        self._unit = unit
        self._label = label
        self._bar = _bar
        self._lock = threading.Lock()
        self._output = []
        self._heartbeat = False
        self._finish = None  # (outcome, message, output lines) once finished here
        self._deferred_since = None  # closed short of its total: outcome decided later
        self._cancel = False
        self._cancel_raised = False
        # Kept by the sender's thread.
        self._registered = False
        self._done = False
        self._seq = 0
        self._sent = 0
        self._sent_total = None
        self._sent_label = None
        self._sent_unit = None
        self._inflight = None
        self._server = None
        self._reporter = reporter
        reporter.add(self)

    # -- what the job calls ------------------------------------------------------------

    @property
    def completed(self):
        """What this process has counted so far."""
        return int(self._bar.n) if self._bar is not None else self._completed

    @property
    def total(self):
        if self._bar is not None:
            return _count(getattr(self._bar, "total", None))
        return self._total

    @property
    def label(self):
        return self._label

    @property
    def cancel_requested(self):
        """Whether the server said someone asked to cancel this task."""
        return self._cancel

    @property
    def server_state(self):
        """The task as the server last returned it (a dict), or None before any reply."""
        return self._server

    def progress(self, completed=None, *, increment=None, total=None, label=None, unit=None, output=None):
        """Records progress: an absolute `completed` or an `increment` (not both), a new
        `total`, `label`, `unit`, and `output` lines (a string or a list of lines) for the
        task's output tail. Raises `Canceled` once if a cancel was requested."""
        if completed is not None and increment is not None:
            raise ValueError("give completed or increment, not both")
        if increment is not None:
            self._completed += int(increment)
        elif completed is not None:
            self._completed = max(self._completed, int(completed))
        if total is not None:
            self._total = _count(total)
        if label is not None:
            self._label = str(label)
        if unit is not None:
            self._unit = str(unit)
        if output is not None:
            self._add_output(output)
        if self._cancel and not self._cancel_raised:
            self.raise_if_canceled()

    def update(self, n=1):
        """Counts `n` more (as tqdm's `update`)."""
        self._completed += n
        if self._cancel and not self._cancel_raised:
            self.raise_if_canceled()

    def heartbeat(self, label=None, output=None):
        """Says the task is alive without moving it (with a new `label` or `output`)."""
        if label is not None:
            self._label = str(label)
        if output is not None:
            self._add_output(output)
        self._heartbeat = True
        if self._cancel and not self._cancel_raised:
            self.raise_if_canceled()

    def finish(self, outcome="succeeded", message=None, output=None):
        """Finishes the task: `succeeded`, `failed` or `canceled`, with an optional
        `message` (an error text) and `output` lines. The first finish counts; it is sent
        in the background (`headway.flush()` waits for it)."""
        if outcome not in ("succeeded", "failed", "canceled"):
            raise ValueError("outcome is succeeded, failed or canceled")
        if self._finish is not None:
            return
        lines = _lines(output) if output is not None else []
        self._finish = (outcome, None if message is None else str(message), lines)
        close_bar(self)
        self._reporter.wake()

    def detach_bar(self):
        """Keeps the bar's count, total and label as this task's own: the bar goes on
        as another task (after `reset`) or is gone."""
        bar = self._bar
        if bar is None:
            return
        from ._reporter import bar_label
        self._completed = int(getattr(bar, "n", 0) or 0)
        self._total = _count(getattr(bar, "total", None))
        self._label = bar_label(bar)
        self._bar = None

    def raise_if_canceled(self):
        """Raises `Canceled` once, if a cancel was requested."""
        if self._cancel and not self._cancel_raised:
            self._cancel_raised = True
            raise Canceled(self.id)

    def __enter__(self):
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self)
        return self

    def __exit__(self, exc_type, error, tb):
        stack = getattr(_local, "stack", None)
        if stack and stack[-1] is self:
            stack.pop()
        self.finish_for(error)
        return False

    def finish_for(self, error):
        """Finishes the task as the end of its work with `error` (None: it went well)."""
        if error is None or (isinstance(error, SystemExit) and not error.code):
            self.finish("succeeded")
        elif isinstance(error, Canceled):
            self.finish("canceled", "canceled on request")
        elif isinstance(error, KeyboardInterrupt):
            self.finish("canceled", "interrupted (KeyboardInterrupt)")
        elif isinstance(error, SystemExit):
            self.finish("failed", f"exit status {error.code}")
        else:
            record_failure(error)
            message, lines = exception_summary(error)
            self.finish("failed", message, lines)

    def close_loop(self, exhausted):
        """The end of a loop over this task (a bar closed, a `track` loop ended): finished
        `succeeded` when it ran out or reached its total, `canceled` after a cancel, and
        otherwise (stopped early: a break, or an exception passing through) decided a
        moment later, once it is known whether an exception is ending the job."""
        if self._finish is not None:
            return
        close_bar(self)
        total = self.total
        if self._cancel_raised:
            self.finish("canceled", "canceled on request")
        elif exhausted or total is None or self.completed >= total:
            self.finish("succeeded")
        else:
            self._deferred_since = time.monotonic()
            self._reporter.wake()

    def settle_deferred(self, now, force=False):
        """Decides the outcome of a loop that stopped short (see `close_loop`)."""
        if self._finish is not None or self._deferred_since is None:
            return
        if not force and now - self._deferred_since < 0.3:
            return
        failure = recent_failure(self._deferred_since)
        if failure is not None:
            self.finish("failed", failure[1], failure[2])
        else:
            self.finish("canceled", f"stopped at {self.completed} of {self.total}")

    def settle_at_exit(self):
        """Finishes a task left open when the process ends."""
        if self._finish is not None:
            return
        if self._deferred_since is not None:
            return self.settle_deferred(time.monotonic(), force=True)
        failure = _uncaught
        if failure is not None:
            self.finish("failed", failure[1], failure[2])
        elif self._cancel:
            self.finish("canceled", "canceled on request")
        elif self.total is None or self.completed >= self.total:
            self.finish("succeeded")
        else:
            self.finish("canceled", f"the process ended at {self.completed} of {self.total}")

    # -- helpers -----------------------------------------------------------------------

    def _add_output(self, output):
        lines = _lines(output)
        with self._lock:
            self._output.extend(lines)
            if len(self._output) > 200:
                del self._output[:-200]

    def __repr__(self):
        return f"<headway.Task {self.id} {self.name!r} {self.completed}/{self._total}>"


def _count(value):
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        return None
    return int(value)


def clean(text):
    """`text` as the server takes it: no NUL, valid Unicode (a lone surrogate, from
    bytes decoded with `surrogateescape`, becomes U+FFFD)."""
    text = str(text)
    if "\0" in text:
        text = text.replace("\0", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def _lines(output):
    """`output` (a string or an iterable of lines) as lines of at most 1,000 characters."""
    if isinstance(output, str):
        output = output.splitlines() or [""]
    return [clean(line).rstrip("\r\n")[:1000] for line in output]


def caller_name(skip_modules=("headway", "tqdm")):
    """`file.py line N` of the first caller outside headway and tqdm: the name of a
    loop given none."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not any(module == m or module.startswith(m + ".") for m in skip_modules):
            return f"{os.path.basename(frame.f_code.co_filename)} line {frame.f_lineno}"
        frame = frame.f_back
    return "loop"


def _rfc3339(moment):
    """`moment` as the server reads a time: a `datetime` as RFC 3339 (a naive one taken as
    local time, as `datetime.astimezone` does), a string as it is, None as None."""
    if moment is None or isinstance(moment, str):
        return moment
    return moment.astimezone().isoformat()


def track(iterable, name=None, *, total=None, unit=None, id=None, parent=None, label=None):
    """Iterates over `iterable` and reports it as a task (no tqdm needed): `name`
    (default: where the loop is), `total` (default: `len(iterable)` when it has one).
    Nested in an open `track` loop or bar, it becomes that one's child. The next
    iteration after a cancel request raises `Canceled`."""
    if total is None:
        try:
            total = len(iterable)
        except (TypeError, AttributeError):
            total = None
    position, found_parent = open_bar(None, parent if parent is not None else current_parent())
    task = Task(name or caller_name(), id=id, total=total, unit=unit, label=label,
                parent=parent if parent is not None else found_parent, _position=position)
    add_open_bar(position, task)
    return _tracked(iterable, task)


def _tracked(iterable, task):
    exhausted = False
    try:
        for item in iterable:
            yield item
            task._completed += 1
            if task._cancel:
                task.raise_if_canceled()
        exhausted = True
    finally:
        task.close_loop(exhausted)
