// The IPC transport: one rank per process, neighbours' blocks mapped with CUDA IPC (same
// node), the fused kernels of device_halo.cu storing straight into them.
#pragma once

#include <mpi.h>

#include <map>
#include <memory>

#include "device_halo.hpp"

namespace halox::detail {

class IpcHalo {
 public:
  IpcHalo(MPI_Comm comm, int rank, BasicKind real, GpuHaloOptions options);
  ~IpcHalo();
  /// Collective over the plan's neighbours (every rank calls it with its own plan).
  void set_plan(const ParticlePlan& plan);
  void forward(void* x, GpuStream stream) { m_halo->forward({x}, stream); }
  void reverse(void* f, GpuStream stream) { m_halo->reverse({f}, stream); }
  void check() const { m_halo->check(); }

 private:
  void close_peers();
  MPI_Comm m_comm;
  int m_rank;
  std::unique_ptr<DeviceHalo> m_halo;
  std::map<int, PeerBlock> m_peers;  // opened IPC mappings by rank
};

}  // namespace halox::detail
