// halox-lbm: a lattice Boltzmann mini-app on halox's grid halo exchange: single-phase D3Q19
// BGK (the bandwidth benchmark and the Taylor-Green check) and the free-energy binary fluid
// (D3Q19 momentum + D3Q7 order parameter), any rank grid (uneven splits handled), periodic,
// CPU or GPU, float or double, the communication variant chosen by a flag.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "../common/agree.hpp"
#include "../common/mpi_main.hpp"
#include "../common/cli.hpp"
#include "../common/output.hpp"
#include "../common/watchdog.hpp"
#include "halox/device.hpp"
#include "halox/error.hpp"
#include "halox/exchange.hpp"
#include "halox/mpi.hpp"
#include "halox/trace.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>

#include "../common/cuda_check.hpp"
#define LBM_CUDA(call) HALOX_APP_CUDA("halox-lbm: ", call)
#endif

namespace {

using namespace halox;
using namespace halox::lbm;
using Clock = std::chrono::steady_clock;

struct Cli {
  std::array<int, 3> grid = {64, 64, 64};
  std::array<int, 3> ranks = {0, 0, 0};
  int rank_count = 0;  // --rank-count N: N ranks on the rank grid grid_rank_dims picks
  std::string model = "multiphase";  // multiphase | bgk
  std::string init;  // droplet | spinodal (multiphase); taylor-green | uniform (bgk)
  std::string device = "auto", comm = "datatype";
  std::string self_halo = "wrap";      // a periodic axis with one rank: wrap | exchange
  std::string fg_exchange = "merged";  // multiphase, halox moving the faces: merged | separate
  TransportKind transport = TransportKind::host;
  bool transport_given = false, single = true;
  bool local =
      false;  // --transport local-pulse or local-fused: every rank of --ranks in this process
  bool local_fused = false;  // --transport local-fused: one kernel for all faces of all ranks
  Params params;
  double radius = 12, velocity = 0.02;
  int steps = 100, report_every = 0;
  int warmup = -1;  // untimed first steps; -1: min(10, steps / 10)
  std::uint64_t seed = 7;
  std::string json, dump, slice, trace;
  double watchdog = 30;
  bool check_taylor_green = false, check_mass = false;
};

Cli parse(int argc, char** argv) {
  Cli c;
  halox::apps::CommandLine line(
      "halox-lbm",
      "Lattice Boltzmann on a periodic box split over a rank grid; halo exchange by halox.\n"
      "Run it as mpiexec -n N halox-lbm [options].");
  line.choice("--model", c.model, "multiphase: D3Q19 + D3Q7 free energy; bgk: D3Q19",
              {"multiphase", "bgk"});
  line.choice("--init", c.init,
              "multiphase: droplet (default) | spinodal; bgk: taylor-green (default) | uniform",
              {"droplet", "spinodal", "taylor-green", "uniform"});
  std::string grid = "64x64x64", ranks, precision = "float", transport;
  line.text("--grid", grid, "global lattice; any size, uneven splits handled", "XxYxZ");
  line.text("--ranks", ranks,
            "rank grid (default: the one whose halo moves the fewest face cells per rank, x "
            "faces, strided, counted 32 / element bytes times: halox::grid_rank_dims)",
            "XxYxZ");
  line.count("--rank-count", c.rank_count,
             "N ranks on that grid (--transport local-*: how many it runs)", 1);
  line.count("--steps", c.steps, "time steps");
  line.choice("--device", c.device, "auto: gpu when one is visible", {"auto", "cpu", "gpu"});
  line.choice("--precision", precision, "arithmetic and storage", {"float", "double"});
  line.choice("--comm", c.comm,
              "datatype: halox datatypes describe the faces, halox packs and moves them; "
              "default: hand-written pack kernels + host copies + MPI; contig: the "
              "hand-written pack, moved by a halox transport; overlap: datatype, inner cells "
              "updated while the halo moves",
              {"datatype", "default", "contig", "overlap"});
  line.text("--transport", transport,
            "for --comm datatype/contig/overlap: host | staged | pipelined | nvshmem-stream | "
            "ipc-fused | nvshmem-fused | nccl | auto (default: host on the CPU, staged on the "
            "GPU) | local-pulse (every rank of --ranks in this one process, run without mpirun; "
            "GPU: one kernel per face) | local-fused (the same, datatype or overlap; GPU: one "
            "kernel moves every face of every rank)");
  line.number("--tau", c.params.tau, "momentum relaxation time (must exceed 0.5)", 0, 1e6);
  line.number("--tau-g", c.params.tau_g, "order-parameter relaxation time", 0, 1e6);
  line.number("--A", c.params.A, "bulk free-energy coefficient", 0, 1e6);
  line.number("--kappa", c.params.kappa, "interface stiffness", 0, 1e6);
  line.number("--mobility", c.params.mobility, "order-parameter mobility", 0, 1e6);
  line.number("--radius", c.radius, "droplet radius", 0, 1e6);
  line.number("--velocity", c.velocity, "Taylor-Green amplitude");
  line.count("--report", c.report_every, "progress line every N steps (0: 10 lines per run)");
  line.count("--warmup", c.warmup,
             "the first N steps are not timed (default min(10, steps/10)): they carry the "
             "transports' lazy set-up (NCCL, NVSHMEM: ~0.4 s)",
             -1);
  double seed = static_cast<double>(c.seed);
  line.number("--seed", seed, "spinodal noise seed", 0, 9e15);
  line.flag("--check-taylor-green", c.check_taylor_green,
            "compare the decay with the analytic solution (1% tolerance)");
  line.flag("--check-mass", c.check_mass,
            "check conservation of each phase and of the fluid (1e-10)");
  line.choice("--self-halo", c.self_halo,
              "a periodic axis that one rank spans alone: wrap (the update reads the opposite "
              "edge in place, no exchange) | exchange (its halo moves like any other)",
              {"wrap", "exchange"});
  line.choice("--fg-exchange", c.fg_exchange,
              "multiphase with --comm datatype or overlap: merged (one exchange moves the "
              "crossing planes of f and g, which lie in one array) | separate (one each)",
              {"merged", "separate"});
  line.text("--dump", c.dump, "rho, u, phi of every cell after the run (binary, global order)");
  line.text("--slice", c.slice, "the order parameter (or |u|) in the mid z plane as a PGM image");
  line.text("--trace", c.trace, "Chrome trace JSON of the last steps");
  line.watchdog(c.watchdog);
  line.text("--json", c.json, "results as JSON");
  line.parse(argc, argv);
  c.grid = parse_dims(grid);
  if (!ranks.empty()) c.ranks = parse_dims(ranks);
  c.single = precision == "float";
  if (!transport.empty()) {
    c.transport = parse_transport(transport);
    c.local_fused = c.transport == TransportKind::local_fused;
    c.local = c.local_fused || c.transport == TransportKind::local_pulse;
    c.transport_given = true;
  }
  if (seed != std::floor(seed)) throw Error("halox-lbm: --seed must be a whole number");
  c.seed = static_cast<std::uint64_t>(seed);
  // The lattice's sound speed is 1/sqrt(3): flows near it are outside what LBM describes.
  if (!(std::abs(c.velocity) < 0.3))
    throw Error("halox-lbm: --velocity must be below 0.3 in lattice units (Mach ~0.5)");
  if (c.init.empty()) c.init = c.model == "bgk" ? "taylor-green" : "droplet";
  const bool ok_init = c.model == "bgk" ? (c.init == "taylor-green" || c.init == "uniform")
                                        : (c.init == "droplet" || c.init == "spinodal");
  if (!ok_init) throw Error("halox-lbm: --init " + c.init + " does not fit --model " + c.model);
  if (c.rank_count > 0 && c.ranks != std::array<int, 3>{0, 0, 0}) {
    throw Error("halox-lbm: --rank-count and --ranks exclude each other");
  }
  if (c.local && c.rank_count == 0 && !(c.ranks[0] > 0 && c.ranks[1] > 0 && c.ranks[2] > 0)) {
    throw Error("halox-lbm: --transport " + to_string(c.transport) +
                " needs the ranks it runs in this process (--ranks XxYxZ, "
                "or --rank-count N for N ranks on the rank grid halox picks)");
  }
  if (c.local_fused && (c.comm == "default" || c.comm == "contig")) {
    throw Error("halox-lbm: --transport local-fused moves the faces of --comm datatype or overlap");
  }
  if (!(c.params.tau > 0.5)) throw Error("halox-lbm: --tau must exceed 0.5 (unstable otherwise)");
  if (!(c.params.tau_g > 0.5))
    throw Error("halox-lbm: --tau-g must exceed 0.5 (unstable otherwise)");
  if (c.warmup < 0) c.warmup = std::min(10, c.steps / 10);
  if (c.warmup > c.steps) throw Error("halox-lbm: --warmup must be at most --steps");
  if (c.params.A <= 0 || c.params.kappa <= 0)
    throw Error("halox-lbm: --A and --kappa must be positive");
  c.params.multiphase = c.model == "multiphase";
  return c;
}

// Uneven split: the first (n mod d) ranks of an axis get one more cell.
int local_size(int n, int d, int c) {
  return n / d + (c < n % d ? 1 : 0);
}
int local_offset(int n, int d, int c) {
  return c * (n / d) + std::min(c, n % d);
}

double hash01(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + i;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / 9007199254740992.0;
}

// The halo exchange of one field (f, g or phi): which planes cross each face.
struct FieldHalo {
  int field = 0;                         // 0 f, 1 g, 2 phi
  std::vector<std::vector<int>> planes;  // per pulse
  GridPlan plan;                         // per-pulse types covering the crossing planes
  GridPlan moved;  // the plan without the pulses of wrapped axes: what a halox exchange moves
  std::unique_ptr<GridExchange> exchange;
  // The contig variant: per axis, a contiguous buffer [send -, send +, recv -, recv +] and an
  // exchange of its byte ranges.
  struct Stage {
    GridPlan plan;                           // the stage's two pulses over byte ranges
    std::unique_ptr<GridExchange> exchange;  // none with local ranks (LocalRanks has them)
    std::array<std::int64_t, 2> bytes{};
    char* buffer = nullptr;
    std::vector<char> host;
  };
  std::array<Stage, 3> stages;
};

// The cells a pulse sends and receives (halo coordinates, [lo, hi)).
struct FaceBoxes {
  std::array<int, 3> send_lo{}, send_hi{}, recv_lo{}, recv_hi{};
};
FaceBoxes face_boxes(const PulseHeader& hd, const std::array<int, 3>& n) {
  FaceBoxes b;
  for (int a = 0; a < 3; ++a) {
    const bool done = a > hd.axis;  // axes exchanged earlier carry their halo along
    b.send_lo[a] = b.recv_lo[a] = done ? 0 : 1;
    b.send_hi[a] = b.recv_hi[a] = done ? n[a] + 2 : n[a] + 1;
  }
  const int a = hd.axis;
  b.send_lo[a] = hd.direction < 0 ? 1 : n[a];
  b.send_hi[a] = b.send_lo[a] + 1;
  b.recv_lo[a] = hd.direction < 0 ? n[a] + 1 : 0;
  b.recv_hi[a] = b.recv_lo[a] + 1;
  return b;
}

// Phase times from points marked in stream order on one back end, read one step late: the
// host waits for step s - 1 while step s is queued, so the GPU never idles between the
// phases or the steps of a stream-ordered exchange. A step marks the points of its set
// (two sets, by step parity): before the exchanges, after them, after the first update,
// after the phi exchange, after the second update (multiphase). A step that moves nothing
// (every axis wrapped) marks no points around its exchanges.
class PhaseClock {
 public:
  /// The first point of the set of step `step`.
  static int first_point(long step) { return 5 * static_cast<int>(step % 2); }
  /// After a step marked the set from `at`: adds the previous step's times.
  void marked(Backend& b, int at, bool moves, bool multiphase) {
    settle(b);
    m_pending = at;
    m_moves = moves;
    m_multiphase = multiphase;
  }
  double exchange(Backend& b) {
    settle(b);
    return m_exchange;
  }
  double compute(Backend& b) {
    settle(b);
    return m_compute;
  }
  void reset(Backend& b) {
    settle(b);
    m_exchange = m_compute = 0;
  }

