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

WaitContext plan_wait(const Topology& topology, const char* where) {
  return {topology.rank(), where, topology.timeout_seconds(), where};
}

void agree_on_grid(const Topology& topology, MPI_Comm comm, const char* where) {
  const auto& d = topology.dims();
  const auto& p = topology.periodic();
  // The least of each value and of its negation: the range of every value in one reduction.
  int values[12] = {d[0], d[1], d[2], p[0], p[1], p[2], -d[0], -d[1], -d[2], -p[0], -p[1], -p[2]};
  const WaitContext context = plan_wait(topology, where);
  bounded_allreduce(comm, MPI_IN_PLACE, values, 12, MPI_INT, MPI_MIN, context,
                    "the agreement on the rank grid");
  std::string error;
  for (int k = 0; k < 6 && error.empty(); ++k) {
    if (values[k] == -values[k + 6]) continue;
    error = std::string("halox::") + where + ": the ranks disagree on the rank grid's " +
            (k < 3 ? "dimensions" : "periodicity") + " (this rank: " + topology.describe() +
            "); every rank must build its Topology alike";
  }
  raise_if_any(comm, error, bounded_wait(comm, context, "the agreement on the rank grid"));
}

}  // namespace detail

namespace {

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

// Sends `out` to send_rank and receives from recv_rank (sizes first), appending to `in`;
// each wait bounded by the topology's time-out and naming the peer and `step`.
void shift_doubles(const Topology& topology, MPI_Comm comm, int send_rank, int recv_rank, int tag,
                   const std::vector<double>& out, std::vector<double>& in, const std::string& step,
                   const char* where) {
  const detail::WaitContext context = detail::plan_wait(topology, where);
  detail::MessageWait wait;
  long long send_count = static_cast<long long>(out.size()), recv_count = 0;
  const std::string counts = step + " (the counts)";
  MPI_Request r;
  HALOX_MPI_CHECK(MPI_Irecv(&recv_count, 1, MPI_LONG_LONG, peer(recv_rank), tag, comm, &r));
  wait.add(
      {r, recv_rank, recv_rank >= 0 ? static_cast<std::int64_t>(sizeof recv_count) : -1, &counts});
  HALOX_MPI_CHECK(MPI_Isend(&send_count, 1, MPI_LONG_LONG, peer(send_rank), tag, comm, &r));
  wait.add({r, send_rank, -1, &counts});
  wait.wait(context);
  const std::size_t at = in.size();
  in.resize(at + static_cast<std::size_t>(recv_count));
  HALOX_MPI_CHECK(MPI_Irecv(in.data() + at, static_cast<int>(recv_count), MPI_DOUBLE,
                            peer(recv_rank), tag + 1, comm, &r));
  wait.add({r, recv_rank, recv_rank >= 0 ? recv_count * 8 : -1, &step});
  HALOX_MPI_CHECK(MPI_Isend(out.data(), static_cast<int>(send_count), MPI_DOUBLE, peer(send_rank),
                            tag + 1, comm, &r));
  wait.add({r, send_rank, -1, &step});
  wait.wait(context);
}

}  // namespace

