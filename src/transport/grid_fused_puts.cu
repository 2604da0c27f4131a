// The fused grid kernel for peers reached by NVSHMEM put-with-signal: the PUTS
// instantiations of grid_fused_kernels.cuh, compiled as relocatable device code and
// device-linked with NVSHMEM's device library (src/CMakeLists.txt). Only in NVSHMEM builds.
#include "../common/cuda_check.hpp"
#include "../device/grid_fused_kernels.cuh"

namespace halox::detail::fused_grid {

void launch_grid_with_puts(dim3 grid, const GridArgs& a, const GridFields& fields,
                           cudaStream_t stream, bool traced) {
  launch_dependent(traced ? grid_exchange_kernel<true, true> : grid_exchange_kernel<true, false>,
                   grid, 256, stream, a, fields);
}

int grid_resident_blocks_with_puts(bool traced) {
  return traced ? resident_blocks(grid_exchange_kernel<true, true>)
                : resident_blocks(grid_exchange_kernel<true, false>);
}

}  // namespace halox::detail::fused_grid