 private:
  // Adds the phase times of the step whose points are still unread (waits for its end).
  void settle(Backend& b) {
    if (m_pending < 0) return;
    const int at = m_pending;
    m_pending = -1;
    if (m_moves) {
      m_exchange +=
          b.seconds_between(at, at + 1) + (m_multiphase ? b.seconds_between(at + 2, at + 3) : 0);
    }
    m_compute += b.seconds_between(at + 1, at + 2) +
                 (m_multiphase ? b.seconds_between(m_moves ? at + 3 : at + 2, at + 4) : 0);
  }
  double m_exchange = 0, m_compute = 0;
  int m_pending = -1;  // the first point of the step not yet added, or -1
  bool m_moves = true, m_multiphase = false;
};

class LocalRanks;

class Lbm {
  friend class LocalRanks;  // drives the exchange pieces of its ranks

 public:
  Lbm(MPI_Comm comm, const Cli& cli) : Lbm(Topology::from_mpi(comm, cli.ranks), cli) {}
  /// One rank of `topology`; with --transport local-*, one of several ranks of this process,
  /// whose exchanges a LocalRanks driver does (no MPI here then).
  Lbm(Topology topology, const Cli& cli) : m_cli(cli), m_topology(std::move(topology)) {
    const auto dims = m_topology.dims(), c = m_topology.coords();
    for (int a = 0; a < 3; ++a) {
      if (cli.grid[a] < dims[a]) {
        throw Error("halox-lbm: the grid has " + std::to_string(cli.grid[a]) + " cells along " +
                    "xyz"[a] + " for " + std::to_string(dims[a]) + " ranks: at least one each");
      }
      m_n[a] = local_size(cli.grid[a], dims[a], c[a]);
      m_offset[a] = local_offset(cli.grid[a], dims[a], c[a]);
      m_wrap[a] = cli.self_halo == "wrap" && dims[a] == 1 && m_topology.periodic()[a];
    }
    const bool gpu = cli.device == "gpu" || (cli.device == "auto" && visible_gpus() > 0);
    m_backend = gpu ? make_gpu_backend(cli.single) : make_cpu_backend(cli.single);
    m_transport = cli.transport_given && !cli.local
                      ? cli.transport
                      : (gpu ? TransportKind::staged : TransportKind::host);
    if (!gpu && m_transport != TransportKind::host) {
      throw Error("halox-lbm: the CPU back end keeps host arrays: use --transport host");
    }
    m_backend->allocate(m_n, cli.params.multiphase, m_wrap);
    if ((long long)m_backend->row_pitch() * (m_n[1] + 2) * (m_n[2] + 2) >= kMaxPlaneElements) {
      throw Error("halox-lbm: " + std::to_string(m_n[0]) + "x" + std::to_string(m_n[1]) + "x" +
                  std::to_string(m_n[2]) + " cells on one rank: a plane of 2^30 elements or " +
                  "more; use more ranks");
    }
    initialise();
    const Datatype real = m_backend->real() == BasicKind::float32 ? Datatype::of<float>().commit()
                                                                  : Datatype::of<double>().commit();
    m_real_bytes = m_backend->real() == BasicKind::float32 ? 4 : 8;
    // The back end's rows may be padded (aligned on the GPU): the plan's types follow them.
    const std::array<std::int64_t, 3> interior = {m_n[0], m_n[1], m_n[2]},
                                      allocated = {m_backend->row_pitch(), m_n[1] + 2, m_n[2] + 2};
    const GridPlan base = cli.local ? make_grid_plan(m_topology, interior, 1, real, allocated)
                                    : build_grid_plan(m_topology, interior, 1, real, allocated);
    // Multiphase, with halox moving the faces: the back end keeps g right after f, so one
    // exchange of f's and g's crossing planes (a struct type spanning both) moves the two: one
    // launch and one handshake per step fewer than an exchange each.
    m_fg_merged = cli.params.multiphase && halox_moves() && cli.fg_exchange == "merged";
    if (m_fg_merged && reinterpret_cast<std::uintptr_t>(m_backend->g()) !=
                           reinterpret_cast<std::uintptr_t>(m_backend->f()) + Q * plane_bytes()) {
      throw Error("halox-lbm: --fg-exchange merged needs g right after f in memory");
    }
    m_f = make_halo(0, base, Q, m_fg_merged ? QG : 0);
    if (cli.params.multiphase) {
      m_g = make_halo(1, base, QG);
      m_phi = make_halo(2, base, 0);
    }
  }
  /// Whether f's exchange moves g's crossing planes too (then g has no exchange of its own).
  bool fg_merged() const { return m_fg_merged; }

