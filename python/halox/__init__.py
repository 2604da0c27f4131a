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
    packed_size,
    subdomain_of,
    transports,
    unpack,
    unpack_accumulate,
)


def pack(array, count, type, out=None, stream=None):
    """The packed bytes of `count` instances of `type` laid out from the array's start.

    NumPy arrays pack on the CPU into a new uint8 array (or `out`). GPU arrays (CuPy,
    PyTorch, any DLPack producer) pack on the GPU into `out`, which for CuPy and PyTorch
    arrays is made here when not given (uint8, the array's framework and device); on
    `stream` (None: the legacy default stream, done on return; a CuPy or PyTorch stream or
    an int handle: queued, both arrays kept referenced until the pack has run)."""
    if out is None and _is_gpu_array(array):
        out = _empty_bytes_like(array, packed_size(type, count))
    return _halox.pack(array, count, type, out=out, stream=stream)


def _is_gpu_array(array):
    device = getattr(array, "__dlpack_device__", None)
    return device is not None and device()[0] == 2  # kDLCUDA


def _empty_bytes_like(array, nbytes):
    """`nbytes` uninitialised bytes of the array's GPU framework, on its device."""
    framework = type(array).__module__.split(".")[0]
    if framework == "cupy":
        import cupy

        with cupy.cuda.Device(array.device.id):
            return cupy.empty(nbytes, dtype=cupy.uint8)
    if framework == "torch":
        import torch

        return torch.empty(nbytes, dtype=torch.uint8, device=array.device)
    raise Error(f"halox.pack: give out= for a GPU array of {framework} (halox makes it for "
                f"CuPy and PyTorch arrays): a GPU array of at least {nbytes} bytes")


def info():
    """What halox-info prints for this process, as a dict: its rows by the same keys
    ("halox", "built with", "CUDA runtime", "GPU 0", "NCCL", "NVSHMEM", "MPI",
    "MPI CUDA-aware", "MPI interposer", "transports available", "transports unavailable",
    "tuning file", "pipelined chunk", "MPS", ...), "gpus" and "peer_access" as lists, and
    "version", "cuda", "mpi", "transports" (the names available) for programs."""
    d = _halox._process_info()
    d.update(version=__version__, cuda=has_cuda, mpi=has_mpi, transports=transports())
    return d
