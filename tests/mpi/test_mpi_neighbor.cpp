// MPI's neighbourhood collectives through libhalox_mpi, on pretend device memory (CI) or
// cudaMalloc'd memory (the GPU build), against the MPI library's own collectives (PMPI_*,
// which the interposer does not see) on host buffers, byte for byte: random Cartesian grids
// (periodic axes of 1 and 2 ranks among them), random distributed graphs (repeated edges and
// self-loops), random vector and subarray types; every collective, blocking and not.
#include <gtest/gtest.h>
#include <mpi.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../common/interposer_buffer.hpp"
#include "../common/seed.hpp"

namespace {

constexpr std::size_t kBytes = 1 << 14;  // every buffer; blocks lie well inside it

int rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

std::uint64_t shared_seed(const char* name) {
  std::uint64_t seed = halox::testing::test_seed(name);
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);  // every rank builds the same cases
  return seed;
}

// A random type: ints, a vector of ints with gaps, or a 2-D subarray of doubles.
MPI_Datatype random_type(std::mt19937_64& rng) {
  MPI_Datatype t = MPI_INT;
  switch (rng() % 3) {
    case 0: break;
    case 1: MPI_Type_vector(3, 2, 4 + static_cast<int>(rng() % 3), MPI_INT, &t); break;
    default: {
      const int sizes[2] = {6, 5}, sub[2] = {2 + static_cast<int>(rng() % 3), 3};
      const int starts[2] = {1, static_cast<int>(rng() % 3)};
      MPI_Type_create_subarray(2, sizes, sub, starts, MPI_ORDER_C, MPI_DOUBLE, &t);
    }
  }
  if (t != MPI_INT) MPI_Type_commit(&t);
  return t;
}

void free_type(MPI_Datatype& t) {
  if (t != MPI_INT) MPI_Type_free(&t);
}

MPI_Aint extent_of(MPI_Datatype t) {
  MPI_Aint lb, extent;
  MPI_Type_get_extent(t, &lb, &extent);
  return extent;
}

std::vector<char> filled(std::mt19937_64& rng) {
  std::vector<char> v(kBytes);
  for (char& c : v) c = static_cast<char>(rng());
  return v;
}

std::string error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

// One collective call: `pmpi` the library's own, else the interposed one; `nonblocking` its
// MPI_Ineighbor_* form waited for at once.
using Call = std::function<int(const void*, void*, bool pmpi, bool nonblocking)>;

// The call on host buffers through the library (the reference), then through halox on host
// and on device buffers, blocking and not: every received byte the same.
void check(const char* what, MPI_Comm comm, std::mt19937_64& rng, const Call& call) {
  const std::vector<char> send = filled(rng);
  const std::vector<char> poison(kBytes, static_cast<char>(0xA5));
  std::vector<char> reference = poison, sent = send;
  const int library = call(sent.data(), reference.data(), true, false);
  ASSERT_EQ(library, MPI_SUCCESS) << what << " (the library's): " << error_text(library);
  for (const bool device : {false, true}) {
    for (const bool nonblocking : {false, true}) {
      Buffer in(kBytes, device), out(kBytes, device);
      out.write(send);
      in.write(poison);
      const int rc = call(out.data(), in.data(), false, nonblocking);
      ASSERT_EQ(rc, MPI_SUCCESS) << what << ": " << error_text(rc);
      EXPECT_TRUE(in.read() == reference)
          << what << (device ? ", device" : ", host") << (nonblocking ? ", nonblocking" : "")
          << " (rank " << rank_of(comm) << ")";
    }
  }
}

