#include "simulation.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>
#include <utility>

#include "../common/gather.hpp"
#include "../common/memory.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "lj.hpp"

namespace halox::md {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double lattice_constant(double density) {
  return std::cbrt(4.0 / density);
}

// A reproducible normal deviate per (seed, atom, component): the initial velocities do not
// depend on the decomposition.
double gaussian(std::uint64_t seed, std::int64_t id, int component) {
  auto mix = [](std::uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const std::uint64_t a = mix(seed ^ mix(static_cast<std::uint64_t>(id) * 8 + component));
  const std::uint64_t b = mix(a);
  const double u1 = (static_cast<double>(a >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = (static_cast<double>(b >> 11) + 0.5) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

void validate(const Config& c, int ranks) {
  auto fail = [](const std::string& m) { throw Error("halox-md: " + m); };
  for (double v : {c.density, c.temperature, c.cutoff, c.skin, c.inner_skin, c.dt, c.jitter}) {
    if (!std::isfinite(v)) fail("every real parameter must be finite");
  }
  if (!(c.density > 0)) fail("--density must be positive (got " + std::to_string(c.density) + ")");
  if (!(c.temperature > 0)) {
    fail("--temperature must be positive (got " + std::to_string(c.temperature) + ")");
  }
  if (c.cells < 1) fail("--cells must be >= 1");
  // Memory grows as cells^3: refuse what this node cannot hold, with the figure, before hours
  // of lattice building (each process holds its share; the host arrays, the migration's
  // copies and the lists take about 400 bytes per atom).
  const double atoms = 4.0 * c.cells * c.cells * c.cells;
  std::ostringstream what;
  what << "halox-md: --cells " << c.cells << " (" << atoms << " atoms)";
  apps::require_memory(what.str(), 400.0 * atoms / ranks);
  if (!(c.cutoff > 0) || !(c.skin >= 0)) fail("--cutoff must be positive and --skin >= 0");
  if (!(c.dt > 0)) fail("--dt must be positive");
  if (!(c.jitter >= 0 && c.jitter < 0.25)) fail("--jitter must be in [0, 0.25)");
  if (c.nstlist < 1) fail("--nstlist must be >= 1");
  if (c.graph && c.device == "cpu") fail("--graph captures CUDA graphs: it needs --device gpu");
  if (c.blocks[0] > 0 && c.local) {
    fail(
        "--blocks runs several ranks per MPI process, whose particles halox moves by the host "
        "transport (CPU) or by staged, mpi-direct, ipc-* or nvshmem-pulse/fused (GPU; --graph "
        "with the last two): no local-* transport");
  }
  if (c.prune < 0) fail("--prune must be >= 0");
  if (c.prune > 0 && !(c.inner_skin >= 0 && c.inner_skin <= c.skin)) {
    fail("--inner-skin must be in [0, --skin]");
  }
  const double box = c.cells * lattice_constant(c.density);
  if (!(c.cutoff + c.skin < 0.5 * box)) {
    std::ostringstream s;
    s << "the cutoff + skin (" << c.cutoff + c.skin << ") must be shorter than half the box ("
      << 0.5 * box << " for " << c.cells << " cells at density " << c.density
      << "); use more --cells";
    fail(s.str());
  }
  const int given =
      (c.ranks[0] ? c.ranks[0] : 1) * (c.ranks[1] ? c.ranks[1] : 1) * (c.ranks[2] ? c.ranks[2] : 1);
  const bool all_given = c.ranks[0] && c.ranks[1] && c.ranks[2];
  if (c.local) {
    if (ranks != 1) {
      fail("--transport " + to_string(c.transport) +
           " runs every rank in one process: start 1 MPI rank, not " + std::to_string(ranks));
    }
    if (!all_given) {
      fail("--transport " + to_string(c.transport) + " needs the whole rank grid: --ranks XxYxZ");
    }
  } else if ((all_given && given != ranks) || (!all_given && ranks % given != 0)) {
    fail("the rank grid " + std::to_string(c.ranks[0]) + "x" + std::to_string(c.ranks[1]) + "x" +
         std::to_string(c.ranks[2]) + " does not match the " + std::to_string(ranks) +
         " MPI ranks");
  }
  if (c.device != "auto" && c.device != "cpu" && c.device != "gpu") {
    fail("--device must be auto, cpu or gpu (got " + c.device + ")");
  }
  // Local ranks' host arrays are copied by the CPU whatever the kind.
  if (c.transport_given && c.device == "cpu" && c.transport != TransportKind::host && !c.local) {
    fail("the CPU back end keeps its arrays in host memory: use --transport host (" +
         to_string(c.transport) + " moves device memory)");
  }
  std::string why;
  if (c.transport_given && c.device != "cpu" && !c.local &&
      !transport_available(c.transport, &why)) {
    fail("the " + to_string(c.transport) + " transport is not available: " + why);
  }
}

void single_rank_default(Config& c, int ranks) {
  if (ranks != 1 || c.transport_given) return;
  for (int a : c.ranks) {
    if (a > 1) return;  // a grid of several ranks in one process was asked for
  }
  c.ranks = {1, 1, 1};
  c.transport = TransportKind::local_fused;
  c.transport_given = true;  // chosen: no later default replaces it
  c.local = true;
}

namespace {
// This process's ranks: every rank of the grid (local-*), a block of them (--blocks), or one.
Ranks ranks_of(const Topology& processes, const Config& config) {
  if (config.local) return Ranks::local(Topology(config.ranks, {true, true, true}, 0));
  return config.blocks[0] > 0 ? Ranks::blocks(processes, config.blocks) : Ranks::mpi(processes);
}
Ranks ranks_of(MPI_Comm comm, const Config& config) {
  return ranks_of(config.local ? Topology({1, 1, 1}, {true, true, true}, 0)
                               : Topology::from_mpi(comm, config.ranks),
                  config);
}
}  // namespace

Simulation::Simulation(MPI_Comm comm, const Config& config)
    : m_comm(comm), m_config(config), m_halox_ranks(ranks_of(comm, config)) {
  const double a = lattice_constant(config.density);
  m_box.length = {config.cells * a, config.cells * a, config.cells * a};
  const bool gpu = config.device == "gpu" || (config.device == "auto" && gpu_present());
  // Each rank as it sees the grid; one rank per process keeps the communicator's view.
  const Topology& grid = m_halox_ranks.topology();
  const bool several = m_halox_ranks.in_process() || m_halox_ranks.in_blocks();
  for (int i = 0; i < m_halox_ranks.count(); ++i) {
    m_ranks.push_back(
        Rank{several ? Topology(grid.dims(), grid.periodic(), m_halox_ranks.rank(i)) : grid,
             {},
             {},
             {},
             {}});
  }
  // Several ranks on the GPU share the first one's stream, which the local exchange follows.
  for (Rank& r : m_ranks) {
    r.backend = gpu ? make_gpu_backend(
                          config.single_precision,
                          m_ranks.front().backend ? m_ranks.front().backend->stream() : nullptr)
                    : make_cpu_backend(config.single_precision);
  }
  for (Rank& r : m_ranks) m_backends.push_back(r.backend.get());
  if (!m_config.transport_given) {
    m_config.transport = gpu ? TransportKind::staged : TransportKind::host;
  }

  // The fcc lattice; each rank keeps the atoms in its domain.
  std::vector<Domain> domains;
  for (const Rank& r : m_ranks) domains.push_back(domain_of(r.topology, m_box, r.topology.rank()));
  const double basis[4][3] = {{0, 0, 0}, {0.5, 0.5, 0}, {0.5, 0, 0.5}, {0, 0.5, 0.5}};
  std::vector<std::vector<double>> velocities(m_ranks.size());
  std::int64_t id = 0;
  for (int k = 0; k < config.cells; ++k)
    for (int j = 0; j < config.cells; ++j)
      for (int i = 0; i < config.cells; ++i)
        for (const auto& b : basis) {
          // Jittered so the step-0 forces are not the zeros of a perfect lattice.
          double p[3] = {(i + b[0]) * a, (j + b[1]) * a, (k + b[2]) * a};
          for (int d = 0; d < 3; ++d) {
            p[d] += config.jitter * a * std::tanh(gaussian(config.seed + 1, id, d));
            p[d] = std::fmod(p[d] + m_box.length[d], m_box.length[d]);
          }
          for (std::size_t r = 0; r < m_ranks.size(); ++r) {
            bool in = true;
            for (int d = 0; d < 3; ++d) in &= p[d] >= domains[r].lo[d] && p[d] < domains[r].hi[d];
            if (!in) continue;
            m_ranks[r].x.insert(m_ranks[r].x.end(), p, p + 3);
            for (int d = 0; d < 3; ++d) velocities[r].push_back(gaussian(config.seed, id, d));
            m_ranks[r].id.push_back(id);
          }
          ++id;
        }
  m_atoms = id;
  // Zero total momentum, then scale to the temperature (3N - 3 degrees of freedom).
  double momentum[3];
  for (int d = 0; d < 3; ++d) {
    double local = 0;
    for (const std::vector<double>& v : velocities) {
      for (std::size_t i = 0; i < v.size() / 3; ++i) local += v[3 * i + d];
    }
    momentum[d] = sum(local);
  }
  double v2 = 0;
  for (std::vector<double>& v : velocities) {
    for (std::size_t i = 0; i < v.size() / 3; ++i) {
      for (int d = 0; d < 3; ++d) {
        v[3 * i + d] -= momentum[d] / static_cast<double>(m_atoms);
        v2 += v[3 * i + d] * v[3 * i + d];
      }
    }
  }
  const double scale = std::sqrt(config.temperature * (3.0 * m_atoms - 3.0) / sum(v2));
  for (std::size_t k = 0; k < m_ranks.size(); ++k) {
    for (double& v : velocities[k]) v *= scale;
    m_ranks[k].backend->refill_velocities(refill_home(0, {}, velocities[k].size() / 3),
                                          velocities[k]);
  }

  neighbor_search(true);
  m_ranks.front().backend->forces_ranks(m_backends, config.cutoff, energy_shift(), true);
  halo(false);
  for (Rank& r : m_ranks) r.backend->synchronize();
  // Past the set-up the ranks step in lockstep: the searches' collectives and the thermo
  // reductions wait as long as an exchange does before naming a rank that does not arrive.
  const double timeout = ExchangeOptions{}.timeout_seconds;
  for (Rank& r : m_ranks) r.topology.set_timeout_seconds(timeout);
  Topology processes = m_halox_ranks.processes();  // the plan calls' waits: the same
  processes.set_timeout_seconds(timeout);
  m_halox_ranks = ranks_of(processes, m_config);
}

Simulation::~Simulation() {
  // The first rank's back end owns the stream the others share: it goes last.
  m_exchange.reset();
  while (!m_ranks.empty()) m_ranks.pop_back();
}

double Simulation::energy_shift() const {
  return m_config.lj_shift == LjShift::cutoff ? lj_energy_shift(m_config.cutoff) : 0.0;
}

double Simulation::sum(double local) {
  double global = 0;
  reduce(&local, &global, 1, MPI_SUM, "the set-up's sums");
  return global;
}

// The simulation's reductions: bounded by the topology's time-out, naming a rank that does
// not arrive (halox::allreduce); ranks in one process have nobody to wait for.
void Simulation::reduce(const void* in, double* out, int count, MPI_Op op, const char* what) {
  // The values reduced were read from the GPU after its exchange: a device-side wait in it
  // that expired is reported first, naming its peer, not 5 s later by this reduction.
  if (m_exchange) m_exchange->check();
  const Topology& topology = m_halox_ranks.processes();
  if (topology.comm() == MPI_COMM_NULL) {
    HALOX_MPI_CHECK(MPI_Allreduce(in, out, count, MPI_DOUBLE, op, m_comm));
  } else {
    allreduce(topology, in, out, count, MPI_DOUBLE, op, what);
  }
}

std::string Simulation::transport_name() const {
  const std::string backend = m_ranks.front().backend->name();
  if (m_halox_ranks.in_process() || m_halox_ranks.in_blocks()) {
    return backend + ", " + to_string(m_config.transport) + " (" + std::to_string(m_ranks.size()) +
           (m_halox_ranks.in_blocks() ? " ranks in each process)" : " ranks in this process)");
  }
  return backend + ", " + to_string(m_config.transport);
}

// Atoms that left their rank's domain move to the rank that owns them now. Those that only
// crossed a periodic edge of an axis the grid does not split wrap back and stay in place
// (a single rank's atoms all do); the others (m_leaving, as the fetch found them) go
// through halox's migration with their velocities and ids (7 doubles each), the rest stay
// in place, their velocities where the back end keeps them.
void Simulation::migrate() {
  const std::size_t n = m_ranks.size();
  m_leaving.resize(n);  // the first search's: none (the lattice is built by domain)
  m_migrate_data.resize(n);
  std::vector<double> v;  // the leavers' velocities, then the arrived ones'
  for (std::size_t k = 0; k < n; ++k) {
    Rank& r = m_ranks[k];
    const Domain domain = domain_of(r.topology, m_box, r.topology.rank());
    std::vector<std::int32_t>& leaving = m_leaving[k];
    std::size_t left = 0;
    for (const std::int32_t i : leaving) {
      double* p = &r.x[3 * static_cast<std::size_t>(i)];
      wrap_unsplit_axes(r.topology, m_box, p);
      if (outside(p, domain.lo.data(), domain.hi.data())) leaving[left++] = i;
    }
    leaving.resize(left);
    std::vector<double>& data = m_migrate_data[k];
    data.clear();
    v.clear();
    r.backend->velocities_of(leaving, v);
    for (std::size_t l = 0; l < leaving.size(); ++l) {
      const double* p = &r.x[3 * static_cast<std::size_t>(leaving[l])];
      data.insert(data.end(), p, p + 3);
      data.insert(data.end(), &v[3 * l], &v[3 * l + 3]);
      data.push_back(static_cast<double>(r.id[static_cast<std::size_t>(leaving[l])]));
    }
  }
  // Collective (MPI): every rank takes part, with or without atoms to move.
  migrate_particles(m_halox_ranks, m_box, m_migrate_data, 7);
  for (std::size_t k = 0; k < n; ++k) {
    Rank& r = m_ranks[k];
    const std::vector<std::int32_t>& leaving = m_leaving[k];
    const std::vector<double>& data = m_migrate_data[k];  // what arrived
    if (leaving.empty() && data.empty()) continue;
    // In place: arrived atoms and, for holes left over, the last atoms fill the places of
    // those that left; the atoms that stay where they are are not copied.
    const std::size_t arrived = data.size() / 7;
    const HomeRefill refill = refill_home(r.id.size(), leaving, arrived);
    const std::size_t most = std::max(r.id.size(), refill.rows);
    r.x.resize(3 * most);
    r.id.resize(most);
    refill_rows<3>(r.x.data(), refill, [&](std::size_t a, int c) { return data[7 * a + c]; });
    refill_rows<1>(r.id.data(), refill, [&](std::size_t a, int) { return data[7 * a + 6]; });
    r.x.resize(3 * refill.rows);
    r.id.resize(refill.rows);
    v.clear();
    for (std::size_t a = 0; a < arrived; ++a) v.insert(v.end(), &data[7 * a + 3], &data[7 * a + 6]);
    r.backend->refill_velocities(refill, v);
  }
}

void Simulation::neighbor_search(bool first) {
  ++m_searches;  // a new plan: --graph captures its steps again
  // The steps before are queued without host waits: the search's clock starts once the GPU
  // has done them, so that it does not count their time again.
  if (!first) m_ranks.front().backend->synchronize();
  // A device-side wait of those steps that expired names its peer: before the search's
  // collectives, which would otherwise wait for that peer and name it less precisely.
  if (m_exchange) m_exchange->check();
  const auto start = Clock::now();
  auto last = start;
  auto part = [&](double SearchParts::*slot) {  // the host time since the previous part
    const auto now = Clock::now();
    m_timers.search_parts.*slot += std::chrono::duration<double>(now - last).count();
    last = now;
  };
  if (!first) {
    m_leaving.resize(m_ranks.size());
    m_fetch_into.clear();
    for (std::size_t k = 0; k < m_ranks.size(); ++k)
      m_fetch_into.push_back({&m_ranks[k].x, &m_leaving[k]});
    // Verlet-list validity: a pair can enter the cutoff unseen only if two atoms together
    // moved more than the skin since the last search; with pruning, more than the inner
    // skin between two prunes. Reported, not hidden.
    double most[2] = {m_ranks.front().backend->fetch_ranks(m_backends, m_fetch_into), 0.0};
    for (Backend* b : m_backends) most[1] = std::max(most[1], b->pruned_displacement2());
    reduce(MPI_IN_PLACE, most, 2, MPI_MAX, "the search's largest displacement");
    const double moved = std::sqrt(most[0]), moved_pruned = std::sqrt(most[1]);
    m_max_displacement = std::max(m_max_displacement, moved);
    if (2 * moved > m_config.skin) ++m_violations;
    if (m_config.prune > 0) {
      m_max_pruned_displacement = std::max(m_max_pruned_displacement, moved_pruned);
      if (2 * moved_pruned > m_config.inner_skin) ++m_violations;
    }
  }
  part(&SearchParts::fetch);
  migrate();
  part(&SearchParts::migrate);

  // The plans (and with them the halo coordinates); the back ends build the neighbour lists.
  const double rlist = m_config.cutoff + m_config.skin;
  // The plans append the halo to each rank's coordinates: r.x holds home then halo atoms
  // until the next fetch (swapped, not copied, into the vectors the builder takes).
  m_xyz.resize(m_ranks.size());
  for (std::size_t k = 0; k < m_ranks.size(); ++k) std::swap(m_xyz[k], m_ranks[k].x);
  std::vector<ParticlePlan> plans = build_particle_plans(m_halox_ranks, m_box, rlist, m_xyz);
  for (std::size_t k = 0; k < m_ranks.size(); ++k) {
    std::swap(m_xyz[k], m_ranks[k].x);
    m_ranks[k].plan = plans[k];
  }
  part(&SearchParts::plans);
  // The lists are queued first and the exchange is set up for the new plans while the GPU
  // builds them (its set-up waits for its own kernels only, not for the lists).
  std::vector<LoadInput> inputs;
  for (Rank& r : m_ranks) inputs.push_back({&r.x, &r.plan});
  m_ranks.front().backend->load_ranks(m_backends, inputs, rlist, [&] {
    part(&SearchParts::lists);
    set_up_exchange(std::move(plans));
    part(&SearchParts::exchange);
  });
  if (m_config.prune > 0) prune();
  part(&SearchParts::list_wait);
  m_timers.search += seconds_since(start);
}

// The exchange for the new plans (of this process's ranks, in order).
void Simulation::set_up_exchange(std::vector<ParticlePlan> plans) {
  if (m_exchange) {
    m_exchange->set_plans(std::move(plans));
    return;
  }
  ExchangeOptions options;
  options.transport = m_config.transport;
  options.chunk_bytes = m_config.chunk_bytes;  // the pipelined transport's; others ignore it
  m_exchange = std::make_unique<ParticleExchange>(m_halox_ranks, std::move(plans),
                                                  m_ranks.front().backend->real(), options);
  if (m_config.graph && !m_exchange->capturable()) {  // the same answer on every rank
    throw Error("halox-md: --graph: the transport " + to_string(m_config.transport) +
                " cannot be captured in a CUDA graph; take local-fused, local-pulse, ipc-fused, "
                "ipc-pulse, nvshmem-fused or nvshmem-pulse");
  }
}

void Simulation::prune() {
  m_ranks.front().backend->prune_ranks(m_backends, m_config.cutoff + m_config.inner_skin);
}

// Coordinates forward (true) or forces back, for every rank of this process.
// Host arrays are done on return; GPU arrays are ordered on the first rank's stream, which
// every rank's kernels share.
void Simulation::halo(bool forward) {
  m_arrays.clear();
  for (Rank& r : m_ranks) {
    m_arrays.push_back(forward ? r.backend->coordinates() : r.backend->force_array());
  }
  GpuStream stream = m_ranks.front().backend->stream();
  forward ? m_exchange->forward_async(m_arrays, stream)
          : m_exchange->reverse_async(m_arrays, stream);
}

double Simulation::queued_halo_seconds(bool forward, int count) {
  HALOX_MPI_CHECK(MPI_Barrier(m_comm));
  const double seconds = m_ranks.front().backend->timed([&] {
    for (int i = 0; i < count; ++i) halo(forward);
  });
  return seconds / count;
}

double Simulation::queued_halo_pair_seconds(int count) {
  HALOX_MPI_CHECK(MPI_Barrier(m_comm));
  const double seconds = m_ranks.front().backend->timed([&] {
    for (int i = 0; i < count; ++i) {
      halo(true);
      halo(false);
    }
  });
  return seconds / (2 * count);
}

double Simulation::graphed_halo_pair_seconds(int count, int replays) {
  constexpr int kHaloPairs = 2;  // graph kinds 0 and 1 are the steps' (step_graphed)
  int mine = m_exchange && m_exchange->capturable() ? 1 : 0, all = 0;
  HALOX_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, m_comm));
  if (all == 0) return 0;
  Backend& first = *m_ranks.front().backend;
  capture(kHaloPairs, [&] {
    for (int i = 0; i < count; ++i) {
      halo(true);
      halo(false);
    }
  });
  first.replay(kHaloPairs);  // the first replay uploads the graph
  first.synchronize();
  m_exchange->check();
  HALOX_MPI_CHECK(MPI_Barrier(m_comm));
  const double seconds = first.timed([&] {
    for (int r = 0; r < replays; ++r) first.replay(kHaloPairs);
  });
  m_exchange->check();
  return seconds / (2.0 * count * replays);
}

template <class Phase>
void Simulation::timed(double& slot, Phase&& phase, Follows follows, double* also) {
  if (m_config.barrier_before_halo &&
      (&slot == &m_timers.halo_forward || &slot == &m_timers.halo_reverse)) {
    HALOX_MPI_CHECK(MPI_Barrier(m_comm));
  }
  // Several ranks on the GPU share the first one's stream, so its events span all of them;
  // on the CPU the phase is done when it returns.
  m_ranks.front().backend->time_async(phase, &slot, also, follows == Follows::last_phase);
}

const Timers& Simulation::timers() {
  m_ranks.front().backend->collect_times(true);
  return m_timers;
}

void Simulation::reset_timers() {
  m_ranks.front().backend->collect_times(true);
  m_timers = {};
}

// --graph: a step between searches that is not a thermo step and follows one (its first
// launch ends that step's deferred half kick), as the ordinary path queues it, without
// phase timing. The search's prune, if any, has been done; `prunes` prunes again.
void Simulation::queue_plain_step(bool prunes) {
  Backend& first = *m_ranks.front().backend;
  first.kick_drift_ranks(m_backends, m_config.dt, true);
  halo(true);
  if (prunes) prune();
  first.forces_ranks(m_backends, m_config.cutoff, energy_shift(), false);
  halo(false);
}

// What `queue` puts on the first back end's stream, captured as its graph `kind` (a capture
// that failed is ended before the error goes on).
void Simulation::capture(int kind, const std::function<void()>& queue) {
  Backend& first = *m_ranks.front().backend;
  first.begin_capture();
  try {
    queue();
  } catch (...) {
    first.abandon_capture();
    throw;
  }
  first.end_capture(kind);
}

// The first step of each kind after a search is captured (a new plan: new lists, new
// exchange launches; an instantiated graph of that kind is updated in place where its shape
// allows), then every step of the kind replays it. The exchange's check() between replays
// reports a device-side time-out, which no exchange call does now.
void Simulation::step_graphed() {
  const std::int64_t next = m_step + 1;
  const bool prunes = m_config.prune > 0 && next % m_config.prune == 0;
  const int kind = prunes ? 1 : 0;
  Backend& first = *m_ranks.front().backend;
  if (m_graph_plan[kind] != m_searches) {
    const auto start = Clock::now();
    capture(kind, [&] { queue_plain_step(prunes); });
    m_graph_plan[kind] = m_searches;
    ++m_timers.captures;
    m_timers.capture_seconds += seconds_since(start);
  }
  timed(
      m_timers.graphed, [&] { first.replay(kind); }, Follows::last_phase);
  ++m_timers.graphed_steps;
  m_step = next;
  m_half_kick_deferred = true;
  m_exchange->check();
  first.collect_times(false);
}

void Simulation::step(bool sums) {
  if (m_config.graph && !sums && m_half_kick_deferred && (m_step + 1) % m_config.nstlist != 0) {
    step_graphed();
    return;
  }
  const double dt = m_config.dt;
  Backend& first = *m_ranks.front().backend;  // its calls cover every rank of this process
  // The forces after a search start on their own; the other phases follow the phase before
  // on the stream, and so does a step's first after a step that deferred its last half kick
  // (nothing came between them).
  const bool ends_last_step = std::exchange(m_half_kick_deferred, false);
  timed(
      m_timers.integrate, [&] { first.kick_drift_ranks(m_backends, dt, ends_last_step); },
      ends_last_step ? Follows::last_phase : Follows::nothing);
  ++m_step;
  const bool search = m_step % m_config.nstlist == 0;
  if (search) {
    neighbor_search(false);  // brings the halo coordinates with the new plan
  } else {
    timed(
        m_timers.halo_forward, [&] { halo(true); }, Follows::last_phase);
    // Every rank's coordinates, halo included, are current: the pruned rows may be cut.
    if (m_config.prune > 0 && m_step % m_config.prune == 0) {
      timed(
          m_timers.search, [&] { prune(); }, Follows::last_phase, &m_timers.prune);
    }
  }
  timed(
      m_timers.force,
      [&] { first.forces_ranks(m_backends, m_config.cutoff, energy_shift(), sums); },
      search ? Follows::nothing : Follows::last_phase);
  timed(
      m_timers.halo_reverse, [&] { halo(false); }, Follows::last_phase,
      search ? &m_timers.halo_reverse_at_search : nullptr);
  // The last half kick: at once where the velocities are read after the step (its thermo),
  // else in the next step's first launch.
  if (sums) {
    timed(
        m_timers.integrate, [&] { first.half_kick_ranks(m_backends, dt); }, Follows::last_phase);
  } else {
    m_half_kick_deferred = true;
  }
  m_ranks.front().backend->collect_times(false);  // the phases the GPU has passed
}

Thermo Simulation::thermo() {
  if (std::exchange(m_half_kick_deferred, false))
    m_ranks.front().backend->half_kick_ranks(m_backends, m_config.dt);
  double local[3] = {0, 0, 0}, global[3];
  for (Rank& r : m_ranks) {
    const Sums sums = r.backend->last_sums();
    local[0] += r.backend->velocity_squared();
    local[1] += sums.energy;
    local[2] += sums.virial;
  }
  reduce(local, global, 3, MPI_SUM, "the thermo output's sums");
  const double n = static_cast<double>(m_atoms);
  const double volume = m_box.length[0] * m_box.length[1] * m_box.length[2];
  Thermo t;
  t.step = m_step;
  t.temperature = global[0] / (3.0 * n - 3.0);
  t.potential = global[1] / n;
  t.total = (0.5 * global[0] + global[1]) / n;
  t.pressure = (n * t.temperature + global[2] / 3.0) / volume;
  return t;
}

std::vector<std::pair<std::int64_t, std::array<double, 3>>> Simulation::gather_forces() {
  std::vector<double> mine;
  for (Rank& r : m_ranks) {
    std::vector<double> f;
    r.backend->fetch_forces(f);
    for (std::size_t i = 0; i < r.id.size(); ++i) {
      mine.push_back(static_cast<double>(r.id[i]));
      mine.insert(mine.end(), &f[3 * i], &f[3 * i + 3]);
    }
  }
  const std::vector<double> all = apps::gather_on_root(m_comm, mine);
  std::vector<std::pair<std::int64_t, std::array<double, 3>>> out;
  for (std::size_t k = 0; k + 4 <= all.size(); k += 4) {
    out.push_back({static_cast<std::int64_t>(all[k]), {all[k + 1], all[k + 2], all[k + 3]}});
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace halox::md
