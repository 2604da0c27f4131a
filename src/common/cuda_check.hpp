// One CUDA check for all of halox's host code: evaluates the call once, throws
// halox::BackendError naming it; stays on in release builds. And the one question of where a
// buffer lives.
#pragma once

#include <cuda_runtime.h>

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
