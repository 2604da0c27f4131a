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


def medians(output):
    lines = output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("last "))
    header = lines[at + 1]
    # Columns are right-aligned to their header's end.
    names = ["rank", "direction", "exchanges", "start", "wait: peer buffer free",
             "wait: forwarded items", "pack + store", "signal sent", "wait: data", "unpack",
             "span", "gap"]
    ends = [header.index(n) + len(n) for n in names]
    rows = {}
    for line in lines[at + 2:]:
        if not line.strip():
            break
        cells = {}
        for n, end in zip(names, ends):
            width = max(9, len(n))
            cells[n] = line[end - width:end].strip() if end <= len(line) else ""
        rows[int(cells["rank"])] = cells
    return rows


def main():
    script = os.path.join(sys.argv[1], "trace-summary")
    failures = 0
    runs = {}
    for with_counters in (True, False):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(trace(with_counters), f)
        runs[with_counters] = subprocess.run([sys.executable, script, f.name, "--kernels", "5"],
                                             capture_output=True, text=True)
        os.unlink(f.name)
    out = runs[True].stdout
    rows = medians(out)
    for rank in (0, 1):
        want = dict(EXPECTED, start=rank * SKEW)
        for column, value in want.items():
            got = float(rows[rank][column])
            if abs(got - value) > 0.011:
                print(f"rank {rank} {column}: {got}, want {value}")
                failures += 1
        if rows[rank]["exchanges"] != "5":
            print(f"rank {rank}: {rows[rank]['exchanges']} exchanges, want 5")
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
