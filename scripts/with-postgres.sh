#!/usr/bin/env bash
# Runs a command beside a private PostgreSQL server of its own:
#
#   scripts/with-postgres.sh CMD [ARG...]
#
# starts the server (Tests/integration/pgserver.py: initdb into a fresh directory under
# /tmp, as the postgres user when root, a Unix socket only; recorded in .build/pgtest),
# runs CMD with HEADWAY_TEST_POSTGRES set to the server's admin URL, then stops and removes
# the server whatever CMD did (even if interrupted), and exits with CMD's status. A server
# left by an interrupted run is stopped first.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 CMD [ARG...]" >&2; exit 2; }

root="$(cd "$(dirname "$0")/.." && pwd)"
pgserver="$root/Tests/integration/pgserver.py"
state="$root/.build/pgtest"

python3 "$pgserver" stop "$state"
trap 'python3 "$pgserver" stop "$state"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
url="$(python3 "$pgserver" start "$state")"

status=0
HEADWAY_TEST_POSTGRES="$url" "$@" || status=$?
exit "$status"
