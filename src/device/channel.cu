// The host side of the device channel's self-test (channel.cuh).
#include "channel.cuh"

#include "../common/cuda_check.hpp"
#include "../runtime/nvshmem_runtime_stub.hpp"
#include "halox/config.hpp"

namespace halox::detail {

#if !HALOX_HAS_NVSHMEM
// No NVSHMEM, no peer reached by puts: never called.
void launch_probes_with_puts(const ProbeLink*, int, u64, u64, ErrorSink, bool, cudaStream_t) {
  no_nvshmem();
}
#endif

ProbeRun::~ProbeRun() {
  // Only what was made: a failed call here (cudaStreamDestroy of no stream) would be the
  // next cudaGetLastError's answer. cudaFree of nothing is no error.
  if (m_stream != nullptr) {
    cudaStreamSynchronize(m_stream);
    cudaStreamDestroy(m_stream);
  }
  cudaFree(m_links);
}

void ProbeRun::launch(std::span<const ProbeLink> links, u64 epoch, double timeout_seconds,
                      ErrorSink error, bool sys, bool puts) {
  if (links.empty()) return;
  finish();
  cudaFree(m_links);  // left by a launch that failed before its stream
  m_links = nullptr;
  HALOX_CUDA_CHECK(cudaMalloc(&m_links, links.size_bytes()));
  copy_to_device_now(m_links, links.data(), links.size_bytes());
  HALOX_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
  // One thread per link: the links are few, so every block is resident and no wait can
  // starve a sender (each thread sends before it waits).
  const int count = static_cast<int>(links.size());
  const u64 timeout_ns = static_cast<u64>(timeout_seconds * 1e9);
  if (puts) {
    launch_probes_with_puts(m_links, count, epoch, timeout_ns, error, sys, m_stream);
  } else {
    probe_kernel<false>
        <<<(count + 255) / 256, 256, 0, m_stream>>>(m_links, count, epoch, timeout_ns, error, sys);
  }
  HALOX_CUDA_CHECK(cudaGetLastError());
}

void ProbeRun::finish() {
  if (m_stream == nullptr) return;
  const cudaError_t finished = cudaStreamSynchronize(m_stream);
  cudaStreamDestroy(m_stream);
  cudaFree(m_links);
  m_stream = nullptr;
  m_links = nullptr;
  HALOX_CUDA_CHECK(finished);
}

}  // namespace halox::detail
