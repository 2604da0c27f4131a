// The fused particle kernels for peers reached by NVSHMEM put-with-signal: the PUTS
// instantiations of device_halo_kernels.cuh, compiled as relocatable device code and
// device-linked with NVSHMEM's device library (src/CMakeLists.txt). Only in NVSHMEM builds.
#include "../common/cuda_check.hpp"
#include "device_halo_kernels.cuh"

namespace halox::detail::fused_particle {

template <class Real>
void launch_with_puts(bool forward, dim3 grid, const LaunchArgs& a, Real* const* arrays,
                      cudaStream_t stream) {
  launch_dependent(forward ? forward_kernel<Real, true> : reverse_kernel<Real, true>, grid, 256,
                   stream, a, arrays);
}
template void launch_with_puts<float>(bool, dim3, const LaunchArgs&, float* const*, cudaStream_t);
template void launch_with_puts<double>(bool, dim3, const LaunchArgs&, double* const*, cudaStream_t);

int resident_blocks_with_puts(bool float32) {
  return float32 ? resident_blocks_both_directions<float, true>()
                 : resident_blocks_both_directions<double, true>();
}

}  // namespace halox::detail::fused_particle