  void step() {
    if (m_cli.comm == "overlap") {
      step_overlapped();
    } else {
      // Phase times: PhaseClock. (A transport that needs the host, such as MPI through host
      // memory, waits for its own work.)
      Backend& b = *m_backend;
      const int at = PhaseClock::first_point(m_steps);
      const bool moves = !exchange_free();
      if (moves) {
        b.mark(at);
        exchange(m_f);
        if (m_cli.params.multiphase && !m_fg_merged) exchange(m_g);
      }
      b.mark(at + 1);
      first_update();
      b.mark(at + 2);
      if (m_cli.params.multiphase) {
        if (moves) {
          exchange(m_phi);
          b.mark(at + 3);
        }
        second_update();
        b.mark(at + 4);
      }
      m_phases.marked(b, at, moves, m_cli.params.multiphase);
    }
    finish_step();
  }

  // The pieces of a step, for a driver of several ranks of one process (LocalRanks), which
  // does every rank's exchanges between them: exchange f and g; the first update (BGK, or
  // the phi pass); exchange phi; the second (the fused stream-collide pass); swap.
  void first_update() { update(0, whole()); }
  void second_update() {
    if (m_cli.params.multiphase) update(1, whole());
  }
  // The overlap variant's halves of update pass 0 or 1: the cells that read no halo, on the
  // side stream (the halo travels meanwhile), then, once it is in, the boundary shell.
  void update_inner(int pass) {
    m_backend->fork();
    update(pass, inner_box(), true);
  }
  void update_shell(int pass) {
    for (const auto& r : shell_boxes()) update(pass, r);
    m_backend->join();
  }
  void finish_step() {
    m_backend->swap();
    ++m_steps;
  }
  /// Field k (0 f, 1 g, 2 phi): the current copy and the plan of the populations it sends.
  void* field(int k) { return base(halo(k)); }
  const GridPlan& plan(int k) const { return (k == 0 ? m_f : k == 1 ? m_g : m_phi).moved; }
  /// Whether the update wraps around pulse p's axis (no exchange of it), or stage s's.
  bool wraps(const FieldHalo& h, std::size_t p) const {
    return m_wrap[h.plan.pulses[p].header.axis];
  }
  bool stage_wraps(const FieldHalo& h, int s) const {
    return wraps(h, 2 * static_cast<std::size_t>(s));
  }
  /// The axes the update wraps, e.g. "yz" (the same on every rank).
  std::string wrapped_axes() const {
    std::string axes;
    for (int a = 0; a < 3; ++a) {
      if (m_wrap[a]) axes += "xyz"[a];
    }
    return axes;
  }
  FieldHalo& halo(int k) { return k == 0 ? m_f : k == 1 ? m_g : m_phi; }
  void synchronize() { m_backend->synchronize(); }

  // The overlap variant: cells that read no halo (the inner box) are updated on a second
  // stream while the halo travels; the boundary shell follows the exchange. Every cell
  // still gets exactly the same arithmetic, so the fields stay bitwise those of the others.
  void step_overlapped() {
    update_inner(0);
    exchange(m_f);
    if (m_cli.params.multiphase && !m_fg_merged) exchange(m_g);
    update_shell(0);
    if (m_cli.params.multiphase) {
      update_inner(1);
      exchange(m_phi);
      update_shell(1);
    }
    // No wait for the GPU here: the next step's work queues behind this one (stream order
    // and the fork/join events keep it correct), so no step starts on an idle GPU. The run's
    // wall time is this variant's compute time (exchange and compute overlap: one span).
  }

  Region whole() const { return Region{{1, 1, 1}, {m_n[0] + 1, m_n[1] + 1, m_n[2] + 1}}; }
  // Update pass 0 (BGK, or the phi pass) or 1 (the fused stream-collide pass) over a region.
  void update(int pass, const Region& r, bool side = false) {
    if (pass == 1) {
      m_backend->stream_collide(m_cli.params, r, side);
    } else if (m_cli.params.multiphase) {
      m_backend->update_phi(r, side);
    } else {
      m_backend->bgk_step(1.0 / m_cli.params.tau, r, side);
    }
  }
  // Cells whose whole stencil lies inside this rank's interior. Along x its ends sit on the
  // back end's row alignment (a DRAM sector on the GPU), so that the x slabs of the shell
  // update whole sectors, not one-cell columns that each cost a sector per cell.
  Region inner_box() const {
    const int w = m_backend->row_alignment();
    return Region{{1 + w, 2, 2}, {1 + (m_n[0] - 1) / w * w, m_n[1], m_n[2]}};
  }
  // The interior minus the inner box, as disjoint slabs: z ends, then y ends, then x ends.
  std::vector<Region> shell_boxes() const {
    const Region inner = inner_box();
    std::vector<Region> out;
    std::array<int, 3> lo = {1, 1, 1}, hi = {m_n[0] + 1, m_n[1] + 1, m_n[2] + 1};
    for (int a : {2, 1, 0}) {
      Region low{lo, hi}, high{lo, hi};
      low.hi[a] = std::clamp(inner.lo[a], lo[a], hi[a]);
      high.lo[a] = std::max(low.hi[a], std::min(inner.hi[a], hi[a]));
      if (low.cells() > 0) out.push_back(low);
      if (high.cells() > 0) out.push_back(high);
      lo[a] = low.hi[a];
      hi[a] = high.lo[a];
    }
    return out;
  }

  // Sums over all ranks: fluid mass, phase A and B amounts, kinetic energy.
  std::array<double, 4> totals() {
    const std::array<double, 4> local = local_totals();
    std::array<double, 4> global{};
    HALOX_MPI_CHECK(
        MPI_Allreduce(local.data(), global.data(), 4, MPI_DOUBLE, MPI_SUM, m_topology.comm()));
    return global;
  }
  // This rank's share of them.
  std::array<double, 4> local_totals() {
    const auto m = m_backend->download_moments();
    std::array<double, 4> local{};
    for (std::size_t i = 0; i < m.size(); i += 5) {
      local[0] += m[i];
      local[1] += 0.5 * (1 + m[i + 4]);
      local[2] += 0.5 * (1 - m[i + 4]);
      local[3] += 0.5 * m[i] * (m[i + 1] * m[i + 1] + m[i + 2] * m[i + 2] + m[i + 3] * m[i + 3]);
    }
    return local;
  }

