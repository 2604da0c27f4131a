#!/usr/bin/env python3
"""Bad input and ranks that disagree end in one clear error and a non-zero exit, never a hang:
MPMD launches whose ranks get different parameters (grids, rank grids, run lengths), an
input error on one rank only, non-finite and out-of-range inputs, runs that diverge.

usage: agreement.py MPIEXEC HALOX_MD HALOX_LBM
"""
import os
import subprocess
import sys

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
TIMEOUT = 60  # far above any of these runs: reaching it is a hang


def launch(mpiexec, parts):
    """parts: one list of arguments per MPMD part (one rank each)."""
    cmd = [mpiexec, "--oversubscribe"]
    for k, part in enumerate(parts):
        cmd += ([":"] if k else []) + ["-n", "1"] + part
    try:
        p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAILED (hang, killed after {TIMEOUT} s): {' '.join(cmd)}")
    return cmd, p


def expect(mpiexec, parts, rc, words):
    cmd, p = launch(mpiexec, parts)
    ok = (p.returncode == rc if rc is not None else p.returncode != 0) and words in p.stderr
    if not ok:
        sys.exit(f"FAILED: {' '.join(cmd)}: rc {p.returncode}, want "
                 f"{rc if rc is not None else 'non-zero'} and '{words}' in stderr:\n{p.stderr}")
    first = next((l for l in p.stderr.splitlines() if words in l), "")
    print(f"ok (rc {p.returncode}): {' '.join(cmd[2:])}\n    {first.strip()}")


def main():
    mpiexec, md, lbm = sys.argv[1:4]
    md_cpu = [md, "--device", "cpu", "--cells", "6", "--quiet"]
    lbm_cpu = [lbm, "--device", "cpu", "--model", "bgk", "--steps", "2"]
    differ = "different parameters"
    # Ranks that pick or are given other rank grids, grids or run parameters.
    expect(mpiexec, [lbm_cpu + ["--grid", "32x32x32"], lbm_cpu + ["--grid", "32x32x30"]], 2, differ)
    expect(mpiexec, [lbm_cpu + ["--grid", "32x32x32", "--ranks", "1x1x2"],
                     lbm_cpu + ["--grid", "32x32x34", "--ranks", "1x1x2"]], 2, differ)
    expect(mpiexec, [lbm_cpu + ["--ranks", "1x1x2"], lbm_cpu + ["--ranks", "1x2x1"]], 2, differ)
    expect(mpiexec, [md_cpu + ["--ranks", "1x1x2"], md_cpu + ["--ranks", "1x2x1"]], 2, differ)
    for option, a, b in [("--nstlist", "10", "5"), ("--steps", "10", "20"),
                         ("--dt", "0.005", "0.004"), ("--seed", "1", "2")]:
        expect(mpiexec, [md_cpu + [option, a], md_cpu + [option, b]], 2, differ)
    # An input error on one rank only reaches the job's output, naming that rank.
    expect(mpiexec, [md_cpu, md_cpu + ["--cells", "0"]], 2,
           "--cells: '0' is outside [1, 2147483647] (see --help) (on rank 1)")
    expect(mpiexec, [lbm_cpu, lbm_cpu + ["--tau", "0.4"]], 2, "(on rank 1)")
    # Non-finite and out-of-range input.
    expect(mpiexec, [md_cpu + ["--dt", "inf", "--steps", "1"]], 2, "not finite")
    expect(mpiexec, [md_cpu + ["--steps", "1e20"]], 2, "--steps: '1e20' is outside")
    expect(mpiexec, [md_cpu + ["--steps", "2.5"]], 2, "--steps: '2.5' is not a whole number")
    expect(mpiexec, [md_cpu + ["--cells", "2000000"]], 2, "GB, more than this node")
    expect(mpiexec, [lbm_cpu + ["--device", "tpu"]], 2, "--device: tpu not in {auto,cpu,gpu}")
    expect(mpiexec, [lbm_cpu + ["--tau", "inf"]], 2, "not finite")
    expect(mpiexec, [lbm_cpu + ["--velocity", "5"]], 2, "--velocity")
    # A run that diverges stops with an error and a non-zero exit.
    expect(mpiexec, [md_cpu + ["--dt", "1e200", "--steps", "20", "--thermo", "1"]], 3,
           "the run diverged")


if __name__ == "__main__":
    main()