// Every collective on `comm` with `in` sources and `out` destinations.
// `shared` draws what every rank must agree on (types, counts), `rng` this rank's own choices.
void every_collective(MPI_Comm comm, int in_degree, int out_degree, std::mt19937_64& shared,
                      std::mt19937_64& rng) {
  // Per-neighbour arrays are never empty: the library refuses a null array even for no
  // neighbours.
  const int in = std::max(in_degree, 1), out = std::max(out_degree, 1);
  MPI_Datatype t = random_type(shared);
  const int count = 1 + static_cast<int>(shared() % 3);
  const int each = static_cast<int>(shared() % 4);
  const MPI_Aint extent = extent_of(t);
  ASSERT_LE(static_cast<MPI_Aint>(std::max(in, out) + 1) * 4 * extent,
            static_cast<MPI_Aint>(kBytes));
  check("neighbor_alltoall", comm, rng, [&](const void* sb, void* rb, bool pmpi, bool nb) {
    MPI_Request r;
    if (pmpi) return PMPI_Neighbor_alltoall(sb, count, t, rb, count, t, comm);
    if (!nb) return MPI_Neighbor_alltoall(sb, count, t, rb, count, t, comm);
    const int rc = MPI_Ineighbor_alltoall(sb, count, t, rb, count, t, comm, &r);
    return rc != MPI_SUCCESS ? rc : MPI_Wait(&r, MPI_STATUS_IGNORE);
  });
  check("neighbor_allgather", comm, rng, [&](const void* sb, void* rb, bool pmpi, bool nb) {
    MPI_Request r;
    if (pmpi) return PMPI_Neighbor_allgather(sb, count, t, rb, count, t, comm);
    if (!nb) return MPI_Neighbor_allgather(sb, count, t, rb, count, t, comm);
    const int rc = MPI_Ineighbor_allgather(sb, count, t, rb, count, t, comm, &r);
    return rc != MPI_SUCCESS ? rc : MPI_Wait(&r, MPI_STATUS_IGNORE);
  });
  // Counts of 0 to 3 per neighbour, blocks in shuffled places.
  std::vector<int> scounts(out), sdispls(out), rcounts(in), rdispls(in);
  auto place = [&](std::vector<int>& counts, std::vector<int>& displs) {
    std::vector<int> slot(counts.size());
    for (std::size_t k = 0; k < slot.size(); ++k) slot[k] = static_cast<int>(k);
    std::shuffle(slot.begin(), slot.end(), rng);
    for (std::size_t k = 0; k < counts.size(); ++k) {
      counts[k] = static_cast<int>(rng() % 4);
      displs[k] = 3 * slot[k];  // 3 elements per slot: blocks never overlap
    }
  };
  place(scounts, sdispls);
  place(rcounts, rdispls);
  // What a receive gets must have the send's size: each rank's receive counts are its
  // neighbours' send counts, which alltoallv leaves to the program. Use the same count for
  // every edge, drawn once per call, for the exchanges; allgatherv takes the send count.
  std::vector<int> scount_each(out, each), rcount_each(in, each);
  check("neighbor_alltoallv", comm, rng, [&](const void* sb, void* rb, bool pmpi, bool nb) {
    MPI_Request r;
    const int *sc = scount_each.data(), *sd = sdispls.data(), *rc_ = rcount_each.data(),
              *rd = rdispls.data();
    if (pmpi) return PMPI_Neighbor_alltoallv(sb, sc, sd, t, rb, rc_, rd, t, comm);
    if (!nb) return MPI_Neighbor_alltoallv(sb, sc, sd, t, rb, rc_, rd, t, comm);
    const int rc = MPI_Ineighbor_alltoallv(sb, sc, sd, t, rb, rc_, rd, t, comm, &r);
    return rc != MPI_SUCCESS ? rc : MPI_Wait(&r, MPI_STATUS_IGNORE);
  });
  std::vector<int> gather_counts(in, count);
  check("neighbor_allgatherv", comm, rng, [&](const void* sb, void* rb, bool pmpi, bool nb) {
    MPI_Request r;
    const int *rc_ = gather_counts.data(), *rd = rdispls.data();
    if (pmpi) return PMPI_Neighbor_allgatherv(sb, count, t, rb, rc_, rd, t, comm);
    if (!nb) return MPI_Neighbor_allgatherv(sb, count, t, rb, rc_, rd, t, comm);
    const int rc = MPI_Ineighbor_allgatherv(sb, count, t, rb, rc_, rd, t, comm, &r);
    return rc != MPI_SUCCESS ? rc : MPI_Wait(&r, MPI_STATUS_IGNORE);
  });
  // alltoallw: a type per neighbour, the same signature on both ends of an edge (count x
  // ints: MPI_INT, or a contiguous/vector layout of as many ints), byte displacements.
  MPI_Datatype ints3;
  MPI_Type_vector(3, 1, 2, MPI_INT, &ints3);
  MPI_Type_commit(&ints3);
  std::vector<MPI_Datatype> stypes(out), rtypes(in);
  std::vector<int> swc(out), rwc(in);
  std::vector<MPI_Aint> swd(out), rwd(in);
  for (int k = 0; k < out; ++k) {
    const bool v = rng() % 2;
    stypes[k] = v ? ints3 : MPI_INT;
    swc[k] = v ? 1 : 3;
    swd[k] = 40 * static_cast<MPI_Aint>(k) + 4 * static_cast<MPI_Aint>(rng() % 3);
  }
  for (int k = 0; k < in; ++k) {
    const bool v = rng() % 2;
    rtypes[k] = v ? ints3 : MPI_INT;
    rwc[k] = v ? 1 : 3;
    rwd[k] = 40 * static_cast<MPI_Aint>(k) + 4 * static_cast<MPI_Aint>(rng() % 3);
  }
  check("neighbor_alltoallw", comm, rng, [&](const void* sb, void* rb, bool pmpi, bool nb) {
    MPI_Request r;
    if (pmpi)
      return PMPI_Neighbor_alltoallw(sb, swc.data(), swd.data(), stypes.data(), rb, rwc.data(),
                                     rwd.data(), rtypes.data(), comm);
    if (!nb)
      return MPI_Neighbor_alltoallw(sb, swc.data(), swd.data(), stypes.data(), rb, rwc.data(),
                                    rwd.data(), rtypes.data(), comm);
    const int rc = MPI_Ineighbor_alltoallw(sb, swc.data(), swd.data(), stypes.data(), rb,
                                           rwc.data(), rwd.data(), rtypes.data(), comm, &r);
    return rc != MPI_SUCCESS ? rc : MPI_Wait(&r, MPI_STATUS_IGNORE);
  });
  MPI_Type_free(&ints3);
  free_type(t);
}

