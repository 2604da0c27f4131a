#!/usr/bin/env python3
"""halox-md decomposition test: runs on N real MPI ranks over several rank-grid shapes and
compares with the single-rank run: forces at step 0 to 1e-12 relative, energies after 20
steps to 1e-9 relative (CPU, double). --bad-input checks that bad input is refused cleanly.

usage: md_decomposition.py MPIEXEC HALOX_MD NP GRID... [--device cpu|gpu] [--transport T]
                           [--force-tol X] [--energy-tol X]
       md_decomposition.py MPIEXEC HALOX_MD --bad-input
"""
import json
import os
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(mpiexec, md, np, args, check=True):
    cmd = [mpiexec, "-n", str(np), "--oversubscribe", md] + args
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p


def simulate(mpiexec, md, np, grid, extra, workdir, steps=20):
    tag = f"np{np}_{grid}"
    forces, out = os.path.join(workdir, f"f_{tag}.txt"), os.path.join(workdir, f"{tag}.json")
    args = ["--cells", "6", "--steps", str(steps), "--thermo", "10", "--ranks", grid,
            "--dump-forces", forces, "--json", out, "--quiet"] + extra
    run(mpiexec, md, np, args)
    with open(forces) as f:
        table = {int(line.split()[0]): [float(v) for v in line.split()[1:]] for line in f}
    with open(out) as f:
        return table, json.load(f)


def main():
    mpiexec, md = sys.argv[1], sys.argv[2]
    if sys.argv[3] == "--bad-input":
        cases = [
            (1, ["--density", "0"], "density"),
            (1, ["--temperature", "-1"], "temperature"),
            (1, ["--cells", "2", "--cutoff", "2.5"], "half the box"),
            (2, ["--ranks", "3x1x1"], "does not match"),
            (1, ["--transport", "carrier-pigeon"], "unknown transport"),
            (2, ["--transport", "local", "--ranks", "2x1x1"], "start 1 MPI rank"),
            (1, ["--transport", "local"], "whole rank grid"),
        ]
        for np, args, words in cases:
            p = run(mpiexec, md, np, args + ["--steps", "1"], check=False)
            if p.returncode != 2 or words not in p.stderr:
                sys.exit(f"FAILED: {args}: rc {p.returncode}, stderr: {p.stderr!r}")
            print(f"refused as expected: {args}: {p.stderr.strip()}")
        return
    np = int(sys.argv[3])
    rest = sys.argv[4:]
    grids = [a for a in rest if not a.startswith("--") and "x" in a]
    extra = [a for a in rest if a not in grids]
    force_tol, energy_tol = 1e-12, 1e-9
    if "--force-tol" in extra:
        i = extra.index("--force-tol")
        force_tol = float(extra[i + 1])
        del extra[i:i + 2]
    if "--energy-tol" in extra:
        i = extra.index("--energy-tol")
        energy_tol = float(extra[i + 1])
        del extra[i:i + 2]
    with tempfile.TemporaryDirectory() as work:
        ref_f, ref = simulate(mpiexec, md, 1, "1x1x1", extra, work)
        scale = max(abs(v) for f in ref_f.values() for v in f)
        for grid in grids:
            got_f, got = simulate(mpiexec, md, np, grid, extra, work)
            if sorted(got_f) != sorted(ref_f):
                sys.exit(f"FAILED {grid}: atom ids differ")
            worst = max(abs(a - b) for i in ref_f for a, b in zip(ref_f[i], got_f[i])) / scale
            e_ref, e_got = ref["thermo"][-1], got["thermo"][-1]
            e_err = max(abs(e_got[k] - e_ref[k]) / abs(e_ref[k])
                        for k in ("potential", "total", "temperature", "pressure"))
            print(f"np {np} grid {grid} ({got['transport']}): step-0 force error {worst:.2e} "
                  f"(tol {force_tol:g}), step-{e_ref['step']} energy error {e_err:.2e} "
                  f"(tol {energy_tol:g})")
            if not worst <= force_tol or not e_err <= energy_tol:
                sys.exit("FAILED: decomposed run differs from the single-rank run")
        if np > 1:
            _, long = simulate(mpiexec, md, np, grids[0], extra, work, steps=1000)
            print(f"total energy drift over 1000 steps on {grids[0]}: {long['energy_drift']:.3e}")
            if abs(long["energy_drift"]) > 1e-3:
                sys.exit("FAILED: energy drift above 1e-3")


if __name__ == "__main__":
    main()
