#include "simulation.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "halox/error.hpp"
#include "halox/mpi.hpp"

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
  if (!(c.density > 0)) fail("--density must be positive (got " + std::to_string(c.density) + ")");
  if (!(c.temperature > 0)) {
    fail("--temperature must be positive (got " + std::to_string(c.temperature) + ")");
  }
  if (c.cells < 1) fail("--cells must be >= 1");
  if (!(c.cutoff > 0) || !(c.skin >= 0)) fail("--cutoff must be positive and --skin >= 0");
  if (!(c.dt > 0)) fail("--dt must be positive");
  if (!(c.jitter >= 0 && c.jitter < 0.25)) fail("--jitter must be in [0, 0.25)");
  if (c.nstlist < 1) fail("--nstlist must be >= 1");
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
  if ((all_given && given != ranks) || (!all_given && ranks % given != 0)) {
    fail("the rank grid " + std::to_string(c.ranks[0]) + "x" + std::to_string(c.ranks[1]) + "x" +
         std::to_string(c.ranks[2]) + " does not match the " + std::to_string(ranks) +
         " MPI ranks");
  }
  if (c.device != "auto" && c.device != "cpu" && c.device != "gpu") {
    fail("--device must be auto, cpu or gpu (got " + c.device + ")");
  }
  if (c.transport_given && c.device == "cpu" && c.transport != TransportKind::host) {
    fail("the CPU back end keeps its arrays in host memory: use --transport host (" +
         to_string(c.transport) + " moves device memory)");
  }
  std::string why;
  if (c.transport_given && c.device != "cpu" && !transport_available(c.transport, &why)) {
    fail("the " + to_string(c.transport) + " transport is not available: " + why);
  }
}

Simulation::Simulation(MPI_Comm comm, const Config& config)
    : m_comm(comm), m_config(config), m_topology(Topology::from_mpi(comm, config.ranks)) {
  const double a = lattice_constant(config.density);
  m_box.length = {config.cells * a, config.cells * a, config.cells * a};
  const bool gpu = config.device == "gpu" || (config.device == "auto" && gpu_present());
  m_backend = gpu ? make_gpu_backend(config.single_precision) : make_cpu_backend();
  if (!m_config.transport_given) {
    m_config.transport = gpu ? TransportKind::staged : TransportKind::host;
  }

  // The fcc lattice; each rank keeps the atoms in its domain.
  const Domain mine = domain_of(m_topology, m_box, m_topology.rank());
  const double basis[4][3] = {{0, 0, 0}, {0.5, 0.5, 0}, {0.5, 0, 0.5}, {0, 0.5, 0.5}};
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
          bool in = true;
          for (int d = 0; d < 3; ++d) in &= p[d] >= mine.lo[d] && p[d] < mine.hi[d];
          if (in) {
            m_x.insert(m_x.end(), p, p + 3);
            for (int d = 0; d < 3; ++d) m_v.push_back(gaussian(config.seed, id, d));
            m_id.push_back(id);
          }
          ++id;
        }
  m_atoms = id;
  // Zero total momentum, then scale to the temperature (3N - 3 degrees of freedom).
  double local[4] = {0, 0, 0, 0}, global[4];
  for (std::size_t i = 0; i < m_id.size(); ++i) {
    for (int d = 0; d < 3; ++d) local[d] += m_v[3 * i + d];
  }
  HALOX_MPI_CHECK(MPI_Allreduce(local, global, 3, MPI_DOUBLE, MPI_SUM, comm));
  double v2 = 0;
  for (std::size_t i = 0; i < m_id.size(); ++i) {
    for (int d = 0; d < 3; ++d) {
      m_v[3 * i + d] -= global[d] / static_cast<double>(m_atoms);
      v2 += m_v[3 * i + d] * m_v[3 * i + d];
    }
  }
  HALOX_MPI_CHECK(MPI_Allreduce(&v2, &global[3], 1, MPI_DOUBLE, MPI_SUM, comm));
  const double scale = std::sqrt(config.temperature * (3.0 * m_atoms - 3.0) / global[3]);
  for (double& v : m_v) v *= scale;

  neighbor_search(true);
  m_backend->forces(config.cutoff);
  m_backend->halo_reverse(*m_exchange);
  m_backend->synchronize();
}

std::string Simulation::transport_name() const {
  return m_backend->name() + ", " + to_string(m_config.transport);
}

