#!/usr/bin/env python3
"""The long crash run: many rounds of SIGKILL under load in each durability mode (the
rounds are Tests/integration/crashproof.py's, which `make test` runs a few of), then the
figures. Exit status 1 if any round found a loss, an extra change or a damaged database.

    bench/crash-proof.py [--rounds 200] [--mode full|normal|both] [--seed N]
                         [--runners 8] [--max-delay 1.0] [--max-minutes M]
                         [--creation-kills 100] [--json FILE]

Then it kills the daemon --creation-kills times while it creates and migrates a new database.

Uses the release build (`swift build -c release`) unless HEADWAYD or --headwayd names
another. The seed (printed; random unless given) repeats the kill delays and the runners'
choices. A failing run keeps its databases and logs and prints where.
"""
import argparse
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "Tests/integration"))
import crashproof  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="rounds per durability mode")
    parser.add_argument("--mode", choices=["full", "normal", "both"], default="both")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--runners", type=int, default=8)
    parser.add_argument("--min-delay", type=float, default=0.05, help="shortest load before a kill, seconds")
    parser.add_argument("--max-delay", type=float, default=1.0, help="longest load before a kill, seconds")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="stop a mode's rounds after this long (the rounds done are reported)")
    parser.add_argument("--headwayd", default=os.environ.get("HEADWAYD", str(ROOT / ".build/release/headwayd")))
    parser.add_argument("--creation-kills", type=int, default=100,
                        help="kills while a new database is created and migrated (0: none)")
    parser.add_argument("--keep", action="store_true", help="keep the databases and logs")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--quiet", action="store_true", help="no line per round")
    arguments = parser.parse_args()
    seed = arguments.seed if arguments.seed is not None else random.SystemRandom().randrange(1, 10**9)
    modes = ["full", "normal"] if arguments.mode == "both" else [arguments.mode]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    print(f"crash-proof: seed {seed}, {arguments.rounds} rounds per mode, modes {', '.join(modes)}, "
          f"{arguments.runners} runners, kills after {arguments.min_delay}-{arguments.max_delay} s, "
          f"headwayd {arguments.headwayd} (commit {commit})", flush=True)

    def log(text):
        if not arguments.quiet:
            print(text, flush=True)

    results = {}
    directory = pathlib.Path(tempfile.mkdtemp(prefix="headway-crash-"))
    for mode in modes:
        rounds = crashproof.CrashRounds(arguments.headwayd, directory / mode, mode, seed,
                                        runners=arguments.runners, minimum_delay=arguments.min_delay,
                                        maximum_delay=arguments.max_delay, log=log)
        results[mode] = rounds.run(arguments.rounds,
                                   max_seconds=arguments.max_minutes * 60 if arguments.max_minutes else None)
    creation_failures, creation_versions = [], {}
    if arguments.creation_kills:
        start = time.monotonic()
        creation_failures, creation_versions = crashproof.creation_kills(
            arguments.headwayd, directory / "creation", seed, arguments.creation_kills)
        creation_seconds = time.monotonic() - start
    failed = any(result.failures for result in results.values()) or bool(creation_failures)

    print()
    print(table(results))
    if arguments.creation_kills:
        print(f"\nKilled while creating and migrating a new database: {arguments.creation_kills} times "
              f"({creation_seconds:.0f} s); schema version found at the kill: "
              + ", ".join(f"{'no file yet' if version is None else version}: {count}"
                          for version, count in sorted(creation_versions.items(), key=lambda item: -1 if item[0] is None else item[0]))
              + f"; failures: {len(creation_failures)}")
    for mode, result in results.items():
        if result.refusals:
            print(f"{mode}: refusals by status and code: "
                  + ", ".join(f"{key}: {count}" for key, count in sorted(result.refusals.items())))
    for mode, result in results.items():
        for failure in result.failures[:50]:
            print(f"FAIL {failure}")
    for failure in creation_failures[:50]:
        print(f"FAIL {failure}")
    if failed or arguments.keep:
        print(f"databases and logs in {directory}")
    else:
        shutil.rmtree(directory, ignore_errors=True)
    if arguments.json:
        with open(arguments.json, "w") as file:
            json.dump({"seed": seed, "commit": commit, "date": time.strftime("%Y-%m-%d"),
                       "runners": arguments.runners, "delay_seconds": [arguments.min_delay, arguments.max_delay],
                       "modes": {mode: {**result.as_dict(), "failure_texts": result.failures}
                                 for mode, result in results.items()},
                       "creation_kills": {"count": arguments.creation_kills,
                                          "schema_versions": {str(k): v for k, v in creation_versions.items()},
                                          "failures": creation_failures}}, file, indent=2)
    print(f"seed {seed}: {'FAILED' if failed else 'no loss, no extra change, no damage'}")
    return 1 if failed else 0


ROWS = [
    ("rounds (kills)", "rounds"),
    ("updates acknowledged", "updates_acknowledged"),
    ("  of which finishes", "finishes_acknowledged"),
    ("registrations acknowledged", "registrations_acknowledged"),
    ("updates in flight, found applied", "in_flight_applied"),
    ("updates in flight, found not applied", "in_flight_not_applied"),
    ("registrations in flight, found applied", "registrations_in_flight_applied"),
    ("registrations in flight, found not applied", "registrations_in_flight_not_applied"),
    ("kills while starting", "startup_kills"),
    ("SIGTERM then SIGKILL", "stops_begun"),
    ("  of which killed before the stop ended", "kills_during_stop"),
    ("WAL frames replayed after a kill, median", "wal_frames_at_kill_median"),
    ("WAL frames replayed after a kill, most", "wal_frames_at_kill_max"),
    ("stall flags found after the kills (sum)", "stalled_seen"),
    ("events received by a subscriber", "events_seen"),
    ("  subscriber cut off before the kill (slow)", "subscribers_cut_off"),
    ("refused (503)", "refused"),
    ("connections broken before a kill", "reconnects"),
    ("failures", "failures"),
    ("time, seconds", "seconds"),
]


def table(results):
    modes = list(results)
    figures = {mode: result.as_dict() for mode, result in results.items()}
    width = max(len(label) for label, _ in ROWS)
    lines = [f"| {'':<{width}} | " + " | ".join(f"{mode:>10}" for mode in modes) + " |",
             f"|{'-' * (width + 2)}|" + "|".join("-" * 12 for _ in modes) + "|"]
    for label, key in ROWS:
        lines.append(f"| {label:<{width}} | " + " | ".join(f"{figures[mode][key]:>10}" for mode in modes) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
