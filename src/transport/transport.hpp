// The transport interface inside halox: an exchange is a list of ops (one message pair
// each) grouped in stages, per direction; a transport is connected to them (collectively:
// buffers, peer mapping, self-test) and then moves them, stream-ordered, for the fields of a
// call. Pack and unpack are callbacks so the same transport serves grids (datatypes) and
// particles (index maps with shifts or sums); the GPU-initiated particle transport reads the
// plan they came from. A connection holds the ops of every rank of this process: one for
// Ranks::mpi, every rank of the grid for Ranks::local (whose transports, local-pulse and
// local-fused, move a face straight from one rank's array to another's, without MPI).
#pragma once

#include "halox/config.hpp"
#if HALOX_HAS_MPI
#include <mpi.h>
#endif

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "halox/datatype.hpp"
#include "halox/device.hpp"
#include "halox/exchange_options.hpp"
#include "halox/plan.hpp"

namespace halox::detail {

/// Writes packed bytes [offset, offset + bytes) of the op's message to `out`.
using PackFn = std::function<void(const void* field, void* out, std::int64_t offset,
                                  std::int64_t bytes, GpuStream stream)>;
/// Consumes packed bytes [offset, offset + bytes) of the received message from `in`.
using UnpackFn = std::function<void(void* field, const void* in, std::int64_t offset,
                                    std::int64_t bytes, GpuStream stream)>;
/// A message to oneself moved straight from the send layout to the receive layout.
using SelfCopyFn = std::function<void(void* field, GpuStream stream)>;

struct Op {
  int stage = 0;
  int field = 0;       // which of a run's fields it moves
  int rank = 0;        // which of this process's ranks it belongs to
  int pulse = 0;       // its index in its rank's plan (for error messages)
  int send_rank = -1;  // -1: nothing to send
  int recv_rank = -1;  // -1: nothing to receive
  int tag = 0;         // a sender's op and its receiver's share it (the rule MPI matches by)
  std::int64_t send_bytes = 0;
  std::int64_t recv_bytes = 0;
  std::int64_t granule = 1;  // chunk boundaries must be multiples of this
  std::string name;          // for error messages
  PackFn pack;
  UnpackFn unpack;
  // When set: used instead of pack + unpack when the op sends to and receives from this
  // rank itself (a periodic axis with one rank), one kernel and no packed copy.
  SelfCopyFn self_copy;
  // Grid ops: the faces as datatypes (one instance at the field), for the transports that
  // pack inside their own kernels (grid_fused.cu). Empty for particle ops.
  Datatype send_type, recv_type;
};

enum class Direction { forward, reverse };

/// What a transport does, for the choice of one and for the callers that need to know.
struct Capabilities {
  bool device_initiated = false;  ///< kernels pack, move, signal and wait: no host in the loop
  bool direct_stores = false;     ///< into the peers' memory, where they are reachable
  bool host_waits = true;         ///< the host blocks per stage (stream sync or MPI wait)
  int fields_per_run = 0;         ///< fields one run moves at most (0: any number)
};

/// What a transport is connected to: the ops of each direction (grids: forward only), and
/// for particles the plans of this process's ranks (which the GPU-initiated and the local
/// particle transports read instead of the ops; Ranks::local's particle connections have no
/// ops). The exchange owns it; a transport keeps a pointer until its next connect.
struct Connection {
  std::vector<Op> forward, reverse;
  int ranks = 1;  // this process's ranks: a run's fields[op.field * ranks + op.rank]
  std::span<const ParticlePlan> particles;
  const std::vector<Op>& ops(Direction d) const {
    return d == Direction::forward ? forward : reverse;
  }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  virtual Capabilities capabilities() const = 0;
  /// Collective: every rank connects at the same call, the first run after a new plan.
  /// Transports that set up per op list (buffers, peer mapping, self-test) do so here or at
  /// the first run of each list.
  virtual void connect(const Connection& connection) { m_connection = &connection; }
  /// Runs every stage of the direction's ops in order (ops of one stage concurrently),
  /// ordered on the streams; fields[op.field * ranks + op.rank] is what each op packs from
  /// and unpacks into. streams: one per GPU of the connection's ranks (one for one rank per
  /// process; Ranks::local's particle transport takes its ranks' GPUs in devices() order).
  virtual void run_async(Direction direction, std::span<void* const> fields,
                         std::span<const GpuStream> streams, ExchangeStats& stats) = 0;
  /// Throws HaloTimeoutError when a device-side wait of an earlier run expired (the
  /// GPU-initiated and stream-waiting transports; runs check first themselves).
  virtual void check() const {}
  /// Kernel launches per run of GPU arrays, where the transport counts them (else 0).
  virtual int launches_per_run() const { return 0; }
  /// Whether a run may be captured into a CUDA graph and replayed: its kernels take their
  /// counters from the device, and nothing is waited for or told on the host.
  virtual bool capturable() const { return false; }
  /// Whether the runs of these fields in `direction` have done their set-up (buffers, peer
  /// mapping, tables at these addresses), which a capture cannot hold: the first run does it.
  virtual bool set_up_for(Direction direction, std::span<void* const> fields) const {
    (void)direction, (void)fields;
    return true;
  }

