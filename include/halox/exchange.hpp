// halox: halo exchanges. An exchange runs a plan over a set of ranks and a transport; the
// ranks are one per process (MPI) or many in this process, the transport is chosen by name
// at run time, and the application code stays the same.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "halox/datatype.hpp"
#include "halox/pack_gpu.hpp"
#include "halox/plan.hpp"
#include "halox/topology.hpp"

namespace halox {

/// How the bytes of a pulse travel.
///  - host:       host memory, MPI on host buffers (CPU codes, CI).
///  - staged:     GPU pack -> stream synchronise -> copy to pinned host -> MPI -> copy up ->
///                GPU unpack, pulse by pulse (the baseline of seeds 000 and 002: two
///                host-blocking waits per pulse).
///  - pipelined:  the same stages cut into chunks that overlap (seed 002); the chunk size
///                comes from the tuning file that halox-tune writes.
///  - mpi-direct: device buffers handed to a CUDA-aware MPI (refused when MPI is not).
///  - nccl:       grouped ncclSend/ncclRecv per stage on the stream (one GPU per rank).
///  - nvshmem-stream: NVSHMEM stream-triggered put-with-signal and signal waits on the
///                stream (no kernel changes, no host waits).
///  - ipc-pulse, ipc-fused, nvshmem-pulse, nvshmem-fused: GPU-initiated (docs/gpu-initiated.md):
///                the neighbours' buffers are mapped (CUDA IPC, or NVSHMEM's symmetric heap
///                and nvshmem_ptr); fused kernels store straight into them, one kernel per
///                pulse or one for all pulses; no host waits. nvshmem-*: a neighbour that
///                nvshmem_ptr cannot map (another node) gets its data by put-with-signal
///                from the same kernels instead, link by link. Grid halos: one fused kernel
///                for all stages (pack into the neighbour's staging, signal, wait, unpack;
///                a later stage's faces wait on the device for the earlier stages'
///                unpacks) for all four (docs/gpu-initiated.md).
///  - nccl-device: the fused particle kernels of ipc-fused over NCCL's symmetric memory
///                (NCCL 2.28+): the blocks are registered windows, and a neighbour in this
///                rank's load/store team (NCCL's LSA: the same node over NVLink) is stored
///                to through the pointer NCCL gives for it. Particles only for now; one GPU
///                per rank, as NCCL needs.
///  - local-pulse, local-fused: the ranks of Ranks::local (many ranks in this process):
///                every face or pulse straight from the sender's array into the
///                receiver's, no staging and no host wait; local-pulse launches one kernel
///                per face (grids) or per pulse (particles) in stage order, local-fused one
///                kernel for every face or pulse of every rank on a GPU, later stages
///                waiting on the device only for what they forward. Host arrays of local
///                ranks are copied by the CPU, pulse by pulse, whatever the kind.
///  - auto:       local ranks: local-fused. Otherwise decided collectively at the first
///                exchange of device memory, and printed (rank 0) with the reason: every neighbour
///                on this node -> direct stores (ipc-fused, particles and grids), unless halox-tune
///                measured NVSHMEM's copy-engine puts to win from a message size the exchange
///                reaches (the tuning file's "direct_until_bytes"), then nvshmem-stream; neighbours
///                on other nodes with NVSHMEM built in -> nvshmem-fused (direct stores to this
///                node's peers, put-with-signal to the others) below that size, nvshmem-stream
///                above it; otherwise, below the message size where halox-tune measured
///                pipelining to win (the "pipelined_from_bytes" of the tuning file), grids
///                and particles -> ipc-fused (direct stores to this node's peers, the host proxy's
///                MPI messages to the others; needs MPI_THREAD_MULTIPLE on every rank), else
///                staged; pipelined above that size. One choice per exchange.
enum class TransportKind {
  host,
  staged,
  pipelined,
  mpi_direct,
  nccl,
  nvshmem_stream,
  ipc_pulse,
  ipc_fused,
  nvshmem_pulse,
  nvshmem_fused,
  nccl_device,
  local_pulse,
  local_fused,
  automatic  ///< "auto": chosen when the exchange first runs, see above
};

std::string to_string(TransportKind kind);
/// Every transport kind, in the order above.
std::vector<TransportKind> all_transports();
/// The name to_string gives ("host", "ipc-fused", "auto", ...); anything else throws
/// halox::Error listing the accepted names.
TransportKind parse_transport(const std::string& name);
/// Whether this build and this MPI library can run the transport; when not, `why` says why.
bool transport_available(TransportKind kind, std::string* why = nullptr);
/// The GPU-initiated transports of one rank per process (ipc-*, nvshmem-pulse/fused,
/// nccl-device): fused kernels pack, store, signal and wait, no host in the loop.
bool gpu_initiated(TransportKind kind);

/// The ranks an exchange connects, as this process holds them.
///  - Ranks::mpi(topology): one rank per process, topology.rank() of an MPI job;
///  - Ranks::local(grid, device_of_rank): every rank of `grid` in this process (no MPI
///    needed), rank r's arrays on GPU device_of_rank[r] (empty: all on the current GPU;
///    ranks on several GPUs reach each other through peer access), or all in host memory.
class Ranks {
 public:
  static Ranks mpi(const Topology& topology);
  /// `grid` gives the dimensions and periodicity; its own rank is ignored. Throws
  /// halox::Error when device_of_rank is neither empty nor one GPU per rank.
  static Ranks local(const Topology& grid, std::vector<int> device_of_rank = {});
  /// Rank r on GPU r * gpus / ranks: consecutive ranks (neighbours along x) share a GPU.
  static std::vector<int> spread_over_gpus(int ranks, int gpus);

