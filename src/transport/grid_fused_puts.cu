// The grid kernel for peers reached by NVSHMEM put-with-signal: the PUTS instantiations of
// grid_fused_kernels.cuh, compiled as relocatable device code and device-linked with NVSHMEM's
// device library (src/CMakeLists.txt). Only in NVSHMEM builds.
#include "../common/cuda_check.hpp"
#include "../device/grid_fused_kernels.cuh"

namespace halox::detail::fused_grid {

void launch_grid_with_puts(int blocks, const GridArgs& a, cudaStream_t stream, bool traced) {
  launch_dependent(traced ? grid_kernel<true, true> : grid_kernel<true, false>, blocks, 256, stream,
                   a);
}

int grid_resident_blocks_with_puts(bool traced) {
  return traced ? resident_blocks(grid_kernel<true, true>)
                : resident_blocks(grid_kernel<true, false>);
}

}  // namespace halox::detail::fused_grid
