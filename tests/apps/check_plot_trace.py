#!/usr/bin/env python3
"""Checks scripts/plot on a trace whose exchanges are known: two ranks, two exchange objects
("f+g" and "phi") whose device events share counter values, a grid op of 60 blocks each.
`--exchange N` alone must refuse (two objects have an exchange N) and name --object; with
--object it must draw a PNG (60 blocks per op: a row per rank and op); an exchange that is
not there must be refused with a message, not drawn empty. The device phases must keep their
colours whichever of them a trace has and in whatever order (pictures of two runs compared),
and spans of other names must get colours of their own. Without --exchange, the picture
holds the first two ranks' host and block-0 tracks and every rank's stream spans
(trace::stream_span_begin/end), and draws.

usage: check_plot_trace.py SCRIPTS_DIR
"""
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

BLOCKS = 60


def trace():
    events = []
    for rank in (0, 1):
        for block in range(BLOCKS):
            tid = block + 1
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                           "args": {"name": f"gpu grid op 4 block {block}"}})
            for turn, obj in enumerate(("f+g", "phi")):
                t0 = 20.0 * turn + 0.01 * block
                for name, start, duration in (("pack + store", 0.0, 3.0), ("unpack", 4.0, 2.0)):
                    events.append({"ph": "X", "name": name, "pid": rank, "tid": tid,
                                   "ts": t0 + start, "dur": duration,
                                   "args": {"exchange": 7, "object": obj}})
    return {"traceEvents": events}


def main():
    plot = os.path.join(sys.argv[1], "plot")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        path, png = os.path.join(tmp, "trace.json"), os.path.join(tmp, "out.png")
        with open(path, "w") as f:
            json.dump(trace(), f)

        def run(*args):
            return subprocess.run([sys.executable, plot, path, "-o", png, "--direction", "grid",
                                   *args], capture_output=True, text=True)

        both = run("--exchange", "7")
        if both.returncode == 0 or "--object" not in both.stderr + both.stdout:
            print("an exchange of two objects was not refused:", both.stdout, both.stderr)
            failures += 1
        one = run("--exchange", "7", "--object", "phi")
        if one.returncode != 0 or not os.path.exists(png) or os.path.getsize(png) < 1000:
            print("--object phi did not draw:", one.stdout, one.stderr)
            failures += 1
        missing = run("--exchange", "8", "--object", "phi")
        if missing.returncode == 0 or "no grid events of exchange 8" not in missing.stderr + missing.stdout:
            print("a missing exchange was not refused:", missing.stdout, missing.stderr)
            failures += 1
    failures += check_colors(plot)
    failures += check_default_selection(plot)
    if failures:
        sys.exit(1)
    print("plot --exchange: two objects refused without --object, one object drawn, a missing "
          "exchange refused; phase colours fixed, other spans' distinct; by default every "
          "rank's stream spans and the first two ranks' host and block-0 tracks, drawn")


def load_plot(plot):
    loader = importlib.machinery.SourceFileLoader("halox_plot", plot)
    spec = importlib.util.spec_from_loader("halox_plot", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def check_default_selection(plot):
    # Three ranks: a host track, a kernel's blocks 0 and 1, and the stream spans "inner" and
    # "exchange f" on each.
    tracks = ["host", "gpu grid op 4 block 0", "gpu grid op 4 block 1", "gpu inner",
              "gpu exchange f"]
    events, names = [], {}
    for rank in (0, 1, 2):
        for tid, track in enumerate(tracks, start=1):
            names[(rank, tid)] = track
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                           "args": {"name": track}})
            events.append({"ph": "X", "name": track.split(" ")[-1], "pid": rank, "tid": tid,
                           "ts": 10.0 * tid, "dur": 5.0, "args": {"exchange": 0}})
    kept = {(e["pid"], names[(e["pid"], e["tid"])])
            for e in load_plot(plot).default_selection(
                [e for e in events if e["ph"] == "X"], names)}
    want = {(r, t) for r in (0, 1) for t in ("host", "gpu grid op 4 block 0")}
    want |= {(r, t) for r in (0, 1, 2) for t in ("gpu inner", "gpu exchange f")}
    failures = 0
    if kept != want:
        print(f"default tracks: {sorted(kept)}, want {sorted(want)}")
        failures += 1
    with tempfile.TemporaryDirectory() as tmp:
        path, png = os.path.join(tmp, "spans.json"), os.path.join(tmp, "spans.png")
        with open(path, "w") as f:
            json.dump({"traceEvents": events}, f)
        drawn = subprocess.run([sys.executable, plot, path, "-o", png], capture_output=True,
                               text=True)
        if drawn.returncode != 0 or not os.path.exists(png) or os.path.getsize(png) < 1000:
            print("a trace with stream spans did not draw:", drawn.stdout, drawn.stderr)
            failures += 1
    return failures


def check_colors(plot):
    module = load_plot(plot)
    queued = module.span_colors(["wait: peer buffer free", "pack + store", "wait: data", "unpack"])
    pairs = module.span_colors(["pack + store", "wait: data", "unpack", "grid exchange",
                                "halo forward", "launch forward"])
    failures = 0
    for name in ("pack + store", "wait: data", "unpack"):
        if queued[name] != pairs[name]:
            print(f"'{name}' drawn {queued[name]} in one trace and {pairs[name]} in another")
            failures += 1
    import matplotlib.colors as mc
    hexes = [mc.to_hex(c) for c in pairs.values()]
    if len(set(hexes)) != len(hexes):
        print("two span names share a colour:", pairs)
        failures += 1
    return failures


if __name__ == "__main__":
    main()