 protected:
  const std::vector<Op>& ops(Direction d) const { return m_connection->ops(d); }
  const Connection* m_connection = nullptr;
};

/// The grid transport of Ranks::local (every build) for host arrays (the CPU, `device`
/// false) and local-pulse (one copy kernel per face); local-fused is the grid kernel's
/// (grid_fused.hpp). Its connect pairs each op with its receiver's and refuses plans that do
/// not match (halox::Error naming both ranks and the pulse).
std::unique_ptr<Transport> make_local_grid_transport(bool device);
/// The particle transport of Ranks::local (every build): the fused particle kernels over
/// every rank of the grid, on one GPU or several (peer access between them), or the CPU for
/// host arrays (`device` false).
std::unique_ptr<Transport> make_local_particle_transport(const Ranks& ranks, bool device,
                                                         BasicKind real,
                                                         const ExchangeOptions& options);
/// Throws halox::Error, naming the ranks and the pulse, for local ranks' particle plans that
/// do not match (one per rank, the same pulses, sizes that agree).
void check_local_particle_plans(const Topology& grid, std::span<const ParticlePlan> plans);

#if HALOX_HAS_MPI
/// Every host-side wait of these transports ends after `timeout_seconds` with a
/// HaloTimeoutError (common/mpi_wait.hpp).
/// host: host arrays of Ranks::mpi and Ranks::blocks (links within a process copied, the
/// others MPI messages on ranks.processes()'s communicator).
std::unique_ptr<Transport> make_host_transport(const Ranks& ranks, double timeout_seconds);
/// Device transports (throw halox::Error when the build has no CUDA or, for mpi-direct,
/// when MPI is not CUDA-aware).
/// Over Ranks::blocks staged and mpi-direct (links within a process stay on the device; the
/// GPU-initiated kinds are make_grid_fused_transport's).
std::unique_ptr<Transport> make_device_transport(TransportKind kind, const Ranks& ranks,
                                                 std::int64_t chunk_bytes, double timeout_seconds);

std::unique_ptr<Transport> make_nccl_transport(MPI_Comm comm, int rank);
std::unique_ptr<Transport> make_nvshmem_stream_transport(MPI_Comm comm, int rank,
                                                         double timeout_seconds);
/// The GPU-initiated particle transports (ipc-*, nvshmem-pulse/fused, nccl-device) of one
/// rank per process or of blocks of ranks (Ranks::mpi, Ranks::blocks): the fused kernels of
/// PeerHalo, connected to the plans of the connection.
std::unique_ptr<Transport> make_particle_fused_transport(const Ranks& ranks, TransportKind kind,
                                                         BasicKind real,
                                                         const ExchangeOptions& options);
#endif

/// Number of stages (the highest stage + 1).
int stage_count(const std::vector<Op>& ops);

}  // namespace halox::detail