TEST(Neighbor, RandomCartesianGridsMatchTheLibrary) {
  std::mt19937_64 rng(shared_seed("Neighbor.RandomCartesianGrids"));
  std::mt19937_64 mine(rng() + static_cast<std::uint64_t>(rank_of(MPI_COMM_WORLD)));
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int round = 0; round < 12; ++round) {
    const int ndims = 1 + static_cast<int>(rng() % 3);
    int dims[3] = {0, 0, 0}, periods[3];
    if (round % 3 == 0 && ndims > 1) dims[0] = 1;  // one rank along an axis: one neighbour
    MPI_Dims_create(size, ndims, dims);
    for (int d = 0; d < ndims; ++d) periods[d] = static_cast<int>(rng() % 2);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, ndims, dims, periods, 0, &cart);
    MPI_Comm_set_errhandler(cart, MPI_ERRORS_RETURN);
    SCOPED_TRACE("grid " + std::to_string(dims[0]) + "x" + std::to_string(dims[1]) + "x" +
                 std::to_string(dims[2]) + " of " + std::to_string(ndims) + " dims, periods " +
                 std::to_string(periods[0]) + std::to_string(periods[1]) +
                 std::to_string(periods[2]));
    every_collective(cart, 2 * ndims, 2 * ndims, rng, mine);
    MPI_Comm_free(&cart);
  }
}

TEST(Neighbor, RandomDistributedGraphsMatchTheLibrary) {
  std::mt19937_64 rng(shared_seed("Neighbor.RandomDistributedGraphs"));
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int rank = rank_of(MPI_COMM_WORLD);
  std::mt19937_64 mine(rng() + static_cast<std::uint64_t>(rank));
  for (int round = 0; round < 8; ++round) {
    // Each rank's destinations (repeats and itself allowed), drawn from the shared stream
    // for every rank so that all agree on the graph.
    std::vector<std::vector<int>> edges(static_cast<std::size_t>(size));
    for (auto& e : edges) {
      const int degree = static_cast<int>(rng() % 5);
      for (int k = 0; k < degree; ++k) e.push_back(static_cast<int>(rng() % size));
    }
    std::vector<int> sources;
    for (int r = 0; r < size; ++r)
      for (int d : edges[static_cast<std::size_t>(r)])
        if (d == rank) sources.push_back(r);
    const std::vector<int>& destinations = edges[static_cast<std::size_t>(rank)];
    MPI_Comm graph;
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, static_cast<int>(sources.size()), sources.data(),
                                   MPI_UNWEIGHTED, static_cast<int>(destinations.size()),
                                   destinations.data(), MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &graph);
    MPI_Comm_set_errhandler(graph, MPI_ERRORS_RETURN);
    SCOPED_TRACE("graph round " + std::to_string(round));
    every_collective(graph, static_cast<int>(sources.size()), static_cast<int>(destinations.size()),
                     rng, mine);
    MPI_Comm_free(&graph);
  }
}

