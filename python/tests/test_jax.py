"""halox.jax: the grid exchange inside jax.jit (an XLA FFI call), against GridExchange on
NumPy arrays of the same values; over MPI ranks and over ranks in one process."""
import os

import numpy as np
import pytest
from mpi4py import MPI

import halox

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # ranks share one GPU
jax = pytest.importorskip("jax")
jnp = jax.numpy
if not halox._halox.has_jax_ffi:
    pytest.skip("this halox was built without JAX", allow_module_level=True)
import halox.jax  # noqa: E402

COMM = MPI.COMM_WORLD


def random_fields(plans, seed):
    """Random values everywhere, the halos included (poison for the exchange to overwrite)."""
    rng = np.random.default_rng(seed)
    print(f"halox.jax test seed {seed}")
    return [rng.standard_normal(p.shape).astype(np.float32) for p in plans]


def numpy_reference(ranks, plans, fields):
    ref = [f.copy() for f in fields]
    halox.GridExchange(ranks, plans).exchange(*ref)
    return ref


@pytest.mark.parametrize("where", ["mpi", "local"])
def test_jitted_exchange_equals_numpys(where):
    grid = halox.Topology.from_mpi(COMM) if where == "mpi" else \
        halox.Topology((2, 2, 1), (True, True, True), 0)
    ranks = halox.Ranks.mpi(grid) if where == "mpi" else halox.Ranks.local(grid)
    plans = halox.build_grid_plans(ranks, (12, 10, 6), 2, np.float32)
    fields = random_fields(plans, 1000 + COMM.rank)
    want = numpy_reference(ranks, plans, fields)
    ex = halox.GridExchange(ranks, plans)

    @jax.jit
    def step(*u):
        filled = halox.jax.exchange(ex, *u)
        return tuple(2.0 * f for f in filled)  # work after the exchange, in the same program

    for _ in range(3):  # compiled once, run again
        got = step(*[jnp.asarray(f) for f in fields])
        for r, (g, w) in enumerate(zip(got, want)):
            assert np.array_equal(np.asarray(g), 2.0 * w), f"rank {ranks.rank(r)}"
    halox.jax.release(ex)
    with pytest.raises(Exception, match="released"):
        jax.block_until_ready(step(*[jnp.asarray(f) for f in fields]))
    from jax._src import dispatch
    dispatch.runtime_tokens.clear()  # the failed call's effect token: not raised again at exit


def test_wrong_arrays_are_refused_when_traced():
    grid = halox.Topology((1, 1, 1), (True, True, True), 0)
    ranks = halox.Ranks.local(grid)
    plans = halox.build_grid_plans(ranks, (4, 4, 4), 1, np.float32)
    ex = halox.GridExchange(ranks, plans)
    with pytest.raises(halox.Error, match="has shape"):
        halox.jax.exchange(ex, jnp.zeros((5, 6, 6), jnp.float32))
    with pytest.raises(halox.Error, match="dtype int32"):
        halox.jax.exchange(ex, jnp.zeros(plans[0].shape, jnp.int32))
    with pytest.raises(halox.Error, match="2 arrays for 1 plans"):
        halox.jax.exchange(ex, *[jnp.zeros(plans[0].shape, jnp.float32)] * 2)


def test_a_rank_that_stays_away_is_named_inside_jit():
    """In pairs of ranks: the first runs its jitted exchange alone and gets the time-out's
    message (rank, peer and pulse) as JAX's runtime error, not a hang; then the second
    exchanges, and only then are the exchanges dropped."""
    pair = COMM.Split(COMM.rank // 2, COMM.rank)
    if pair.size < 2:
        pair.Free()
        pytest.skip("a rank without a pair")
    topo = halox.Topology.from_mpi(pair, (2, 1, 1))
    ranks = halox.Ranks.mpi(topo)
    plans = halox.build_grid_plans(ranks, (8, 3, 2), 1, np.float32)
    # JAX's arrays are host memory on its CPU backend and device memory on a GPU.
    transport = "host" if jax.default_backend() == "cpu" else "staged"
    ex = halox.GridExchange(ranks, plans, transport=transport, timeout=0.3)
    step = jax.jit(lambda a: halox.jax.exchange(ex, a)[0])
    u = jnp.asarray(np.zeros(plans[0].shape, np.float32))
    from jax._src import dispatch
    if topo.rank == 0:
        try:
            with pytest.raises(Exception, match=r"rank 0 timed out after 0.3 s on pulse .* "
                                                r"waiting for rank 1"):
                jax.block_until_ready(step(u))
        finally:  # rank 1 is told even where the check fails, so that it cannot hang
            dispatch.runtime_tokens.clear()  # the failed call's effect token: not raised at exit
            pair.send(None, dest=1)
    else:
        pair.recv(source=0)
        try:
            jax.block_until_ready(step(u))
        except Exception as error:  # the first gave its receives up: this one's sends find none
            assert "timed out" in str(error), error
        dispatch.runtime_tokens.clear()
    pair.Barrier()
    halox.jax.release(ex)
    del ex
    pair.Free()
