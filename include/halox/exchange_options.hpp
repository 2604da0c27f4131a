// halox: what an exchange is given besides its plans: the transport kinds, the ranks it
// connects (Ranks) and its options, and the counters it keeps. The transports and the device
// code take these without the exchange classes (halox/exchange.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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
///    ranks on several GPUs reach each other through peer access), or all in host memory;
///  - Ranks::blocks(processes, block): several ranks per MPI process: the processes of
///    `processes` (a Topology::from_mpi) each hold a block of block[X] x block[Y] x block[Z]
///    ranks of a grid of processes.dims() x block ranks (the processes' periodicity), the
///    block at the process's coordinates times the block. Links between ranks of one process
///    are copies, the others MPI messages. Host arrays by the host transport; device arrays
///    of grids by ipc-*, nvshmem-* (the grid kernel), staged or mpi-direct (auto: ipc-fused
///    with every process on one node, else staged), of particles by ipc-*, nvshmem-pulse,
///    nvshmem-fused (the particle kernels of every rank of the process in one launch, not
///    through the host proxy), staged or mpi-direct (auto: staged).
/// The index of a process's rank (the order of its plans and arrays) runs x fastest over its
/// block, as Topology numbers a grid.
class Ranks {
 public:
  static Ranks mpi(const Topology& topology);
  /// `grid` gives the dimensions and periodicity; its own rank is ignored. Throws
  /// halox::Error when device_of_rank is neither empty nor one GPU per rank.
  static Ranks local(const Topology& grid, std::vector<int> device_of_rank = {});
  /// Throws halox::Error for a block dimension below 1 or a grid too large for an int.
  static Ranks blocks(const Topology& processes, std::array<int, 3> block);
  /// Rank r on GPU r * gpus / ranks: consecutive ranks (neighbours along x) share a GPU.
  static std::vector<int> spread_over_gpus(int ranks, int gpus);

  /// Whether this process holds every rank of the grid (Ranks::local).
  bool in_process() const { return m_in_process; }
  /// Whether each process holds a block of several ranks (Ranks::blocks).
  bool in_blocks() const { return m_blocks; }
  /// The grid; seen from this process's rank (Ranks::mpi), from rank 0 (Ranks::local) or
  /// from this process's first rank (Ranks::blocks).
  const Topology& topology() const { return m_topology; }
  /// The MPI processes: the topology (Ranks::mpi), the processes' grid (Ranks::blocks);
  /// Ranks::local: the grid as topology() (no MPI).
  const Topology& processes() const { return m_blocks ? m_processes : m_topology; }
  /// How many ranks this process holds: the arrays an exchange call takes.
  int count() const {
    return m_in_process ? m_topology.size() : m_block[0] * m_block[1] * m_block[2];
  }
  /// The grid rank of this process's index-th rank (0 <= index < count()): the order of the
  /// plans and arrays of every call over these ranks.
  int rank(int index = 0) const;
  /// The process (its rank in processes()) that holds grid rank `rank`.
  int process_of(int rank) const;
  /// Grid rank `rank`'s index among the ranks of its process.
  int index_in_process(int rank) const;
  /// Ranks::local: the GPU of every rank (empty: the current GPU for all).
  const std::vector<int>& device_of_rank() const { return m_device_of_rank; }

 private:
  Ranks(const Topology& topology, bool in_process, std::vector<int> device_of_rank)
      : m_topology(topology),
        m_processes(topology),
        m_in_process(in_process),
        m_device_of_rank(std::move(device_of_rank)) {}
  Topology m_topology;
  Topology m_processes;  // Ranks::blocks: the processes' grid
  bool m_in_process;
  bool m_blocks = false;
  std::array<int, 3> m_block{1, 1, 1};
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

}  // namespace halox
