"""halox's Python API on real MPI ranks (mpirun -n 4 python -m pytest python/tests), each
result against an independent reference: mpi4py's MPI.Datatype.Pack of the same type, an
analytic field for the grid halo, and the error types for bad input."""
import os

import numpy as np
import pytest
from mpi4py import MPI

import halox

COMM = MPI.COMM_WORLD


def seed_of(name):
    """One seed per test, rank 0's, printed so a failure can be replayed."""
    seed = int(os.environ.get("HALOX_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    seed = COMM.bcast(seed, root=0)
    if COMM.rank == 0:
        print(f"[seed] {name}: HALOX_TEST_SEED={seed}")
    return seed


def random_mpi_type(rng):
    """A random vector, hvector, indexed or subarray type of a random basic type, as mpi4py
    builds it (committed); its data inside [0, extent), as mpi4py's Pack takes a buffer of
    count x extent bytes."""
    base = [MPI.DOUBLE, MPI.FLOAT, MPI.INT, MPI.INT64_T][rng.integers(4)]
    kind = rng.integers(4)
    if kind == 0:
        t = base.Create_vector(int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(3, 7)))
    elif kind == 1:
        t = base.Create_hvector(int(rng.integers(1, 6)), int(rng.integers(1, 3)), int(rng.integers(3, 9)) * base.extent)
    elif kind == 2:
        n = int(rng.integers(1, 5))
        lengths = [int(v) for v in rng.integers(1, 4, n)]
        disps = [0] + sorted(int(v) for v in rng.choice(np.arange(1, 40), n - 1, replace=False))
        t = base.Create_indexed(lengths, disps)
    else:
        sizes = [int(v) for v in rng.integers(3, 7, 3)]
        subs = [int(rng.integers(1, s + 1)) for s in sizes]
        starts = [int(rng.integers(0, s - u + 1)) for s, u in zip(sizes, subs)]
        t = base.Create_subarray(sizes, subs, starts, order=MPI.ORDER_C if rng.integers(2) else MPI.ORDER_FORTRAN)
    t.Commit()
    return t


def test_packs_equal_mpi_pack():
    rng = np.random.default_rng(seed_of("test_packs_equal_mpi_pack"))
    for _ in range(200):
        t = random_mpi_type(rng)
        count = int(rng.integers(1, 4))
        buf = rng.integers(0, 256, count * t.extent, dtype=np.uint8)
        theirs = np.empty(t.Pack_size(count, COMM), dtype=np.uint8)
        position = t.Pack(buf, theirs, 0, COMM)
        ours = halox.pack(buf, count, halox.from_mpi(t))
        assert ours.nbytes == position
        assert np.array_equal(ours, theirs[:position])
        # Unpacked into a poisoned array, the bytes land where MPI_Unpack puts them (a type
        # that addresses a byte twice is refused for unpacking, as MPI leaves it undefined).
        mine = np.full_like(buf, 0xA5)
        ref = np.full_like(buf, 0xA5)
        try:
            halox.unpack(ours, mine, count, halox.from_mpi(t))
        except halox.DatatypeError as e:
            assert "twice" in str(e)
            t.Free()
            continue
        t.Unpack(theirs[:position], 0, ref, COMM)
        assert np.array_equal(mine, ref)
        t.Free()


def test_constructors_match_mpi4py():
    sizes, subs, starts = [6, 5, 4], [2, 5, 1], [3, 0, 2]
    mpi = MPI.DOUBLE.Create_subarray(sizes, subs, starts).Commit()
    ours = halox.Datatype.subarray(sizes, subs, starts, np.float64).commit()
    field = np.random.default_rng(1).random(6 * 5 * 4)
    ref = np.empty(mpi.Pack_size(1, COMM), dtype=np.uint8)
    n = mpi.Pack(field, ref, 0, COMM)
    assert np.array_equal(halox.pack(field, 1, ours), ref[:n])
    assert (ours.size, ours.extent) == (mpi.size, mpi.extent)
    mpi.Free()


def global_value(x, y, z, n):
    """The analytic field at global cell (x, y, z) of a periodic lattice of n cells."""
    x, y, z = x % n[0], y % n[1], z % n[2]
    return x + 1000.0 * y + 1.0e6 * z + 0.25


def fill_and_check(topo, plan, rank, global_n, exchange):
    offset, interior = halox.subdomain_of(topo, global_n, rank)
    h = plan.halo
    u = np.full(plan.shape, -12345.0)
    z, y, x = np.meshgrid(*[np.arange(interior[a]) + offset[a] for a in (2, 1, 0)], indexing="ij")
    u[h:h + interior[2], h:h + interior[1], h:h + interior[0]] = global_value(x, y, z, global_n)
    return u, (offset, interior)


def expected(plan, where, global_n):
    offset, interior = where
    h = plan.halo
    zz, yy, xx = np.meshgrid(*[np.arange(-h, interior[a] + h) + offset[a] for a in (2, 1, 0)], indexing="ij")
    return global_value(xx, yy, zz, global_n)


def test_grid_halo_over_mpi_ranks_uneven():
    global_n = (10, 9, 7)  # the ranks do not divide it
    topo = halox.Topology.from_mpi(COMM)
    ranks = halox.Ranks.mpi(topo)
    [plan] = halox.build_grid_plans(ranks, global_n, halo=1, element=np.float64)
    assert plan.interior == halox.subdomain_of(topo, global_n)[1]
    assert plan.interior == halox.build_grid_plan(topo, plan.interior, 1, np.float64).interior
    u, where = fill_and_check(topo, plan, ranks.rank(0), global_n, None)
    ex = halox.GridExchange(ranks, [plan], transport="host")
    ex.exchange(u)
    assert np.array_equal(u, expected(plan, where, global_n))  # faces, edges, corners


def test_grid_halo_local_ranks():
    global_n = (12, 8, 5)
    grid = halox.Topology((3, 2, 1), (True, True, True), 0)
    plans = halox.build_grid_plans(halox.Ranks.local(grid), global_n, 2, np.float32)
    fields = [fill_and_check(grid, plans[r], r, global_n, None) for r in range(grid.size)]
    arrays = [f[0].astype(np.float32) for f in fields]
    ex = halox.GridExchange(halox.Ranks.local(grid), plans)
    assert ex.capturable == halox.has_cuda  # local-pulse's GPU kernels can be; a CPU build has none
    ex.exchange(*arrays)
    for r in range(grid.size):
        assert np.array_equal(arrays[r], expected(plans[r], fields[r][1], global_n).astype(np.float32))


def particle_world(rng, atoms, box):
    """Random atoms in the box, and their ids."""
    return rng.random((atoms, 3)) * np.array(box.length)


def owned_by(topo, box, rank, xyz):
    """The atoms of `xyz` whose position lies in the rank's domain [lo, hi)."""
    lo, hi = (np.array(v) for v in halox.domain_of(topo, box, rank))
    return np.all((xyz >= lo) & (xyz < hi), axis=1)


def check_particle_halo(topo_of_rank, box, cutoff, world, plans, xyzs, forward, reverse, dtype):
    """Forward: the halo items of every rank, poisoned first, are images of atoms (some atom's
    position plus whole box lengths), moved with their owners (every home atom shifted by the
    same vector). Reverse: forces of 1 on every item; each home atom then holds 1 plus the
    number of its images in the halos, counted by brute force."""
    shift = np.array([0.013, -0.007, 0.002])
    length = np.array(box.length)
    arrays = []
    for plan, xyz in zip(plans, xyzs):
        a = np.full((plan.total_count, 3), np.nan, dtype=dtype)
        a[:plan.home_count] = xyz[:plan.home_count] + shift
        arrays.append(a)
    forward(arrays)
    images = {}  # home atom (rank, index) -> copies in halos
    for r, (plan, xyz, a) in enumerate(zip(plans, xyzs, arrays)):
        assert not np.isnan(a).any(), f"rank {r}: a halo item was not filled"
        # Each halo item is the builder's halo position moved by the shift (an image moves
        # with its atom): independent of the exchange's own bookkeeping.
        tol = 1e-5 if dtype == np.float32 else 1e-12
        assert np.allclose(a[plan.home_count:], xyz[plan.home_count:] + shift, atol=tol), f"rank {r}"
        # Whose image: the home atom at the same position modulo the box.
        for h in xyz[plan.home_count:]:
            d = np.abs(((world - h + length / 2) % length) - length / 2).sum(axis=1)
            images[int(np.argmin(d))] = images.get(int(np.argmin(d)), 0) + 1
    forces = [np.ones((plan.total_count, 3), dtype=dtype) for plan in plans]
    reverse(forces)
    for r, (plan, xyz, f) in enumerate(zip(plans, xyzs, forces)):
        for k in range(plan.home_count):
            d = np.abs(((world - xyz[k] + length / 2) % length) - length / 2).sum(axis=1)
            want = 1 + images.get(int(np.argmin(d)), 0)
            assert np.all(f[k] == want), f"rank {r} atom {k}: force {f[k]}, {want} copies"
    return sum(images.values())


@pytest.mark.parametrize("transport", ["local-fused", "local-pulse"])
def test_particle_halo_local_ranks(transport):
    rng = np.random.default_rng(seed_of("test_particle_halo_local_ranks"))
    grid = halox.Topology((2, 2, 1), (True, True, True), 0)
    box = halox.Box((6.0, 6.0, 5.0))
    world = particle_world(rng, 400, box)
    homes = [world[owned_by(grid, box, r, world)] for r in range(grid.size)]
    assert sum(len(h) for h in homes) == len(world)
    plans, xyzs = halox.build_particle_plans(halox.Ranks.local(grid), box, 1.2, homes)
    assert [p.home_count for p in plans] == [len(h) for h in homes]
    order = np.concatenate(homes)  # the world in the ranks' order, for the brute force
    for dtype in (np.float64, np.float32):
        ex = halox.ParticleExchange(halox.Ranks.local(grid), plans, dtype, transport=transport)
        copies = check_particle_halo(grid, box, 1.2, order, plans, xyzs,
                                     lambda a: ex.forward(*a), lambda f: ex.reverse(*f), dtype)
        assert copies > 0
        ex.check()


def test_particle_halo_mpi_ranks():
    rng = np.random.default_rng(seed_of("test_particle_halo_mpi_ranks"))
    topo = halox.Topology.from_mpi(COMM)
    box = halox.Box((7.0, 6.0, 5.5))
    world = particle_world(rng, 500, box)  # the same on every rank (one seed)
    mine = world[owned_by(topo, box, topo.rank, world)]
    plan, xyz = halox.build_particle_plan(topo, box, 1.3, mine)
    plans, xyzs = halox.build_particle_plans(halox.Ranks.mpi(topo), box, 1.3, [mine])
    assert [p.total_count for p in plans] == [plan.total_count]  # the same builder
    assert np.array_equal(xyzs[0], xyz)
    ex = halox.ParticleExchange(halox.Ranks.mpi(topo), [plan], np.float64, transport="host")
    # Every rank's plan and coordinates, for the brute force (gathered: the exchange is
    # collective; the check reads every rank's halo).
    x = np.full((plan.total_count, 3), np.nan)
    x[:plan.home_count] = mine + 0.01
    ex.forward(x)
    assert not np.isnan(x).any()
    assert np.allclose(x[plan.home_count:], xyz[plan.home_count:] + 0.01, atol=1e-12)
    # Reverse: each home atom gets one force per halo copy of it anywhere, counted over all
    # ranks' halos by matching positions modulo the box.
    length = np.array(box.length)
    halos = np.concatenate(COMM.allgather(xyz[plan.home_count:]))
    f = np.ones((plan.total_count, 3))
    ex.reverse(f)
    for k in range(plan.home_count):
        d = np.abs(((halos - xyz[k] + length / 2) % length) - length / 2).sum(axis=1)
        assert np.all(f[k] == 1 + np.count_nonzero(d < 1e-9)), f"atom {k}"


def test_particle_async_forms_equal_the_synchronous_ones():
    """forward_async / reverse_async: host arrays done on return, the same items as forward /
    reverse; the arrays referenced by the exchange until its next call; a bad stream refused."""
    import gc
    import weakref
    rng = np.random.default_rng(seed_of("test_particle_async"))
    grid = halox.Topology((2, 1, 2), (True, True, True), 0)
    box = halox.Box((5.0, 4.0, 6.0))
    world = particle_world(rng, 300, box)
    homes = [world[owned_by(grid, box, r, world)] for r in range(grid.size)]
    plans, xyzs = halox.build_particle_plans(halox.Ranks.local(grid), box, 1.1, homes)
    ex = halox.ParticleExchange(halox.Ranks.local(grid), plans, np.float64)

    def poisoned():
        out = []
        for p, x in zip(plans, xyzs):
            a = np.full((p.total_count, 3), np.nan)
            a[:p.home_count] = x[:p.home_count]
            out.append(a)
        return out
    want, got = poisoned(), poisoned()
    ex.forward(*want)
    ex.forward_async(*got, stream=None)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    forces = [rng.standard_normal((p.total_count, 3)) for p in plans]
    want_f = [f.copy() for f in forces]
    ex.reverse(*want_f)
    ex.reverse_async(*forces)
    assert all(np.array_equal(a, b) for a, b in zip(forces, want_f))
    watched = weakref.ref(forces[0])
    del forces
    gc.collect()
    assert watched() is not None  # the exchange holds it
    ex.forward_async(*poisoned(), stream=0)
    gc.collect()
    assert watched() is None  # released by the next call
    with pytest.raises(halox.Error, match="stream must be None"):
        ex.reverse_async(*poisoned(), stream="fast")


def test_migrate_particles_over_both_kinds_of_ranks():
    """Atoms moved by up to 0.4 of a domain: afterwards each rank holds exactly the atoms in its
    domain (positions taken modulo the box), none lost or doubled, and the MPI ranks hold the
    same rows in the same order as the same ranks in one process (two implementations)."""
    rng = np.random.default_rng(seed_of("test_migrate_particles"))
    topo = halox.Topology.from_mpi(COMM)
    box = halox.Box((6.0, 5.0, 7.0))
    world = particle_world(rng, 400, box)  # the same on every rank (one seed)
    widths = np.array(box.length) / np.array(topo.dims)
    moved = world + rng.uniform(-0.4, 0.4, world.shape) * widths
    ids = np.arange(len(world), dtype=np.float64)
    sets = [np.column_stack([moved[o], ids[o], 2 * ids[o]])
            for o in (owned_by(topo, box, r, world) for r in range(topo.size))]
    local = halox.migrate_particles(halox.Ranks.local(topo), box, sets)
    [mine] = halox.migrate_particles(halox.Ranks.mpi(topo), box, [sets[topo.rank]])
    assert np.array_equal(mine, local[topo.rank])
    assert np.array_equal(np.sort(np.concatenate([s[:, 3] for s in local])), ids)
    length = np.array(box.length)
    for r, s in enumerate(local):
        assert np.array_equal(s[:, 4], 2 * s[:, 3])  # the other columns travel with the atom
        lo, hi = (np.array(v) for v in halox.domain_of(topo, box, r))
        at = s[:, :3] % length
        assert np.all((at >= lo) & (at < hi)), f"rank {r}: an atom outside its domain"
    with pytest.raises(halox.Error, match="the same for every set"):
        halox.migrate_particles(halox.Ranks.local(topo), box,
                                [np.zeros((1, 4))] + [np.zeros((1, 5))] * (topo.size - 1)
                                if topo.size > 1 else [np.zeros((1, 2))])


def test_particle_bad_input():
    grid = halox.Topology((2, 1, 1), (True, True, True), 0)
    box = halox.Box((4.0, 4.0, 4.0))
    world = particle_world(np.random.default_rng(5), 60, box)
    homes = [world[owned_by(grid, box, r, world)] for r in range(2)]
    plans, xyzs = halox.build_particle_plans(halox.Ranks.local(grid), box, 1.0, homes)
    ex = halox.ParticleExchange(halox.Ranks.local(grid), plans, np.float64)
    wrong = [np.zeros((p.total_count + 1, 3)) for p in plans]
    with pytest.raises(halox.Error, match=r"must have shape \(%d, 3\)" % plans[0].total_count):
        ex.forward(*wrong)
    with pytest.raises(halox.Error, match="another dtype"):
        ex.forward(*[x.astype(np.float32) for x in xyzs])
    with pytest.raises(halox.Error, match="array 1 must be C-contiguous"):
        ex.forward(xyzs[0], np.zeros((plans[1].total_count, 6))[:, ::2])
    with pytest.raises(halox.Error, match="float64 array"):
        halox.build_particle_plans(halox.Ranks.local(grid), box, 1.0, [h.astype(np.float32) for h in homes])
    with pytest.raises(halox.Error, match="float32 or float64"):
        halox.ParticleExchange(halox.Ranks.local(grid), plans, np.int32)


def test_a_rank_that_stays_away_is_named():
    """In pairs of ranks: the first exchanges alone and times out, the error naming rank, peer
    and pulse as attributes; then the second exchanges (matching what the first left in
    flight, or timing out itself), and only then are the exchanges dropped."""
    pair = COMM.Split(COMM.rank // 2, COMM.rank)
    if pair.size < 2:
        pair.Free()
        pytest.skip("a rank without a pair")
    topo = halox.Topology.from_mpi(pair, (2, 1, 1))
    plan = halox.build_grid_plan(topo, (4, 3, 2), halo=1, element=np.float64)
    ex = halox.GridExchange(halox.Ranks.mpi(topo), [plan], transport="host", timeout=0.3)
    u = np.zeros(plan.shape)
    if topo.rank == 0:
        with pytest.raises(halox.HaloTimeoutError) as raised:
            ex.exchange(u)
        e = raised.value
        assert (e.rank, e.peer) == (0, 1), str(e)
        assert e.pulse and e.pulse in str(e), (e.pulse, str(e))
        assert "rank 0 timed out after 0.3 s" in str(e)
        pair.send(None, dest=1)
    else:
        pair.recv(source=0)
        try:
            ex.exchange(u)
        except halox.HaloTimeoutError:
            pass  # the first gave its receives up: this one's sends find none
    pair.Barrier()  # nobody's buffers freed while the other still exchanges
    del ex
    pair.Free()


def test_exchange_async_keeps_its_arrays_alive():
    """exchange_async: host arrays done on return (as exchange); the arrays referenced by the
    exchange until its next call, so that one the caller drops is not freed under the GPU's
    work; bad streams refused."""
    import gc
    import weakref
    global_n = (6, 4, 4)
    grid = halox.Topology((2, 1, 1), (True, True, True), 0)
    plans = halox.build_grid_plans(halox.Ranks.local(grid), global_n, 1, np.float64)
    ex = halox.GridExchange(halox.Ranks.local(grid), plans)
    fields = [fill_and_check(grid, plans[r], r, global_n, None) for r in range(2)]
    arrays = [f[0] for f in fields]
    ex.exchange_async(*arrays, stream=None)
    for r in range(2):
        assert np.array_equal(arrays[r], expected(plans[r], fields[r][1], global_n))
    watched = weakref.ref(arrays[0])
    del arrays, fields
    gc.collect()
    assert watched() is not None  # the exchange holds it
    ex.exchange_async(*[np.zeros(p.shape) for p in plans], stream=0)
    gc.collect()
    assert watched() is None  # released by the next call
    with pytest.raises(halox.Error, match="stream must be None"):
        ex.exchange_async(*[np.zeros(p.shape) for p in plans], stream="fast")


def test_bad_input_raises_the_right_error():
    with pytest.raises(halox.DatatypeError, match="count = -1"):
        halox.Datatype.vector(-1, 1, 1, np.float64)
    with pytest.raises(halox.DatatypeError):
        halox.Datatype.subarray([4, 4], [2, 3], [0, 2], np.float64)  # start + subsize > size
    t = halox.Datatype.contiguous(10, np.float64).commit()
    with pytest.raises(halox.Error):  # the type reaches past the array
        halox.pack(np.zeros(5), 1, t)
    with pytest.raises(halox.Error, match="C-contiguous"):
        halox.pack(np.zeros((4, 6))[:, ::2], 1, halox.Datatype.of(np.float64).commit())
    grid = halox.Topology((1, 1, 1), (True, True, True), 0)
    plans = halox.build_grid_plans(halox.Ranks.local(grid), (4, 4, 4), 1, np.float64)
    ex = halox.GridExchange(halox.Ranks.local(grid), plans)
    with pytest.raises(halox.Error, match="another dtype"):
        ex.exchange(np.zeros(plans[0].shape, dtype=np.float32))
    with pytest.raises(halox.Error, match=r"has shape \(6, 6, 5\)"):
        ex.exchange(np.zeros((6, 6, 5)))
    with pytest.raises(halox.Error, match=r"has shape \(6, 6, 6, 1\)"):
        ex.exchange(np.zeros((6, 6, 6, 1)))
    with pytest.raises(halox.Error, match="array 0 must be C-contiguous"):
        ex.exchange(np.zeros((6, 6, 12))[:, :, ::2])
    assert issubclass(halox.HaloTimeoutError, halox.Error)
    assert halox.info()["mpi"] is True


def test_readme_python_blocks_run():
    """Every ```python block of the README runs as written (on every rank, collectively)."""
    import pathlib
    import re

    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S)
    assert blocks
    for code in blocks:
        if "halox_jax" in code and not has_halox_jax():
            continue  # the JAX block needs jax and a module built with it (test_jax.py's skip)
        exec(compile(code, str(readme), "exec"), {})


def has_halox_jax():
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return halox._halox.has_jax_ffi


def gpu_framework(name):
    """(to_gpu, to_numpy) of CuPy or PyTorch; skips without it, a GPU or a CUDA halox."""
    if not halox.has_cuda:
        pytest.skip("halox built without CUDA")
    if name == "cupy":
        cp = pytest.importorskip("cupy")
        try:
            cp.cuda.runtime.getDeviceCount()
        except Exception:
            pytest.skip("no GPU")
        return cp.asarray, cp.asnumpy
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    return (lambda a: torch.from_numpy(a).cuda()), (lambda t: t.cpu().numpy())


@pytest.mark.parametrize("framework", ["cupy", "torch"])
def test_grid_halo_of_gpu_arrays_equals_numpys(framework):
    """GPU arrays of CuPy and PyTorch (DLPack) exchanged as NumPy's are."""
    to_gpu, to_numpy = gpu_framework(framework)
    global_n = (12, 8, 5)
    grid = halox.Topology((3, 2, 1), (True, True, True), 0)
    plans = halox.build_grid_plans(halox.Ranks.local(grid), global_n, 2, np.float64)
    fields = [fill_and_check(grid, plans[r], r, global_n, None) for r in range(grid.size)]
    host = [f[0].astype(np.float64) for f in fields]
    device = [to_gpu(a) for a in host]
    ex = halox.GridExchange(halox.Ranks.local(grid), plans, transport="local-fused")
    ex.exchange(*device)
    halox.GridExchange(halox.Ranks.local(grid), plans).exchange(*host)
    for r in range(grid.size):
        assert np.array_equal(to_numpy(device[r]), host[r])
    with pytest.raises(halox.Error):
        ex.exchange(host[0], *device[1:])  # host and GPU arrays in one call


def test_repeated_exchanges_of_the_same_cupy_arrays():
    """A double-buffered loop that exchanges two sets of CuPy arrays in turn, whose pointers
    the exchange reuses: right when the values change between calls (exchange and
    exchange_async alternating), and an array given another shape in place is seen (refused
    as any wrong shape is)."""
    to_gpu, to_numpy = gpu_framework("cupy")
    import cupy as cp
    global_n = (12, 8, 5)
    grid = halox.Topology((3, 2, 1), (True, True, True), 0)
    plans = halox.build_grid_plans(halox.Ranks.local(grid), global_n, 2, np.float64)
    ex = halox.GridExchange(halox.Ranks.local(grid), plans, transport="local-fused")
    reference = halox.GridExchange(halox.Ranks.local(grid), plans)
    rng = np.random.default_rng(seed_of("repeated cupy arrays"))
    buffers = [[to_gpu(np.full(p.shape, np.nan)) for p in plans] for _ in range(2)]
    for step in range(6):
        device = buffers[step % 2]
        host = [rng.standard_normal(p.shape) for p in plans]
        for d, h in zip(device, host):
            d[...] = cp.asarray(h)  # the same array objects, new values
        if step % 3 == 1:
            ex.exchange(*device)
        else:
            ex.exchange_async(*device, stream=None)
            cp.cuda.runtime.deviceSynchronize()
        reference.exchange(*host)
        for r in range(grid.size):
            assert np.array_equal(to_numpy(device[r]), host[r]), f"step {step}, rank {r}"
    shape = device[0].shape
    device[0].shape = (shape[0] * shape[1], shape[2])  # the same memory, another shape
    with pytest.raises(halox.Error, match="has shape"):
        ex.exchange(*device)
    device[0].shape = shape
    ex.exchange(*device)  # and back


@pytest.mark.parametrize("memory", ["numpy", "cupy", "torch"])
def test_blocks_of_ranks_per_process_equal_the_whole_grid_in_one(memory):
    """Ranks.blocks (2 ranks per process along x): every rank's array after the exchange
    equals the same rank's of the whole grid exchanged in one process (Ranks.local, NumPy);
    so do the particles' migration, plans and forward over the same blocks. The blocks'
    arrays in host memory, or on the GPU (auto: ipc-fused for the grid, staged for the
    particles)."""
    to_memory, to_numpy = (lambda a: a, lambda a: a) if memory == "numpy" else gpu_framework(memory)
    rng = np.random.default_rng(seed_of("test_blocks_of_ranks_per_process_equal_the_whole_grid_in_one"))
    processes = halox.Topology.from_mpi(COMM, (COMM.size, 1, 1), (True, False, True))
    ranks = halox.Ranks.blocks(processes, (2, 1, 1))
    grid = ranks.topology
    global_n = (4 * COMM.size + 3, 6, 5)
    mine = halox.build_grid_plans(ranks, global_n, 1, np.float64)
    whole = halox.build_grid_plans(halox.Ranks.local(grid), global_n, 1, np.float64)
    arrays = [rng.standard_normal(p.shape) for p in whole]
    reference = [a.copy() for a in arrays]
    halox.GridExchange(halox.Ranks.local(grid), whole).exchange(*reference)
    held = [ranks.rank(i) for i in range(ranks.count)]
    assert all(ranks.process_of(r) == processes.rank for r in held)
    blocks = [to_memory(arrays[r]) for r in held]
    halox.GridExchange(ranks, mine).exchange(*blocks)
    for i, r in enumerate(held):
        assert np.array_equal(to_numpy(blocks[i]), reference[r])
    # Particles over the same blocks: the migration, the plans and the coordinates' forward
    # equal those of the whole grid in one process.
    box = halox.Box((7.0, 6.0, 5.5))
    world = particle_world(rng, 400, box)  # the same on every rank (one seed)
    moved = world + rng.uniform(-0.3, 0.3, world.shape)
    homes = [world[owned_by(grid, box, r, world)] for r in range(grid.size)]
    after = [moved[owned_by(grid, box, r, world)] for r in range(grid.size)]
    migrated = halox.migrate_particles(ranks, box, [after[r] for r in held])
    migrated_whole = halox.migrate_particles(halox.Ranks.local(grid), box, after)
    for i, r in enumerate(held):
        assert np.array_equal(migrated[i], migrated_whole[r])
    plans, xyzs = halox.build_particle_plans(ranks, box, 1.3, [homes[r] for r in held])
    plans_whole, xyzs_whole = halox.build_particle_plans(halox.Ranks.local(grid), box, 1.3, homes)
    x = [np.full((p.total_count, 3), np.nan) for p in plans_whole]
    for r, p in enumerate(plans_whole):
        x[r][:p.home_count] = homes[r] + 0.01
    mine_x = [to_memory(x[r].copy()) for r in held]
    halox.ParticleExchange(halox.Ranks.local(grid), plans_whole, np.float64).forward(*x)
    halox.ParticleExchange(ranks, plans, np.float64).forward(*mine_x)
    for i, r in enumerate(held):
        assert np.array_equal(xyzs[i], xyzs_whole[r])
        assert plans[i].total_count == plans_whole[r].total_count
        got = to_numpy(mine_x[i])
        assert not np.isnan(got).any() and np.array_equal(got, x[r])


def test_pack_into_out_and_its_bad_input():
    """pack into a given array equals the new array's bytes; sizes are checked before any
    byte moves: a short packed buffer, a short typed array, a negative count."""
    rng = np.random.default_rng(seed_of("test_pack_into_out_and_its_bad_input"))
    t = halox.Datatype.vector(4, 2, 5, np.float64).commit()
    src = rng.standard_normal(4 * 5)
    out = np.full(halox.packed_size(t, 1) + 8, 0xA5, dtype=np.uint8)
    assert halox.pack(src, 1, t, out=out) is out
    assert np.array_equal(out[:64], halox.pack(src, 1, t)) and (out[64:] == 0xA5).all()
    with pytest.raises(halox.DatatypeError, match="packed bytes hold 63"):
        halox.pack(src, 1, t, out=np.empty(63, np.uint8))
    with pytest.raises(halox.DatatypeError, match="touch bytes"):
        halox.pack(src[:15], 1, t)
    with pytest.raises(halox.DatatypeError, match="count"):
        halox.pack(src, -1, t)
    with pytest.raises(halox.DatatypeError, match="touch bytes"):
        halox.unpack(halox.pack(src, 1, t), np.empty(15), 1, t)


@pytest.mark.parametrize("framework", ["cupy", "torch"])
def test_gpu_packs_equal_numpys(framework):
    """pack, unpack and unpack_accumulate of GPU arrays (CuPy, PyTorch) against the same
    calls on NumPy arrays, which test_packs_equal_mpi_pack checks against MPI_Pack."""
    to_gpu, to_numpy = gpu_framework(framework)
    rng = np.random.default_rng(seed_of("test_gpu_packs_equal_numpys"))
    for _ in range(50):
        t = random_mpi_type(rng)
        count = int(rng.integers(1, 4))
        ours = halox.from_mpi(t)
        buf = rng.integers(0, 256, count * t.extent, dtype=np.uint8)
        packed = halox.pack(to_gpu(buf), count, ours)
        expected = halox.pack(buf, count, ours)
        assert np.array_equal(to_numpy(packed), expected)
        mine, ref = np.full_like(buf, 0xA5), np.full_like(buf, 0xA5)
        try:
            halox.unpack(expected, ref, count, ours)
        except halox.DatatypeError:
            t.Free()
            continue
        target = to_gpu(mine)
        halox.unpack(packed, target, count, ours)
        assert np.array_equal(to_numpy(target), ref)
        t.Free()
    # Accumulation: forces added into a poisoned array, as on the host.
    t = halox.Datatype.vector(5, 3, 7, np.float64).commit()
    forces = rng.standard_normal(15)
    base = rng.standard_normal(35)
    on_gpu = to_gpu(base.copy())
    halox.unpack_accumulate(to_gpu(forces.view(np.uint8).copy()), on_gpu, 1, t)
    host = base.copy()
    halox.unpack_accumulate(forces.view(np.uint8), host, 1, t)
    assert np.array_equal(to_numpy(on_gpu), host)
    with pytest.raises(halox.Error, match="host and on the GPU"):
        halox.unpack(forces.view(np.uint8), on_gpu, 1, t)
    with pytest.raises(halox.DatatypeError, match="touch bytes"):
        halox.pack(to_gpu(base[:30]), 1, t)


def test_gpu_pack_on_a_stream_keeps_its_arrays():
    """A pack queued on a stream keeps both arrays referenced until it has run: the caller
    may drop them at once."""
    to_gpu, to_numpy = gpu_framework("cupy")
    import cupy as cp

    rng = np.random.default_rng(seed_of("test_gpu_pack_on_a_stream_keeps_its_arrays"))
    t = halox.Datatype.subarray([64, 64, 64], [64, 64, 2], [0, 0, 31], np.float64).commit()
    host = rng.standard_normal(64**3)
    stream = cp.cuda.Stream(non_blocking=True)
    x = to_gpu(host)
    out = halox.pack(x, 1, t, stream=stream)
    del x  # the pack still reads it
    stream.synchronize()
    assert np.array_equal(to_numpy(out), halox.pack(host, 1, t))
    halox.pack(to_gpu(host), 1, t, stream=stream)  # retires the first
    stream.synchronize()
    assert halox._halox._packs_in_flight() == 0


def test_the_installed_package_is_typed():
    """pip install . ships the stubs that stubgen made from the module, and the PEP 561 marker."""
    package = os.path.dirname(halox.__file__)
    stub = os.path.join(package, "_halox.pyi")
    assert os.path.exists(os.path.join(package, "py.typed"))
    with open(stub) as f:
        text = f.read()
    assert "class GridExchange" in text and "def exchange(" in text and "class Datatype" in text


def test_the_module_exports_only_its_entry_point():
    """libhalox's functions stay inside the module: exported, they crashed the GPU machine's
    Python at the first number a time-out's message wrote to a std::ostringstream."""
    import shutil
    import subprocess
    module = halox._halox.__file__
    if shutil.which("nm") is None or not module.endswith(".so"):
        pytest.skip("no nm, or not an ELF module")
    out = subprocess.run(["nm", "-D", "--defined-only", module], capture_output=True, text=True,
                         check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert "PyInit__halox" in names
    leaked = [n for n in names if n.startswith(("_ZN5halox", "_ZNK5halox", "_ZNSt6locale",
                                                "_ZNSo", "_ZNSt8ios_base"))]
    assert not leaked, leaked[:10]


def test_info_is_halox_infos_rows(tmp_path, monkeypatch):
    """halox.info(): halox-info's rows for this process by its keys, the GPU lists, and an
    unusable tuning file reported as halox-info reports it (not raised)."""
    d = halox.info()
    assert d["halox"] == halox.__version__ == d["version"]
    for key in ("built with", "NCCL", "NVSHMEM", "MPI", "MPI CUDA-aware", "MPI interposer",
                "transports available", "transports unavailable", "tuning file", "MPS"):
        assert isinstance(d[key], str) and d[key], key
    assert "Open MPI" in d["MPI"] or "MPICH" in d["MPI"]
    assert len(d["peer_access"]) == len(d["gpus"])
    assert "host" in d["transports available"].split()
    bad = tmp_path / "tuning.json"
    bad.write_text('{"chunk_bytes": ')
    monkeypatch.setenv("HALOX_TUNING_FILE", str(bad))
    assert halox.info()["tuning file"].startswith("unusable: ")