  /// Whether this process holds every rank of the grid (Ranks::local).
  bool in_process() const { return m_in_process; }
  /// The grid; seen from this process's rank (Ranks::mpi) or from rank 0 (Ranks::local).
  const Topology& topology() const { return m_topology; }
  /// How many ranks this process holds: the arrays an exchange call takes.
  int count() const { return m_in_process ? m_topology.size() : 1; }
  /// Ranks::local: the GPU of every rank (empty: the current GPU for all).
  const std::vector<int>& device_of_rank() const { return m_device_of_rank; }

 private:
  Ranks(const Topology& topology, bool in_process, std::vector<int> device_of_rank)
      : m_topology(topology),
        m_in_process(in_process),
        m_device_of_rank(std::move(device_of_rank)) {}
  Topology m_topology;
  bool m_in_process;
  std::vector<int> m_device_of_rank;
};

struct ExchangeOptions {
  /// Used for device buffers; host buffers always travel through the host transport (one
  /// rank per process) or CPU copies (local ranks). Local ranks take local-pulse or
  /// local-fused (auto and host mean local-fused there); the other kinds need one rank per
  /// process.
  TransportKind transport = TransportKind::host;
  /// Pipelined chunk size in bytes; 0 takes it from the tuning file (see tuning.hpp).
  std::int64_t chunk_bytes = 0;
  /// Every wait of an exchange, host (MPI) and device, ends after this many seconds with a
  /// HaloTimeoutError naming the rank, the peer, the pulse and the transport; the
  /// GPU-initiated transports also run a start-up self-test of every link. Finite, above 0
  /// and at most 1e6 s: anything else is refused when the exchange is built.
  double timeout_seconds = 5.0;
  bool self_test = true;
  /// In traces (halox/trace.hpp): the name that this exchange's device events carry
  /// (args.object), which tells them from another exchange's; empty: "#" and a number that
  /// counts the process's GPU-initiated exchanges in the order their kernels were set up
  /// (at their first exchange), the same on every rank.
  std::string name{};
  /// For tests and measurements of paths a healthy run on this machine does not take.
  struct Testing {
    /// nvshmem-pulse and nvshmem-fused: the fused kernels reach every peer by NVSHMEM
    /// put-with-signal (packed into a send staging area, put by the last block), even a
    /// peer nvshmem_ptr maps for direct stores. They do this on their own for a peer it
    /// cannot map (another node); this runs and measures that path on one node. The
    /// environment variable HALOX_NVSHMEM_PUTS=1 sets it too.
    bool nvshmem_puts_only = false;
    /// ipc-fused and nvshmem-fused grids: the fused kernel reaches every neighbour in another
    /// process through the host proxy (mapped host memory, MPI from a proxy thread; needs
    /// MPI_THREAD_MULTIPLE), as ipc-fused does on its own for a neighbour on another node.
    /// This runs and measures that path on one node. HALOX_HOST_PROXY=1 sets it too.
    bool host_proxy = false;
    /// local-pulse and local-fused: this rank's faces or blocks do nothing, as if it had
    /// stalled (nor, in the self-test, send or receive its probes); the others time out.
    int stall_rank = -1;
    /// Particles between ranks of one launch (local ranks on one GPU, a rank's pulses to
    /// itself): coordinates go straight into the receiver's halo and returned forces
    /// straight into the sender's home items, with no staging, signal or wait, wherever no
    /// forwarded item needs that pulse's staging. false: through staging as between
    /// processes (tests of that path).
    bool direct_in_launch = true;
  } testing{};
};

/// Counters since construction (or reset_stats()).
struct ExchangeStats {
  std::int64_t exchanges = 0;
  std::int64_t host_waits = 0;  ///< host-blocking calls: stream/event synchronise, MPI_Wait*
  std::int64_t messages = 0;    ///< messages to other ranks (a chunk counts as one)
  std::int64_t bytes_sent = 0;  ///< bytes to other ranks
};

/// A grid field as a typed view: its array of T (halo included, x fastest, the interior at
/// offset `halo` on every axis, as the plan lays it out) and the halo width it was allocated
/// with. An exchange given views checks each against its plan before it touches an array:
/// T must be the plan's element's basic type (every basic element of the element of T's
/// kind, the element a whole number of T: `Datatype::contiguous(3, of<double>())` cells are
/// viewed as double), and the halo width the plan's. A bare `void*` is taken unchecked.
template <class T>
struct FieldView {
  T* data = nullptr;
  int halo = 1;
};

/// The grid halo of a field laid out as the plan describes (x fastest, halo on each side),
/// for every rank this process holds. Stage by stage (Z, then Y carrying the Z halo, then X
/// carrying both), so edges and corners arrive.
class GridExchange {
 public:
  /// Collective over the ranks' processes. plans[i]: the plan of this process's i-th rank
  /// (Ranks::mpi: one, from build_grid_plan or validated; Ranks::local: one per rank of the
  /// grid, from make_local_grid_plans). Several fields moved in one call (GHEX's
  /// exchange(f, g)): plans[f * ranks.count() + i] is field f's plan of rank i, the fields
  /// of a plan set may differ in element type and layout, and each call passes the arrays
  /// in the same order. Plans that do not match their neighbours' are refused on every
  /// rank, naming both ranks and the pulse; plans whose headers disagree with their types
  /// are refused naming the rank. Ranks::mpi: the exchange runs on a duplicate of the
  /// topology's communicator (Topology::duplicate), so that several exchanges may be in
  /// flight at once. An exchange is used by one thread at a time; a second thread calling
  /// it while one is inside gets a halox::Error.
  GridExchange(const Ranks& ranks, std::vector<GridPlan> plans, ExchangeOptions options = {});
  /// One rank per process: GridExchange(Ranks::mpi(topology), {plan}, options).
  GridExchange(const Topology& topology, GridPlan plan, ExchangeOptions options = {});
  ~GridExchange();
  GridExchange(const GridExchange&) = delete;
  GridExchange& operator=(const GridExchange&) = delete;

