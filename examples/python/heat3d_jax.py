"""The 3D heat equation of heat3d.py in JAX: the whole run is one jitted program (a
jax.lax.fori_loop of steps), each step filling the one-cell halo with halox.jax.exchange, an
XLA FFI call, on the host for CPU arrays or on XLA's stream on a GPU. The start
u = sin(kx) sin(ky) sin(kz) decays by the same factor in every cell each step, so the result
is checked against the exact discrete solution (float64: JAX's x64 mode).

    mpirun -n 4 python3 examples/python/heat3d_jax.py            # JAX on the CPU
    mpirun -n 2 python3 examples/python/heat3d_jax.py --device gpu

halox.jax needs a halox module built where jax was importable (pip install
--no-build-isolation . with jax installed). Exit codes: 0 the result matches, 1 it does not,
2 bad options or no halox.jax.
"""
import argparse
import contextlib
import math
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # ranks share a GPU
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import halox  # noqa: E402

LAMBDA = 0.1  # alpha dt / h^2 (stable below 1/6)


def parse(comm):
    parser = argparse.ArgumentParser(
        prog="heat3d_jax.py",
        description="The 3D heat equation in one jitted JAX program over mpi4py ranks, its "
                    "halo filled by halox.jax inside it.")
    parser.add_argument("--cells", type=int, default=48, help="global cells per axis (48)")
    parser.add_argument("--steps", type=int, default=100, help="time steps (100)")
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                        help="JAX's CPU or GPU back end (cpu)")
    parser.add_argument("--transport", default="auto", help="a halox transport (auto)")
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
    """One message, from rank 0, and exit code 2 on every rank."""
    if comm.rank == 0:
        print(f"heat3d_jax.py: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    comm = MPI.COMM_WORLD
    args = parse(comm)
    try:
        import jax
    except ImportError:
        refuse(comm, "needs jax (pip install jax)")
    if not halox._halox.has_jax_ffi:
        refuse(comm, "this halox was built without halox.jax (build it where jax is installed: "
                     "pip install --no-build-isolation .)")
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cuda" if args.device == "gpu" else "cpu")
    import jax.numpy as jnp
    from halox import jax as halox_jax

    ranks = halox.Ranks.mpi(halox.Topology.from_mpi(comm))
    n = args.cells
    offset, interior = halox.subdomain_of(ranks.topology, (n, n, n))
    [plan] = halox.build_grid_plans(ranks, (n, n, n), halo=1, element=np.float64)
    exchange = halox.GridExchange(ranks, [plan], transport=args.transport)

    k = 2 * math.pi / n
    x, y, z = (np.sin(k * (offset[a] + np.arange(interior[a]))) for a in range(3))
    start = z[:, None, None] * y[None, :, None] * x[None, None, :]
    u0 = np.zeros(plan.shape)
    u0[1:-1, 1:-1, 1:-1] = start

    def step(_, u):
        (u,) = halox_jax.exchange(exchange, u)  # the halo, inside the compiled program
        c = u[1:-1, 1:-1, 1:-1]
        c = c + LAMBDA * (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1] +
                          u[1:-1, 2:, 1:-1] + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:] - 6 * c)
        return u.at[1:-1, 1:-1, 1:-1].set(c)

    run = jax.jit(lambda u, steps: jax.lax.fori_loop(0, steps, step, u), static_argnums=1)
    jax.block_until_ready(run(jnp.asarray(u0), 1))  # compiled and warmed outside the timing
    comm.Barrier()
    began = MPI.Wtime()
    u = jax.block_until_ready(run(jnp.asarray(u0), args.steps))
    seconds = comm.allreduce(MPI.Wtime() - began, op=MPI.MAX)

    factor = (1 + LAMBDA * 3 * (2 * math.cos(k) - 2)) ** args.steps
    got = np.asarray(u)[1:-1, 1:-1, 1:-1]
    error = float(np.max(np.abs(got - factor * start))) if got.size else 0.0
    error = comm.allreduce(error, op=MPI.MAX)
    ok = error < 1e-12
    if comm.rank == 0:
        print(f"heat3d_jax.py: {n}^3 cells on {comm.size} ranks, JAX {jax.__version__} on "
              f"{jax.devices()[0].platform}, halox {halox.__version__}, transport {args.transport}")
        print(f"{args.steps} steps in one jitted program: {seconds / args.steps * 1e3:.3f} ms "
              f"per step (slowest rank)")
        print(f"largest error against the exact discrete solution: {error:.2e} "
              f"({'ok' if ok else 'WRONG'}, limit 1e-12)")
    halox_jax.release(exchange)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
