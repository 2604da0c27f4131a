"""The 3D heat equation on a periodic box over mpi4py ranks, explicit in time: each step
fills the one-cell halo of every rank's block with halox, then updates its interior. NumPy
arrays on the CPU, CuPy arrays on a GPU: the same file (--device). The start
u = sin(kx) sin(ky) sin(kz) decays by the same factor in every cell each step, so the result
is checked against the exact discrete solution.

    mpirun -n 4 python3 examples/python/heat3d.py                 # NumPy
    mpirun -n 2 python3 examples/python/heat3d.py --device gpu    # CuPy (halox built with CUDA)

Exit codes: 0 the result matches, 1 it does not, 2 bad options.
"""
import argparse
import contextlib
import math
import os
import sys

import numpy as np
from mpi4py import MPI

import halox

LAMBDA = 0.1  # alpha dt / h^2 (stable below 1/6)


def parse(comm):
    parser = argparse.ArgumentParser(
        prog="heat3d.py",
        description="The 3D heat equation over mpi4py ranks, its halo filled by halox.")
    parser.add_argument("--cells", type=int, default=48, help="global cells per axis (48)")
    parser.add_argument("--steps", type=int, default=100, help="time steps (100)")
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                        help="NumPy arrays on the CPU, or CuPy arrays on the GPU (cpu)")
    parser.add_argument("--transport", default="auto", help="a halox transport (auto)")
    # --help and option errors once, from rank 0, also under mpirun.
    quiet = open(os.devnull, "w") if comm.rank != 0 else None
    with contextlib.redirect_stdout(quiet or sys.stdout), \
            contextlib.redirect_stderr(quiet or sys.stderr):
        try:
            args = parser.parse_args()
        except SystemExit as e:
            sys.exit(e.code)
    if args.cells < 2 or args.steps < 1:
        refuse(comm, "--cells must be at least 2 and --steps at least 1")
    return args


def refuse(comm, message):
    """Bad options: one message, from rank 0, and exit code 2 on every rank."""
    if comm.rank == 0:
        print(f"heat3d.py: {message}", file=sys.stderr)
    sys.exit(2)


def array_module(device):
    if device == "cpu":
        return np
    try:
        import cupy
    except ImportError:
        refuse(MPI.COMM_WORLD, "--device gpu needs CuPy")
    if not halox.has_cuda:
        refuse(MPI.COMM_WORLD, "--device gpu needs a halox built with CUDA")
    cupy.cuda.Device(MPI.COMM_WORLD.rank % cupy.cuda.runtime.getDeviceCount()).use()
    return cupy


def main():
    comm = MPI.COMM_WORLD
    args = parse(comm)
    xp = array_module(args.device)
    topo = halox.Topology.from_mpi(comm)
    n = args.cells
    offset, interior = halox.subdomain_of(topo, (n, n, n))
    plan = halox.build_grid_plan(topo, interior, halo=1, element=np.float64)
    exchange = halox.GridExchange(halox.Ranks.mpi(topo), [plan], transport=args.transport)

    # The start, interior cells only (the array is (z, y, x) with a one-cell halo).
    k = 2 * math.pi / n
    x, y, z = (np.sin(k * (offset[a] + np.arange(interior[a]))) for a in range(3))
    start = z[:, None, None] * y[None, :, None] * x[None, None, :]
    u = xp.zeros(plan.shape)
    u[1:-1, 1:-1, 1:-1] = xp.asarray(start)
    u_next = xp.zeros_like(u)

    def synchronize():
        if xp is not np:
            xp.cuda.Device().synchronize()

    exchange_seconds = 0.0
    synchronize()
    comm.Barrier()
    began = MPI.Wtime()
    for _ in range(args.steps):
        t = MPI.Wtime()
        exchange.exchange(u)  # ordered after the update on the default stream
        exchange_seconds += MPI.Wtime() - t
        c = u[1:-1, 1:-1, 1:-1]
        u_next[1:-1, 1:-1, 1:-1] = c + LAMBDA * (
            u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1] +
            u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:] - 6 * c)
        u, u_next = u_next, u
    synchronize()
    seconds = comm.allreduce(MPI.Wtime() - began, op=MPI.MAX)
    exchange_seconds = comm.allreduce(exchange_seconds, op=MPI.MAX)

    # The exact discrete solution: the mode's factor per step, to the power of the steps.
    factor = (1 + LAMBDA * 3 * (2 * math.cos(k) - 2)) ** args.steps
    got = u[1:-1, 1:-1, 1:-1]
    error = float(xp.max(xp.abs(got - factor * xp.asarray(start)))) if got.size else 0.0
    error = comm.allreduce(error, op=MPI.MAX)
    ok = error < 1e-12
    if comm.rank == 0:
        dims = "x".join(str(d) for d in topo.dims)
        print(f"heat3d.py: {n}^3 cells on {dims} ranks, {args.device} "
              f"({'NumPy' if xp is np else 'CuPy'}), halox {halox.__version__}, "
              f"transport {exchange.transport_name(u)}")
        print(f"{args.steps} steps: {seconds / args.steps * 1e3:.3f} ms per step "
              f"(halo exchange {exchange_seconds / args.steps * 1e3:.3f} ms, slowest rank)")
        print(f"largest error against the exact discrete solution: {error:.2e} "
              f"({'ok' if ok else 'WRONG'}, limit 1e-12)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
