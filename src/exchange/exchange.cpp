// The public exchanges: one GridExchange and one ParticleExchange, each running one engine
// for ranks of either locality (grid_engine.cpp, particle_engine.cpp) over the transports
// (src/transport/), Ranks::local's own among them.
#include "halox/exchange.hpp"

#include <atomic>

#include "halox/error.hpp"
#include "halox/trace.hpp"
#include "engine.hpp"
#include "../common/no_mpi.hpp"
#include "../runtime/mpi_cuda_aware.hpp"
#if HALOX_HAS_CUDA
#include "../common/cuda_check.hpp"
#endif

namespace halox {

std::string to_string(TransportKind kind) {
  switch (kind) {
    case TransportKind::host: return "host";
    case TransportKind::staged: return "staged";
    case TransportKind::pipelined: return "pipelined";
    case TransportKind::mpi_direct: return "mpi-direct";
    case TransportKind::nccl: return "nccl";
    case TransportKind::nvshmem_stream: return "nvshmem-stream";
    case TransportKind::ipc_pulse: return "ipc-pulse";
    case TransportKind::ipc_fused: return "ipc-fused";
    case TransportKind::nvshmem_pulse: return "nvshmem-pulse";
    case TransportKind::nvshmem_fused: return "nvshmem-fused";
    case TransportKind::nccl_device: return "nccl-device";
    case TransportKind::local_pulse: return "local-pulse";
    case TransportKind::local_fused: return "local-fused";
    case TransportKind::automatic: return "auto";
  }
  return "?";
}

std::vector<TransportKind> all_transports() {
  return {TransportKind::host,          TransportKind::staged,      TransportKind::pipelined,
          TransportKind::mpi_direct,    TransportKind::nccl,        TransportKind::nvshmem_stream,
          TransportKind::ipc_pulse,     TransportKind::ipc_fused,   TransportKind::nvshmem_pulse,
          TransportKind::nvshmem_fused, TransportKind::nccl_device, TransportKind::local_pulse,
          TransportKind::local_fused,   TransportKind::automatic};
}

TransportKind parse_transport(const std::string& name) {
  std::string names;
  for (auto kind : all_transports()) {
    if (name == to_string(kind)) return kind;
    names += (names.empty() ? "" : ", ") + to_string(kind);
  }
  throw Error("halox: unknown transport '" + name + "' (choose " + names + ")");
}

bool gpu_initiated(TransportKind kind) {
  return kind == TransportKind::ipc_pulse || kind == TransportKind::ipc_fused ||
         kind == TransportKind::nvshmem_pulse || kind == TransportKind::nvshmem_fused ||
         kind == TransportKind::nccl_device;
}

bool transport_available(TransportKind kind, std::string* why) {
  auto no = [&](const char* reason) {
    if (why) *why = reason;
    return false;
  };
  // The local transports copy host arrays on the CPU: they run in every build.
  if (kind == TransportKind::host || kind == TransportKind::automatic ||
      kind == TransportKind::local_pulse || kind == TransportKind::local_fused) {
    return true;
  }
#if HALOX_HAS_CUDA
#if HALOX_HAS_MPI
  if (kind == TransportKind::mpi_direct && !detail::mpi_is_cuda_aware()) {
    return no("this MPI library is not CUDA-aware (MPIX_Query_cuda_support)");
  }
  if (kind == TransportKind::nccl && !HALOX_HAS_NCCL) return no("halox was built without NCCL");
  if (kind == TransportKind::nccl_device && !HALOX_HAS_NCCL_DEVICE) {
    return no("halox was built without NCCL's device API (NCCL 2.28 or later)");
  }
  if ((kind == TransportKind::nvshmem_stream || kind == TransportKind::nvshmem_pulse ||
       kind == TransportKind::nvshmem_fused) &&
      !HALOX_HAS_NVSHMEM) {
    return no("halox was built without NVSHMEM");
  }
  return true;
#else
  return no("halox was built without MPI");
#endif
#else
  return no("halox was built without CUDA");
#endif
}

// ---------------------------------------------------------------------------------------------
// Ranks

Ranks Ranks::mpi(const Topology& topology) {
  return Ranks(topology, false, {});
}

Ranks Ranks::local(const Topology& grid, std::vector<int> device_of_rank) {
  if (!device_of_rank.empty() && static_cast<int>(device_of_rank.size()) != grid.size()) {
    throw Error("halox::Ranks::local: " + std::to_string(device_of_rank.size()) +
                " GPUs given for a grid of " + std::to_string(grid.size()) + " ranks");
  }
  return Ranks(Topology(grid.dims(), grid.periodic(), 0), true, std::move(device_of_rank));
}

Ranks Ranks::blocks(const Topology& processes, std::array<int, 3> block) {
  std::array<int, 3> dims{};
  long long ranks = 1;
  for (int a = 0; a < 3; ++a) {
    if (block[a] < 1) {
      throw Error("halox::Ranks::blocks: block " + std::to_string(block[0]) + "x" +
                  std::to_string(block[1]) + "x" + std::to_string(block[2]) +
                  ": every dimension must be at least 1");
    }
    dims[a] = processes.dims()[a] * block[a];
    ranks *= dims[a];
  }
  if (ranks > (1 << 30)) throw Error("halox::Ranks::blocks: the grid of ranks is too large");
  const std::array<int, 3> at = processes.coords();
  const Topology grid(dims, processes.periodic(), 0);
  const int first = grid.rank_of({at[0] * block[0], at[1] * block[1], at[2] * block[2]});
  Ranks r(Topology(dims, processes.periodic(), first), false, {});
  r.m_processes = processes;
  r.m_blocks = true;
  r.m_block = block;
  return r;
}

int Ranks::rank(int index) const {
  if (index < 0 || index >= count()) {
    throw Error("halox::Ranks::rank: index " + std::to_string(index) + " of a process of " +
                std::to_string(count()) + " rank(s)");
  }
  if (m_in_process) return index;
  if (!m_blocks) return m_topology.rank();
  const std::array<int, 3> at = m_processes.coords();
  const std::array<int, 3> local{index % m_block[0], index / m_block[0] % m_block[1],
                                 index / (m_block[0] * m_block[1])};
  return m_topology.rank_of({at[0] * m_block[0] + local[0], at[1] * m_block[1] + local[1],
                             at[2] * m_block[2] + local[2]});
}

int Ranks::process_of(int rank) const {
  if (m_in_process) return 0;
  if (!m_blocks) return rank;
  const std::array<int, 3> c = m_topology.coords_of(rank);
  return m_processes.rank_of({c[0] / m_block[0], c[1] / m_block[1], c[2] / m_block[2]});
}

int Ranks::index_in_process(int rank) const {
  if (m_in_process) return rank;
  if (!m_blocks) return 0;
  const std::array<int, 3> c = m_topology.coords_of(rank);
  return c[0] % m_block[0] + m_block[0] * (c[1] % m_block[1] + m_block[1] * (c[2] % m_block[2]));
}

std::vector<int> Ranks::spread_over_gpus(int ranks, int gpus) {
  if (ranks < 1 || gpus < 1)
    throw Error("halox::Ranks::spread_over_gpus: ranks and GPUs must be >= 1");
  std::vector<int> out(ranks);
  for (int r = 0; r < ranks; ++r)
    out[r] = static_cast<int>(static_cast<long long>(r) * gpus / ranks);
  return out;
}

namespace {

// The synchronous calls' wait: the default stream, when the arrays are on the GPU.
void finish_default_stream(bool device) {
#if HALOX_HAS_CUDA
  if (device) detail::finish_default_stream();
#else
  (void)device;
#endif
}

void check_one_rank(const Ranks& ranks, const char* exchange) {
  if (ranks.count() != 1) {
    throw Error(std::string("halox::") + exchange + ": this process holds " +
                std::to_string(ranks.count()) + " ranks; pass one array per rank");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Grid

namespace {

// One rank per process: the exchange's ranks on a communicator of their own
// (Topology::duplicate), so that exchanges on one Topology never take each other's messages.
Ranks own_ranks(const Ranks& ranks) {
#if HALOX_HAS_MPI
  if (ranks.in_process() || ranks.processes().comm() == MPI_COMM_NULL) return ranks;
  if (ranks.in_blocks()) {
    const std::array<int, 3> g = ranks.topology().dims(), p = ranks.processes().dims();
    return Ranks::blocks(ranks.processes().duplicate(), {g[0] / p[0], g[1] / p[1], g[2] / p[2]});
  }
  return Ranks::mpi(ranks.topology().duplicate());
#else
  return ranks;
#endif
}

// A null array would be written through by a pack or a kernel: refused, naming it.
void require_arrays(std::span<void* const> arrays, const char* exchange) {
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i] == nullptr) {
      throw Error(std::string("halox::") + exchange + ": array " + std::to_string(i) + " of " +
                  std::to_string(arrays.size()) + " is null");
    }
  }
}

// An exchange is not thread-safe: a second caller while one is inside is refused, where it
// would have crashed, timed out or swapped halo cells.
class OneCallerAtATime {
 public:
  OneCallerAtATime(std::atomic<bool>& busy, const char* exchange) : m_busy(busy) {
    if (m_busy.exchange(true, std::memory_order_acquire)) {
      throw Error(std::string("halox::") + exchange +
                  ": called from two threads at once; an exchange is used by one thread at a "
                  "time (give each thread an exchange of its own: they may run at once)");
    }
  }
  ~OneCallerAtATime() { m_busy.store(false, std::memory_order_release); }
  OneCallerAtATime(const OneCallerAtATime&) = delete;
  OneCallerAtATime& operator=(const OneCallerAtATime&) = delete;