// A halo exchanged by one MPI_Neighbor_alltoallw per step inside one field (send and receive
// buffer the same, faces as vector types, as halox-lbm's mpi-neighbor does), two fields taking
// turns over many steps with new values each step: repeated calls reuse the interposer's
// cached exchanges; every received byte equals the library's on host copies of the fields.
TEST(Neighbor, RepeatedCallsOnFieldsTakingTurnsMatchTheLibrary) {
  std::mt19937_64 rng(shared_seed("Neighbor.RepeatedCalls"));
  std::mt19937_64 mine(rng() + static_cast<std::uint64_t>(rank_of(MPI_COMM_WORLD)));
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int dims[2] = {0, 0}, periods[2] = {1, 1};
  MPI_Dims_create(size, 2, dims);
  MPI_Comm cart;
  MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
  MPI_Comm_set_errhandler(cart, MPI_ERRORS_RETURN);
  // A 2-D field of 10 x 12 ints with one halo cell: faces of the interior sent, halos received.
  constexpr int ny = 10, nx = 12;
  MPI_Datatype row, column;
  MPI_Type_contiguous(nx - 2, MPI_INT, &row);
  MPI_Type_vector(ny - 2, 1, nx, MPI_INT, &column);
  MPI_Type_commit(&row);
  MPI_Type_commit(&column);
  const auto at = [](int y, int x) { return static_cast<MPI_Aint>((y * nx + x) * sizeof(int)); };
  // Blocks by direction (dimension 0 is y): towards -y, +y, -x, +x.
  const MPI_Datatype types[4] = {row, row, column, column};
  const MPI_Aint send_at[4] = {at(1, 1), at(ny - 2, 1), at(1, 1), at(1, nx - 2)};
  const MPI_Aint recv_at[4] = {at(0, 1), at(ny - 1, 1), at(1, 0), at(1, nx - 1)};
  const int counts[4] = {1, 1, 1, 1};
  const std::size_t bytes = ny * nx * sizeof(int);
  Buffer fields[2] = {Buffer(bytes, true), Buffer(bytes, true)};
  for (int step = 0; step < 12; ++step) {
    std::vector<char> values(bytes);
    for (char& c : values) c = static_cast<char>(mine());
    Buffer& field = fields[step % 2];
    field.write(values);
    std::vector<char> reference = values;
    ASSERT_EQ(PMPI_Neighbor_alltoallw(reference.data(), counts, send_at, types, reference.data(),
                                      counts, recv_at, types, cart),
              MPI_SUCCESS);
    ASSERT_EQ(MPI_Neighbor_alltoallw(field.data(), counts, send_at, types, field.data(), counts,
                                     recv_at, types, cart),
              MPI_SUCCESS);
    EXPECT_TRUE(field.read() == reference)
        << "step " << step << " (rank " << rank_of(MPI_COMM_WORLD) << ")";
  }
  MPI_Type_free(&row);
  MPI_Type_free(&column);
  MPI_Comm_free(&cart);
}

// A communicator without a topology: an MPI error naming the call, as the library gives.
TEST(Neighbor, NoTopologyIsAnError) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int x = 1, y = 0;
  const int rc = MPI_Neighbor_alltoall(&x, 1, MPI_INT, &y, 1, MPI_INT, comm);
  EXPECT_NE(rc, MPI_SUCCESS);
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  EXPECT_NE(std::string(text).find("MPI_Neighbor_alltoall"), std::string::npos) << text;
  MPI_Comm_free(&comm);
}

}  // namespace
