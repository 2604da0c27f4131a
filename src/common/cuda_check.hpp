// One CUDA check for all of halox's host code: evaluates the call once, throws
// halox::BackendError naming it; stays on in release builds. The one question of where a
// buffer lives, and set-up copies that are complete on return.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <string>
#include <utility>

#include "halox/error.hpp"
#include "../runtime/env.hpp"

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
/// Whether work queued on `stream` now goes into a CUDA graph being captured. The legacy
/// default stream (null) is never captured: work queued there while another stream
/// captures fails by itself.
inline bool capturing(cudaStream_t stream) {
  if (stream == nullptr) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

/// The synchronous exchange calls: what they queued on the default stream is done.
inline void finish_default_stream() {
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

/// Whether the exchange kernels are launched as programmatic dependents of the kernel before
/// them (compute capability 9.0 and up; HALOX_PDL=0 turns it off): their blocks are
/// scheduled while that kernel still runs and wait for it on the GPU
/// (wait_for_previous_kernel), so the launch gap between queued kernels overlaps the
/// previous one. Read once per process, for the current GPU at the first call.
inline bool dependent_launch() {
  static const bool on = [] {
    if (!env_dependent_launch()) return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return on;
}

/// Launches `kernel` on `stream`, as a programmatic dependent of the kernel before it where
/// dependent_launch() allows. The kernel must call wait_for_previous_kernel() (signals.cuh)
/// before it touches memory.
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = dependent_launch() ? 1 : 0;
  HALOX_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace halox::detail
