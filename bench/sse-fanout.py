#!/usr/bin/env python3
"""Event-stream fan-out: N subscribers, stamped updates at a fixed rate, and what arrives.

Starts the release headwayd (or nginx+nchan with --server nchan) pinned to CPU 0, opens N
subscribers of one task from an epoll loop pinned to CPU 1, posts RATE updates per second
for SECONDS (each label carries its send time) and prints: subscribers connected, events
delivered vs expected, publish-to-receive latency, the server's CPU (idle and busy) and
its RSS per subscriber; for headwayd also its fan-out laps from `/metrics` (how many, and
their mean length: what the last subscriber waits at most, whatever the client measures).

    bench/sse-fanout.py --subscribers 10000 [--rate 5 --seconds 30 --durability full --server headway]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=5.0, help="updates per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--durability", default="full")
    parser.add_argument("--server", choices=["headway", "nchan"], default="headway")
    args = parser.parse_args()
    servers.pin_this_process_to_cpu1()
    server = servers.Nchan() if args.server == "nchan" else servers.Headway(args.durability)
    try:
        r = servers.fanout(server, subscribers=args.subscribers, rate=args.rate, seconds=args.seconds)
        laps = fanout_laps(server) if args.server == "headway" else None
    finally:
        server.stop()
    print(f"server                    {server.name}")
    print(f"subscribers connected     {r['connected']}/{r['requested']} (in {r['connect_seconds']:.1f} s)")
    print(f"updates acknowledged      {r['acknowledged']} at {args.rate}/s for {args.seconds:.0f} s")
    print(f"events delivered/expected {r['delivered']}/{r['expected']} "
          f"({100.0 * r['delivered'] / max(1, r['expected']):.2f}%)")
    print(f"latency p50 / p90 / p99   {r['p50_ms']:.2f} / {r['p90_ms']:.2f} / {r['p99_ms']:.2f} ms")
    print(f"first / last arrival      {r['first_arrival_ms']:.2f} / {r['last_arrival_ms']:.2f} ms "
          "(medians over the updates of the earliest and the latest subscriber to receive each)")
    print(f"server CPU                {r['idle_cpu_percent']:.2f}% of a core idle, "
          f"{r['busy_cpu_percent']:.1f}% while delivering")
    print(f"server RSS                {r['rss_before_kib'] / 1024:.1f} MiB -> {r['rss_after_kib'] / 1024:.1f} MiB "
          f"({r['rss_per_subscriber_kib']:.1f} KiB per subscriber)")
    if laps:
        count, seconds = laps
        print(f"fan-out laps              {count:.0f}, {1000 * seconds / max(1, count):.1f} ms each on average")


def fanout_laps(server):
    """headwayd's fan-out laps so far and their seconds, from `/metrics` (None from a
    build without them)."""
    api = servers.connection(server)
    api.request("GET", "/metrics")
    samples = dict(line.rsplit(" ", 1) for line in api.getresponse().read().decode().splitlines()
                   if line.startswith("headway_event_fanout_lap"))
    api.close()
    if "headway_event_fanout_laps_total" not in samples:
        return None
    return float(samples["headway_event_fanout_laps_total"]), float(samples["headway_event_fanout_lap_seconds_total"])


if __name__ == "__main__":
    main()
