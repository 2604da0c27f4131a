// The transport interface inside halox: an exchange is a list of ops (one message pair
// each) grouped in stages; a transport moves them. Pack and unpack are callbacks so the same
// transport serves grids (datatypes) and particles (index maps with shifts or sums).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "halox/exchange.hpp"

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
  int send_rank = -1;  // -1: nothing to send
  int recv_rank = -1;  // -1: nothing to receive
  int tag = 0;
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

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  /// Runs every stage in order; ops of one stage run concurrently.
  virtual void run(const std::vector<Op>& ops, void* field, GpuStream stream,
                   ExchangeStats& stats) = 0;
  /// The exchange has a new plan (collective: every rank learns it at the same call): a
  /// transport that sets up per op list does so again at the next run of each list.
  virtual void new_plan() {}
};

/// Every host-side wait of these transports ends after `timeout_seconds` with a
/// HaloTimeoutError (host_wait.hpp).
std::unique_ptr<Transport> make_host_transport(MPI_Comm comm, int rank, double timeout_seconds);
/// Device transports (throw halox::Error when the build has no CUDA or, for mpi-direct,
/// when MPI is not CUDA-aware).
std::unique_ptr<Transport> make_device_transport(TransportKind kind, MPI_Comm comm, int rank,
                                                 std::int64_t chunk_bytes, double timeout_seconds);

std::unique_ptr<Transport> make_nccl_transport(MPI_Comm comm, int rank);
std::unique_ptr<Transport> make_nvshmem_stream_transport(MPI_Comm comm, int rank,
                                                         double timeout_seconds);

/// Number of stages (the highest stage + 1).
int stage_count(const std::vector<Op>& ops);

/// A host memory buffer that only grows.
struct HostBuffer {
  std::vector<char> bytes;
  char* at_least(std::int64_t n) {
    if (static_cast<std::int64_t>(bytes.size()) < n) bytes.resize(static_cast<std::size_t>(n));
    return bytes.data();
  }
};

}  // namespace halox::detail