  // Every cell's moments in global order on rank 0 (rho, ux, uy, uz, phi).
  std::vector<double> gather() {
    const std::vector<double> mine = tagged_moments();
    int size = 0, rank = 0;
    HALOX_MPI_CHECK(MPI_Comm_size(m_topology.comm(), &size));
    HALOX_MPI_CHECK(MPI_Comm_rank(m_topology.comm(), &rank));
    int count = static_cast<int>(mine.size());
    std::vector<int> counts(size), displs(size);
    HALOX_MPI_CHECK(
        MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, m_topology.comm()));
    int total = 0;
    for (int r = 0; r < size; ++r) {
      displs[r] = total;
      total += counts[r];
    }
    std::vector<double> all(rank == 0 ? total : 0);
    HALOX_MPI_CHECK(MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(),
                                displs.data(), MPI_DOUBLE, 0, m_topology.comm()));
    return rank == 0 ? in_global_order(all, m_cli.grid) : std::vector<double>{};
  }
  // This rank's cells: the global cell number, then rho, ux, uy, uz, phi, per cell.
  std::vector<double> tagged_moments() {
    const auto m = m_backend->download_moments();
    std::vector<double> mine;
    for (int z = 0; z < m_n[2]; ++z)
      for (int y = 0; y < m_n[1]; ++y)
        for (int x = 0; x < m_n[0]; ++x) {
          const std::size_t i = 5 * ((static_cast<std::size_t>(z) * m_n[1] + y) * m_n[0] + x);
          const double gi =
              ((static_cast<double>(z + m_offset[2]) * m_cli.grid[1]) + (y + m_offset[1])) *
                  m_cli.grid[0] +
              (x + m_offset[0]);
          mine.push_back(gi);
          mine.insert(mine.end(), &m[i], &m[i + 5]);
        }
    return mine;
  }
  // Tagged moments of every rank (any order) -> the moments in global cell order.
  // Every cell of the global grid exactly once, or an error: ranks that disagree on the grid
  // send cells that do not fit it (they once overflowed this buffer).
  static std::vector<double> in_global_order(const std::vector<double>& all,
                                             const std::array<int, 3>& grid) {
    const std::size_t cells = static_cast<std::size_t>(grid[0]) * grid[1] * grid[2];
    if (all.size() != 6 * cells) {
      throw Error("halox-lbm: the ranks' cells add up to " + std::to_string(all.size() / 6) +
                  ", not the " + std::to_string(cells) + " of the global grid");
    }
    std::vector<double> out(5 * cells);
    std::vector<bool> seen(cells, false);
    for (std::size_t k = 0; k + 6 <= all.size(); k += 6) {
      const double g = all[k];
      const std::size_t gi = static_cast<std::size_t>(g);
      if (!(g >= 0) || gi >= cells || seen[gi]) {
        throw Error("halox-lbm: a rank sent cell " + std::to_string(g) +
                    ", outside the global grid or twice");
      }
      seen[gi] = true;
      std::copy(&all[k + 1], &all[k + 6], &out[5 * gi]);
    }
    return out;
  }

  ~Lbm() {
#if HALOX_HAS_CUDA
    // The default and contig variants' device buffers.
    cudaFree(m_device_send);
    cudaFree(m_device_recv);
    if (m_backend && m_backend->on_device()) {
      for (FieldHalo* h : {&m_f, &m_g, &m_phi}) {
        for (auto& st : h->stages) cudaFree(st.buffer);
      }
    }
#endif
  }
  Lbm(const Lbm&) = delete;
  Lbm& operator=(const Lbm&) = delete;

  const Topology& topology() const {
    return m_topology;
  }
  Backend& backend() {
    return *m_backend;
  }
  std::string transport() const {
    if (m_cli.comm == "default") return "default (hand-written pack + host copies + MPI)";
    return m_cli.comm + ", " + to_string(m_transport);
  }
  double time_exchange() {
    return m_phases.exchange(*m_backend);
  }
  double time_compute() {
    return m_phases.compute(*m_backend);
  }
  void reset_timers() {
    m_phases.reset(*m_backend);
  }
  std::array<int, 3> local() const {
    return m_n;
  }

 private:
  // Bytes of one population plane of the padded local array (halo layer included).
  std::int64_t plane_bytes() const {
    return static_cast<std::int64_t>(m_backend->row_pitch()) * (m_n[1] + 2) * (m_n[2] + 2) *
           m_real_bytes;
  }
  // Whether halox exchanges move the faces (the default and contig variants pack by hand).
  bool halox_moves() const {
    return m_cli.comm == "datatype" || m_cli.comm == "overlap";
  }
  // Every axis is wrapped by the update (one rank, periodic): no face to exchange.
  bool exchange_free() const {
    return m_wrap[0] && m_wrap[1] && m_wrap[2];
  }

  void initialise() {
    const Params& p = m_cli.params;
    std::vector<double> cells;
    cells.reserve(static_cast<std::size_t>(m_n[0]) * m_n[1] * m_n[2] * 26);
    const double k0 = 2 * M_PI / m_cli.grid[0], k1 = 2 * M_PI / m_cli.grid[1];
    const double xi = std::sqrt(p.kappa / p.A);
    for (int z = 0; z < m_n[2]; ++z)
      for (int y = 0; y < m_n[1]; ++y)
        for (int x = 0; x < m_n[0]; ++x) {
          const int gx = x + m_offset[0], gy = y + m_offset[1], gz = z + m_offset[2];
          double rho = 1, ux = 0, uy = 0, phi = 0;
          if (m_cli.init == "taylor-green") {
            const double U = m_cli.velocity, X = k0 * (gx + 0.5), Y = k1 * (gy + 0.5);
            ux = U * std::sin(X) * std::cos(Y);
            uy = -U * std::cos(X) * std::sin(Y);
            // The matching pressure field, p = -U^2/4 (cos 2X + cos 2Y), as rho = 1 + 3 p.
            rho = 1 - 0.75 * U * U * (std::cos(2 * X) + std::cos(2 * Y));
          } else if (m_cli.init == "droplet") {
            const double dx = gx + 0.5 - m_cli.grid[0] / 2.0, dy = gy + 0.5 - m_cli.grid[1] / 2.0,
                         dz = gz + 0.5 - m_cli.grid[2] / 2.0;
            const double r = std::sqrt(dx * dx + dy * dy + dz * dz);
            phi = std::tanh((m_cli.radius - r) / (std::sqrt(2.0) * xi));
          } else if (m_cli.init == "spinodal") {
            const std::uint64_t id =
                (static_cast<std::uint64_t>(gz) * m_cli.grid[1] + gy) * m_cli.grid[0] + gx;
            phi = 0.1 * (2 * hash01(m_cli.seed, id) - 1);
          }
          for (int q = 0; q < Q; ++q) cells.push_back(equilibrium<double>(q, rho, ux, uy, 0.0));
          // D3Q7 at rest with mu = 0: everything in the rest population.
          cells.push_back(phi);
          for (int q = 1; q < QG; ++q) cells.push_back(0.0);
        }
    m_backend->upload(cells);
  }

  // Per pulse, the planes whose populations cross that face toward the receiver: those
  // with e_axis == direction (the receiver pulls them from its halo). phi: its only plane.
  // f with g_count > 0: g's crossing planes too, as planes Q + q of f (g follows f).
  FieldHalo make_halo(int field, const GridPlan& base, int q_count, int g_count = 0) {
    FieldHalo h;
    h.field = field;
    h.plan = base;
    for (auto& pulse : h.plan.pulses) {
      std::vector<int> planes;
      if (field == 2) {
        planes = {0};
      } else {
        for (int q = 0; q < q_count; ++q) {
          const int e[3] = {ex(q), ey(q), ez(q)};
          if (e[pulse.header.axis] == pulse.header.direction) planes.push_back(q);
        }
        for (int q = 0; q < g_count; ++q) {  // D3Q7's velocities are D3Q19's first seven
          const int e[3] = {ex(q), ey(q), ez(q)};
          if (e[pulse.header.axis] == pulse.header.direction) planes.push_back(Q + q);
        }
      }
      std::vector<std::int64_t> blocks(planes.size(), 1), disps;
      for (int q : planes) disps.push_back(q * plane_bytes());
      const std::vector<Datatype> sends(planes.size(), pulse.send_type),
          recvs(planes.size(), pulse.recv_type);
      pulse.send_type = Datatype::struct_(blocks, disps, sends).commit();
      pulse.recv_type = Datatype::struct_(blocks, disps, recvs).commit();
      const std::int64_t factor = static_cast<std::int64_t>(planes.size());
      pulse.header.send_size *= factor;
      pulse.header.recv_size *= factor;
      h.planes.push_back(planes);
    }
    h.moved = h.plan;
    std::erase_if(h.moved.pulses, [&](const GridPulse& p) { return m_wrap[p.header.axis]; });
    const bool merged_into_f = field == 1 && m_fg_merged;
    if (halox_moves() && !m_cli.local && !h.moved.pulses.empty() && !merged_into_f) {
      h.exchange = std::make_unique<GridExchange>(m_topology, h.moved, exchange_options(h));
    }
    return h;
  }

  // The field's exchange options: the transport, and its name in traces.
  ExchangeOptions exchange_options(const FieldHalo& h) const {
    ExchangeOptions options{m_transport};
    options.name = h.field == 0 ? (m_fg_merged ? "f+g" : "f") : h.field == 1 ? "g" : "phi";
    return options;
  }

  void* base(const FieldHalo& h) {
    return h.field == 0 ? m_backend->f() : h.field == 1 ? m_backend->g() : m_backend->phi();
  }

  void exchange(FieldHalo& h) {
    if (m_cli.comm == "contig") {
      exchange_contiguous(h);
    } else if (m_cli.comm == "default") {
      exchange_by_hand(h);
    } else if (h.exchange) {  // none when every axis wraps
      h.exchange->exchange_async(base(h), m_backend->stream_handle());
    }
  }

  // The contig variant: the hand-written pack into contiguous buffers of the default
  // variant, moved by a halox transport (one exchange per axis, since each axis forwards
  // what the previous one unpacked).
  void exchange_contiguous(FieldHalo& h) {
    for (int s = 0; s < 3; ++s) {
      if (stage_wraps(h, s)) continue;
      contig_pack(h, s);
      h.stages[s].exchange->exchange_async(h.stages[s].buffer, m_backend->stream_handle());
      contig_unpack(h, s);
    }
  }
  // The contig variant's pieces (LocalRanks moves the stage buffers between its ranks):
  // stage s's two faces packed by hand into the front of its buffer, and unpacked from the
  // back once the exchange has filled it.
  void contig_pack(FieldHalo& h, int s) {
    contig_setup(h, s);
    FieldHalo::Stage& st = h.stages[s];
    const std::size_t p0 = 2 * static_cast<std::size_t>(s);
    for (int k = 0; k < 2; ++k) {
      const FaceBoxes fb = face_boxes(h.plan.pulses[p0 + k].header, m_n);
      m_backend->pack_box(h.field, fb.send_lo, fb.send_hi, h.planes[p0 + k],
                          st.buffer + (k ? st.bytes[0] : 0));
    }
  }
  void contig_unpack(FieldHalo& h, int s) {
    FieldHalo::Stage& st = h.stages[s];
    const std::size_t p0 = 2 * static_cast<std::size_t>(s);
    const std::int64_t recv_base = st.bytes[0] + st.bytes[1];
    for (int k = 0; k < 2; ++k) {
      const PulseHeader& hd = h.plan.pulses[p0 + k].header;
      if (hd.recv_rank < 0) continue;
      const FaceBoxes fb = face_boxes(hd, m_n);
      m_backend->unpack_box(h.field, fb.recv_lo, fb.recv_hi, h.planes[p0 + k],
                            st.buffer + recv_base + (k ? st.bytes[0] : 0));
    }
  }
  // Once per field and stage: the byte-range plan, the buffer and (across processes) the
  // exchange.
  void contig_setup(FieldHalo& h, int s) {
    FieldHalo::Stage& st = h.stages[s];
    const std::size_t p0 = 2 * static_cast<std::size_t>(s);
    if (st.buffer != nullptr) return;
    GridPlan plan = h.plan;
    plan.pulses = {h.plan.pulses[p0], h.plan.pulses[p0 + 1]};
    std::array<std::int64_t, 4> offset{};
    for (int k = 0; k < 2; ++k) {
      const FaceBoxes fb = face_boxes(plan.pulses[k].header, m_n);
      std::int64_t cells = static_cast<std::int64_t>(h.planes[p0 + k].size());
      for (int a = 0; a < 3; ++a) cells *= fb.send_hi[a] - fb.send_lo[a];
      st.bytes[k] = cells * m_real_bytes;
    }
    offset = {0, st.bytes[0], st.bytes[0] + st.bytes[1], 2 * st.bytes[0] + st.bytes[1]};
    const std::int64_t at = 2 * (st.bytes[0] + st.bytes[1]);
    const Datatype byte = Datatype::of<char>().commit();
    // Bytes [off, off + len) of the buffer.
    auto range = [&](std::int64_t off, std::int64_t len) {
      return Datatype::struct_(std::span<const std::int64_t>(&len, 1),
                               std::span<const std::int64_t>(&off, 1),
                               std::span<const Datatype>(&byte, 1))
          .commit();
    };
    for (int k = 0; k < 2; ++k) {
      plan.pulses[k].send_type = range(offset[k], st.bytes[k]);
      plan.pulses[k].recv_type = range(offset[2 + k], st.bytes[k]);
      plan.pulses[k].header.send_size = plan.pulses[k].header.send_rank >= 0 ? st.bytes[k] : 0;
      plan.pulses[k].header.recv_size = plan.pulses[k].header.recv_rank >= 0 ? st.bytes[k] : 0;
    }
#if HALOX_HAS_CUDA
    if (m_backend->on_device()) {
      void* p = nullptr;
      if (cudaMalloc(&p, static_cast<std::size_t>(std::max<std::int64_t>(at, 1))) != cudaSuccess) {
        throw Error("halox-lbm: cudaMalloc of the contig buffers failed");
      }
      st.buffer = static_cast<char*>(p);
    } else
#endif
    {
      st.host.resize(static_cast<std::size_t>(std::max<std::int64_t>(at, 1)));
      st.buffer = st.host.data();
    }
    if (!m_cli.local) {
      ExchangeOptions options = exchange_options(h);
      options.name += std::string(" ") + "xyz"[h.plan.pulses[p0].header.axis];
      st.exchange = std::make_unique<GridExchange>(m_topology, plan, options);
    }
    st.plan = std::move(plan);
  }

  // The "default" variant, as the seed's application does it: hand-written pack kernels into
  // contiguous buffers, explicit copies to the host, MPI_Sendrecv, copies back, unpack.
  void exchange_by_hand(FieldHalo& h) {
    MPI_Comm comm = m_topology.comm();
    for (std::size_t p = 0; p < h.plan.pulses.size(); ++p) {
      if (wraps(h, p)) continue;
      const PulseHeader& hd = h.plan.pulses[p].header;
      const int bytes = static_cast<int>(hand_pack(h, p));
      const int to = hd.send_rank < 0 ? MPI_PROC_NULL : hd.send_rank;
      const int from = hd.recv_rank < 0 ? MPI_PROC_NULL : hd.recv_rank;
      HALOX_MPI_CHECK(MPI_Sendrecv(m_host_send.data(), bytes, MPI_BYTE, to,
                                   600 + static_cast<int>(p), m_host_recv.data(), bytes, MPI_BYTE,
                                   from, 600 + static_cast<int>(p), comm, MPI_STATUS_IGNORE));
      if (hd.recv_rank >= 0) hand_unpack(h, p);
    }
  }
  // Its halves (LocalRanks copies the host buffers between its ranks in place of MPI): pulse
  // p's face packed by hand and copied into the host send buffer (returns its bytes; the
  // receive buffer is sized alike), and unpacked from the host receive buffer.
  std::size_t hand_pack(FieldHalo& h, std::size_t p) {
    const FaceBoxes fb = face_boxes(h.plan.pulses[p].header, m_n);
    std::int64_t cells = static_cast<std::int64_t>(h.planes[p].size());
    for (int k = 0; k < 3; ++k) cells *= fb.send_hi[k] - fb.send_lo[k];
    const std::size_t bytes = static_cast<std::size_t>(cells * m_real_bytes);
    m_host_send.resize(bytes);
    m_host_recv.resize(bytes);
#if HALOX_HAS_CUDA
    if (m_backend->on_device()) {
      if (m_device_bytes < bytes) {
        LBM_CUDA(cudaFree(m_device_send));
        LBM_CUDA(cudaFree(m_device_recv));
        m_device_send = m_device_recv = nullptr;
        m_device_bytes = 0;
        LBM_CUDA(cudaMalloc(&m_device_send, bytes));
        LBM_CUDA(cudaMalloc(&m_device_recv, bytes));
        m_device_bytes = bytes;
      }
      m_backend->pack_box(h.field, fb.send_lo, fb.send_hi, h.planes[p], m_device_send);
      LBM_CUDA(cudaMemcpyAsync(m_host_send.data(), m_device_send, bytes, cudaMemcpyDeviceToHost,
                               m_backend->stream_handle()));
      m_backend->synchronize();
      return bytes;
    }
#endif
    m_backend->pack_box(h.field, fb.send_lo, fb.send_hi, h.planes[p], m_host_send.data());
    return bytes;
  }
  void hand_unpack(FieldHalo& h, std::size_t p) {
    const FaceBoxes fb = face_boxes(h.plan.pulses[p].header, m_n);
#if HALOX_HAS_CUDA
    if (m_backend->on_device()) {
      LBM_CUDA(cudaMemcpyAsync(m_device_recv, m_host_recv.data(), m_host_recv.size(),
                               cudaMemcpyHostToDevice, m_backend->stream_handle()));
      m_backend->unpack_box(h.field, fb.recv_lo, fb.recv_hi, h.planes[p], m_device_recv);
      m_backend->synchronize();
      return;
    }
#endif
    m_backend->unpack_box(h.field, fb.recv_lo, fb.recv_hi, h.planes[p], m_host_recv.data());
  }

  Cli m_cli;
  Topology m_topology;
  std::array<int, 3> m_n{}, m_offset{};
  std::array<bool, 3> m_wrap{};  // periodic axes this rank spans alone, wrapped by the update
  std::unique_ptr<Backend> m_backend;
  TransportKind m_transport = TransportKind::host;
  int m_real_bytes = 4;
  FieldHalo m_f, m_g, m_phi;
  bool m_fg_merged = false;  // m_f's exchange moves g's planes too
  std::vector<char> m_host_send, m_host_recv;
  void* m_device_send = nullptr;
  void* m_device_recv = nullptr;
  std::size_t m_device_bytes = 0;
  PhaseClock m_phases;
  long m_steps = 0;
};

