#!/usr/bin/env python3
"""Checks scripts/trace-summary --kernels against a trace whose answer is known: two ranks,
six queued exchanges each, every phase at a set time, the device events carrying their
exchange's counter (args.exchange) as halox's do. Inside an exchange the blocks fall silent
for as long as between two (1.1 us from pack to signal, 1.1 us from one exchange's end to
the next one's start), as a block barrier and a release add make them on the GPU: grouping
by idle time could not tell them apart. A trace without the counters must be refused with a
message, not misread.

usage: check_trace_summary.py SCRIPTS_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

PERIOD, SKEW = 6.3, 0.3  # us between exchanges; rank 1 starts later by this much
# (name, start, duration) of one block's phases, us from the exchange's start.
PHASES = [("wait: peer buffer free", 0.0, 1.0), ("pack + store", 1.0, 1.0),
          ("signal sent", 3.1, 0.0), ("wait: data", 3.2, 1.5), ("unpack", 4.7, 0.5)]
EXPECTED = {"start": None, "wait: peer buffer free": 1.00, "pack + store": 2.00,
            "signal sent": 3.10, "wait: data": 4.70, "unpack": 5.20, "span": 5.20,
            "gap": PERIOD - 5.20}


def trace(with_counters):
    events = []
    for rank in (0, 1):
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": 1,
                       "args": {"name": "gpu forward pulse 2 block 0"}})
        for k in range(6):
            t0 = k * PERIOD + rank * SKEW
            for name, start, duration in PHASES:
                e = {"name": name, "pid": rank, "tid": 1, "ts": t0 + start}
                e.update({"ph": "X", "dur": duration} if duration else {"ph": "i", "s": "t"})
                if with_counters:
                    e["args"] = {"exchange": 100 + k}
                events.append(e)
    return {"traceEvents": events}


def main():
    script = os.path.join(sys.argv[1], "trace-summary")
    failures = 0
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        tables = os.path.join(tmp, "tables.json")
        for with_counters in (True, False):
            path = os.path.join(tmp, f"trace-{with_counters}.json")
            with open(path, "w") as f:
                json.dump(trace(with_counters), f)
            runs[with_counters] = subprocess.run(
                [sys.executable, script, path, "--kernels", "5", "--json", tables],
                capture_output=True, text=True)
            if with_counters:
                with open(tables) as f:
                    rows = {r["rank"]: r for r in json.load(f)["exchanges"]}
    out = runs[True].stdout
    for rank in (0, 1):
        want = dict(EXPECTED, start=rank * SKEW)
        for column, value in want.items():
            got = rows[rank][column]
            if got is None or abs(got - value) > 1e-6:
                print(f"rank {rank} {column}: {got}, want {value}")
                failures += 1
        if rows[rank]["exchanges"] != 5 or rows[rank]["wait: forwarded items"] is not None:
            print(f"rank {rank}: {rows[rank]}")
            failures += 1
    refused = runs[False]
    if refused.returncode == 0 or "exchange counter" not in refused.stderr:
        print("a trace without exchange counters was not refused:", refused.stderr)
        failures += 1
    if failures:
        print(out)
        sys.exit(1)
    print("trace-summary --kernels: every phase, the skew and the gap as built; a trace "
          "without exchange counters refused")


if __name__ == "__main__":
    main()