void Simulation::neighbor_search(bool first) {
  const auto start = Clock::now();
  if (!first) m_backend->fetch(m_x, m_v);
  // Verlet-list validity: a pair can enter the cutoff unseen only if two atoms together
  // moved more than the skin since the last search. Reported, not hidden.
  if (!first) {
    double local = 0, global = 0;
    for (std::size_t i = 0; i < m_id.size(); ++i) {
      double d2 = 0;
      for (int d = 0; d < 3; ++d) {
        const double dx = m_x[3 * i + d] - m_x_search[3 * i + d];
        d2 += dx * dx;
      }
      local = std::max(local, d2);
    }
    HALOX_MPI_CHECK(MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, MPI_MAX, m_comm));
    m_max_displacement = std::max(m_max_displacement, std::sqrt(global));
    if (2 * std::sqrt(global) > m_config.skin) ++m_violations;
  }
  // Migration: position, velocity and id travel together.
  std::vector<double> data;
  data.reserve(m_id.size() * 7);
  for (std::size_t i = 0; i < m_id.size(); ++i) {
    data.insert(data.end(), &m_x[3 * i], &m_x[3 * i + 3]);
    data.insert(data.end(), &m_v[3 * i], &m_v[3 * i + 3]);
    data.push_back(static_cast<double>(m_id[i]));
  }
  migrate_particles(m_topology, m_box, data, 7);
  const std::size_t home = data.size() / 7;
  m_x.resize(3 * home);
  m_v.resize(3 * home);
  m_id.resize(home);
  for (std::size_t i = 0; i < home; ++i) {
    std::copy(&data[7 * i], &data[7 * i + 3], &m_x[3 * i]);
    std::copy(&data[7 * i + 3], &data[7 * i + 6], &m_v[3 * i]);
    m_id[i] = static_cast<std::int64_t>(data[7 * i + 6]);
  }
  m_x_search = m_x;

  // The plan (and with it the halo coordinates); the back end builds the neighbour list.
  const double rlist = m_config.cutoff + m_config.skin;
  std::vector<double> xyz = m_x;
  m_plan = build_particle_plan(m_topology, m_box, rlist, xyz);
  m_backend->load(xyz, m_v, m_plan, rlist);
  if (!m_exchange) {
    m_exchange = std::make_unique<ParticleExchange>(
        m_topology, m_plan, m_backend->real(),
        ExchangeOptions{m_config.transport, m_config.chunk_bytes});
  } else {
    m_exchange->set_plan(m_plan);
  }
  m_timers.search += seconds_since(start);
}

void Simulation::step() {
  const double dt = m_config.dt;
  auto timed = [&](double& slot, auto&& work) {
    if (m_config.barrier_before_halo &&
        (&slot == &m_timers.halo_forward || &slot == &m_timers.halo_reverse)) {
      HALOX_MPI_CHECK(MPI_Barrier(m_comm));
    }
    slot += m_backend->timed(work);
  };
  timed(m_timers.integrate, [&] {
    m_backend->half_kick(dt);
    m_backend->drift(dt);
  });
  ++m_step;
  const bool search = m_step % m_config.nstlist == 0;
  if (search) {
    neighbor_search(false);  // brings the halo coordinates with the new plan
  } else {
    timed(m_timers.halo_forward, [&] { m_backend->halo_forward(*m_exchange); });
  }
  timed(m_timers.force, [&] { m_backend->forces(m_config.cutoff); });
  const double reverse_before = m_timers.halo_reverse;
  timed(m_timers.halo_reverse, [&] { m_backend->halo_reverse(*m_exchange); });
  if (search) m_timers.halo_reverse_at_search += m_timers.halo_reverse - reverse_before;
  timed(m_timers.integrate, [&] { m_backend->half_kick(dt); });
}

Thermo Simulation::thermo() {
  const Sums sums = m_backend->last_sums();
  double local[3] = {m_backend->velocity_squared(), sums.energy, sums.virial}, global[3];
  HALOX_MPI_CHECK(MPI_Allreduce(local, global, 3, MPI_DOUBLE, MPI_SUM, m_comm));
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
  std::vector<double> f;
  m_backend->fetch_forces(f);
  std::vector<double> mine;
  for (std::size_t i = 0; i < m_id.size(); ++i) {
    mine.push_back(static_cast<double>(m_id[i]));
    mine.insert(mine.end(), &f[3 * i], &f[3 * i + 3]);
  }
  int size = 0, rank = 0;
  MPI_Comm_size(m_comm, &size);
  MPI_Comm_rank(m_comm, &rank);
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(size), displs(size);
  HALOX_MPI_CHECK(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, m_comm));
  int sum = 0;
  for (int r = 0; r < size; ++r) {
    displs[r] = sum;
    sum += counts[r];
  }
  std::vector<double> all(rank == 0 ? sum : 0);
  HALOX_MPI_CHECK(MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(),
                              displs.data(), MPI_DOUBLE, 0, m_comm));
  std::vector<std::pair<std::int64_t, std::array<double, 3>>> out;
  for (std::size_t k = 0; k + 4 <= all.size(); k += 4) {
    out.push_back({static_cast<std::int64_t>(all[k]), {all[k + 1], all[k + 2], all[k + 3]}});
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace halox::md
