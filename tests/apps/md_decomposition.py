#!/usr/bin/env python3
"""halox-md decomposition test: runs on N real MPI ranks over several rank-grid shapes and
compares with the single-rank run: forces at step 0 to 1e-12 relative, energies after 20
steps to 1e-9 relative (CPU, double). --bad-input checks that bad input is refused cleanly.

--lattice checks perfect and near-perfect fcc lattices (jitter 0, 1e-7, 1e-6: atoms on or
within rounding of cell and domain boundaries), float and double, on one rank, 2x2x2 and
3x1x2 grids (one process, --transport local-fused, and MPI_NP real ranks): potential and pressure
at step 0 against the double single-rank run (1e-6 relative for float, 1e-12 for double)
and, for the perfect lattice, against the analytic lattice sums, with --lj-shift cutoff and
none.

--prune checks that dynamic pruning leaves the physics as it is: runs with --prune against
the same runs without (1 rank, and 2x2x2 in one process), step-0 forces to 1e-12 and
energies after 60 steps (3 searches, 12 prunes) to 1e-9, no list violation; and that an
inner skin too thin for the pruning interval is reported.

--graph checks halox-md --graph (GPU) against the same run without: 1 rank, 2x2x2 and 3x3x3
in one process (local-fused, local-pulse), and 2 processes (--mpi-transport T); step-0 forces
to 1e-12 and energies after 60 steps (6 searches, a prune every 4 steps) to 1e-9, most steps
replayed.

--blocks=AxBxC (with NP GRID...): each process of the decomposed runs holds a block of AxBxC
ranks (--blocks; GRID is then the grid of processes); the reference stays the single rank.

usage: md_decomposition.py MPIEXEC HALOX_MD NP GRID... [--device cpu|gpu] [--transport T]
                           [--force-tol X] [--energy-tol X] [--blocks=AxBxC]
       md_decomposition.py MPIEXEC HALOX_MD --bad-input
       md_decomposition.py MPIEXEC HALOX_MD --lattice [--device cpu|gpu] [--mpi-transport T]
       md_decomposition.py MPIEXEC HALOX_MD --prune [--device cpu|gpu]
       md_decomposition.py MPIEXEC HALOX_MD --graph [--mpi-transport T]
"""
import itertools
import math
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
        doc = json.load(f)
    # The summary's shares (every phase's mean, and "other") add up to the loop; each phase's
    # least <= mean <= most over the processes.
    shares = sum(v["share"] for v in doc["timing"].values())
    if not abs(shares - 1) < 1e-9:
        sys.exit(f"FAILED: {tag}: the timing shares add up to {shares}, not 1")
    for name, v in doc["timing"].items():
        if name != "other" and not v["min"] <= v["avg"] * (1 + 1e-12) <= v["max"] * (1 + 1e-12):
            sys.exit(f"FAILED: {tag}: {name}: min {v['min']} avg {v['avg']} max {v['max']}")
    if not doc["atom_steps_per_second"] > 0 or not doc["tau_per_day"] > 0:
        sys.exit(f"FAILED: {tag}: rates {doc['atom_steps_per_second']} {doc['tau_per_day']}")
    return table, doc


def differences(ref_f, ref, got_f, got):
    """The largest step-0 force difference relative to the largest force, and the largest
    relative difference of the last thermo line's energies, temperature and pressure."""
    scale = max(abs(v) for f in ref_f.values() for v in f)
    worst = max(abs(a - b) for i in ref_f for a, b in zip(ref_f[i], got_f[i])) / scale
    e_ref, e_got = ref["thermo"][-1], got["thermo"][-1]
    e_err = max(abs(e_got[k] - e_ref[k]) / abs(e_ref[k])
                for k in ("potential", "total", "temperature", "pressure"))
    return worst, e_err


def fcc_lattice_sums(density, cutoff, cells):
    """Per atom of a perfect fcc lattice: the LJ energy (truncated at the cutoff) and the
    virial sum of r.F over its pairs within the cutoff, both halved (each pair is shared)."""
    a = (4.0 / density) ** (1.0 / 3.0)
    basis = [(0, 0, 0), (0.5, 0.5, 0), (0.5, 0, 0.5), (0, 0.5, 0.5)]
    reach = int(math.ceil(cutoff / a)) + 1
    energy = virial = shift_pairs = 0.0
    for i, j, k in itertools.product(range(-reach, reach + 1), repeat=3):
        for b in basis:
            r = [(i + b[0]) * a, (j + b[1]) * a, (k + b[2]) * a]
            r2 = sum(c * c for c in r)
            if r2 == 0 or r2 >= cutoff * cutoff:
                continue
            inv6 = 1.0 / r2 ** 3
            energy += 0.5 * 4 * inv6 * (inv6 - 1)
            virial += 0.5 * 48 * inv6 * (inv6 - 0.5)
            shift_pairs += 0.5
    box = cells * a
    assert cutoff < box / 2, "the lattice sums assume no image of an atom within the cutoff"
    return energy, virial, shift_pairs


