"""A Lennard-Jones particle halo over mpi4py ranks: each step moves the atoms a little, fills
every rank's halo with their new coordinates (forward), computes the forces of the pairs the
rank owns (halox's eighth shell: the pair's two atoms together inside the home domain along
every axis, decided at plan time), each once, and returns the halo atoms' forces to their
owners (reverse). Each home atom's force is then checked against the direct sum over every
atom of the box (minimum image), which needs no halo.

    mpirun -n 4 python3 examples/python/particles.py

Exit codes: 0 the forces match, 1 they do not, 2 bad options.
"""
import argparse
import contextlib
import os
import sys

import numpy as np
from mpi4py import MPI

import halox


def parse(comm):
    parser = argparse.ArgumentParser(
        prog="particles.py",
        description="A Lennard-Jones particle halo over mpi4py ranks, through halox.")
    parser.add_argument("--atoms", type=int, default=1000, help="atoms in the box (1000)")
    parser.add_argument("--steps", type=int, default=20, help="steps (20)")
    parser.add_argument("--cutoff", type=float, default=2.5, help="LJ cutoff (2.5)")
    parser.add_argument("--density", type=float, default=0.5, help="atoms per unit volume (0.5)")
    parser.add_argument("--transport", default="auto", help="a halox transport (auto)")
    # --help and option errors once, from rank 0, also under mpirun.
    quiet = open(os.devnull, "w") if comm.rank != 0 else None
    with contextlib.redirect_stdout(quiet or sys.stdout), \
            contextlib.redirect_stderr(quiet or sys.stderr):
        try:
            args = parser.parse_args()
        except SystemExit as e:
            sys.exit(e.code)
    if args.atoms < 1 or args.steps < 1 or not args.cutoff > 0 or not args.density > 0:
        if comm.rank == 0:
            print("particles.py: --atoms, --steps, --cutoff and --density must be positive",
                  file=sys.stderr)
        sys.exit(2)
    return args


def lj(d):
    """The LJ force on the first atom of each pair, d = its position minus the other's."""
    r2 = np.sum(d * d, axis=-1, keepdims=True)
    inv6 = 1.0 / r2 ** 3
    return 24.0 * inv6 * (2.0 * inv6 - 1.0) / r2 * d


def owned_pairs(xyz, inside, cutoff):
    """Forces on every item from the pairs this rank owns (inside[a] | inside[b] covers every
    axis: halox's eighth shell), each pair once; rows in blocks to bound the memory."""
    f = np.zeros_like(xyz)
    for start in range(0, len(xyz), 256):
        a = np.arange(start, min(start + 256, len(xyz)))
        d = xyz[a, None, :] - xyz[None, :, :]
        r2 = np.sum(d * d, axis=-1)
        mine = (inside[a, None] | inside[None, :]) == 7
        i, j = np.nonzero((r2 < cutoff * cutoff) & mine & (a[:, None] < np.arange(len(xyz))))
        fij = lj(d[i, j])
        np.add.at(f, a[i], fij)
        np.add.at(f, j, -fij)
    return f


def direct_forces(mine, world, side, cutoff):
    """Each of `mine`'s atoms' force summed over every atom of the box, minimum image."""
    d = mine[:, None, :] - world[None, :, :]
    d -= side * np.round(d / side)
    r2 = np.sum(d * d, axis=-1)
    near = (r2 < cutoff * cutoff) & (r2 > 0)
    f = np.zeros((len(mine), 3))
    i, j = np.nonzero(near)
    np.add.at(f, i, lj(d[i, j]))
    return f


def main():
    comm = MPI.COMM_WORLD
    args = parse(comm)
    topo = halox.Topology.from_mpi(comm)
    side = (args.atoms / args.density) ** (1 / 3)
    box = halox.Box((side, side, side))
    rng = np.random.default_rng(2026)  # the same atoms on every rank; each keeps its own
    world = rng.random((args.atoms, 3)) * side
    direction = np.sin(3.0 * np.arange(args.atoms)[:, None] + np.arange(3))  # per atom

    def at_step(step):  # every atom's position at a step, the same on every rank
        return (world + 0.001 * step * direction) % side

    lo, hi = (np.array(v) for v in halox.domain_of(topo, box, topo.rank))
    ids = np.nonzero(np.all((world >= lo) & (world < hi), axis=1))[0]
    # A skin of 0.3 around the cutoff: the atoms move 0.001 per step along each axis.
    if args.steps * 0.001 * 2 > 0.3:
        if comm.rank == 0:
            print("particles.py: --steps at most 150 (the skin's motion)", file=sys.stderr)
        sys.exit(2)
    plan, xyz = halox.build_particle_plan(topo, box, args.cutoff + 0.3, world[ids])
    # Along which axes each item lies inside the home domain, at plan time (docs/halo.md).
    inside = ((xyz >= lo) & (xyz < hi)) @ np.array([1, 2, 4])
    exchange = halox.ParticleExchange(halox.Ranks.mpi(topo), [plan], np.float64,
                                      transport=args.transport)
    n = plan.home_count
    start = xyz.copy()
    worst = exchange_seconds = 0.0
    comm.Barrier()
    began = MPI.Wtime()
    for step in range(1, args.steps + 1):
        xyz[:n] = start[:n] + 0.001 * step * direction[ids]  # no wrap: halox's images follow
        t = MPI.Wtime()
        exchange.forward(xyz)
        exchange_seconds += MPI.Wtime() - t
        f = owned_pairs(xyz, inside, args.cutoff)
        t = MPI.Wtime()
        exchange.reverse(f)
        exchange_seconds += MPI.Wtime() - t
        want = direct_forces(xyz[:n], at_step(step), side, args.cutoff)
        scale = max(1.0, float(np.max(np.abs(want)))) if n else 1.0
        worst = max(worst, float(np.max(np.abs(f[:n] - want))) / scale if n else 0.0)
    seconds = comm.allreduce(MPI.Wtime() - began, op=MPI.MAX)
    exchange_seconds = comm.allreduce(exchange_seconds, op=MPI.MAX)
    worst = comm.allreduce(worst, op=MPI.MAX)
    halo = comm.allreduce(plan.total_count - plan.home_count)
    ok = worst < 1e-10
    if comm.rank == 0:
        dims = "x".join(str(d) for d in topo.dims)
        print(f"particles.py: {args.atoms} atoms on {dims} ranks, {halo} halo atoms in all, "
              f"halox {halox.__version__}, transport {args.transport}")
        print(f"{args.steps} steps: {seconds / args.steps * 1e3:.3f} ms per step (halo "
              f"forward + reverse {exchange_seconds / args.steps * 1e3:.3f} ms, slowest rank)")
        print(f"largest force difference against the direct sum: {worst:.2e} "
              f"({'ok' if ok else 'WRONG'}, limit 1e-10 of the largest force)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
