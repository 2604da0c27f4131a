#!/usr/bin/env python3
"""halox-lbm decomposition invariance: runs on N real MPI ranks over several rank-grid shapes
(uneven splits included) and requires rho, u and phi of every cell to be bitwise identical to
the single-rank run after the given steps.

usage: lbm_decomposition.py MPIEXEC HALOX_LBM NP [--local] GRID... [-- extra halox-lbm arguments]

--local: the decomposed runs keep every rank in one process (--transport local, NP = 1); the
reference stays the ordinary single-rank run.
"""
import os
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(mpiexec, lbm, np, args):
    cmd = [mpiexec, "-n", str(np), "--oversubscribe", lbm] + args
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def main():
    mpiexec, lbm, np = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rest = sys.argv[4:]
    extra = rest[rest.index("--") + 1:] if "--" in rest else []
    grids = rest[:rest.index("--")] if "--" in rest else rest
    local = "--local" in grids
    grids = [g for g in grids if g != "--local"]
    decomposed = extra + (["--transport", "local"] if local else [])
    with tempfile.TemporaryDirectory() as work:
        ref = os.path.join(work, "ref.bin")
        run(mpiexec, lbm, 1, extra + ["--ranks", "1x1x1", "--dump", ref])
        want = open(ref, "rb").read()
        for grid in grids:
            out = os.path.join(work, f"{grid}.bin")
            run(mpiexec, lbm, np, decomposed + ["--ranks", grid, "--dump", out])
            got = open(out, "rb").read()
            same = got == want
            print(f"np {np} grid {grid} {' '.join(decomposed)}: fields {'bitwise identical' if same else 'DIFFER'} "
                  f"({len(want) // 40} cells)")
            if not same:
                sys.exit("FAILED: the decomposed run differs from the single-rank run")


if __name__ == "__main__":
    main()
