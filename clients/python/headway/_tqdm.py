"""tqdm that reports to Headway: `headway.tqdm` (a subclass of `tqdm.tqdm`) and
`patch_tqdm()`, which makes every tqdm bar of the process report (tqdm's base class is
instrumented in place, so `tqdm.auto`, `tqdm.rich`, `trange` and subclasses follow)."""
import inspect

import tqdm.std as _std

from . import _task
from ._task import Task, add_open_bar, caller_name, close_bar, current_parent, open_bar

# tqdm's own methods, taken before anything is instrumented: every wrapper calls these.
# (Read through the class: tqdm wraps `__init__` in a `functools.partialmethod` that
# applies TQDM_* environment variables.)
_ORIGINAL = {name: getattr(_std.tqdm, name) for name in ("__init__", "update", "close", "__iter__", "reset", "__exit__")}
_SIGNATURE = inspect.signature(getattr(_std.tqdm.__dict__["__init__"], "func", _std.tqdm.__dict__["__init__"]))


def _start(bar, args, kwargs):
    """Makes the task of a bar just made by tqdm's `__init__`."""
    if bar.__dict__.get("_hw") is not None:
        return
    try:
        bound = _SIGNATURE.bind(bar, *args, **kwargs).arguments
    except TypeError:
        bound = kwargs
    desc = bound.get("desc") or ""
    name = desc.rstrip(": ").strip() or caller_name(("headway", "tqdm", "contextlib", "concurrent"))
    unit = bound.get("unit", "it")
    bar._hw_name_desc = desc.rstrip(": ").strip()
    position, parent = open_bar(bound.get("position"), bar.__dict__.get("_hw_parent") or current_parent())
    # tqdm counts nothing while it does not draw (disable=True, or disable=None off a
    # terminal): then the wrappers count, so the task still moves.
    bar._hw_count_self = bool(getattr(bar, "disable", False))
    bar._hw_closed = False
    bar._hw_exhausted = False
    task = Task(name, id=bar.__dict__.get("_hw_id"), total=getattr(bar, "total", None),
                unit=None if unit in (None, "it") else unit, parent=parent,
                metadata=bar.__dict__.get("_hw_metadata"), _bar=bar, _position=position)
    bar._hw_position = position
    add_open_bar(position, task)
    bar._hw = task


def _exhaustion_marker(bar, iterable):
    yield from iterable
    bar._hw_exhausted = True


def _counting_iter(bar):
    """Iterates a bar that tqdm does not draw, counting for it."""
    task = bar._hw
    n = bar.n
    try:
        for item in bar.iterable:
            yield item
            n += 1
            bar.n = n
            if task._cancel:
                task.raise_if_canceled()
        bar._hw_exhausted = True
    finally:
        bar.n = n
        bar.close()


def _make_wrappers():
    """The instrumented methods; each calls tqdm's own (`_ORIGINAL`), so `headway.tqdm`
    on an instrumented base class reports once."""
    original_init, original_update, original_close = _ORIGINAL["__init__"], _ORIGINAL["update"], _ORIGINAL["close"]
    original_iter, original_reset, original_exit = _ORIGINAL["__iter__"], _ORIGINAL["reset"], _ORIGINAL["__exit__"]

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        try:
            _start(self, args, kwargs)
        except Exception as error:  # a bar that cannot report still draws
            _task._reporter()._warn("tqdm:" + type(error).__name__, f"a tqdm bar cannot report: {error!r}")

    def update(self, n=1):
        shown = original_update(self, n)
        if self._hw_count_self:
            self.n += n
        task = self._hw
        if task is not None and task._cancel:
            task.raise_if_canceled()
        return shown

    def __iter__(self):
        if self._hw is None:
            return original_iter(self)
        if self._hw_count_self:
            return _counting_iter(self)
        if self.iterable is not None and not self.__dict__.get("_hw_marked"):
            # tqdm closes the bar in its loop's `finally`, for a break as for the end:
            # the marker says which it was.
            self._hw_marked = True
            self.iterable = _exhaustion_marker(self, self.iterable)
        return original_iter(self)

    def close(self):
        original_close(self)
        task = self._hw
        if task is not None and not self._hw_closed:
            self._hw_closed = True
            self._hw_count_self = False
            try:
                task.close_loop(self._hw_exhausted)
            except Exception:  # tqdm's __del__ at interpreter teardown: nothing to report to
                pass

    def reset(self, total=None):
        task = self._hw
        if task is not None and not self._hw_closed and self.n > 0:
            # A bar used again (the inner bar of a nested loop, reset each round): the
            # round that ended is a task of its own, and the next one starts afresh.
            task.detach_bar()
            task.close_loop(False)
            original_reset(self, total)
            position = self._hw_position
            new = Task(task.name, total=getattr(self, "total", None), unit=task._unit, parent=task.parent,
                       _bar=self, _position=position)
            add_open_bar(position, new)
            self._hw = new
            return None
        return original_reset(self, total)

    def __exit__(self, kind, error, tb):
        task = self._hw
        if task is not None and error is not None and task._finish is None:
            close_bar(task)
            task.detach_bar()
            task.finish_for(error)
        return original_exit(self, kind, error, tb)

    wrappers = {"__init__": __init__, "update": update, "__iter__": __iter__, "close": close,
                "reset": reset, "__exit__": __exit__}
    for wrapper in wrappers.values():
        wrapper._hw_wrapper = True
    return wrappers


class tqdm(_std.tqdm):
    """`tqdm.tqdm` that also reports to Headway: same arguments (and `id`, `parent`,
    `metadata` of its task), still draws unless `disable=True` (and then still reports). `desc` is the task's name, a later
    `set_description` or `set_postfix` its label; a bar made while another is open
    (`position`, nested loops) is a child of the open bar below it. After a cancel
    request the next `update()` raises `headway.Canceled`."""

    _hw = None
    _hw_count_self = False
    _hw_closed = False
    _hw_exhausted = False


for _name, _wrapper in _make_wrappers().items():
    setattr(tqdm, _name, _wrapper)
_instrumented_init = tqdm.__init__


def _init(self, *args, id=None, parent=None, metadata=None, **kwargs):
    """As tqdm's, and `id` (the task's id: registering it again adopts the task),
    `parent` (a `headway.Task` or a task id) and `metadata` (a small dict) of the bar's
    task."""
    self._hw_id = id
    self._hw_parent = parent
    self._hw_metadata = metadata
    _instrumented_init(self, *args, **kwargs)


tqdm.__init__ = _init


def trange(*args, **kwargs):
    """`headway.tqdm(range(*args), **kwargs)`."""
    return tqdm(range(*args), **kwargs)


def patch_tqdm():
    """Makes every tqdm bar of this process report (tqdm's base class instrumented in
    place; idempotent)."""
    base = _std.tqdm
    if getattr(base.__dict__.get("update"), "_hw_wrapper", False):
        return
    for attribute in ("_hw", "_hw_count_self", "_hw_closed", "_hw_exhausted"):
        setattr(base, attribute, getattr(tqdm, attribute))
    for name, wrapper in _make_wrappers().items():
        setattr(base, name, wrapper)
