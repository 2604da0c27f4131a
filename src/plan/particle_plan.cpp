// The collective parts of the plans: validation, the particle plan builder (which moves the
// halo coordinates while it decides what to send, as GROMACS's setup does) and migration.
#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>

#include "collective.hpp"
#include "particle_builder.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "halox/plan.hpp"
#include "../common/mpi_tags.hpp"

namespace halox {

namespace detail {

void agree_on_grid(const Topology& topology, MPI_Comm comm, const char* where) {
  const auto& d = topology.dims();
  const auto& p = topology.periodic();
  const int mine[6] = {d[0], d[1], d[2], p[0], p[1], p[2]};
  int lo[6], hi[6];
  HALOX_MPI_CHECK(MPI_Allreduce(mine, lo, 6, MPI_INT, MPI_MIN, comm));
  HALOX_MPI_CHECK(MPI_Allreduce(mine, hi, 6, MPI_INT, MPI_MAX, comm));
  std::string error;
  for (int k = 0; k < 6 && error.empty(); ++k) {
    if (lo[k] == hi[k]) continue;
    error = std::string("halox::") + where + ": the ranks disagree on the rank grid's " +
            (k < 3 ? "dimensions" : "periodicity") + " (this rank: " + topology.describe() +
            "); every rank must build its Topology alike";
  }
  raise_if_any(comm, error);
}

}  // namespace detail

namespace {

// The plan builders' point-to-point waits: longer than an exchange's, as ranks reach a plan
// after their own set-up work.
constexpr double kPlanWaitSeconds = 30.0;

int peer(int rank) {
  return rank < 0 ? MPI_PROC_NULL : rank;
}

MPI_Comm comm_of(const Topology& topology, const char* where) {
  if (topology.comm() == MPI_COMM_NULL) {
    throw Error(std::string("halox::") + where +
                ": the topology has no communicator (build it with Topology::from_mpi)");
  }
  return topology.comm();
}

// Sends `out` to send_rank and receives from recv_rank (sizes first), appending to `in`.
void shift_doubles(MPI_Comm comm, int send_rank, int recv_rank, int tag,
                   const std::vector<double>& out, std::vector<double>& in) {
  long long send_count = static_cast<long long>(out.size()), recv_count = 0;
  HALOX_MPI_CHECK(MPI_Sendrecv(&send_count, 1, MPI_LONG_LONG, peer(send_rank), tag, &recv_count, 1,
                               MPI_LONG_LONG, peer(recv_rank), tag, comm, MPI_STATUS_IGNORE));
  const std::size_t at = in.size();
  in.resize(at + static_cast<std::size_t>(recv_count));
  HALOX_MPI_CHECK(MPI_Sendrecv(out.data(), static_cast<int>(send_count), MPI_DOUBLE,
                               peer(send_rank), tag + 1, in.data() + at,
                               static_cast<int>(recv_count), MPI_DOUBLE, peer(recv_rank), tag + 1,
                               comm, MPI_STATUS_IGNORE));
}

}  // namespace

void validate_plan(const Topology& topology, const std::vector<PulseHeader>& pulses) {
  MPI_Comm comm = comm_of(topology, "validate_plan");
  // Collectively first (no message can then go unmatched): the rank grid, the pulse count,
  // and each pulse's peers; point-to-point messages only when all agree.
  detail::agree_on_grid(topology, comm, "validate_plan");
  int n = static_cast<int>(pulses.size()), lo = 0, hi = 0;
  HALOX_MPI_CHECK(MPI_Allreduce(&n, &lo, 1, MPI_INT, MPI_MIN, comm));
  HALOX_MPI_CHECK(MPI_Allreduce(&n, &hi, 1, MPI_INT, MPI_MAX, comm));
  std::string error;
  if (lo != hi) {
    error = "halox::validate_plan: the ranks' plans have between " + std::to_string(lo) + " and " +
            std::to_string(hi) + " pulses (this rank: " + std::to_string(n) + ")";
    detail::raise_if_any(comm, error);
  }
  {
    int size = 1;
    HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
    std::vector<int> mine(2 * pulses.size()), all(mine.size() * static_cast<std::size_t>(size));
    for (std::size_t p = 0; p < pulses.size(); ++p) {
      mine[2 * p] = pulses[p].send_rank;
      mine[2 * p + 1] = pulses[p].recv_rank;
    }
    HALOX_MPI_CHECK(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT, all.data(),
                                  static_cast<int>(mine.size()), MPI_INT, comm));
    for (std::size_t p = 0; p < pulses.size() && error.empty(); ++p) {
      const int to = pulses[p].send_rank, me = topology.rank();
      if (to < 0) continue;
      const int their_source =
          to < size ? all[static_cast<std::size_t>(to) * mine.size() + 2 * p + 1] : -2;
      if (their_source != me) {
        error = "halox::validate_plan: " + pulses[p].name(static_cast<int>(p)) + ": rank " +
                std::to_string(me) + " sends to rank " + std::to_string(to) +
                ", which expects this pulse from rank " + std::to_string(their_source) +
                ": the ranks' plans or rank grids differ";
      }
    }
    detail::raise_if_any(comm, error);
  }
  std::vector<long long> sent(pulses.size()), seen(pulses.size(), -1);
  std::vector<std::string> names(pulses.size());
  detail::MessageWait requests;
  for (std::size_t p = 0; p < pulses.size(); ++p) {
    const int tag = detail::tags::kPlanCheck + static_cast<int>(p);
    sent[p] = pulses[p].send_size;
    names[p] = pulses[p].name(static_cast<int>(p)) + " (plan check)";
    MPI_Request r;
    HALOX_MPI_CHECK(
        MPI_Irecv(&seen[p], 1, MPI_LONG_LONG, peer(pulses[p].recv_rank), tag, comm, &r));
    const std::int64_t expected = pulses[p].recv_rank >= 0 ? sizeof(long long) : -1;
    requests.add({r, pulses[p].recv_rank, expected, &names[p]});
    HALOX_MPI_CHECK(
        MPI_Isend(&sent[p], 1, MPI_LONG_LONG, peer(pulses[p].send_rank), tag, comm, &r));
    requests.add({r, pulses[p].send_rank, -1, &names[p]});
  }
  // The peers agreed above, so these messages match; a peer that stalls now is named.
  requests.wait({topology.rank(), "validate_plan", kPlanWaitSeconds});
  for (std::size_t p = 0; p < pulses.size() && error.empty(); ++p) {
    if (pulses[p].recv_rank >= 0 && seen[p] != pulses[p].recv_size) {
      error = "halox::validate_plan: " + pulses[p].name(static_cast<int>(p)) + ": rank " +
              std::to_string(pulses[p].recv_rank) + " sends " + std::to_string(seen[p]) +
              " but rank " + std::to_string(topology.rank()) + " expects " +
              std::to_string(pulses[p].recv_size);
    }
  }
  detail::raise_if_any(comm, error);
}

