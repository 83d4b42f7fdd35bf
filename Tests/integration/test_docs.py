"""The documentation names what exists: scripts/check-docs.py (paths, ARCHITECTURE.md's
targets and their imports against Package.swift, Swift names, links and anchors, metrics,
and every option of `headwayd --help` in docs/operating.md)."""
import pathlib
import subprocess
import sys

from conftest import HEADWAYD

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_docs_name_only_what_exists():
    result = subprocess.run([sys.executable, str(ROOT / "scripts/check-docs.py"), "--headwayd", HEADWAYD],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