def lattice(mpiexec, md, args):
    device = args[args.index("--device") + 1] if "--device" in args else "cpu"
    mpi_transport = args[args.index("--mpi-transport") + 1] if "--mpi-transport" in args else None
    cells, density, cutoff, temperature = 6, 0.8442, 2.5, 1.44
    base = ["--cells", str(cells), "--steps", "0", "--quiet", "--device", device]
    failures = []
    with tempfile.TemporaryDirectory() as work:
        def step0(np, grid, precision, jitter, shift, transport):
            out = os.path.join(work, "lattice.json")
            extra = ["--ranks", grid, "--precision", precision, "--jitter", str(jitter),
                     "--lj-shift", shift, "--json", out]
            if transport:
                extra += ["--transport", transport]
            run(mpiexec, md, np, base + extra)
            with open(out) as f:
                return json.load(f)["thermo"][0]

        e_pair, w_pair, pairs = fcc_lattice_sums(density, cutoff, cells)
        inv6 = 1.0 / cutoff ** 6
        u_rc = 4 * inv6 * (inv6 - 1)
        for shift in ("cutoff", "none"):
            for jitter in (0, 1e-7, 1e-6):
                ref = step0(1, "1x1x1", "double", jitter, shift, None)
                if jitter == 0:
                    analytic = {"potential": e_pair - (u_rc * pairs if shift == "cutoff" else 0),
                                "pressure": density * temperature + density * w_pair / 3}
                    for k, v in analytic.items():
                        err = abs(ref[k] - v) / abs(v)
                        print(f"perfect lattice, --lj-shift {shift}: {k} {ref[k]:.10f}, "
                              f"analytic {v:.10f}, error {err:.1e}")
                        if not err <= 1e-12:
                            failures.append(f"analytic {k} (--lj-shift {shift})")
                runs = [(1, "1x1x1", None), (1, "2x2x2", "local-fused"), (1, "3x1x2", "local-fused")]
                if mpi_transport:
                    runs += [(2, "1x1x2", mpi_transport)]
                for precision in ("double", "float"):
                    tol = 1e-12 if precision == "double" else 1e-6
                    for np, grid, transport in runs:
                        got = step0(np, grid, precision, jitter, shift, transport)
                        err = max(abs(got[k] - ref[k]) / abs(ref[k])
                                  for k in ("potential", "pressure"))
                        where = (f"{precision} jitter {jitter:g} --lj-shift {shift} {grid} "
                                 f"({np} process{'es' if np > 1 else ''}"
                                 f"{', ' + transport if transport else ''})")
                        print(f"{where}: potential {got['potential']:.10f} pressure "
                              f"{got['pressure']:.8f}, error {err:.1e} (tol {tol:g})")
                        if not err <= tol:
                            failures.append(where)
    if failures:
        sys.exit("FAILED: " + "; ".join(failures))


def prune(mpiexec, md, args):
    lists = ["--nstlist", "20", "--skin", "1.0"]
    pruned = ["--prune", "5", "--inner-skin", "0.4"]
    with tempfile.TemporaryDirectory() as work:
        for grid, transport in (("1x1x1", []), ("2x2x2", ["--transport", "local-fused"])):
            extra = args + lists + transport
            ref_f, ref = simulate(mpiexec, md, 1, grid, extra, work, steps=60)
            got_f, got = simulate(mpiexec, md, 1, grid, extra + pruned, work, steps=60)
            worst, e_err = differences(ref_f, ref, got_f, got)
            e_ref = ref["thermo"][-1]
            print(f"{grid} pruned every 5 steps: step-0 force error {worst:.2e}, step-"
                  f"{e_ref['step']} energy error {e_err:.2e}, largest displacement between "
                  f"prunes {got['max_pruned_displacement']:.4f}, violations "
                  f"{got['list_violations']}")
            if not worst <= 1e-12 or not e_err <= 1e-9:
                sys.exit("FAILED: the pruned run differs from the unpruned one")
            if ref["list_violations"] or got["list_violations"]:
                sys.exit("FAILED: a list was not valid throughout; the test needs another skin")
            if not got["max_pruned_displacement"] > 0:
                sys.exit("FAILED: no pruning happened")
        # An inner skin the atoms outrun between prunes: reported, not hidden.
        _, thin = simulate(mpiexec, md, 1, "1x1x1",
                           args + lists + ["--prune", "10", "--inner-skin", "0.02"], work, steps=60)
        print(f"inner skin 0.02, pruned every 10 steps: {thin['list_violations']} violations")
        if not thin["list_violations"] > 0:
            sys.exit("FAILED: a pruned list too thin for its interval was not reported")


