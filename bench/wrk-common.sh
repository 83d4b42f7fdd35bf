# Shared by the wrk benchmarks (bench/progress-throughput.sh, bench/progress-batch.sh):
# source it after setting BINARY. Checks the release binary and wrk, pins the daemon to
# CPU 0 and wrk to CPU 1 where there are two cores ($pin_server, $pin_client), makes a
# scratch folder removed at exit ($work), and defines free_port and median.
[ -x "$BINARY" ] || { echo "build first: swift build -c release --product headwayd" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
pin_server="" pin_client=""
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then pin_server="taskset -c 0"; pin_client="taskset -c 1"; fi

work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# A free loopback port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# The median of the numbers on stdin, one a line.
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
