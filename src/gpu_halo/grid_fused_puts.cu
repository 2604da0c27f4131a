// The fused grid kernel for peers reached by NVSHMEM put-with-signal: the PUTS
// instantiations of grid_fused_kernels.cuh, compiled as relocatable device code and
// device-linked with NVSHMEM's device library (src/CMakeLists.txt). Only in NVSHMEM builds.
#include "../common/cuda_check.hpp"
#include "grid_fused_kernels.cuh"

namespace halox::detail::fused_grid {

void launch_grid_with_puts(dim3 grid, const GridArgs& a, char* field, cudaStream_t stream,
                           bool traced) {
  if (traced)
    grid_exchange_kernel<true, true><<<grid, 256, 0, stream>>>(a, field);
  else
    grid_exchange_kernel<true, false><<<grid, 256, 0, stream>>>(a, field);
}

void launch_grid_probe_with_puts(unsigned ops, const GridArgs& a) {
  grid_probe_kernel<true><<<ops, 32>>>(a);
}

int grid_blocks_per_sm_with_puts(bool traced) {
  int per_sm = 0;
  if (traced) {
    HALOX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, grid_exchange_kernel<true, true>, 256, 0));
  } else {
    HALOX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, grid_exchange_kernel<true, false>, 256, 0));
  }
  return per_sm;
}

}  // namespace halox::detail::fused_grid
