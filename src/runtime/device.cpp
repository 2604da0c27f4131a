#include "halox/device.hpp"

#include "halox/config.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace halox {

int visible_gpus() {
#if HALOX_HAS_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

}  // namespace halox
