"""halox for Python: MPI-style datatypes and packs on NumPy arrays, and halo exchanges of
NumPy arrays over mpi4py ranks or over ranks in one process.

    from mpi4py import MPI
    import numpy as np, halox
    topo = halox.Topology.from_mpi(MPI.COMM_WORLD)
    offset, interior = halox.subdomain_of(topo, (64, 64, 64))
    plan = halox.build_grid_plan(topo, interior, halo=1, element=np.float64)
    u = np.zeros(plan.shape)                       # (z, y, x) with the halo
    halox.GridExchange(halox.Ranks.mpi(topo), [plan]).exchange(u)
"""
from . import _halox
from ._halox import (  # noqa: F401
    BackendError,
    Box,
    Datatype,
    DatatypeError,
    Error,
    GridExchange,
    GridPlan,
    HaloTimeoutError,
    ParticleExchange,
    ParticlePlan,
    Ranks,
    Topology,
    __version__,
    build_grid_plan,
    build_grid_plans,
    build_particle_plan,
    build_particle_plans,
    domain_of,
    from_mpi,
    migrate_particles,
    has_cuda,
    has_mpi,
    pack,
    subdomain_of,
    transports,
    unpack,
    unpack_accumulate,
)


def info():
    """What halox-info prints for this process, as a dict: its rows by the same keys
    ("halox", "built with", "CUDA runtime", "GPU 0", "NCCL", "NVSHMEM", "MPI",
    "MPI CUDA-aware", "MPI interposer", "transports available", "transports unavailable",
    "tuning file", "pipelined chunk", "MPS", ...), "gpus" and "peer_access" as lists, and
    "version", "cuda", "mpi", "transports" (the names available) for programs."""
    d = _halox._process_info()
    d.update(version=__version__, cuda=has_cuda, mpi=has_mpi, transports=transports())
    return d
