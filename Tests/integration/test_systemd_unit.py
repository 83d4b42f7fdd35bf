"""The shipped systemd units (the service and its socket): valid for systemd (`systemd-analyze verify`, its ExecStart
pointed at the built daemon) and hardened to an exposure of at most 1.5 of 10
(`systemd-analyze security --offline`, on systemd's 0–100 scale: 15)."""
import pathlib
import subprocess

from conftest import HEADWAYD, ROOT


def test_the_unit_verifies_and_is_hardened(tmp_path):
    unit = (ROOT / "deploy/headwayd.service").read_text()
    assert "ExecStart=/usr/local/bin/headwayd\n" in unit
    copy = tmp_path / "headwayd.service"
    copy.write_text(unit.replace("ExecStart=/usr/local/bin/headwayd", f"ExecStart={HEADWAYD}"))
    (tmp_path / "headwayd.socket").write_text((ROOT / "deploy/headwayd.socket").read_text())
    verified = subprocess.run(["systemd-analyze", "verify", str(copy), str(tmp_path / "headwayd.socket")],
                              capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.strip() == "" and verified.stderr.strip() == "", verified.stdout + verified.stderr
    security = subprocess.run(["systemd-analyze", "security", "--offline=true", "--threshold=15", str(copy)],
                              capture_output=True, text=True, timeout=60)
    assert security.returncode == 0, security.stdout[-2000:]
    assert "Overall exposure level for headwayd.service: 1." in security.stdout, security.stdout[-400:]