  /// Fills the halos: fields[f * ranks().count() + i] is field f's array of this process's
  /// i-th rank (all in host memory or all on the GPUs). Device fields: ordered on `stream`
  /// (the call may still block the host, as the staged transports do); host fields: done on
  /// return. The fields' pulses of one stage move together: one host wait per stage for all
  /// of them on the staged transports, one launch for all on the GPU-initiated ones.
  void exchange_async(std::span<void* const> fields, GpuStream stream);
  /// The same for a process holding one rank and one field.
  void exchange_async(void* field, GpuStream stream);
  /// The same, done on return for device fields too (the default stream synchronised).
  void exchange(std::span<void* const> fields);
  void exchange(void* field);
  /// The same with typed views, checked against the plans first (FieldView): a view of
  /// the wrong element type or halo width is a halox::Error naming the field and rank.
  template <class T>
  void exchange_async(std::span<const FieldView<T>> fields, GpuStream stream) {
    exchange_async(checked(fields), stream);
  }
  template <class T>
  void exchange_async(FieldView<T> field, GpuStream stream) {
    exchange_async(std::span<const FieldView<T>>(&field, 1), stream);
  }
  template <class T>
  void exchange(std::span<const FieldView<T>> fields) {
    exchange(checked(fields));
  }
  template <class T>
  void exchange(FieldView<T> field) {
    exchange(std::span<const FieldView<T>>(&field, 1));
  }

  const Ranks& ranks() const;
  /// The plan of this process's first rank (first field), and those of all its ranks and
  /// fields.
  const GridPlan& plan() const;
  const std::vector<GridPlan>& plans() const;
  /// Fields per call.
  int fields() const;
  const ExchangeStats& stats() const;
  void reset_stats();
  /// The transport a field uses ("host" for host fields of one rank per process).
  std::string transport_name(const void* field) const;
  /// The faces this process's ranks send per exchange; and, once GPU arrays were
  /// exchanged, the kernel launches per exchange where the transport counts them (local
  /// ranks: local-fused 1, local-pulse one per face; else 0).
  int faces_per_exchange() const;
  int launches_per_exchange() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;

