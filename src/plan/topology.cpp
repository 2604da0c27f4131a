#include "halox/topology.hpp"

#include <limits>
#include <sstream>

#include "halox/error.hpp"
#if HALOX_HAS_MPI
#include "../common/mpi_wait.hpp"
#include "halox/mpi.hpp"
#endif

namespace halox {

Topology::Topology(std::array<int, 3> dims, std::array<bool, 3> periodic, int rank)
    : m_dims(dims), m_periodic(periodic), m_rank(rank) {
  long long product = 1;
  for (int a = 0; a < 3; ++a) {
    if (dims[a] <= 0) {
      throw Error("halox::Topology: dimension " + std::to_string(a) + " is " +
                  std::to_string(dims[a]) + "; every dimension must be >= 1");
    }
    product *= dims[a];  // each factor < 2^31: the product of three fits in 64 bits
  }
  if (product > std::numeric_limits<int>::max()) {
    throw Error("halox::Topology: a rank grid of " + std::to_string(dims[0]) + "x" +
                std::to_string(dims[1]) + "x" + std::to_string(dims[2]) + " = " +
                std::to_string(product) + " ranks is more than an int counts");
  }
  if (rank < 0 || rank >= size()) {
    throw Error("halox::Topology: rank " + std::to_string(rank) + " is outside the " + describe() +
                " grid of " + std::to_string(size()) + " ranks");
  }
}

#if HALOX_HAS_MPI
namespace {

// halox's duplicate of `comm`, freed with the last copy of the topology. Collective, bounded:
// a rank that never arrives ends the others' wait in a time-out (a roll call only on halox's
// own communicators: on the caller's its messages could meet the caller's).
std::shared_ptr<const MPI_Comm> own_duplicate(MPI_Comm comm, int rank, bool ours,
                                              const char* where) {
  MPI_Comm own = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  HALOX_MPI_CHECK(MPI_Comm_idup(comm, &own, &request));
  detail::wait_collective(ours ? comm : MPI_COMM_NULL, request,
                          {rank, "", kPlanTimeoutSeconds, where},
                          "the duplicate of the communicator");
  // halox's calls on its communicator report errors (a truncated message, a dead peer) as
  // exceptions naming the call, instead of aborting the caller's job from inside MPI.
  HALOX_MPI_CHECK(MPI_Comm_set_errhandler(own, MPI_ERRORS_RETURN));
  return std::shared_ptr<const MPI_Comm>(new MPI_Comm(own), [](const MPI_Comm* c) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    MPI_Comm doomed = *c;
    if (!finalized) MPI_Comm_free(&doomed);  // nothing to report from a destructor
    delete c;
  });
}

}  // namespace

Topology Topology::from_mpi(MPI_Comm comm, std::array<int, 3> dims, std::array<bool, 3> periodic) {
  if (comm == MPI_COMM_NULL) {
    throw Error("halox::Topology::from_mpi: the communicator is MPI_COMM_NULL");
  }
  int size = 0, rank = 0;
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  long long given = 1;
  bool any_free = false;
  for (int d : dims) {
    if (d < 0) throw Error("halox::Topology::from_mpi: negative dimension " + std::to_string(d));
    if (d == 0)
      any_free = true;
    else
      given *= d;
  }
  if (any_free) {
    if (size % given != 0) {
      throw Error("halox::Topology::from_mpi: the fixed dimensions (product " +
                  std::to_string(given) + ") do not divide the " + std::to_string(size) +
                  " ranks of the communicator");
    }
    // MPI_Dims_create orders from slowest to fastest varying; ours is x fastest, so reverse.
    int mpi_dims[3] = {dims[2], dims[1], dims[0]};
    HALOX_MPI_CHECK(MPI_Dims_create(size, 3, mpi_dims));
    dims = {mpi_dims[2], mpi_dims[1], mpi_dims[0]};
  }
  const long long product = 1LL * dims[0] * dims[1] * dims[2];
  if (product != size) {
    throw Error("halox::Topology::from_mpi: a rank grid of " + std::to_string(dims[0]) + "x" +
                std::to_string(dims[1]) + "x" + std::to_string(dims[2]) + " = " +
                std::to_string(product) + " ranks does not match the communicator's " +
                std::to_string(size) + " ranks");
  }
  Topology topology(dims, periodic, rank);
  topology.m_comm = own_duplicate(comm, rank, false, "Topology::from_mpi");
  return topology;
}

Topology Topology::duplicate() const {
  if (!m_comm) {
    throw Error(
        "halox::Topology::duplicate: the topology has no communicator (build it with "
        "Topology::from_mpi)");
  }
  Topology copy = *this;
  copy.m_comm = own_duplicate(*m_comm, m_rank, true, "Topology::duplicate");
  return copy;
}
#endif

#if HALOX_HAS_MPI
void allreduce(const Topology& topology, const void* in, void* out, int count, MPI_Datatype type,
               MPI_Op op, const char* what) {
  if (topology.comm() == MPI_COMM_NULL) {
    throw Error(
        "halox::allreduce: the topology has no communicator (build it with "
        "Topology::from_mpi)");
  }
  detail::bounded_allreduce(topology.comm(), in, out, count, type, op,
                            {topology.rank(), "", topology.timeout_seconds(), "allreduce"}, what);
}
#endif

