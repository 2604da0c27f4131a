// halox-md's simulation: a Lennard-Jones fluid in reduced units on any rank grid, written
// once against halox's public API; the back end (CPU or GPU) and the halo transport are
// chosen at run time.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "halox/exchange.hpp"
#include "halox/plan.hpp"
#include "halox/topology.hpp"

namespace halox::md {

/// The pair energy: `cutoff` shifts it by -u(rc) so it is continuous at the cutoff (halox-md's
/// default: the total-energy drift then measures the integration); `none` is the plain
/// truncated LJ of LAMMPS's lj/cut and GROMACS's vdw-modifier = None. Forces are the same.
enum class LjShift { cutoff, none };

struct Config {
  int cells = 8;              ///< fcc unit cells per box edge (4 atoms each)
  double density = 0.8442;    ///< reduced number density
  double temperature = 1.44;  ///< initial reduced temperature
  double cutoff = 2.5;
  double skin = 0.6;
  double dt = 0.005;
  int nstlist = 10;  ///< neighbour search (and migration, plan rebuild) every N steps
  /// Dynamic pruning (GROMACS's): every `prune` steps the list (radius cutoff + skin) is cut
  /// to the pairs within cutoff + inner_skin, the list the forces then walk; 0: off.
  int prune = 0;
  double inner_skin = 0.3;
  std::array<int, 3> ranks = {0, 0, 0};  ///< 0: chosen by MPI_Dims_create
  std::string device = "auto";           ///< auto | cpu | gpu
  bool single_precision = false;         ///< float coordinates, forces and velocities
  LjShift lj_shift = LjShift::cutoff;
  TransportKind transport = TransportKind::host;
  bool transport_given = false;  ///< otherwise host on the CPU, staged on the GPU
  /// --transport local-pulse or local-fused: every rank of `ranks` in this one process (no
  /// MPI between them), the exchange built over Ranks::local (on the GPU one kernel for all
  /// ranks, or one per pulse; the CPU copies host arrays).
  bool local = false;
  /// --blocks: each MPI process runs a block of this many ranks (Ranks::blocks; `ranks` is
  /// then the grid of processes); 0: one rank per process.
  std::array<int, 3> blocks = {0, 0, 0};
  std::int64_t chunk_bytes = 0;
  std::uint64_t seed = 2026;
  double jitter = 0.02;
  /// Benchmarks: an (untimed) MPI_Barrier before each halo phase, so its time is the
  /// exchange itself and not the wait for a rank still busy with its forces or search.
  bool barrier_before_halo = false;  ///< random lattice displacement, in lattice constants (< 0.25)
  /// --graph (GPU): the steps between searches captured in CUDA graphs, one per kind of step
  /// (plain, pruning, before or after the plan's first prune), captured again after each
  /// search (a new plan) and replayed; thermo and search steps run as ever.
  bool graph = false;
};

/// Throws halox::Error with a clear message for bad input, before any work.
void validate(const Config& config, int ranks);

/// One process and no --transport: its one rank runs through the local engine on a 1x1x1
/// grid (local-fused), whose periodic self-halo is one launch of direct copies, where
/// staged, the one-rank-per-process default, moves it through pinned host memory.
void single_rank_default(Config& config, int ranks);

struct Thermo {
  std::int64_t step = 0;
  double temperature = 0, potential = 0, total = 0, pressure = 0;  // energies per atom
};

/// The neighbour search's parts (host clock; the search waits for the GPU where it reads).
struct SearchParts {
  double fetch = 0;      ///< coordinates and velocities to the host, the list-validity check
  double migrate = 0;    ///< atoms to the ranks that own them now
  double plans = 0;      ///< the halo plans
  double lists = 0;      ///< the back ends' neighbour lists queued (uploads included)
  double exchange = 0;   ///< the exchange's set-up for the new plans (while the GPU builds)
  double list_wait = 0;  ///< the wait for the lists after the set-up (and rows widened)
};

/// Seconds per phase on this rank.
struct Timers {
  double force = 0, halo_forward = 0, halo_reverse = 0, integrate = 0, search = 0;
  /// The part of halo_reverse spent at neighbour-search steps: there it is the first
  /// exchange with the new plan, and carries the transport's set-up for it.
  double halo_reverse_at_search = 0;
  SearchParts search_parts;  ///< of `search`
  double total() const {
    return force + halo_forward + halo_reverse + integrate + search + graphed;
  }
  double prune = 0;  ///< dynamic pruning between searches, part of `search` (list upkeep)
  /// --graph: the replayed steps, whole (their phases are not timed one by one).
  double graphed = 0;
  std::int64_t graphed_steps = 0, captures = 0;
  double capture_seconds = 0;  ///< host time of the captures (the step queued, the graph made)
};

/// The ranks of this process: one per process with MPI (the usual case), or every rank of
/// the grid with Config::local. Written once for both: each phase runs over this process's
/// ranks, the sums add them before reducing over the communicator, and only the migration,
/// the plans and the halo exchange differ (MPI vs halox's local builders and engine).
class Simulation {
 public:
  /// Collective: builds the lattice, velocities, the first plan and the step-0 forces.
  Simulation(MPI_Comm comm, const Config& config);
  ~Simulation();
  /// One velocity Verlet step (collective at neighbour-search steps). `sums`: the step's
  /// forces also compute the energy and virial (a step whose thermo() is read); the GPU
  /// skips their reductions on the others, and their last half kick goes into the next
  /// step's first launch (thermo() applies it). No host wait apart from the neighbour search.
  void step(bool sums = true);
  /// Collective.
  Thermo thermo();
  /// Collective: (atom id, force) of every atom, on rank 0 (empty elsewhere), sorted by id.
  std::vector<std::pair<std::int64_t, std::array<double, 3>>> gather_forces();

