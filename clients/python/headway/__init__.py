"""Report a Python job's progress to Headway (https://github.com/headway): `Task`,
`track(iterable)`, a `tqdm` drop-in, and `python -m headway run script.py` for scripts
that know nothing of Headway. Standard library only; tqdm is used when installed.

Reports are sent by a background thread, a few times a second, and never fail the job:
when the server is away it warns once and sends the latest state when it is back.
Configuration comes from `HEADWAY_URL`, `HEADWAY_TOKEN` and `HEADWAY_TASK_PREFIX`."""
from ._reporter import flush
from ._task import Canceled, Task, track

__all__ = ["Canceled", "Task", "flush", "patch_tqdm", "tqdm", "track", "trange"]
__version__ = "0.1.0"


def __getattr__(name):
    # tqdm is optional: imported only when `headway.tqdm` is asked for.
    if name in ("tqdm", "trange", "patch_tqdm"):
        try:
            from . import _tqdm
        except ImportError as error:
            if getattr(error, "name", None) not in ("tqdm", "tqdm.std"):
                raise
            raise ImportError(f"headway.{name} needs tqdm (pip install tqdm); "
                              "headway.track works without it") from None
        return getattr(_tqdm, name)
    raise AttributeError(f"module 'headway' has no attribute {name!r}")