std::array<int, 3> grid_rank_dims(int ranks, const std::array<long, 3>& cells,
                                  double x_face_weight) {
  if (ranks < 1) throw Error("halox::grid_rank_dims: " + std::to_string(ranks) + " ranks");
  std::array<int, 3> best{};
  double best_cost = -1;
  for (int dz = ranks; dz >= 1; --dz) {  // slower axes first: they win ties
    if (ranks % dz != 0) continue;
    for (int dy = ranks / dz; dy >= 1; --dy) {
      if (ranks / dz % dy != 0) continue;
      const std::array<int, 3> dims = {ranks / dz / dy, dy, dz};
      bool fits = true;
      std::array<double, 3> side{};  // the largest rank's extent along each axis
      for (int a = 0; a < 3; ++a) {
        fits = fits && cells[a] >= dims[a];
        side[a] = static_cast<double>((cells[a] + dims[a] - 1) / dims[a]);
      }
      if (!fits) continue;
      // Two faces per split axis: the cells of a face are the product of the other sides.
      const double cost = (dims[0] > 1 ? 2 * x_face_weight * side[1] * side[2] : 0) +
                          (dims[1] > 1 ? 2 * side[0] * side[2] : 0) +
                          (dims[2] > 1 ? 2 * side[0] * side[1] : 0);
      if (best_cost < 0 || cost < best_cost) {
        best_cost = cost;
        best = dims;
      }
    }
  }
  if (best_cost < 0) {
    throw Error("halox::grid_rank_dims: no grid of " + std::to_string(ranks) + " ranks fits " +
                std::to_string(cells[0]) + "x" + std::to_string(cells[1]) + "x" +
                std::to_string(cells[2]) + " cells with one cell per rank and axis");
  }
  return best;
}

std::array<int, 3> Topology::coords_of(int rank) const {
  if (rank < 0 || rank >= size()) {
    throw Error("halox::Topology::coords_of: rank " + std::to_string(rank) + " is outside the " +
                describe() + " grid of " + std::to_string(size()) + " ranks");
  }
  return {rank % m_dims[0], (rank / m_dims[0]) % m_dims[1], rank / (m_dims[0] * m_dims[1])};
}

int Topology::rank_of(std::array<int, 3> c) const {
  for (int a = 0; a < 3; ++a) {
    if (c[a] < 0 || c[a] >= m_dims[a]) {
      if (!m_periodic[a]) return -1;
      c[a] = ((c[a] % m_dims[a]) + m_dims[a]) % m_dims[a];
    }
  }
  return c[0] + m_dims[0] * (c[1] + m_dims[1] * c[2]);
}

int Topology::neighbor(int rank, int axis, int direction) const {
  if (axis < 0 || axis > 2 || (direction != -1 && direction != 1)) {
    throw Error("halox::Topology::neighbor: axis " + std::to_string(axis) + ", direction " +
                std::to_string(direction) +
                ": the axis must be 0, 1 or 2 and the direction -1 "
                "or +1");
  }
  auto c = coords_of(rank);
  c[axis] += direction;
  return rank_of(c);
}

void Topology::set_timeout_seconds(double seconds) {
  if (!(seconds > 0 && seconds <= 1e6)) {
    throw Error("halox::Topology::set_timeout_seconds: " + std::to_string(seconds) +
                " s; a time-out must be finite, above 0 and at most 1e6 s");
  }
  m_timeout_seconds = seconds;
}

std::string Topology::describe() const {
  std::ostringstream s;
  s << m_dims[0] << 'x' << m_dims[1] << 'x' << m_dims[2];
  const char* names = "xyz";
  std::string periodic;
  for (int a = 0; a < 3; ++a) {
    if (m_periodic[a]) periodic += names[a];
  }
  s << (periodic.empty() ? " non-periodic" : " periodic " + periodic);
  return s.str();
}

std::array<int, 3> parse_dims(const std::string& text, int min_dims) {
  const std::string form = min_dims >= 3 ? "NxMxK" : "N, NxM or NxMxK";
  auto refuse = [&](const std::string& why) {
    throw Error("halox: '" + text + "' is not of the form " + form + " with positive whole values" +
                why);
  };
  std::array<int, 3> dims = {1, 1, 1};
  std::size_t pos = 0;
  int given = 0;
  for (;;) {
    if (given == 3) refuse(" (more than three dimensions)");
    const std::size_t end = text.find('x', pos);
    const std::string part = text.substr(pos, end == std::string::npos ? end : end - pos);
    const bool digits = !part.empty() && part.size() <= 9 &&
                        part.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoi(part) <= 0) refuse("");
    dims[static_cast<std::size_t>(given++)] = std::stoi(part);
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  if (given < min_dims) refuse(" (" + std::to_string(given) + " given)");
  return dims;
}

}  // namespace halox
