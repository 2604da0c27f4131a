// One rank per process, the neighbours' blocks mapped into this process so the fused kernels
// of device_halo.cu store straight into them:
//  - ipc:     blocks from cudaMalloc, mapped with CUDA IPC handles sent over MPI;
//  - nvshmem: blocks from NVSHMEM's symmetric heap, mapped with nvshmem_ptr.
// Both need load/store-reachable peers (one node: the same GPU under MPS, or NVLink).
#pragma once

#include <mpi.h>

#include <map>
#include <memory>

#include "device_halo.hpp"

namespace halox::detail {

enum class Mapping { ipc, nvshmem };

class PeerHalo {
 public:
  PeerHalo(MPI_Comm comm, int rank, Mapping mapping, BasicKind real, GpuHaloOptions options);
  ~PeerHalo();
  /// Collective over the communicator (every rank calls it with its own plan).
  void set_plan(const ParticlePlan& plan);
  void forward(void* x, GpuStream stream) { m_halo->forward({x}, stream); }
  void reverse(void* f, GpuStream stream) { m_halo->reverse({f}, stream); }
  void check() const { m_halo->check(); }

 private:
  void unmap_peers();
  MPI_Comm m_comm;
  int m_rank;
  Mapping m_mapping;
  std::unique_ptr<DeviceHalo> m_halo;
  std::map<int, PeerBlock> m_peers;  // mapped blocks by rank
};

}  // namespace halox::detail