def graph(mpiexec, md, args):
    mpi_transport = args[args.index("--mpi-transport") + 1] if "--mpi-transport" in args else None
    common = ["--device", "gpu", "--nstlist", "10", "--skin", "1.0", "--prune", "4",
              "--inner-skin", "0.5"]
    runs = [(1, "1x1x1", []), (1, "2x2x2", ["--transport", "local-fused"]),
            (1, "3x3x3", ["--transport", "local-fused"]),
            (1, "2x2x2", ["--transport", "local-pulse"])]
    if mpi_transport:
        runs.append((2, "1x1x2", ["--transport", mpi_transport]))
        # Blocks of 2 ranks per process, every rank's step in the process's graph.
        runs.append((2, "1x1x2", ["--transport", mpi_transport, "--blocks", "2x1x1"]))
    with tempfile.TemporaryDirectory() as work:
        for np, grid, transport in runs:
            extra = common + transport
            ref_f, ref = simulate(mpiexec, md, np, grid, extra, work, steps=60)
            got_f, got = simulate(mpiexec, md, np, grid, extra + ["--graph"], work, steps=60)
            worst, e_err = differences(ref_f, ref, got_f, got)
            print(f"np {np} {grid} {' '.join(transport)} --graph: step-0 force error {worst:.2e}, "
                  f"step-{ref['thermo'][-1]['step']} energy error {e_err:.2e}, "
                  f"{got['graphed_steps']} of 60 steps replayed, {got['captures']} captures")
            if not worst <= 1e-12 or not e_err <= 1e-9:
                sys.exit("FAILED: the graphed run differs from the ordinary one")
            if not got["graphed_steps"] >= 40 or not got["captures"] >= 6:
                sys.exit("FAILED: fewer steps replayed or captured than the run's shape gives")


def main():
    mpiexec, md = sys.argv[1], sys.argv[2]
    if sys.argv[3] == "--graph":
        graph(mpiexec, md, sys.argv[4:])
        return
    if sys.argv[3] == "--lattice":
        lattice(mpiexec, md, sys.argv[4:])
        return
    if sys.argv[3] == "--prune":
        prune(mpiexec, md, sys.argv[4:])
        return
    if sys.argv[3] == "--bad-input":
        cases = [
            (1, ["--density", "0"], "density"),
            (1, ["--temperature", "-1"], "temperature"),
            (1, ["--cells", "2", "--cutoff", "2.5"], "half the box"),
            (2, ["--ranks", "3x1x1"], "does not match"),
            (1, ["--transport", "carrier-pigeon"], "unknown transport"),
            (2, ["--transport", "local-fused", "--ranks", "2x1x1"], "start 1 MPI rank"),
            (1, ["--transport", "local-fused"], "whole rank grid"),
            (1, ["--graph", "--device", "cpu"], "needs --device gpu"),
            (2, ["--blocks", "2x1x1", "--transport", "local-fused"], "--blocks runs"),
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
    blocks = [a for a in extra if a.startswith("--blocks=")]
    extra = [a for a in extra if a not in blocks]
    decomposed = extra + [b for a in blocks for b in ("--blocks", a[9:])]
    with tempfile.TemporaryDirectory() as work:
        ref_f, ref = simulate(mpiexec, md, 1, "1x1x1", extra, work)
        for grid in grids:
            got_f, got = simulate(mpiexec, md, np, grid, decomposed, work)
            if sorted(got_f) != sorted(ref_f):
                sys.exit(f"FAILED {grid}: atom ids differ")
            worst, e_err = differences(ref_f, ref, got_f, got)
            e_ref = ref["thermo"][-1]
            print(f"np {np} grid {grid} ({got['transport']}): step-0 force error {worst:.2e} "
                  f"(tol {force_tol:g}), step-{e_ref['step']} energy error {e_err:.2e} "
                  f"(tol {energy_tol:g})")
            if not worst <= force_tol or not e_err <= energy_tol:
                sys.exit("FAILED: decomposed run differs from the single-rank run")
        if np > 1:
            _, long = simulate(mpiexec, md, np, grids[0], decomposed, work, steps=1000)
            print(f"total energy drift over 1000 steps on {grids[0]}: {long['energy_drift']:.3e}")
            if abs(long["energy_drift"]) > 1e-3:
                sys.exit("FAILED: energy drift above 1e-3")


if __name__ == "__main__":
    main()
