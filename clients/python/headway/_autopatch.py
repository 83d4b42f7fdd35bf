"""Loaded at interpreter start by `headway-patch-tqdm.pth` when `HEADWAY_PATCH_TQDM` is
set (not empty, not 0): makes every tqdm bar report, without importing tqdm (or anything
heavy) before the program does. An import hook waits for `tqdm.std` and instruments it
as soon as it has loaded."""
import importlib.abc
import importlib.util
import sys


class _TqdmWatcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `tqdm.std` is imported, wraps its loader so that tqdm
    is instrumented right after the module ran."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "tqdm.std":
            return None
        others = [finder for finder in sys.meta_path if finder is not self]
        for finder in others:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            _remove()
            from ._tqdm import patch_tqdm
            patch_tqdm()
        except Exception as error:  # the program's tqdm must work even if this fails
            sys.stderr.write(f"headway: cannot instrument tqdm: {error!r}\n")

    def __getattr__(self, name):
        return getattr(self._loader, name)


_watcher = None


def _remove():
    if _watcher in sys.meta_path:
        sys.meta_path.remove(_watcher)


def install():
    """Instruments tqdm now if it is loaded, else when it is."""
    global _watcher
    if "tqdm.std" in sys.modules:
        from ._tqdm import patch_tqdm
        patch_tqdm()
        return
    if _watcher is None:
        _watcher = _TqdmWatcher()
        sys.meta_path.insert(0, _watcher)


install()
