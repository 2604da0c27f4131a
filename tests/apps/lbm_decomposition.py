#!/usr/bin/env python3
"""halox-lbm decomposition invariance: runs on N real MPI ranks over several rank-grid shapes
(uneven splits included) and requires rho, u and phi of every cell to be bitwise identical to
the single-rank run after the given steps.

usage: lbm_decomposition.py MPIEXEC HALOX_LBM NP [--local-pulse | --local-fused] [--graph] [--blocks=AxBxC] GRID... [-- extra halox-lbm arguments]

GRID: a rank grid XxYxZ, or count=N for N ranks on the grid halox-lbm picks.

--local-pulse: the decomposed runs keep every rank in one process (--transport local-pulse,
NP = 1; on the GPU one kernel per face); the reference stays the ordinary single-rank run.
--local-fused: likewise with --transport local-fused (one GPU-initiated kernel for every face
of every rank).
--graph: the decomposed runs capture their step in a CUDA graph and replay it (--graph); the
reference stays the ordinary single-rank run.
--blocks=AxBxC: each of the NP processes of a decomposed run holds a block of AxBxC ranks
(--blocks; GRID is then the grid of processes); the reference stays the single-rank run.

HALOX_TEST_PRELOAD=PATH: every run preloads PATH (libhalox_mpi, for --comm mpi-* on a GPU).
"""
import os
import subprocess
import sys
import struct
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(mpiexec, lbm, np, args):
    # HALOX_TEST_PRELOAD=<libhalox_mpi.so>: the ranks run with the MPI interposer in front
    # (halox-lbm --comm mpi-* on device memory).
    preload = os.environ.get("HALOX_TEST_PRELOAD")
    cmd = [mpiexec, "-n", str(np), "--oversubscribe"] + (
        ["-x", f"LD_PRELOAD={preload}"] if preload else []) + [lbm] + args
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def main():
    mpiexec, lbm, np = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rest = sys.argv[4:]
    extra = rest[rest.index("--") + 1:] if "--" in rest else []
    grids = rest[:rest.index("--")] if "--" in rest else rest
    local = next((g[2:] for g in grids if g in ("--local-pulse", "--local-fused")), None)
    graph = ["--graph"] if "--graph" in grids else []
    blocks = [a for g in grids if g.startswith("--blocks=") for a in ("--blocks", g[9:])]
    grids = [g for g in grids if not g.startswith("--")]
    decomposed = extra + (["--transport", local] if local else []) + graph + blocks
    with tempfile.TemporaryDirectory() as work:
        ref = os.path.join(work, "ref.bin")
        run(mpiexec, lbm, 1, extra + ["--ranks", "1x1x1", "--dump", ref])
        want = open(ref, "rb").read()
        failed = []
        for grid in grids:
            out = os.path.join(work, f"{grid}.bin")
            # "count=N": N ranks on the rank grid halox-lbm picks (--rank-count N).
            ranks = ["--rank-count", grid[6:]] if grid.startswith("count=") else ["--ranks", grid]
            run(mpiexec, lbm, np, decomposed + ranks + ["--dump", out])
            got = open(out, "rb").read()
            same = got == want
            print(f"np {np} grid {grid} {' '.join(decomposed)}: fields {'bitwise identical' if same else 'DIFFER'} "
                  f"({len(want) // 40} cells)")
            if not same:
                print(where_they_differ(want, got, extra))
                failed.append(grid)
    if failed:
        sys.exit(f"FAILED: the decomposed runs on {' '.join(failed)} differ from the single-rank run")


def where_they_differ(want, got, args):
    """How many cells differ and the first few, as (x, y, z) of the global grid when --grid is
    known: a pattern (one face, one edge, every cell) points at the part that broke."""
    if len(want) != len(got):
        return f"  {len(got)} bytes, the single-rank run {len(want)}"
    n = [int(v) for v in args[args.index("--grid") + 1].split("x")] if "--grid" in args else None
    names = ("rho", "ux", "uy", "uz", "phi")
    want_cells = struct.iter_unpack("5d", want)
    got_cells = struct.iter_unpack("5d", got)
    bad = [(i, a, b) for i, (a, b) in enumerate(zip(want_cells, got_cells)) if a != b]
    lines = [f"  {len(bad)} of {len(want) // 40} cells differ; the first:"]
    for i, a, b in bad[:6]:
        at = f"({i % n[0]}, {i // n[0] % n[1]}, {i // (n[0] * n[1])})" if n else f"cell {i}"
        q = next(k for k in range(5) if a[k] != b[k])
        lines.append(f"    {at}: {names[q]} {b[q]!r}, single rank {a[q]!r}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
