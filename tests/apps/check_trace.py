#!/usr/bin/env python3
"""Checks a halox Chrome trace: valid JSON, every event complete (a span with a non-negative
duration, or an instant), timestamps non-decreasing per track (rank, thread), every track
named, and at least the expected event names present.

usage: check_trace.py TRACE.json [--expect NAME ...] [--ranks N]
"""
import json
import sys


def main():
    path = sys.argv[1]
    expect, ranks = [], None
    args = sys.argv[2:]
    while args:
        a = args.pop(0)
        if a == "--expect":
            expect.append(args.pop(0))
        elif a == "--ranks":
            ranks = int(args.pop(0))
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    named, last, names, pids = set(), {}, set(), set()
    for e in events:
        if e["ph"] == "M":
            if e["name"] == "thread_name":
                named.add((e["pid"], e["tid"]))
            continue
        key = (e["pid"], e["tid"])
        if e["ph"] == "X":
            if e["dur"] < 0:
                sys.exit(f"FAILED: negative duration: {e}")
        elif e["ph"] != "i":
            sys.exit(f"FAILED: an event that is neither a complete span nor an instant: {e}")
        if e["ts"] < last.get(key, -1.0):
            sys.exit(f"FAILED: timestamps go back on track {key}: {e}")
        last[key] = e["ts"]
        names.add(e["name"])
        pids.add(e["pid"])
    missing = [k for k in last if k not in named]
    if missing:
        sys.exit(f"FAILED: tracks without a name: {missing}")
    for name in expect:
        if name not in names:
            sys.exit(f"FAILED: no '{name}' event (have: {sorted(names)})")
    if ranks is not None and len(pids) != ranks:
        sys.exit(f"FAILED: events from {len(pids)} ranks, expected {ranks}")
    print(f"trace OK: {len(events)} events, {len(last)} tracks, {len(pids)} ranks, names {sorted(names)}")


if __name__ == "__main__":
    main()
