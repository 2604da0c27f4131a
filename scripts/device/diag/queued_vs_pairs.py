#!/usr/bin/env python3
"""Splits a `halox-bench halo --app md --trace` trace (diag/md_pair_trace.sh) into the
exchanges queued in one direction and the forward + reverse pairs that end it, and prints
per rank and direction the median time at which each phase of each pulse ended (its last
block), from the exchange's first event, and the median period from one exchange's start
to the next of that rank and direction. (trace-summary --kernels takes the last N exchanges
of a direction, which mixes the two.)

usage: scripts/device/diag/queued_vs_pairs.py TRACE.json[.gz] [--pairs 50] [--queued 100]
"""
import argparse
import gzip
import json
import statistics
from collections import defaultdict


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--pairs", type=int, default=50, help="pairs at the trace's end")
    parser.add_argument("--queued", type=int, default=100, help="one-direction exchanges before")
    args = parser.parse_args()
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    # Device rows are named "gpu <direction> pulse <p> block <b>".
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    exchanges = defaultdict(list)
    for e in events:
        if e["ph"] not in "Xi" or "exchange" not in e.get("args", {}):
            continue
        words = rows[(e["pid"], e["tid"])].split()
        key = (e["pid"], words[1], e["args"]["exchange"])
        exchanges[key].append((e["name"], int(words[3]), e["ts"], e["ts"] + e.get("dur", 0)))
    for rank in sorted({k[0] for k in exchanges}):
        for direction in ("forward", "reverse"):
            numbers = [k[2] for k in exchanges if k[0] == rank and k[1] == direction]
            if not numbers:
                continue
            last = max(numbers)
            spans = (("queued", range(last - args.pairs - args.queued + 1, last - args.pairs + 1)),
                     ("pairs", range(last - args.pairs + 1, last + 1)))
            for label, span in spans:
                starts, ends = [], defaultdict(list)
                for number in span:
                    evs = exchanges.get((rank, direction, number))
                    if not evs:
                        continue
                    start = min(ev[2] for ev in evs)
                    starts.append(start)
                    latest = defaultdict(float)
                    for name, pulse, _, end in evs:
                        latest[(name, pulse)] = max(latest[(name, pulse)], end - start)
                    for phase, t in latest.items():
                        ends[phase].append(t)
                periods = [b - a for a, b in zip(starts, starts[1:])]
                if not periods:
                    continue
                phases = " ".join(f"{name} p{pulse} {statistics.median(t):.2f}"
                                  for (name, pulse), t in sorted(ends.items(), key=lambda kv:
                                                                 statistics.median(kv[1])))
                print(f"rank {rank} {direction} {label} ({len(starts)}): period "
                      f"{statistics.median(periods):.2f} us; {phases}")


if __name__ == "__main__":
    main()