  const Config& config() const { return m_config; }
  /// The grid, as this process's first rank sees it.
  const Topology& topology() const { return m_ranks.front().topology; }
  std::int64_t atoms() const { return m_atoms; }
  /// Of this process's first rank.
  std::int64_t home_atoms() const { return static_cast<std::int64_t>(m_ranks.front().id.size()); }
  std::int64_t halo_atoms() const {
    return m_ranks.front().plan.total_count - m_ranks.front().plan.home_count;
  }
  const ParticlePlan& plan() const { return m_ranks.front().plan; }
  std::int64_t steps() const { return m_step; }
  /// The phases' seconds so far (waits for the GPU to pass the last timed phase).
  const Timers& timers();
  void reset_timers();
  /// The exchange's counters (host waits, messages and bytes between ranks).
  ExchangeStats exchange_stats() const {
    return m_exchange ? m_exchange->stats() : ExchangeStats{};
  }
  void reset_exchange_stats() {
    if (m_exchange) m_exchange->reset_stats();
  }
  Backend& backend() { return *m_ranks.front().backend; }
  std::string transport_name() const;
  /// Benchmarks (collective): `count` forward (or reverse) halo exchanges queued back to
  /// back after one barrier and timed as one span, in seconds per exchange: the cost of an
  /// exchange in a stream of work (its launch overlapping the previous one), measured as an
  /// empty kernel launch is. The forward rewrites the halo coordinates with the same values;
  /// the reverse adds the halo forces into the home atoms again (end of a run only).
  double queued_halo_seconds(bool forward, int count);
  /// The same for `count` forward + reverse pairs queued alternately, as the steps of a run
  /// exchange (per exchange: half a pair).
  double queued_halo_pair_seconds(int count);
  /// The same `count` pairs captured in one CUDA graph (issue 57's graphed exchange, as a
  /// --graph run replays the steps between searches), its replays timed `replays` times,
  /// in seconds per exchange; 0 where the exchange cannot be captured (the CPU, a
  /// host-driven transport). After the other benchmarks: the forces are summed again.
  double graphed_halo_pair_seconds(int count, int replays);
  /// Searches at which twice the largest displacement since the previous one exceeded the
  /// skin (a pair may have entered the cutoff unseen).
  std::int64_t list_violations() const { return m_violations; }
  /// The largest displacement of any atom between two searches.
  double max_displacement() const { return m_max_displacement; }
  /// With pruning: the largest between two prunes (or a prune and a search).
  double max_pruned_displacement() const { return m_max_pruned_displacement; }
  double box_length() const { return m_box.length[0]; }

 private:
  struct Rank {
    Topology topology;             // the grid seen from this rank
    std::vector<double> x;         // home, after a search's plans also halo, coordinates
    std::vector<std::int64_t> id;  // home atom ids
    ParticlePlan plan;
    std::unique_ptr<Backend> backend;
  };
  void neighbor_search(bool first);
  void migrate();
  /// halox's view of this process's ranks: every rank of the grid (local) or its MPI rank.
  void set_up_exchange(std::vector<ParticlePlan> plans);
  void prune();  // every rank's list cut to cutoff + inner skin (Config::prune)
  void halo(bool forward);
  /// The energy shift each pair inside the cutoff gets (Config::lj_shift).
  double energy_shift() const;
  double sum(double local);
  void reduce(const void* in, double* out, int count, MPI_Op op, const char* what);
  /// What went onto the stream just before a timed phase: the last timed phase (whose end
  /// is then its start: one event per boundary) or something else, or nothing.
  enum class Follows { last_phase, nothing };
  /// Runs `phase` for every rank of this process, timed into `slot` (and `also`) without
  /// waiting (Backend::time_async).
  template <class Phase>
  void timed(double& slot, Phase&& phase, Follows follows, double* also = nullptr);

  MPI_Comm m_comm;
  Config m_config;
  Ranks m_halox_ranks;                // this process's ranks: Ranks::mpi, ::local or ::blocks
  bool m_half_kick_deferred = false;  // the last step's final half kick is still to come (step)
  // --graph: the search (plan) count, and per kind of step the plan it was captured on.
  std::int64_t m_searches = 0;
  std::array<std::int64_t, 4> m_graph_plan{-1, -1, -1, -1};
  void capture(int kind, const std::function<void()>& queue);
  void step_graphed();
  void queue_plain_step(bool prunes);
  Box m_box;
  std::int64_t m_atoms = 0;
  std::vector<Rank> m_ranks;
  std::vector<Backend*> m_backends;  // the ranks', in order: each phase one call for all
  // The search's, reused: each rank's leaving atoms (their indices, from the fetch; then
  // position, velocity and id, 7 doubles each) and the plan builder's coordinate sets.
  std::vector<std::vector<std::int32_t>> m_leaving;
  std::vector<std::vector<double>> m_migrate_data, m_xyz;
  std::vector<Fetched> m_fetch_into;
  std::unique_ptr<ParticleExchange> m_exchange;  // over m_halox_ranks
  std::vector<void*> m_arrays;                   // the ranks' arrays of a call (reused)
  Timers m_timers;
  std::int64_t m_step = 0;
  std::int64_t m_violations = 0;
  double m_max_displacement = 0;
  double m_max_pruned_displacement = 0;
};

}  // namespace halox::md
