"""headwayd killed with SIGKILL under load, in both durability modes: every acknowledged
update survives, nothing beyond the requests in flight appears, a request in flight sent
again with its seq is applied exactly once, and the database passes `PRAGMA
integrity_check` (see crashproof.py for the rounds, bench/crash-proof.py and
docs/crash-proof.md for the long run). Seeded: HEADWAY_CRASH_SEED=N repeats a run's kill
delays and runners' choices."""
import os
import subprocess

import pytest

import crashproof
from conftest import HEADWAYD

SEED = int(os.environ.get("HEADWAY_CRASH_SEED", "20261130"))
ROUNDS = 8


@pytest.mark.parametrize("durability", ["full", "normal"])
def test_acknowledged_updates_survive_sigkill(tmp_path, durability):
    print(f"crash rounds: seed {SEED}, durability {durability}")
    statistics = crashproof.CrashRounds(HEADWAYD, tmp_path, durability, SEED, log=print).run(ROUNDS)
    summary = statistics.as_dict()
    print(summary)
    assert statistics.failures == [], \
        f"seed {SEED} (HEADWAY_CRASH_SEED={SEED} repeats it), files in {tmp_path}:\n" + \
        "\n".join(statistics.failures[:40])
    assert summary["rounds"] == ROUNDS
    assert summary["updates_acknowledged"] > 0 and summary["registrations_acknowledged"] > 0
    in_flight = (summary["in_flight_applied"] + summary["in_flight_not_applied"]
                 + summary["registrations_in_flight_applied"] + summary["registrations_in_flight_not_applied"])
    assert in_flight > 0, "no request was in flight at any kill: the rounds proved little"


def test_a_database_killed_while_created_and_migrated_is_whole(tmp_path):
    failures, versions = crashproof.creation_kills(HEADWAYD, tmp_path, SEED, 6)
    print(f"seed {SEED}: kills at schema versions {versions}")
    assert failures == [], f"seed {SEED}, files in {tmp_path}:\n" + "\n".join(failures)


# The checks are only worth something if they fail when the database loses or damages
# what was acknowledged: the two tests below do that to it on purpose after a kill.

def lose_an_acknowledged_update(database):
    crashproof.sqlite3(database, "UPDATE tasks SET completed = completed - 1, last_seq = last_seq - 1 WHERE id = "
                                 "(SELECT id FROM tasks WHERE completed > 0 AND child_count = 0 ORDER BY id LIMIT 1)")


def damage_the_file(database):
    # Everything into the main file first (no newer copy of a page left in the WAL), then
    # garbage over the pages after the first.
    crashproof.sqlite3(database, "PRAGMA wal_checkpoint(TRUNCATE)")
    with open(database, "r+b") as file:
        page_size = int(crashproof.sqlite3(database, "PRAGMA page_size").strip())
        file.seek(page_size)
        file.write(b"\xa5" * page_size * 4)


@pytest.mark.parametrize("damage, expected", [(lose_an_acknowledged_update, "acknowledged"),
                                              (damage_the_file, "integrity_check")])
def test_the_checks_see_a_loss(tmp_path, damage, expected):
    rounds = crashproof.CrashRounds(HEADWAYD, tmp_path, "normal", SEED, minimum_delay=0.3, maximum_delay=0.5,
                                    startup_kill_chance=0, stop_kill_chance=0, late_kill_chance=0,
                                    after_kill=damage)
    try:
        statistics = rounds.run(1)
    except (RuntimeError, subprocess.SubprocessError):
        return  # a daemon that cannot start on the damaged file: noticed as well
    assert statistics.failures, "the database was damaged on purpose, and the checks found nothing"
    assert any(expected in failure for failure in statistics.failures), statistics.failures
