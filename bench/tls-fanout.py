#!/usr/bin/env python3
"""Event-stream fan-out over HTTPS beside plain HTTP: N subscribers of one task, stamped
updates at a fixed rate, each server alone (fresh headwayd, pinned to CPU 0; clients on
CPU 1), plain and TLS alternating for ROUNDS rounds.

Prints, per transport: subscribers connected, events delivered vs expected,
publish-to-receive latency (p50 / p90 / p99) and headwayd's RSS per subscriber. Under TLS
the subscribers (Python's ssl module) and the updates (http.client over HTTPS) use a fresh
self-signed certificate made with openssl.

    bench/tls-fanout.py --subscribers 10000 [--rate 5 --seconds 30 --rounds 1 --json out.json]

With --updates-beside-idle-subscribers it measures instead what idle streams cost the
updates: wrk's updates/s (50 keep-alive connections, 10 s, over HTTPS under TLS) with no
subscriber, then beside N subscribers of a task nobody updates, plain and TLS.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402


def updates_per_second(server, scheme):
    """wrk's updates/s and latency on 50 tasks (like servers.wrk_publish, any scheme)."""
    server.prepare_channels([f"bench-{i}" for i in range(50)])
    env = dict(os.environ, BENCH_TASKS="50", BENCH_PATH=server.publish_path("CHANNEL"))
    output = subprocess.run(
        ["taskset", "-c", "1", "wrk", "-t1", "-c50", "-d10s", "-s", os.path.join(servers.ROOT, "bench/progress.lua"),
         f"{scheme}://127.0.0.1:{server.port}"], env=env, capture_output=True, text=True, check=True).stdout
    line = next(l for l in output.splitlines() if l.startswith("RESULT"))
    return dict(part.split("=") for part in line.split()[1:])


def updates_beside_idle_subscribers(subscribers, durability):
    for tls in (False, True):
        for count in (0, subscribers):
            server = servers.Headway(durability, tls=tls)
            try:
                server.prepare_channels(["idle"])
                clients = servers.Subscribers(server.port, count, server.subscribe_request("idle"),
                                              ssl_context=server.ssl_context) if count else None
                for _ in range(20 if clients else 0):
                    clients.pump(0.05)
                result = updates_per_second(server, "https" if tls else "http")
                print(f"{'TLS  ' if tls else 'plain'} beside {clients.connected if clients else 0:>6} idle subscribers: "
                      f"{float(result['rps']):,.0f} updates/s, p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms, "
                      f"{result['errors']} errors", flush=True)
                if clients:
                    clients.close()
            finally:
                server.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribers", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=5.0, help="updates per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--durability", default="full")
    parser.add_argument("--json", help="also write every round's figures to this file")
    parser.add_argument("--updates-beside-idle-subscribers", action="store_true")
    args = parser.parse_args()
    servers.pin_this_process_to_cpu1()
    if args.updates_beside_idle_subscribers:
        updates_beside_idle_subscribers(args.subscribers, args.durability)
        return
    results = {"plain": [], "tls": []}
    for round_number in range(args.rounds):
        order = ["plain", "tls"] if round_number % 2 == 0 else ["tls", "plain"]
        for transport in order:
            server = servers.Headway(args.durability, tls=transport == "tls")
            try:
                # One client for both columns: Python's, the only one here that speaks TLS.
                result = servers.fanout(server, subscribers=args.subscribers, rate=args.rate, seconds=args.seconds,
                                        python_client=True)
            finally:
                server.stop()
            results[transport].append(result)
            print(f"round {round_number + 1} {transport:5}: {result['connected']} connected, "
                  f"{result['delivered']}/{result['expected']} delivered, p50 {result['p50_ms']:.1f} ms, "
                  f"p99 {result['p99_ms']:.1f} ms, {result['rss_per_subscriber_kib']:.1f} KiB/subscriber",
                  flush=True)

    def median(transport, key):
        return statistics.median(r[key] for r in results[transport])

    print()
    print(f"{args.subscribers} subscribers of one task, {args.rate}/s stamped updates for {args.seconds:.0f} s, "
          f"medians of {args.rounds} round(s)")
    print("| figure | plain HTTP | HTTPS (TLS) |")
    print("|---|---|---|")
    print(f"| subscribers connected | {median('plain', 'connected'):.0f} | {median('tls', 'connected'):.0f} |")
    delivered = {t: 100.0 * sum(r["delivered"] for r in results[t]) / max(1, sum(r["expected"] for r in results[t]))
                 for t in results}
    print(f"| events delivered / expected | {delivered['plain']:.2f}% | {delivered['tls']:.2f}% |")
    print(f"| publish-to-receive latency p50 | {median('plain', 'p50_ms'):.1f} ms | {median('tls', 'p50_ms'):.1f} ms |")
    print(f"| publish-to-receive latency p99 | {median('plain', 'p99_ms'):.1f} ms | {median('tls', 'p99_ms'):.1f} ms |")
    print(f"| headwayd RSS per subscriber | {median('plain', 'rss_per_subscriber_kib'):.1f} KiB | "
          f"{median('tls', 'rss_per_subscriber_kib'):.1f} KiB |")
    print(f"| headwayd CPU while delivering | {median('plain', 'busy_cpu_percent'):.0f}% of a core | "
          f"{median('tls', 'busy_cpu_percent'):.0f}% of a core |")
    if args.json:
        with open(args.json, "w") as output:
            json.dump(results, output, indent=1)


if __name__ == "__main__":
    main()
