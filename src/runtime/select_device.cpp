#include <cstdlib>

#include "halox/config.hpp"
#include "halox/device.hpp"
#include "halox/mpi.hpp"
#include "env.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace halox {

int select_device(MPI_Comm comm) {
#if HALOX_HAS_CUDA
  MPI_Comm node;
  HALOX_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int local = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(node, &local));
  HALOX_MPI_CHECK(MPI_Comm_free(&node));
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