 private:
  std::atomic<bool>& m_busy;
};

}  // namespace

struct GridExchange::Impl {
  Impl(const Ranks& r, std::vector<GridPlan> p) : ranks(own_ranks(r)), plans(std::move(p)) {}
  Ranks ranks;
  std::atomic<bool> busy{false};
  std::vector<GridPlan> plans;  // [field][rank]
  std::unique_ptr<detail::GridEngine> engine;
  ExchangeStats stats;
};

GridExchange::GridExchange(const Ranks& ranks, std::vector<GridPlan> plans, ExchangeOptions options)
    : m_impl(std::make_unique<Impl>(ranks, plans)) {
  if (plans.empty() || plans.size() % static_cast<std::size_t>(ranks.count()) != 0) {
    throw Error("halox::GridExchange: " + std::to_string(plans.size()) + " plans for the " +
                std::to_string(ranks.count()) +
                " rank(s) of this process (one per rank and field)");
  }
#if !HALOX_HAS_MPI
  if (!ranks.in_process()) detail::no_mpi("GridExchange");
#endif
  m_impl->engine = detail::make_grid_engine(m_impl->ranks, std::move(plans), options);
}
GridExchange::GridExchange(const Topology& topology, GridPlan plan, ExchangeOptions options)
    : GridExchange(Ranks::mpi(topology), std::vector<GridPlan>{std::move(plan)}, options) {}
GridExchange::~GridExchange() = default;

void GridExchange::exchange_async(std::span<void* const> fields, GpuStream stream) {
  if (fields.size() != m_impl->plans.size()) {
    throw Error("halox::GridExchange: " + std::to_string(fields.size()) + " arrays given for " +
                std::to_string(this->fields()) + " field(s) of " +
                std::to_string(m_impl->ranks.count()) + " rank(s) (one per field and rank)");
  }
  const OneCallerAtATime guard(m_impl->busy, "GridExchange");
  require_arrays(fields, "GridExchange");
  trace::Scope scope("grid exchange",
                     m_impl->ranks.in_process() ? 0 : m_impl->ranks.topology().rank());
  m_impl->engine->exchange_async(fields, stream, m_impl->stats);
}
void GridExchange::exchange_async(void* field, GpuStream stream) {
  check_one_rank(m_impl->ranks, "GridExchange");
  if (fields() != 1) {
    throw Error("halox::GridExchange: " + std::to_string(fields()) +
                " fields planned; pass one array per field");
  }
  exchange_async(std::span<void* const>(&field, 1), stream);
}
void GridExchange::exchange(std::span<void* const> fields) {
  exchange_async(fields, nullptr);
  finish_default_stream(!fields.empty() && m_impl->engine->on_device(fields[0]));
}
void GridExchange::exchange(void* field) {
  check_one_rank(m_impl->ranks, "GridExchange");
  exchange(std::span<void* const>(&field, 1));
}
void GridExchange::check_view(const Datatype& element, int halo, std::size_t index) const {
  const GridPlan& plan = m_impl->plans[index];
  const int ranks = m_impl->ranks.count();
  const std::string which = "halox::GridExchange: the view of field " +
                            std::to_string(index / static_cast<std::size_t>(ranks)) + " of rank " +
                            std::to_string(index % static_cast<std::size_t>(ranks));
  BasicKind mine{}, planned{};
  element.homogeneous(&mine);
  const bool same_kind = plan.element.homogeneous(&planned) && planned == mine;
  const std::string planned_text = "its plan's element (" + plan.element.combiner_name() + ", " +
                                   std::to_string(plan.element.size()) + " bytes)";
  if (!same_kind) {
    throw Error(which + " holds " + std::to_string(element.size()) +
                "-byte values of another basic type than " + planned_text);
  }
  if (plan.element.extent() % element.size() != 0) {
    throw Error(which + ": " + planned_text + " is not a whole number of its " +
                std::to_string(element.size()) + "-byte values");
  }
  if (halo != plan.halo) {
    throw Error(which + " says halo width " + std::to_string(halo) + ", its plan " +
                std::to_string(plan.halo));
  }
}
const Ranks& GridExchange::ranks() const {
  return m_impl->ranks;
}
const GridPlan& GridExchange::plan() const {
  return m_impl->plans.front();
}
const std::vector<GridPlan>& GridExchange::plans() const {
  return m_impl->plans;
}
int GridExchange::fields() const {
  return static_cast<int>(m_impl->plans.size()) / m_impl->ranks.count();
}
const ExchangeStats& GridExchange::stats() const {
  return m_impl->stats;
}
void GridExchange::reset_stats() {
  m_impl->stats = {};
}
bool GridExchange::capturable() const {
  return m_impl->engine->capturable();
}
void GridExchange::check() const {
  m_impl->engine->check();
}

std::string GridExchange::transport_name(const void* field) const {
  return m_impl->engine->transport_name(field);
}
int GridExchange::faces_per_exchange() const {
  return m_impl->engine->faces_per_exchange();
}
int GridExchange::launches_per_exchange() const {
  return m_impl->engine->launches_per_exchange();
}

// ---------------------------------------------------------------------------------------------
// Particles

struct ParticleExchange::Impl {
  explicit Impl(const Ranks& r) : ranks(own_ranks(r)) {}
  Ranks ranks;
  std::atomic<bool> busy{false};
  std::unique_ptr<detail::ParticleEngine> engine;
  TransportKind transport = TransportKind::automatic;  // as asked (for messages)
  ExchangeStats stats;
  void run(bool forward, std::span<void* const> arrays, std::span<const GpuStream> streams) {
    const OneCallerAtATime guard(busy, "ParticleExchange");
    require_arrays(arrays, "ParticleExchange");
    trace::Scope scope(forward ? "halo forward" : "halo reverse",
                       ranks.in_process() ? 0 : ranks.topology().rank());
    engine->run(forward, arrays, streams, stats);
  }
};

ParticleExchange::ParticleExchange(const Ranks& ranks, std::vector<ParticlePlan> plans,
                                   BasicKind real, ExchangeOptions options)
    : m_impl(std::make_unique<Impl>(ranks)) {
  if (static_cast<int>(plans.size()) != ranks.count()) {
    throw Error("halox::ParticleExchange: " + std::to_string(plans.size()) + " plans for the " +
                std::to_string(ranks.count()) + " rank(s) of this process");
  }
#if !HALOX_HAS_MPI
  if (!ranks.in_process()) detail::no_mpi("ParticleExchange");
#endif
  m_impl->transport = options.transport;
  m_impl->engine = detail::make_particle_engine(m_impl->ranks, std::move(plans), real, options);
}
ParticleExchange::ParticleExchange(const Topology& topology, const ParticlePlan& plan,
                                   BasicKind real, ExchangeOptions options)
    : ParticleExchange(Ranks::mpi(topology), std::vector<ParticlePlan>{plan}, real, options) {}
ParticleExchange::~ParticleExchange() = default;

void ParticleExchange::set_plans(std::vector<ParticlePlan> plans) {
  const OneCallerAtATime guard(m_impl->busy, "ParticleExchange");
  m_impl->engine->set_plans(std::move(plans));
}
void ParticleExchange::set_plan(const ParticlePlan& plan) {
  check_one_rank(m_impl->ranks, "ParticleExchange");
  set_plans({plan});
}
void ParticleExchange::forward_async(std::span<void* const> xyz, GpuStream stream) {
  m_impl->run(true, xyz, std::span<const GpuStream>(&stream, 1));
}
void ParticleExchange::reverse_async(std::span<void* const> forces, GpuStream stream) {
  m_impl->run(false, forces, std::span<const GpuStream>(&stream, 1));
}
void ParticleExchange::forward_async(std::span<void* const> xyz,
                                     std::span<const GpuStream> streams) {
  m_impl->run(true, xyz, streams);
}
void ParticleExchange::reverse_async(std::span<void* const> forces,
                                     std::span<const GpuStream> streams) {
  m_impl->run(false, forces, streams);
}
void ParticleExchange::forward_async(void* xyz, GpuStream stream) {
  check_one_rank(m_impl->ranks, "ParticleExchange");
  forward_async(std::span<void* const>(&xyz, 1), stream);
}
void ParticleExchange::reverse_async(void* forces, GpuStream stream) {
  check_one_rank(m_impl->ranks, "ParticleExchange");
  reverse_async(std::span<void* const>(&forces, 1), stream);
}
void ParticleExchange::forward(std::span<void* const> xyz) {
  forward_async(xyz, nullptr);
  m_impl->engine->finish_default_streams(xyz);
}
void ParticleExchange::reverse(std::span<void* const> forces) {
  reverse_async(forces, nullptr);
  m_impl->engine->finish_default_streams(forces);
}
void ParticleExchange::forward(void* xyz) {
  check_one_rank(m_impl->ranks, "ParticleExchange");
  forward(std::span<void* const>(&xyz, 1));
}
void ParticleExchange::reverse(void* forces) {
  check_one_rank(m_impl->ranks, "ParticleExchange");
  reverse(std::span<void* const>(&forces, 1));
}
const Ranks& ParticleExchange::ranks() const {
  return m_impl->ranks;
}
const ParticlePlan& ParticleExchange::plan() const {
  return m_impl->engine->plans().front();
}
const std::vector<ParticlePlan>& ParticleExchange::plans() const {
  return m_impl->engine->plans();
}
const ExchangeStats& ParticleExchange::stats() const {
  return m_impl->stats;
}
void ParticleExchange::reset_stats() {
  m_impl->stats = {};
}
std::vector<int> ParticleExchange::devices() const {
  return m_impl->engine->devices();
}
bool ParticleExchange::capturable() const {
  return m_impl->engine->capturable();
}
void ParticleExchange::check() const {
  m_impl->engine->check();
}
int ParticleExchange::launches_per_exchange() const {
  return m_impl->engine->launches_per_exchange();
}

}  // namespace halox
