#include <cstdlib>

#include "halox/config.hpp"
#include "halox/device.hpp"
#include "halox/mpi.hpp"
#include "env.hpp"
#include "halox/topology.hpp"
#include "node.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace halox {

int select_device(MPI_Comm comm) {
#if HALOX_HAS_CUDA
  int rank = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  // The caller's communicator: bounded, but no roll call on it.
  const int local =
      detail::NodeRanks(comm, {rank, "", kPlanTimeoutSeconds, "select_device"}, false).rank();
  const int count = visible_gpus();
  if (count == 0) return -1;
  int device = local % count;
  device = detail::env_device(count, device);
  if (cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
#else
  (void)comm;
  return -1;
#endif
}

}  // namespace halox