ParticlePlan build_particle_plan(const Topology& topology, const Box& box, double cutoff,
                                 std::vector<double>& xyz) {
  MPI_Comm comm = comm_of(topology, "build_particle_plan");
  detail::agree_on_grid(topology, comm, "build_particle_plan");
  // Every rank must build with the same box and cutoff, or their pulse counts differ and the
  // builder's messages would not match: compare first.
  const double mine[4] = {cutoff, box.length[0], box.length[1], box.length[2]};
  double lo[4], hi[4];
  HALOX_MPI_CHECK(MPI_Allreduce(mine, lo, 4, MPI_DOUBLE, MPI_MIN, comm));
  HALOX_MPI_CHECK(MPI_Allreduce(mine, hi, 4, MPI_DOUBLE, MPI_MAX, comm));
  std::string mismatch;
  for (int k = 0; k < 4 && mismatch.empty(); ++k) {
    if (lo[k] != hi[k]) {
      mismatch = std::string("halox::build_particle_plan: the ranks disagree on the ") +
                 (k == 0 ? "cutoff" : "box length") + " (from " + std::to_string(lo[k]) + " to " +
                 std::to_string(hi[k]) + ")";
    }
  }
  detail::raise_if_any(comm, mismatch);
  detail::raise_if_any(comm, detail::check_particle_input(topology, box, cutoff, xyz));
  std::vector<detail::BuilderRank> ranks(1);
  ranks[0].topology = &topology;
  ranks[0].xyz = &xyz;
  detail::build_particle_plans(box, cutoff, ranks,
                               [&](int number, const std::vector<std::vector<double>>& out,
                                   std::vector<std::vector<double>>& in) {
                                 const PulseHeader& h = ranks[0].plan.pulses.back().header;
                                 shift_doubles(comm, h.send_rank, h.recv_rank, 100 + 2 * number,
                                               out[0], in[0]);
                               });
  validate_plan(topology, headers(ranks[0].plan));
  return std::move(ranks[0].plan);
}

GridPlan build_grid_plan(const Topology& topology, std::array<std::int64_t, 3> interior, int halo,
                         const Datatype& element, std::array<std::int64_t, 3> allocated) {
  std::string error;
  GridPlan plan;
  try {
    plan = make_grid_plan(topology, interior, halo, element, allocated);
  } catch (const Error& e) {
    error = e.what();
  }
  detail::raise_if_any(comm_of(topology, "build_grid_plan"), error);
  validate_plan(topology, headers(plan));
  return plan;
}

void migrate_particles(const Topology& topology, const Box& box, std::vector<double>& data,
                       int stride) {
  MPI_Comm comm = comm_of(topology, "migrate_particles");
  detail::agree_on_grid(topology, comm, "migrate_particles");
  std::vector<detail::MigrateRank> ranks(1);
  ranks[0].topology = &topology;
  ranks[0].data = &data;
  const std::string error = detail::migrate_particles_of(box, ranks, stride, [&](int axis) {
    detail::MigrateRank& r = ranks[0];
    const int tag = detail::tags::kMigrate + 4 * axis;
    shift_doubles(comm, topology.neighbor(axis, -1), topology.neighbor(axis, +1), tag, r.down,
                  r.arrived);
    shift_doubles(comm, topology.neighbor(axis, +1), topology.neighbor(axis, -1), tag + 2, r.up,
                  r.arrived);
  });
  detail::raise_if_any(comm, error);
}

}  // namespace halox
