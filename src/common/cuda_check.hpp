// One CUDA check for all of halox's host code: evaluates the call once, throws
// halox::BackendError naming it; stays on in release builds. The one question of where a
// buffer lives, and set-up copies that are complete on return.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "halox/error.hpp"

namespace halox::detail {

inline void check_cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) {
    throw BackendError(std::string("CUDA call failed: ") + call + ": " + cudaGetErrorString(rc));
  }
}

/// Whether `p` is device (or managed) memory; the exchanges ask once per buffer.
inline bool is_device_memory(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // an unregistered host pointer on old drivers: clear the error
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

}  // namespace halox::detail

#define HALOX_CUDA_CHECK(call)                  \
  do {                                          \
    ::halox::detail::check_cuda((call), #call); \
  } while (0)

namespace halox::detail {

// Set-up copies and fills that are complete when they return. cudaMemcpy from pageable host
// memory may return before its DMA has landed, and cudaMemset returns at once; both run on
// the default stream, which the non-blocking streams users hand us do not wait for, so a
// kernel there could read the old bytes (it did: a table or a field read half-written).
inline void copy_to_device_now(void* device, const void* host, std::size_t bytes) {
  HALOX_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, nullptr));
  HALOX_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}
inline void fill_device_now(void* device, int byte, std::size_t bytes) {
  HALOX_CUDA_CHECK(cudaMemsetAsync(device, byte, bytes, nullptr));
  HALOX_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

/// Blocks of 256 threads of `kernel` the current GPU holds at once (its SMs times the
/// occupancy calculator's blocks per SM): what a grid whose blocks all spin may use.
template <class Kernel>
int resident_blocks(Kernel kernel) {
  int device = 0, sms = 0, per_sm = 0;
  HALOX_CUDA_CHECK(cudaGetDevice(&device));
  HALOX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  HALOX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, 0));
  return sms * per_sm;
}

}  // namespace halox::detail