// --transport local-pulse or local-fused: every rank of --ranks in this one process, stepped
// in lockstep. Between the updates, one GridExchange over Ranks::local per field moves every rank's
// faces straight into its neighbours' arrays (host memory: CPU copies; GPU: one kernel per face, or
// with local-fused one kernel for all of them, on rank 0's stream). The ranks' streams are ordered
// through events, not the host: rank 0's stream waits for every rank's updates before an exchange,
// and every rank's stream waits for the exchange before its next update, so the steps queue
// without a host wait (the contig and default variants still pass through the host). The
// fields stay bitwise those of one rank.
class LocalRanks {
 public:
  explicit LocalRanks(const Cli& cli) : m_cli(cli), m_shape(cli.ranks, {true, true, true}, 0) {
    for (int r = 0; r < m_shape.size(); ++r) {
      m_ranks.push_back(
          std::make_unique<Lbm>(Topology(m_shape.dims(), m_shape.periodic(), r), cli));
    }
    const int fields = cli.params.multiphase ? 3 : 1;
    for (int k = 0; k < fields; ++k) {
      if (k == 1 && fg_merged()) {  // g moves with f (alike on every rank)
        m_exchanges.push_back(nullptr);
        continue;
      }
      std::vector<GridPlan> plans;
      for (auto& lbm : m_ranks) plans.push_back(lbm->plan(k));
      ExchangeOptions options;
      options.transport = cli.transport;
      m_exchanges.push_back(
          std::make_unique<GridExchange>(Ranks::local(m_shape), std::move(plans), options));
    }
  }

