"""halox inside ``jax.jit``: the grid exchange as an XLA FFI call.

    import halox, halox.jax
    ex = halox.GridExchange(ranks, plans)          # built once, outside the jitted code
    @jax.jit
    def step(u):
        (u,) = halox.jax.exchange(ex, u)            # the halos filled in the compiled program
        return stencil(u)

The call runs where XLA runs the program: on the host for CPU arrays (halox's host transport
or CPU copies), on the stream XLA gives for GPU arrays (the GPU-initiated transports queue
their kernels there; a staged or pipelined transport waits on the host inside the call).
Each array is updated in place (its output aliases its input). An exchange used here is
kept alive until ``release(ex)``; a compiled program that names a released exchange fails
with an error instead of touching freed memory.
"""
import numpy as np

from . import _halox
from ._halox import Error

_TARGET = "halox_grid_exchange"
_registered = False
_in_use = {}  # handle -> exchange: kept alive while compiled programs may name it


def _register_targets():
    global _registered
    if _registered:
        return
    if not _halox.has_jax_ffi:
        raise Error("halox.jax: this halox was built without JAX (jax was not importable when "
                    "the module was built); reinstall it with jax installed")
    import jax
    for platform, capsule in _halox._jax_handlers().items():
        jax.ffi.register_ffi_target(_TARGET, capsule, platform=platform)
    _registered = True


def _expected_shape(plan, dtype):
    """The array of a plan as (z, y, x[, values per cell]) with the halo."""
    per_cell = max(1, plan.element_bytes // np.dtype(dtype).itemsize)
    return tuple(plan.shape) + ((per_cell,) if per_cell > 1 else ())


def exchange(ex, *fields):
    """Fills the halos of ``fields`` (one JAX array per field and rank of this process, as
    ``GridExchange.exchange`` takes them) inside a traced or jitted program. Returns the
    arrays with their halos filled, a tuple in the order given. Shapes and dtypes are
    checked against the plans when traced."""
    import jax
    _register_targets()
    plans = ex.plans
    if len(fields) != len(plans):
        raise Error(f"halox.jax.exchange: {len(fields)} arrays for {len(plans)} plans "
                    "(one per field and rank of this process)")
    for i, (f, plan) in enumerate(zip(fields, plans)):
        want = _expected_shape(plan, f.dtype)
        if tuple(f.shape) != want:
            raise Error(f"halox.jax.exchange: array {i} has shape {tuple(f.shape)}; its plan's "
                        f"array is {want}: (z, y, x) with the halo")
        if np.dtype(f.dtype) != np.dtype(plan.dtype):
            raise Error(f"halox.jax.exchange: array {i} has dtype {np.dtype(f.dtype)}, its "
                        f"plan's element {np.dtype(plan.dtype)}")
    handle = _halox._jax_register(ex)
    _in_use[handle] = ex
    call = jax.ffi.ffi_call(
        _TARGET,
        tuple(jax.ShapeDtypeStruct(f.shape, f.dtype) for f in fields),
        input_output_aliases={i: i for i in range(len(fields))},
        has_side_effect=True,
    )
    return tuple(call(*fields, exchange=np.int64(handle)))


def release(ex):
    """Compiled programs that exchange through ``ex`` fail from now on; ``ex`` is no longer
    kept alive by halox.jax."""
    _halox._jax_release(ex)
    for handle, kept in list(_in_use.items()):
        if kept is ex:
            del _in_use[handle]
