#!/usr/bin/env python3
"""Checks scripts/trace-summary --kernels against a trace whose answer is known: two ranks,
two exchange objects ("f+g" and "phi", as halox-lbm names them) taking turns, six queued
exchanges each, every phase at a set time (phi's phases half as long), the device events
carrying their object's name and their exchange's counter (args.object, args.exchange) as
halox's do. The two objects count their exchanges from the same value, so only the names
tell their kernels apart. Inside an exchange the blocks fall silent for as long as between
two (1.1 us from pack to signal, 1.1 us from one exchange's end to the next one's start),
as a block barrier and a release add make them on the GPU: grouping by idle time could not
tell them apart. A trace without the counters must be refused with a message, not misread.
--skip M takes the exchanges before the last M: 3 of them with --kernels 3 --skip 2, and the
4 there are with --kernels 5 --skip 2. Stream spans (trace::stream_span_begin/end: "inner" on
both ranks, "exchange f" on rank 0, once per exchange) must stay out of --kernels, and
--spans 2 must give the last two of each name as one timeline over the ranks.

usage: check_trace_summary.py SCRIPTS_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

PERIOD, SKEW = 6.3, 0.3  # us between exchanges; rank 1 starts later by this much
OBJECTS = {"f+g": 1.0, "phi": 0.5}  # name: its phases' times, as a fraction of PHASES'
# (name, start, duration) of one block's phases, us from the exchange's start.
PHASES = [("wait: peer buffer free", 0.0, 1.0), ("pack + store", 1.0, 1.0),
          ("signal sent", 3.1, 0.0), ("wait: data", 3.2, 1.5), ("unpack", 4.7, 0.5)]
# Each object's exchanges come every 2 PERIOD: its gap is to its own next one.
EXPECTED = {"start": None, "wait: peer buffer free": 1.00, "pack + store": 2.00,
            "signal sent": 3.10, "wait: data": 4.70, "unpack": 5.20, "span": 5.20}


def trace(with_counters):
    events = []
    for rank in (0, 1):
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": 1,
                       "args": {"name": "gpu grid op 4 block 0"}})
        for k in range(6):
            for turn, (obj, scale) in enumerate(OBJECTS.items()):
                t0 = (2 * k + turn) * PERIOD + rank * SKEW
                for name, start, duration in PHASES:
                    e = {"name": name, "pid": rank, "tid": 1, "ts": t0 + scale * start}
                    e.update({"ph": "X", "dur": scale * duration} if duration else
                             {"ph": "i", "s": "t"})
                    if with_counters:
                        e["args"] = {"exchange": 100 + k, "object": obj}
                    events.append(e)
        if with_counters:
            events += stream_spans(rank)
    return {"traceEvents": events}


# Stream spans, one per pair of exchanges: (name, rank's offset, start, duration) in us.
SPANS = [("inner", SKEW, 0.2, 3.0), ("exchange f", None, 0.5, 1.0)]


def stream_spans(rank):
    events = []
    for tid, (name, offset, start, duration) in enumerate(SPANS, start=2):
        if offset is None and rank != 0:
            continue  # on rank 0 only
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                       "args": {"name": "gpu " + name}})
        for k in range(6):
            events.append({"ph": "X", "name": name, "pid": rank, "tid": tid,
                           "ts": 2 * k * PERIOD + rank * (offset or 0) + start, "dur": duration,
                           "args": {"exchange": k, "object": name}})
    return events


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
                    both = json.load(f)
                rows = {(r["rank"], r["object"]): r for r in both["exchanges"]}
                spans = {(r["rank"], r["object"], r["event"]): r for r in both["events"]}
    out = runs[True].stdout
    if len(rows) != 4:
        print(f"{len(rows)} rows, want one per rank and object: {sorted(rows)}")
        failures += 1
    for rank in (0, 1):
        for obj, scale in OBJECTS.items():
            row = rows.get((rank, obj))
            if row is None:
                print(f"no row for rank {rank}, object {obj}")
                failures += 1
                continue
            want = {c: v * scale for c, v in EXPECTED.items() if v is not None}
            want.update(start=rank * SKEW, gap=2 * PERIOD - EXPECTED["span"] * scale)
            for column, value in want.items():
                got = row[column]
                if got is None or abs(got - value) > 1e-6:
                    print(f"rank {rank} {obj} {column}: {got}, want {value}")
                    failures += 1
            if row["exchanges"] != 5 or row["wait: forwarded items"] is not None:
                print(f"rank {rank} {obj}: {row}")
                failures += 1
    # The events table: each object's spans apart (phi's unpack is half as long as f+g's).
    for obj, scale in OBJECTS.items():
        row = spans.get((0, obj, "unpack"))
        if row is None or row["count"] != 6 or abs(row["median_us"] - 0.5 * scale) > 1e-6:
            print(f"events table, rank 0, {obj}, unpack: {row}")
            failures += 1
    for count, want in ((3, 3), (5, 4)):
        with tempfile.TemporaryDirectory() as tmp:
            path, tables = os.path.join(tmp, "trace.json"), os.path.join(tmp, "tables.json")
            with open(path, "w") as f:
                json.dump(trace(True), f)
            subprocess.run([sys.executable, script, path, "--kernels", str(count), "--skip", "2",
                            "--json", tables], capture_output=True, text=True, check=True)
            with open(tables) as f:
                got = sorted({r["exchanges"] for r in json.load(f)["exchanges"]})
        if got != [want]:
            print(f"--kernels {count} --skip 2: {got} exchanges per row, want {want}")
            failures += 1
    # --spans 2: counts 4 and 5 of each name, from the first shown (inner 4 on rank 0).
    want_spans = [("inner", 4, 2, 0.0, SKEW + 3.0), ("exchange f", 4, 1, 0.3, 1.3),
                  ("inner", 5, 2, 2 * PERIOD, 2 * PERIOD + SKEW + 3.0),
                  ("exchange f", 5, 1, 2 * PERIOD + 0.3, 2 * PERIOD + 1.3)]
    with tempfile.TemporaryDirectory() as tmp:
        path, tables = os.path.join(tmp, "trace.json"), os.path.join(tmp, "tables.json")
        with open(path, "w") as f:
            json.dump(trace(True), f)
        subprocess.run([sys.executable, script, path, "--spans", "2", "--json", tables],
                       capture_output=True, text=True, check=True)
        with open(tables) as f:
            got = [(r["span"], r["count"], r["ranks"], r["begin_us"], r["end_us"])
                   for r in json.load(f)["spans"]]
    if len(got) != len(want_spans) or any(
            g[:3] != w[:3] or abs(g[3] - w[3]) > 1e-6 or abs(g[4] - w[4]) > 1e-6
            for g, w in zip(got, want_spans)):
        print(f"--spans 2: {got}, want {want_spans}")
        failures += 1
    refused = runs[False]
    if refused.returncode == 0 or "exchange counter" not in refused.stderr:
        print("a trace without exchange counters was not refused:", refused.stderr)
        failures += 1
    if failures:
        print(out)
        sys.exit(1)
    print("trace-summary --kernels: every phase, the skew and the gap of each exchange object "
          "as built, stream spans left out; the events table per object; --skip; a trace "
          "without exchange counters refused; --spans: the last stream spans as a timeline")


if __name__ == "__main__":
    main()