  void step() {
    if (m_cli.comm == "overlap") {
      step_overlapped();
    } else {
      step_in_phases();
    }
    for (auto& lbm : m_ranks) lbm->finish_step();
  }

  Backend& backend() { return m_ranks[0]->backend(); }
  const Topology& topology() const { return m_shape; }
  std::string transport() const {
    const std::string where = to_string(m_cli.transport) + " (" + std::to_string(m_ranks.size()) +
                              " ranks in this process)";
    if (m_cli.comm == "default") {
      return "default (hand-written pack + host copies between the ranks), " + where;
    }
    return m_cli.comm + (m_cli.local_fused ? ", GPU-initiated (one kernel for every face)" : "") +
           ", " + where;
  }
  double time_exchange() { return m_phases.exchange(backend()); }
  double time_compute() { return m_phases.compute(backend()); }
  void reset_timers() { m_phases.reset(backend()); }
  std::array<int, 3> local() const { return m_ranks[0]->local(); }
  std::string wrapped_axes() const { return m_ranks[0]->wrapped_axes(); }
  bool fg_merged() const { return m_ranks[0]->fg_merged(); }
  std::array<double, 4> totals() {
    std::array<double, 4> sum{};
    for (auto& lbm : m_ranks) {
      const auto mine = lbm->local_totals();
      for (int k = 0; k < 4; ++k) sum[k] += mine[k];
    }
    return sum;
  }
  std::vector<double> gather() {
    std::vector<double> all;
    for (auto& lbm : m_ranks) {
      const auto mine = lbm->tagged_moments();
      all.insert(all.end(), mine.begin(), mine.end());
    }
    return Lbm::in_global_order(all, m_cli.grid);
  }
  void synchronize() {
    for (auto& lbm : m_ranks) lbm->synchronize();
  }

 private:
  // Rank 0's stream waits for every rank's work so far (their faces and updates).
  void gather_streams() {
    for (std::size_t r = 1; r < m_ranks.size(); ++r) backend().wait_for(m_ranks[r]->backend());
  }
  // Every rank's stream waits for rank 0's work so far (an exchange into their halos).
  void scatter_streams() {
    for (std::size_t r = 1; r < m_ranks.size(); ++r) m_ranks[r]->backend().wait_for(backend());
  }

  // Exchange, update, (exchange phi, update): every rank's updates are timed together, from
  // points marked on rank 0's stream (PhaseClock).
  void step_in_phases() {
    Backend& b = backend();
    const int at = PhaseClock::first_point(m_steps);
    gather_streams();
    b.mark(at);
    exchange(0);
    if (m_cli.params.multiphase && !fg_merged()) exchange(1);
    b.mark(at + 1);
    scatter_streams();
    for (auto& lbm : m_ranks) lbm->first_update();
    gather_streams();
    b.mark(at + 2);
    if (m_cli.params.multiphase) {
      exchange(2);
      b.mark(at + 3);
      scatter_streams();
      for (auto& lbm : m_ranks) lbm->second_update();
      gather_streams();
      b.mark(at + 4);
    }
    m_phases.marked(b, at, true, m_cli.params.multiphase);
    ++m_steps;
  }
  // The overlap variant: every rank's inner cells on its side stream while the faces move
  // (on rank 0's stream), then the shells. No phase times: one span.
  void step_overlapped() {
    for (auto& lbm : m_ranks) lbm->update_inner(0);
    gather_streams();  // the shells of the last step: the faces
    exchange(0);
    if (m_cli.params.multiphase && !fg_merged()) exchange(1);
    scatter_streams();
    for (auto& lbm : m_ranks) lbm->update_shell(0);
    if (m_cli.params.multiphase) {
      for (auto& lbm : m_ranks) lbm->update_inner(1);
      gather_streams();  // phi of every rank's shell, before its faces move
      exchange(2);
      scatter_streams();
      for (auto& lbm : m_ranks) lbm->update_shell(1);
    }
  }

  // Ordered by the caller: every rank's stream is gathered into rank 0's before, and waits
  // for it after (the contig and default variants wait on the host themselves).
  void exchange(int field) {
    if (m_cli.comm == "contig") {
      exchange_contiguous(field);
      return;
    }
    if (m_cli.comm == "default") {
      exchange_by_hand(field);
      return;
    }
    std::vector<void*>& pointers = m_pointers;
    pointers.clear();
    for (auto& lbm : m_ranks) pointers.push_back(lbm->field(field));
    m_exchanges[field]->exchange_async(pointers, m_ranks[0]->backend().stream_handle());
  }

  // contig: stage by stage, every rank packs its two faces by hand into its stage buffer, one
  // GridExchange (local-pulse) per field and stage moves the byte ranges between the ranks'
  // buffers, and every rank unpacks.
  void exchange_contiguous(int field) {
    for (int s = 0; s < 3; ++s) {
      if (m_ranks[0]->stage_wraps(m_ranks[0]->halo(field), s)) continue;  // alike on every rank
      for (auto& lbm : m_ranks) lbm->contig_pack(lbm->halo(field), s);
      synchronize();
      std::unique_ptr<GridExchange>& stage = m_stage_exchanges[3 * field + s];
      if (!stage) {
        std::vector<GridPlan> plans;
        for (auto& lbm : m_ranks) plans.push_back(lbm->halo(field).stages[s].plan);
        ExchangeOptions options;
        options.transport = TransportKind::local_pulse;  // the stage buffers: one kernel per face
        stage = std::make_unique<GridExchange>(Ranks::local(m_shape), std::move(plans), options);
      }
      std::vector<void*>& buffers = m_pointers;
      buffers.clear();
      for (auto& lbm : m_ranks) buffers.push_back(lbm->halo(field).stages[s].buffer);
      stage->exchange_async(buffers, m_ranks[0]->backend().stream_handle());
      m_ranks[0]->synchronize();
      for (auto& lbm : m_ranks) lbm->contig_unpack(lbm->halo(field), s);
    }
    synchronize();
  }
  // default: pulse by pulse, every rank packs by hand and copies its face to the host, the
  // host buffers move between the ranks (a host copy in place of MPI_Sendrecv), and every
  // rank copies back and unpacks.
  void exchange_by_hand(int field) {
    const std::size_t pulses = m_ranks[0]->halo(field).plan.pulses.size();
    for (std::size_t p = 0; p < pulses; ++p) {
      if (m_ranks[0]->wraps(m_ranks[0]->halo(field), p)) continue;  // alike on every rank
      for (auto& lbm : m_ranks) lbm->hand_pack(lbm->halo(field), p);
      for (auto& lbm : m_ranks) {
        const int to = lbm->halo(field).plan.pulses[p].header.send_rank;
        if (to >= 0) m_ranks[to]->m_host_recv = lbm->m_host_send;
      }
      for (auto& lbm : m_ranks) {
        if (lbm->halo(field).plan.pulses[p].header.recv_rank >= 0) {
          lbm->hand_unpack(lbm->halo(field), p);
        }
      }
    }
  }

