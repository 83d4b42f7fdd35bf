#!/usr/bin/env python3
"""The dashboard under load, in a real headless Chromium: 10,000 running tasks and 1,000
progress updates a second (POST /v1/tasks/{id}/progress from 10 threads, paced every 100 ms).

Prints, for a quiet page and for the page under load, the main thread's busy time
(the DevTools Performance metric TaskDuration, as a share of the wall clock), script
time, the frames drawn per second (counted with requestAnimationFrame in the page), the
events the page applied per second and the rows it updated. Run from the repository:

    python3 bench/dashboard.py [--tasks 10000] [--rate 1000] [--seconds 10] [--headwayd PATH]
"""
import argparse
import concurrent.futures
import pathlib
import random
import shutil
import sys
import tempfile
import threading
import time

import httpx

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "Tests/integration"))
from conftest import chromium_options, run_headwayd  # noqa: E402

FRAME_COUNTER = """
window.benchFrames = 0;
const count = () => { window.benchFrames += 1; requestAnimationFrame(count); };
requestAnimationFrame(count);
"""


def metrics(driver):
    reply = driver.execute_cdp_cmd("Performance.getMetrics", {})
    return {entry["name"]: entry["value"] for entry in reply["metrics"]}


def measure(driver, seconds):
    """Busy share, script share, frames/s, events/s and row updates/s over `seconds`."""
    before = metrics(driver)
    page_before = driver.execute_script("return [window.benchFrames, headwayStats.events, headwayStats.rowUpdates]")
    start = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - start
    after = metrics(driver)
    page_after = driver.execute_script("return [window.benchFrames, headwayStats.events, headwayStats.rowUpdates]")
    return {
        "busy": (after["TaskDuration"] - before["TaskDuration"]) / elapsed,
        "script": (after["ScriptDuration"] - before["ScriptDuration"]) / elapsed,
        "fps": (page_after[0] - page_before[0]) / elapsed,
        "events": (page_after[1] - page_before[1]) / elapsed,
        "rows": (page_after[2] - page_before[2]) / elapsed,
        "heap_mb": after["JSHeapUsedSize"] / 1e6,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=1_000, help="progress updates per second")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--headwayd", default=str(ROOT / ".build/release/headwayd"))
    arguments = parser.parse_args()
    if arguments.tasks < 1 or arguments.rate < 10 or arguments.seconds <= 0:
        parser.error("--tasks must be at least 1, --rate at least 10, --seconds above 0")
    import conftest
    conftest.HEADWAYD = arguments.headwayd
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory() as folder, run_headwayd(pathlib.Path(folder)) as base:
        client = httpx.Client(base_url=base, timeout=30)
        ids = [f"bench-{number:05d}" for number in range(arguments.tasks)]

        def register(chunk):
            with httpx.Client(base_url=base, timeout=30) as own:
                for task_id in chunk:
                    reply = own.post("/v1/tasks", json={"id": task_id, "name": f"Task {task_id}", "total": 1_000_000,
                                                        "stall_timeout_seconds": 3600})
                    reply.raise_for_status()

        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(register, [ids[i::8] for i in range(8)]))
        print(f"registered {arguments.tasks} tasks in {time.monotonic() - started:.1f} s", flush=True)

        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                                  options=chromium_options())
        try:
            driver.execute_cdp_cmd("Performance.enable", {"timeDomain": "threadTicks"})
            driver.get(f"{base}/?min_duration=0&lang=en")
            deadline = time.monotonic() + 60
            while driver.execute_script("return document.getElementById('connection').dataset.state") != "live":
                if time.monotonic() > deadline:
                    raise SystemExit("the page did not get live within 60 s")
                time.sleep(0.1)
            time.sleep(2)
            driver.execute_script(FRAME_COUNTER)
            quiet = measure(driver, arguments.seconds)

            stop = threading.Event()
            sent = [0, 0]
            completed = dict.fromkeys(ids, 0)

            lock = threading.Lock()

            def pour(worker, workers):
                # Each worker sends its share of the rate, paced every 100 ms.
                mine = ids[worker::workers]
                per_tick = max(1, arguments.rate // workers // 10)
                tick = time.monotonic()
                with httpx.Client(base_url=base, timeout=30) as own:
                    while not stop.is_set():
                        for task_id in random.sample(mine, min(per_tick, len(mine))):
                            completed[task_id] += 1
                            reply = own.post(f"/v1/tasks/{task_id}/progress", json={"completed": completed[task_id]})
                            with lock:
                                sent[0] += 1
                                sent[1] += reply.status_code != 200
                        tick += 0.1
                        time.sleep(max(0.0, tick - time.monotonic()))

            pourers = [threading.Thread(target=pour, args=(worker, 10)) for worker in range(10)]
            for pourer in pourers:
                pourer.start()
            time.sleep(2)
            start_sent = sent[0]
            start = time.monotonic()
            loaded = measure(driver, arguments.seconds)
            offered = (sent[0] - start_sent) / (time.monotonic() - start)
            stop.set()
            for pourer in pourers:
                pourer.join()
            rows = driver.execute_script("return document.querySelectorAll('#tasks > li').length")
        finally:
            driver.quit()

    print(f"tasks: {arguments.tasks}, rows on the page: {rows}, updates sent: {offered:.0f}/s, failed updates: {sent[1]}")
    print("| page | main thread busy | script | frames/s | events applied/s | rows updated/s | JS heap |")
    print("|---|---|---|---|---|---|---|")
    for name, figures in [("quiet", quiet), (f"{arguments.rate:,} updates/s", loaded)]:
        print(f"| {name} | {figures['busy'] * 100:.1f}% | {figures['script'] * 100:.1f}% | {figures['fps']:.0f} | "
              f"{figures['events']:.0f} | {figures['rows']:.0f} | {figures['heap_mb']:.0f} MB |")


if __name__ == "__main__":
    main()
