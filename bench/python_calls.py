"""The cost of calling halox from Python: GridExchange.exchange_async of the same exchange
and arrays called from a Python loop and from a C++ loop (the module's _time_calls), in the
same run. Two figures: the per-call cost of queued calls (no wait: for GPU arrays the host
time of a call, what Python adds to it), and the halo time per step (each call waited for,
as heat3d.py's loop does). Each is the median of --repeats alternated runs, slowest rank.

    mpirun -n 2 python3 bench/python_calls.py                  # NumPy arrays (host)
    mpirun -n 2 python3 bench/python_calls.py --device gpu     # CuPy arrays

Exit codes: 0 done, 2 bad options.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

import halox


def parse(comm):
    parser = argparse.ArgumentParser(
        prog="python_calls.py",
        description="exchange_async from Python against the same call from C++ (halox).")
    parser.add_argument("--cells", type=int, default=48, help="global cells per axis (48)")
    parser.add_argument("--calls", type=int, default=1000, help="calls per timed loop (1000)")
    parser.add_argument("--repeats", type=int, default=7, help="alternated loops, median (7)")
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                        help="NumPy arrays, or CuPy arrays on the GPU (cpu)")
    parser.add_argument("--transport", default="auto", help="a halox transport (auto)")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    quiet = open(os.devnull, "w") if comm.rank != 0 else None
    with contextlib.redirect_stdout(quiet or sys.stdout), \
            contextlib.redirect_stderr(quiet or sys.stderr):
        try:
            args = parser.parse_args()
        except SystemExit as e:
            sys.exit(e.code)
    if args.cells < 2 or args.calls < 1 or args.repeats < 1:
        if comm.rank == 0:
            print("python_calls.py: --cells must be at least 2, --calls and --repeats at least 1",
                  file=sys.stderr)
        sys.exit(2)
    # A file that cannot be written is found now, not after the run.
    error = None
    if args.json and comm.rank == 0:
        try:
            open(args.json, "a").close()
        except OSError as e:
            error = f"python_calls.py: cannot write --json {args.json}: {e.strerror}"
    error = comm.bcast(error, root=0)
    if error:
        if comm.rank == 0:
            print(error, file=sys.stderr)
        sys.exit(2)
    return args


def main():
    comm = MPI.COMM_WORLD
    args = parse(comm)
    xp, stream, synchronize = np, None, (lambda: None)
    if args.device == "gpu":
        import cupy as xp

        stream = xp.cuda.Stream(non_blocking=True)
        synchronize = stream.synchronize
    topo = halox.Topology.from_mpi(comm)
    ranks = halox.Ranks.mpi(topo)
    plan = halox.build_grid_plans(ranks, (args.cells,) * 3, 1, np.float64)[0]
    exchange = halox.GridExchange(ranks, [plan], transport=args.transport)
    u = xp.asarray(np.random.default_rng(1).standard_normal(plan.shape))
    exchange.exchange_async(u, stream=stream)  # set-up outside the timed loops
    synchronize()

    def from_python(wait_each):
        start = time.perf_counter()
        for _ in range(args.calls):
            exchange.exchange_async(u, stream=stream)
            if wait_each:
                synchronize()
        synchronize()
        return (time.perf_counter() - start) / args.calls

    def from_cpp(wait_each):
        return exchange._time_calls(u, calls=args.calls, stream=stream, wait_each=wait_each)

    rows = []
    for what, wait_each in (("queued call", False), ("halo per step", True)):
        times = {"python": [], "c++": []}
        for _ in range(args.repeats):
            for name, run in (("python", from_python), ("c++", from_cpp)):
                comm.Barrier()
                times[name].append(comm.allreduce(run(wait_each), op=MPI.MAX))
        py, cpp = statistics.median(times["python"]), statistics.median(times["c++"])
        rows.append({"what": what, "python_us": py * 1e6, "cpp_us": cpp * 1e6,
                     "python_over_cpp": py / cpp, "python_minus_cpp_us": (py - cpp) * 1e6})
    # What a call from Python is made of (GPU arrays): the DLPack export that a call with
    # other arrays than the last call's costs, the layout read by which a call with the same
    # CuPy arrays is known to be one, and the wait for an idle stream.
    parts = {}
    if args.device == "gpu":
        def per_call(work):
            start = time.perf_counter()
            for _ in range(args.calls):
                work()
            return (time.perf_counter() - start) / args.calls * 1e6
        parts = {"dlpack_export_us": per_call(lambda: u.__dlpack__()),
                 "layout_read_us": per_call(lambda: (u.data.ptr, u.shape, u.strides, u.dtype)),
                 "idle_stream_wait_us": per_call(synchronize)}
        parts = {k: comm.allreduce(v, op=MPI.MAX) for k, v in parts.items()}
    if comm.rank == 0:
        name = exchange.transport_name(u)
        print(f"# halox {halox.__version__} python_calls.py: {comm.size} ranks, {args.cells}^3 "
              f"cells, {args.device} ({'NumPy' if xp is np else 'CuPy'}), transport {name}, "
              f"{args.calls} calls x {args.repeats} alternated loops, median of the slowest rank")
        print(f"{'# what':<16}{'Python us':>12}{'C++ us':>12}{'Python/C++':>12}{'added us':>12}")
        for r in rows:
            print(f"{r['what']:<16}{r['python_us']:>12.2f}{r['cpp_us']:>12.2f}"
                  f"{r['python_over_cpp']:>12.3f}{r['python_minus_cpp_us']:>12.2f}")
        if parts:
            print("# parts of a Python call, us: DLPack export (another array than the last "
                  f"call's) {parts['dlpack_export_us']:.2f}, layout read (the same CuPy array) "
                  f"{parts['layout_read_us']:.2f}, idle stream wait {parts['idle_stream_wait_us']:.2f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"program": "python_calls.py", "ranks": comm.size, "cells": args.cells,
                           "device": args.device, "transport": name, "calls": args.calls,
                           "repeats": args.repeats, "halox": halox.__version__, "rows": rows,
                           "parts": parts},
                          f, indent=1)
            print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
