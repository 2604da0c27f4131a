// The self-test's probe kernel for peers reached by NVSHMEM puts: relocatable device code,
// device-linked with NVSHMEM's device library (src/CMakeLists.txt). NVSHMEM builds only.
#include "channel.cuh"

namespace halox::detail {

void launch_probes_with_puts(const ProbeLink* links, int count, u64 epoch, u64 timeout_ns,
                             ErrorSink error, bool sys, cudaStream_t stream) {
  probe_kernel<true>
      <<<(count + 255) / 256, 256, 0, stream>>>(links, count, epoch, timeout_ns, error, sys);
}

}  // namespace halox::detail