void validate_plan(const Topology& topology, const std::vector<PulseHeader>& pulses) {
  MPI_Comm comm = comm_of(topology, "validate_plan");
  // Collectively first (no message can then go unmatched): the rank grid, the pulse count,
  // and each pulse's peers; point-to-point messages only when all agree.
  detail::agree_on_grid(topology, comm, "validate_plan");
  const detail::WaitContext context = detail::plan_wait(topology, "validate_plan");
  const detail::CollectiveWait agree = detail::bounded_wait(comm, context, "the plan check");
  const int n = static_cast<int>(pulses.size());
  int range[2] = {n, -n};
  detail::bounded_allreduce(comm, MPI_IN_PLACE, range, 2, MPI_INT, MPI_MIN, context,
                            "the plan check (the pulse counts)");
  const int lo = range[0], hi = -range[1];
  std::string error;
  if (lo != hi) {
    error = "halox::validate_plan: the ranks' plans have between " + std::to_string(lo) + " and " +
            std::to_string(hi) + " pulses (this rank: " + std::to_string(n) + ")";
    detail::raise_if_any(comm, error, agree);
  }
  {
    int size = 1;
    HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
    std::vector<int> mine(2 * pulses.size()), all(mine.size() * static_cast<std::size_t>(size));
    for (std::size_t p = 0; p < pulses.size(); ++p) {
      mine[2 * p] = pulses[p].send_rank;
      mine[2 * p + 1] = pulses[p].recv_rank;
    }
    detail::bounded_allgather(comm, mine.data(), all.data(), static_cast<int>(mine.size()), MPI_INT,
                              context, "the plan check (the peers)");
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
    detail::raise_if_any(comm, error, agree);
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
  requests.wait(context);
  for (std::size_t p = 0; p < pulses.size() && error.empty(); ++p) {
    if (pulses[p].recv_rank >= 0 && seen[p] != pulses[p].recv_size) {
      error = "halox::validate_plan: " + pulses[p].name(static_cast<int>(p)) + ": rank " +
              std::to_string(pulses[p].recv_rank) + " sends " + std::to_string(seen[p]) +
              " but rank " + std::to_string(topology.rank()) + " expects " +
              std::to_string(pulses[p].recv_size);
    }
  }
  detail::raise_if_any(comm, error, agree);
}

namespace {

// Every rank must build with the same box and cutoff, or their pulse counts differ and the
// builder's messages would not match: compared first. Every rank's input checked too (each
// of `xyz`, seen from `views`). Collective over `comm`: all throw the first error.
void agree_on_particle_input(const Topology& topology, MPI_Comm comm, const Box& box, double cutoff,
                             const std::vector<Topology>& views,
                             const std::vector<std::vector<double>*>& xyz) {
  const detail::WaitContext context = detail::plan_wait(topology, "build_particle_plan");
  const detail::CollectiveWait agree =
      detail::bounded_wait(comm, context, "the agreement on the plan's input");
  double range[8] = {cutoff,  box.length[0],  box.length[1],  box.length[2],
                     -cutoff, -box.length[0], -box.length[1], -box.length[2]};
  detail::bounded_allreduce(comm, MPI_IN_PLACE, range, 8, MPI_DOUBLE, MPI_MIN, context,
                            "the agreement on the box and cutoff");
  std::string mismatch;
  for (int k = 0; k < 4 && mismatch.empty(); ++k) {
    if (range[k] != -range[k + 4]) {
      mismatch = std::string("halox::build_particle_plan: the ranks disagree on the ") +
                 (k == 0 ? "cutoff" : "box length") + " (from " + std::to_string(range[k]) +
                 " to " + std::to_string(-range[k + 4]) + ")";
    }
  }
  detail::raise_if_any(comm, mismatch, agree);
  std::string bad;
  for (std::size_t k = 0; k < views.size() && bad.empty(); ++k)
    bad = detail::check_particle_input(views[k], box, cutoff, *xyz[k]);
  detail::raise_if_any(comm, bad, agree);
}

// Collective over `comm`: every rank's stride valid and the same (or the messages would not
// fit), before any move; `data` per rank, seen from `views`.
void agree_on_stride(const Topology& topology, MPI_Comm comm, const char* where,
                     const std::vector<Topology>& views,
                     const std::vector<std::vector<double>*>& data, int stride) {
  const detail::WaitContext context = detail::plan_wait(topology, where);
  const detail::CollectiveWait agree =
      detail::bounded_wait(comm, context, "the migration's verdict");
  std::string bad;
  for (std::size_t k = 0; k < views.size() && bad.empty(); ++k)
    bad = detail::check_migrate_input(where, views[k].rank(), *data[k], stride);
  int strides[2] = {stride, -stride};
  detail::bounded_allreduce(comm, MPI_IN_PLACE, strides, 2, MPI_INT, MPI_MIN, context,
                            "the agreement on the stride");
  if (bad.empty() && strides[0] != -strides[1]) {
    bad = std::string("halox::") + where + ": the ranks' strides differ (" +
          std::to_string(strides[0]) + " to " + std::to_string(-strides[1]) + " doubles per atom)";
  }
  detail::raise_if_any(comm, bad, agree);
}

}  // namespace

ParticlePlan build_particle_plan(const Topology& topology, const Box& box, double cutoff,
                                 std::vector<double>& xyz) {
  MPI_Comm comm = comm_of(topology, "build_particle_plan");
  detail::agree_on_grid(topology, comm, "build_particle_plan");
  agree_on_particle_input(topology, comm, box, cutoff, {topology}, {&xyz});
  std::vector<detail::BuilderRank> ranks(1);
  ranks[0].topology = &topology;
  ranks[0].xyz = &xyz;
  detail::build_particle_plans(
      box, cutoff, ranks,
      [&](int number, const std::vector<std::vector<double>>& out,
          std::vector<std::vector<double>>& in) {
        const PulseHeader& h = ranks[0].plan.pulses.back().header;
        shift_doubles(topology, comm, h.send_rank, h.recv_rank, 100 + 2 * number, out[0], in[0],
                      h.name(number) + " of the plan's build", "build_particle_plan");
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
  MPI_Comm comm = comm_of(topology, "build_grid_plan");
  detail::raise_if_any(comm, error,
                       detail::bounded_wait(comm, detail::plan_wait(topology, "build_grid_plan"),
                                            "the agreement on the grid plan"));
  validate_plan(topology, headers(plan));
  return plan;
}

void migrate_particles(const Topology& topology, const Box& box, std::vector<double>& data,
                       int stride) {
  MPI_Comm comm = comm_of(topology, "migrate_particles");
  detail::agree_on_grid(topology, comm, "migrate_particles");
  agree_on_stride(topology, comm, "migrate_particles", {topology}, {&data}, stride);
  const detail::WaitContext context = detail::plan_wait(topology, "migrate_particles");
  const detail::CollectiveWait agree =
      detail::bounded_wait(comm, context, "the migration's verdict");
  std::vector<detail::MigrateRank> ranks(1);
  ranks[0].topology = &topology;
  ranks[0].data = &data;
  const std::string error = detail::migrate_particles_of(box, ranks, stride, [&](int axis) {
    detail::MigrateRank& r = ranks[0];
    const int tag = detail::tags::kMigrate + 4 * axis;
    const std::string name = std::string("the migration along ") + "xyz"[axis];
    shift_doubles(topology, comm, topology.neighbor(axis, -1), topology.neighbor(axis, +1), tag,
                  r.down, r.arrived, name + " (down)", "migrate_particles");
    shift_doubles(topology, comm, topology.neighbor(axis, +1), topology.neighbor(axis, -1), tag + 2,
                  r.up, r.arrived, name + " (up)", "migrate_particles");
  });
  detail::raise_if_any(comm, error, agree);
}

namespace {

// One message per rank of this process over Ranks::blocks, in `shifts` (by index in the
// process): rank k's `out` goes to grid rank send_rank, and what grid rank recv_rank sends it
// is appended to its `in`. Between ranks of this process a copy, else MPI messages between
// the processes (the count, then the doubles), tagged by the receiver's index. Every wait
// bounded, naming the peer and `step`.
struct BlockShift {
  int send_rank = -1, recv_rank = -1;
  const std::vector<double>* out = nullptr;
  std::vector<double>* in = nullptr;
};

void shift_in_blocks(const Ranks& ranks, std::vector<BlockShift>& shifts, const std::string& step,
                     const char* where) {
  const Topology& processes = ranks.processes();
  MPI_Comm comm = processes.comm();
  const detail::WaitContext context{ranks.rank(0), where, processes.timeout_seconds(), where};
  const std::string counts = step + " (the counts)";
  auto remote = [&](int g) { return g >= 0 && ranks.process_of(g) != processes.rank(); };
  auto tag = [&](int receiver) { return detail::tags::kBlockShift + 2 * receiver; };
  const std::size_t n = shifts.size();
  std::vector<long long> sent(n, 0), seen(n, 0);
  detail::MessageWait wait;
  MPI_Request r;
  for (std::size_t k = 0; k < n; ++k) {
    const BlockShift& s = shifts[k];
    if (remote(s.recv_rank)) {
      HALOX_MPI_CHECK(MPI_Irecv(&seen[k], 1, MPI_LONG_LONG, ranks.process_of(s.recv_rank),
                                tag(static_cast<int>(k)), comm, &r));
      wait.add({r, s.recv_rank, static_cast<std::int64_t>(sizeof(long long)), &counts});
    }
    if (remote(s.send_rank)) {
      sent[k] = static_cast<long long>(s.out->size());
      HALOX_MPI_CHECK(MPI_Isend(&sent[k], 1, MPI_LONG_LONG, ranks.process_of(s.send_rank),
                                tag(ranks.index_in_process(s.send_rank)), comm, &r));
      wait.add({r, s.send_rank, -1, &counts});
    }
  }
  wait.wait(context);
  for (const BlockShift& s : shifts) {  // within the process: each rank receives from one
    if (s.send_rank < 0 || remote(s.send_rank)) continue;
    std::vector<double>& in = *shifts[ranks.index_in_process(s.send_rank)].in;
    in.insert(in.end(), s.out->begin(), s.out->end());
  }
  for (std::size_t k = 0; k < n; ++k) {
    const BlockShift& s = shifts[k];
    if (remote(s.recv_rank)) {
      const std::size_t at = s.in->size();
      s.in->resize(at + static_cast<std::size_t>(seen[k]));
      HALOX_MPI_CHECK(MPI_Irecv(s.in->data() + at, static_cast<int>(seen[k]), MPI_DOUBLE,
                                ranks.process_of(s.recv_rank), tag(static_cast<int>(k)) + 1, comm,
                                &r));
      wait.add({r, s.recv_rank, seen[k] * 8, &step});
    }
    if (remote(s.send_rank)) {
      HALOX_MPI_CHECK(MPI_Isend(s.out->data(), static_cast<int>(sent[k]), MPI_DOUBLE,
                                ranks.process_of(s.send_rank),
                                tag(ranks.index_in_process(s.send_rank)) + 1, comm, &r));
      wait.add({r, s.send_rank, -1, &step});
    }
  }
  wait.wait(context);
}

// A plan call over Ranks::blocks: the processes' communicator, the grid as each rank of this
// process sees it, and its entries of `sets` (one per rank, checked), after the processes
// agreed on the grid.
struct BlockCall {
  MPI_Comm comm;
  std::vector<Topology> views;
  std::vector<std::vector<double>*> sets;
};

BlockCall start_block_call(const Ranks& ranks, std::vector<std::vector<double>>& sets,
                           const char* function, const char* what) {
  if (static_cast<int>(sets.size()) != ranks.count()) {
    throw Error(std::string("halox::") + function + ": " + std::to_string(sets.size()) + " " +
                what + " for the " + std::to_string(ranks.count()) + " ranks of this process");
  }
  BlockCall call{comm_of(ranks.processes(), function), {}, {}};
  const Topology& grid = ranks.topology();
  for (int i = 0; i < ranks.count(); ++i) {
    call.views.emplace_back(grid.dims(), grid.periodic(), ranks.rank(i));
    call.sets.push_back(&sets[static_cast<std::size_t>(i)]);
  }
  detail::agree_on_grid(ranks.processes(), call.comm, function);
  return call;
}

}  // namespace

namespace detail {

std::vector<ParticlePlan> build_block_particle_plans(const Ranks& ranks, const Box& box,
                                                     double cutoff,
                                                     std::vector<std::vector<double>>& xyz) {
  const BlockCall call = start_block_call(ranks, xyz, "build_particle_plans", "coordinate sets");
  const std::vector<Topology>& views = call.views;
  agree_on_particle_input(ranks.processes(), call.comm, box, cutoff, views, call.sets);
  std::vector<BuilderRank> builders(views.size());
  for (std::size_t k = 0; k < views.size(); ++k) {
    builders[k].topology = &views[k];
    builders[k].xyz = &xyz[k];
  }
  build_particle_plans(
      box, cutoff, builders,
      [&](int number, std::vector<std::vector<double>>& out, std::vector<std::vector<double>>& in) {
        std::vector<BlockShift> shifts(builders.size());
        for (std::size_t k = 0; k < builders.size(); ++k) {
          const PulseHeader& h = builders[k].plan.pulses.back().header;
          shifts[k] = {h.send_rank, h.recv_rank, &out[k], &in[k]};
        }
        const PulseHeader& h = builders[0].plan.pulses.back().header;
        shift_in_blocks(ranks, shifts, h.name(number) + " of the plan's build",
                        "build_particle_plans");
      });
  std::vector<ParticlePlan> plans;
  for (auto& b : builders) plans.push_back(std::move(b.plan));
  return plans;
}

void migrate_block_particles(const Ranks& ranks, const Box& box,
                             std::vector<std::vector<double>>& data, int stride) {
  const BlockCall call = start_block_call(ranks, data, "migrate_particles", "atom sets");
  const std::vector<Topology>& views = call.views;
  agree_on_stride(ranks.processes(), call.comm, "migrate_particles", views, call.sets, stride);
  std::vector<MigrateRank> movers(views.size());
  for (std::size_t k = 0; k < views.size(); ++k) {
    movers[k].topology = &views[k];
    movers[k].data = &data[k];
  }
  const std::string error = migrate_particles_of(box, movers, stride, [&](int axis) {
    const std::string name = std::string("the migration along ") + "xyz"[axis];
    for (const int down : {1, 0}) {  // what goes to -1, from +1; then what goes to +1
      std::vector<BlockShift> shifts(movers.size());
      for (std::size_t k = 0; k < movers.size(); ++k) {
        const int to = views[k].neighbor(axis, down ? -1 : +1);
        const int from = views[k].neighbor(axis, down ? +1 : -1);
        shifts[k] = {to, from, down ? &movers[k].down : &movers[k].up, &movers[k].arrived};
      }
      shift_in_blocks(ranks, shifts, name + (down ? " (down)" : " (up)"), "migrate_particles");
    }
  });
  raise_if_any(call.comm, error,
               bounded_wait(call.comm, plan_wait(ranks.processes(), "migrate_particles"),
                            "the migration's verdict"));
}

}  // namespace detail

}  // namespace halox