  /// Throws unless a view of `element` (a basic type) with `halo` fits plans()[index].
  void check_view(const Datatype& element, int halo, std::size_t index) const;
  template <class T>
  std::vector<void*> checked(std::span<const FieldView<T>> fields) const {
    std::vector<void*> arrays;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (i < plans().size()) check_view(Datatype::of<std::remove_cv_t<T>>(), fields[i].halo, i);
      arrays.push_back(const_cast<std::remove_cv_t<T>*>(fields[i].data));
    }
    return arrays;
  }
};

/// The particle halo: coordinates forward (with the periodic shifts), forces back (added).
/// Each item is three reals (x, y, z), float or double.
class ParticleExchange {
 public:
  /// Collective over the ranks' processes. plans[i]: the plan of this process's i-th rank
  /// (Ranks::mpi: build_particle_plan; Ranks::local: build_local_particle_plans), checked
  /// when taken (and by set_plan(s)): a plan whose indices or ranges leave its arrays is
  /// refused naming the rank and pulse. Communicator and threads as GridExchange's.
  ParticleExchange(const Ranks& ranks, std::vector<ParticlePlan> plans, BasicKind real,
                   ExchangeOptions options = {});
  /// One rank per process: ParticleExchange(Ranks::mpi(topology), {plan}, real, options).
  ParticleExchange(const Topology& topology, const ParticlePlan& plan, BasicKind real,
                   ExchangeOptions options = {});
  ~ParticleExchange();
  ParticleExchange(const ParticleExchange&) = delete;
  ParticleExchange& operator=(const ParticleExchange&) = delete;

  /// Replaces the plans after a neighbour search (buffers grow, never shrink). Collective.
  void set_plans(std::vector<ParticlePlan> plans);
  void set_plan(const ParticlePlan& plan);
  /// Coordinates: fills items [home_count, total_count) of each rank's `xyz` from the
  /// peers. xyz[i]: the array of this process's i-th rank. Device arrays: successive
  /// forward and reverse calls on one exchange must run in order on the device (one
  /// stream, or ordered by the caller with events), as a run's steps are; the
  /// GPU-initiated transports rely on it (a launch after one of the other direction knows
  /// the peers' buffers are free and does not wait for them).
  void forward_async(std::span<void* const> xyz, GpuStream stream);
  /// Forces: sends the forces on items [home_count, total_count) back to their owners, in
  /// reverse pulse order, and adds them there (so forwarded items are accumulated first).
  /// Afterwards the home items hold their total forces; the halo items' forces are
  /// transport-dependent (the GPU-initiated transports sum forwarded items' forces on the
  /// way and leave the halo items as they were).
  void reverse_async(std::span<void* const> forces, GpuStream stream);
  /// Local ranks on several GPUs: one stream per GPU of devices(), each GPU's launch
  /// ordered on its own.
  void forward_async(std::span<void* const> xyz, std::span<const GpuStream> streams);
  void reverse_async(std::span<void* const> forces, std::span<const GpuStream> streams);
  /// A process holding one rank.
  void forward_async(void* xyz, GpuStream stream);
  void reverse_async(void* forces, GpuStream stream);
  /// The same on the default stream (each GPU's), done on return.
  void forward(std::span<void* const> xyz);
  void reverse(std::span<void* const> forces);
  void forward(void* xyz);
  void reverse(void* forces);
  /// Throws HaloTimeoutError when a device-side wait of an earlier call expired (no host
  /// synchronisation: it reads a flag in mapped host memory). Every call checks first; this
  /// reports it without another exchange, e.g. after the caller synchronised its stream.
  void check() const;

  const Ranks& ranks() const;
  /// The plan of this process's first rank, and those of all its ranks.
  const ParticlePlan& plan() const;
  const std::vector<ParticlePlan>& plans() const;
  const ExchangeStats& stats() const;
  void reset_stats();
  /// The GPUs of this process's ranks, in the order the stream lists take them (local
  /// ranks; the current GPU for one rank per process); empty once the exchange moved host
  /// arrays.
  std::vector<int> devices() const;
  /// Local ranks on the GPU, after the first exchange: kernel launches per forward (or
  /// reverse) call and GPU (local-fused: 1, local-pulse: one per pulse); 0 in host memory.
  int launches_per_exchange() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace halox
