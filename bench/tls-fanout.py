#!/usr/bin/env python3
"""Event-stream fan-out over HTTPS beside plain HTTP: N subscribers of one task, stamped
updates at a fixed rate, each server alone (fresh headwayd, pinned to CPU 0; clients on
CPU 1), plain and TLS alternating for ROUNDS rounds.

Prints, per transport: subscribers connected, events delivered vs expected,
publish-to-receive latency (p50 / p90 / p99) and headwayd's RSS per subscriber. Under TLS
the subscribers (Python's ssl module) and the updates (http.client over HTTPS) use a fresh
self-signed certificate made with openssl.

    bench/tls-fanout.py --subscribers 10000 [--rate 5 --seconds 30 --rounds 1 --json out.json]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribers", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=5.0, help="updates per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--durability", default="full")
    parser.add_argument("--json", help="also write every round's figures to this file")
    args = parser.parse_args()
    servers.pin_this_process_to_cpu1()
    results = {"plain": [], "tls": []}
    for round_number in range(args.rounds):
        order = ["plain", "tls"] if round_number % 2 == 0 else ["tls", "plain"]
        for transport in order:
            server = servers.Headway(args.durability, tls=transport == "tls")
            try:
                result = servers.fanout(server, subscribers=args.subscribers, rate=args.rate, seconds=args.seconds)
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
