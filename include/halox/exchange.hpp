// halox: halo exchanges. An exchange runs a plan over a transport; the transport is chosen
// by name at run time and the application code stays the same.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
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
///  - ipc-pulse, ipc-fused, nvshmem-pulse, nvshmem-fused: GPU-initiated (gpu_halo.hpp):
///                the neighbours' buffers are mapped (CUDA IPC, or NVSHMEM's symmetric heap
///                and nvshmem_ptr); fused kernels store straight into them, one kernel per
///                pulse or one for all pulses; no host waits. nvshmem-*: a neighbour that
///                nvshmem_ptr cannot map (another node) gets its data by put-with-signal
///                from the same kernels instead, link by link. Grid halos: one fused kernel
///                for all stages (pack into the neighbour's staging, signal, wait, unpack;
///                a later stage's faces wait on the device for the earlier stages'
///                unpacks) for all four (docs/gpu-initiated.md).
///  - auto:       decided collectively at the first exchange of device memory, and printed
///                (rank 0) with the reason: every neighbour on this node -> direct stores
///                (ipc-fused, particles and grids), unless halox-tune measured NVSHMEM's
///                copy-engine puts to win from a message size the exchange reaches (the
///                tuning file's "direct_until_bytes"), then nvshmem-stream; neighbours on
///                other nodes with NVSHMEM built in -> nvshmem-fused (direct stores to this
///                node's peers, put-with-signal to the others) below that size, nvshmem-stream
///                above it; otherwise staged below and pipelined above
///                the message size where halox-tune measured pipelining to win (the
///                "pipelined_from_bytes" of the tuning file). One choice per exchange, made
///                for its slowest link class.
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

struct ExchangeOptions {
  /// Used for device buffers; host buffers always travel through the host transport.
  TransportKind transport = TransportKind::host;
  /// Pipelined chunk size in bytes; 0 takes it from the tuning file (see tuning.hpp).
  std::int64_t chunk_bytes = 0;
  /// Every wait of an exchange, host (MPI) and device, ends after this many seconds with a
  /// HaloTimeoutError naming the rank, the peer, the pulse and the transport; the
  /// GPU-initiated transports also run a start-up self-test of every link.
  double timeout_seconds = 5.0;
  bool self_test = true;
  /// nvshmem-pulse and nvshmem-fused: the fused kernels reach every peer by NVSHMEM
  /// put-with-signal (packed into a send staging area, put by the last block), even a peer
  /// nvshmem_ptr maps for direct stores. They do this on their own for a peer it cannot
  /// map (another node); this runs and measures that path on one node. The environment
  /// variable HALOX_NVSHMEM_PUTS=1 sets it too.
  bool nvshmem_puts_only = false;
  /// In traces (halox/trace.hpp): the name that this exchange's device events carry
  /// (args.object), which tells them from another exchange's; empty: "#" and a number that
  /// counts the process's GPU-initiated exchanges in the order their kernels were set up
  /// (at their first exchange), the same on every rank.
  std::string name{};
};

/// Counters since construction (or reset_stats()).
struct ExchangeStats {
  std::int64_t exchanges = 0;
  std::int64_t host_waits = 0;  ///< host-blocking calls: stream/event synchronise, MPI_Wait*
  std::int64_t messages = 0;    ///< messages to other ranks (a chunk counts as one)
  std::int64_t bytes_sent = 0;  ///< bytes to other ranks
};

class Transport;

/// The grid halo of a field laid out as the plan describes (x fastest, halo on each side).
class GridExchange {
 public:
  /// Collective. The plan must come from build_grid_plan (or be validated).
  GridExchange(const Topology& topology, GridPlan plan, ExchangeOptions options = {});
  ~GridExchange();
  GridExchange(const GridExchange&) = delete;
  GridExchange& operator=(const GridExchange&) = delete;

  /// Fills the halo of `field` (host or device memory). Device fields: ordered on `stream`
  /// (the call may still block the host, as the staged transports do); host fields: done on
  /// return.
  void exchange_async(void* field, GpuStream stream);
  /// The same, done on return for device fields too (the default stream synchronised).
  void exchange(void* field);

  const GridPlan& plan() const;
  const ExchangeStats& stats() const;
  void reset_stats();
  /// The transport a device field uses ("host" for host fields).
  std::string transport_name(const void* field) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

/// The particle halo: coordinates forward (with the periodic shifts), forces back (added).
/// Each item is three reals (x, y, z), float or double.
class ParticleExchange {
 public:
  ParticleExchange(const Topology& topology, const ParticlePlan& plan, BasicKind real,
                   ExchangeOptions options = {});
  ~ParticleExchange();
  ParticleExchange(const ParticleExchange&) = delete;
  ParticleExchange& operator=(const ParticleExchange&) = delete;

  /// Replaces the plan after a neighbour search (buffers grow, never shrink).
  void set_plan(const ParticlePlan& plan);
  /// Coordinates: fills items [home_count, total_count) of `xyz` from the peers.
  /// Device arrays: successive forward and reverse calls on one exchange must run in order on
  /// the device (one stream, or ordered by the caller with events), as a run's steps are; the
  /// GPU-initiated transports rely on it (a launch after one of the other direction knows the
  /// peers' buffers are free and does not wait for them).
  void forward_async(void* xyz, GpuStream stream);
  /// Forces: sends the forces on items [home_count, total_count) back to their owners, in
  /// reverse pulse order, and adds them there (so forwarded items are accumulated first).
  /// Afterwards the home items hold their total forces; the halo items' forces are
  /// transport-dependent (the GPU-initiated transports sum forwarded items' forces on the
  /// way and leave the halo items as they were).
  void reverse_async(void* forces, GpuStream stream);
  /// forward_async and reverse_async on the default stream, done on return.
  void forward(void* xyz);
  void reverse(void* forces);

  const ParticlePlan& plan() const;
  const ExchangeStats& stats() const;
  void reset_stats();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace halox