  Cli m_cli;
  Topology m_shape;
  std::vector<std::unique_ptr<Lbm>> m_ranks;
  std::vector<std::unique_ptr<GridExchange>> m_exchanges;          // f, then g and phi
  std::array<std::unique_ptr<GridExchange>, 9> m_stage_exchanges;  // contig: field, stage
  std::vector<void*> m_pointers;
  PhaseClock m_phases;
  long m_steps = 0;
};

// The run and its report, for one MPI rank (Lbm) or every rank in this process (LocalRanks).
template <class Run>
int drive(Run& lbm, const Cli& cli, int rank, halox::apps::Watchdog& watchdog) {
  const long long cells = (long long)cli.grid[0] * cli.grid[1] * cli.grid[2];
  const auto first = lbm.totals();
  const std::string wrapped = lbm.wrapped_axes();
  if (rank == 0) {
    std::printf("halox-lbm: %s, %dx%dx%d cells on %s ranks, %s, %s\n", cli.model.c_str(),
                cli.grid[0], cli.grid[1], cli.grid[2], lbm.topology().describe().c_str(),
                lbm.backend().name().c_str(), lbm.transport().c_str());
    if (!wrapped.empty()) {
      std::printf("periodic axes with one rank (%s): the update wraps them, no self-halo\n",
                  wrapped.c_str());
    }
    std::printf(
        "memory: %.1f bytes per cell on rank 0 (two copies of f%s, phi, one halo layer)\n",
        double(lbm.backend().bytes()) / (double(lbm.local()[0]) * lbm.local()[1] * lbm.local()[2]),
        cli.model == "multiphase" ? " and g" : "");
  }
  const int every = cli.report_every > 0 ? cli.report_every : std::max(1, cli.steps / 10);
  if (!cli.trace.empty()) trace::enable();
  // The physics runs all the steps; the clock starts after the warm-up steps (the first
  // exchanges of NCCL and NVSHMEM set up connections and would count ~0.4 s otherwise).
  auto start = Clock::now();
  const int timed = cli.steps - cli.warmup;
  watchdog.beat("a step", cli.watchdog);
  for (int s = 1; s <= cli.steps; ++s) {
    if (!cli.trace.empty() && s == std::max(1, cli.steps - 2)) trace::clear();
    watchdog.beat("a step");
    lbm.step();
    if (s == cli.warmup) {
      lbm.synchronize();
      HALOX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
      lbm.reset_timers();
      start = Clock::now();
    }
    if (s % every == 0 && s > cli.warmup && rank == 0) {
      const double t = std::chrono::duration<double>(Clock::now() - start).count();
      std::printf("  step %6d  %8.1f MLUPS so far\n", s, cells * double(s - cli.warmup) / t / 1e6);
      std::fflush(stdout);
    }
  }
  lbm.synchronize();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  watchdog.beat("the summary", cli.watchdog > 0 ? halox::apps::kSetupSeconds : 0);
  if (!cli.trace.empty()) trace::write(MPI_COMM_WORLD, cli.trace);
  const auto last = lbm.totals();
  // The same sums on every rank: all stop together, with a non-zero exit.
  for (int k = 0; k < 4; ++k) {
    if (!std::isfinite(last[k])) {
      throw Error("halox-lbm: the fluid's totals became non-finite after " +
                  std::to_string(cli.steps) + " steps (mass " + std::to_string(last[0]) +
                  ", kinetic energy " + std::to_string(last[3]) +
                  "): the run diverged; raise --tau or lower --velocity");
    }
  }
  // overlap: one span, the whole run (its steps do not wait for the GPU one by one).
  double worst[2] = {0, 0},
         mine[2] = {lbm.time_exchange(), cli.comm == "overlap" ? seconds : lbm.time_compute()};
  HALOX_MPI_CHECK(MPI_Reduce(mine, worst, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
  const double mlups = timed > 0 ? cells * double(timed) / seconds / 1e6 : 0;
  // The update kernels alone (the slowest rank's compute phases; not for overlap, whose one
  // span holds the exchange too): the rate if the exchange were free.
  const double compute_mlups = cli.comm != "overlap" && timed > 0 && worst[1] > 0
                                   ? cells * double(timed) / worst[1] / 1e6
                                   : 0;
  // The bandwidth bound: bytes each cell update moves (counted below) against the copy
  // ceiling measured now. BGK: 19 populations read + written. Multiphase (two passes): the
  // phi pass reads g (7) and writes phi (1); the fused stream-collide pass reads and writes
  // f (19) and g (7) and reads phi (1, its neighbours come from cache): 61 values.
  const double real_bytes = lbm.backend().real() == BasicKind::float32 ? 4 : 8;
  const double cell_bytes = (cli.model == "bgk" ? 38 : 61) * real_bytes;
  // The whole run's bound: every process copies at once and their rates add up. Processes
  // sharing a GPU (two under MPS, each held to half of it) then get their shares of it, and
  // several GPUs add theirs; one process's ceiling alone was half a shared GPU's, which made
  // two processes on one GPU run at "130% of the bound".
  int processes = 1;
  HALOX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &processes));
  HALOX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  const double my_ceiling = lbm.backend().copy_ceiling_gbs();
  double ceiling = 0;
  HALOX_MPI_CHECK(MPI_Allreduce(&my_ceiling, &ceiling, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  const double bound = ceiling > 0 ? ceiling * 1e9 / cell_bytes / 1e6 : 0;
  int rc = 0;
  std::string checks;
  // Taylor-Green: the velocity amplitude (square root of the kinetic energy) decays as
  // exp(-nu (kx^2 + ky^2) t).
  double tg_error = 0;
  if (cli.init == "taylor-green") {
    const double nu = (cli.params.tau - 0.5) / 3.0;
    const double k2 = std::pow(2 * M_PI / cli.grid[0], 2) + std::pow(2 * M_PI / cli.grid[1], 2);
    const double want = std::exp(-nu * k2 * cli.steps), got = std::sqrt(last[3] / first[3]);
    tg_error = std::abs(got - want) / want;
    checks += "Taylor-Green velocity amplitude after " + std::to_string(cli.steps) +
              " steps: " + std::to_string(got) + " vs analytic " + std::to_string(want) +
              ", relative error " + std::to_string(tg_error);
    if (cli.check_taylor_green && !(tg_error < 0.01)) rc = 1;
  }
  double mass_error = 0;
  for (int k = 0; k < 3; ++k) {
    if (k > 0 && cli.model != "multiphase") continue;
    mass_error = std::max(mass_error, std::abs(last[k] - first[k]) / std::abs(first[k]));
  }
  if (cli.check_mass && !(mass_error < 1e-10)) rc = 1;
  // Collective: every rank takes part, only rank 0 receives the fields.
  const bool gathered = !cli.dump.empty() || !cli.slice.empty() || cli.init == "droplet";
  std::vector<double> fields;
  if (gathered) fields = lbm.gather();
  if (rank == 0) {
    std::printf(
        "\n%d steps (after %d untimed) in %.3f s: %.1f MLUPS; exchange %.1f%% of the step "
        "(slowest rank: exchange %.3f s, compute %.3f s)\n",
        timed, cli.warmup, seconds, mlups, 100 * worst[0] / std::max(1e-12, worst[0] + worst[1]),
        worst[0], worst[1]);
    if (bound > 0) {
      std::printf(
          "bandwidth bound: %.0f bytes per cell update, copy ceiling %.0f GB/s (measured now%s) "
          "-> %.0f MLUPS; this run: %.1f%% of it\n",
          cell_bytes, ceiling, processes > 1 ? ", every process copying at once" : "", bound,
          100 * mlups / bound);
    }
    if (compute_mlups > 0) {
      std::printf("update kernels alone: %.1f MLUPS", compute_mlups);
      if (bound > 0) std::printf(" (%.1f%% of the bound)", 100 * compute_mlups / bound);
      std::printf("\n");
    }
    std::printf("conservation: fluid mass %.3e, phase A %.3e, phase B %.3e (relative change)\n",
                std::abs(last[0] - first[0]) / first[0],
                cli.model == "multiphase" ? std::abs(last[1] - first[1]) / first[1] : 0.0,
                cli.model == "multiphase" ? std::abs(last[2] - first[2]) / first[2] : 0.0);
    if (!checks.empty()) std::printf("%s\n", checks.c_str());
    if (rc) std::printf("CHECK FAILED\n");
  }
  if (cli.init == "droplet") {
    // Laplace: the pressure jump c_s^2 (rho_in - rho_out) between the centre and a corner.
    const auto& m = fields;
    if (rank == 0) {
      auto at = [&](int x, int y, int z) {
        return m[5 * ((static_cast<std::size_t>(z) * cli.grid[1] + y) * cli.grid[0] + x)];
      };
      const int cx = cli.grid[0] / 2, cy = cli.grid[1] / 2, cz = cli.grid[2] / 2;
      const double inside = at(cx, cy, cz), outside = at(0, 0, 0);
      const double dp = (inside - outside) / 3.0;
      std::printf(
          "droplet radius %.2f: pressure jump %.6e (rho %.8f inside, %.8f outside); dp * R = "
          "%.6e\n",
          cli.radius, dp, inside, outside, dp * cli.radius);
      if (!cli.json.empty()) {
        char text[64];
        std::snprintf(text, sizeof text, "%.17g\n", dp);
        halox::apps::write_file("halox-lbm", cli.json + ".droplet", text);
      }
    }
  }
  if (rank == 0 && !cli.dump.empty()) {
    halox::apps::write_file(
        "halox-lbm", cli.dump,
        std::string(reinterpret_cast<const char*>(fields.data()), fields.size() * sizeof(double)));
  }
  if (rank == 0 && !cli.slice.empty()) {
    std::string image =
        "P5\n" + std::to_string(cli.grid[0]) + " " + std::to_string(cli.grid[1]) + "\n255\n";
    const int z = cli.grid[2] / 2;
    double lo = 1e300, hi = -1e300;
    const int channel = cli.model == "multiphase" ? 4 : 1;
    for (int y = 0; y < cli.grid[1]; ++y)
      for (int x = 0; x < cli.grid[0]; ++x) {
        const double v =
            fields[5 * ((static_cast<std::size_t>(z) * cli.grid[1] + y) * cli.grid[0] + x) +
                   channel];
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    for (int y = 0; y < cli.grid[1]; ++y)
      for (int x = 0; x < cli.grid[0]; ++x) {
        const double v =
            fields[5 * ((static_cast<std::size_t>(z) * cli.grid[1] + y) * cli.grid[0] + x) +
                   channel];
        image += static_cast<char>(hi > lo ? 255.0 * (v - lo) / (hi - lo) : 0);
      }
    halox::apps::write_file("halox-lbm", cli.slice, image);
    std::printf("wrote %s (mid-z slice of %s)\n", cli.slice.c_str(), channel == 4 ? "phi" : "u_x");
  }
  if (rank == 0 && !cli.json.empty()) {
    const std::string fg_exchange = !cli.params.multiphase ? "none"
                                    : lbm.fg_merged()      ? "merged"
                                                           : "separate";
    halox::apps::Json j;
    j["app"] = "halox-lbm";
    j["model"] = cli.model;
    j["init"] = cli.init;
    j["grid"] = cli.grid;
    j["ranks"] = lbm.topology().describe();
    j["backend"] = lbm.backend().name();
    j["variant"] = cli.comm;
    j["transport"] = lbm.transport();
    j["self_halo"] = cli.self_halo;
    j["fg_exchange"] = fg_exchange;
    j["wrapped_axes"] = wrapped;
    j["steps"] = cli.steps;
    j["warmup_steps"] = cli.warmup;
    j["timed_steps"] = timed;
    j["seconds"] = seconds;
    j["mlups"] = mlups;
    j["exchange_seconds"] = worst[0];
    j["compute_seconds"] = worst[1];
    j["compute_mlups"] = compute_mlups;
    j["bytes_per_cell"] =
        double(lbm.backend().bytes()) / (double(lbm.local()[0]) * lbm.local()[1] * lbm.local()[2]);
    j["bytes_per_cell_update"] = cell_bytes;
    j["copy_ceiling_gbs"] = ceiling;
    j["bound_mlups"] = bound;
    j["fraction_of_bound"] = bound > 0 ? mlups / bound : 0;
    j["mass_change"] = mass_error;
    j["taylor_green_error"] = tg_error;
    halox::apps::write_json("halox-lbm", cli.json, j);
  }
  return rc;
}

int run(int argc, char** argv) {
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  halox::apps::Watchdog watchdog("halox-lbm", rank, "start-up", halox::apps::kSetupSeconds);
  Cli cli;
  halox::apps::check_input_collectively(MPI_COMM_WORLD, "halox-lbm", argc, argv, [&] {
    cli = parse(argc, argv);
    for (int a = 0; a < 3; ++a) {
      if (cli.grid[a] <= 0) throw Error("halox-lbm: grid sizes must be positive");
    }
    if (cli.rank_count > 0 || (!cli.local && cli.ranks == std::array<int, 3>{0, 0, 0})) {
      // The SoA fields are x fastest: an x face is one element per 32-byte sector.
      cli.ranks =
          grid_rank_dims(cli.rank_count > 0 ? cli.rank_count : size,
                         {cli.grid[0], cli.grid[1], cli.grid[2]}, 32.0 / (cli.single ? 4 : 8));
    }
    if (cli.local && size != 1) {
      throw Error(
          "halox-lbm: --transport local-pulse and local-fused run every rank in one process: start "
          "it without "
          "mpirun (or with one MPI rank), not " +
          std::to_string(size));
    }
    if (!cli.local) {
      const auto& r = cli.ranks;
      const bool all = r[0] && r[1] && r[2];
      if (all && 1LL * r[0] * r[1] * r[2] != size) {
        throw Error("halox-lbm: the rank grid " + std::to_string(r[0]) + "x" +
                    std::to_string(r[1]) + "x" + std::to_string(r[2]) + " does not match the " +
                    std::to_string(size) + " MPI ranks");
      }
    }
    if (cli.model == "multiphase" &&
        2 * cli.radius >= *std::min_element(cli.grid.begin(), cli.grid.end()) &&
        cli.init == "droplet") {
      throw Error("halox-lbm: the droplet (radius " + std::to_string(cli.radius) +
                  ") does not fit the grid");
    }
  });
  watchdog.beat("set-up", cli.watchdog > 0 ? halox::apps::kSetupSeconds : 0);
  if (cli.device != "cpu") select_device(MPI_COMM_WORLD);  // one GPU per rank
  try {  // collective, and the same on every rank (the ranks agreed on their input)
    const Topology shape = cli.local ? Topology(cli.ranks, {true, true, true}, 0)
                                     : Topology::from_mpi(MPI_COMM_WORLD, cli.ranks);
    for (int a = 0; a < 3; ++a) {
      if (cli.grid[a] < shape.dims()[a]) {
        throw Error("halox-lbm: the grid has " + std::to_string(cli.grid[a]) + " cells along " +
                    "xyz"[a] + " for " + std::to_string(shape.dims()[a]) +
                    " ranks: at least one each");
      }
    }
  } catch (const Error& e) {
    throw halox::apps::InputError(e.what());
  }
  if (cli.local) {
    LocalRanks ranks(cli);
    return drive(ranks, cli, rank, watchdog);
  }
  Lbm lbm(MPI_COMM_WORLD, cli);
  return drive(lbm, cli, rank, watchdog);
}

}  // namespace

int main(int argc, char** argv) {
  return halox::apps::mpi_main("halox-lbm", argc, argv, run);
}
