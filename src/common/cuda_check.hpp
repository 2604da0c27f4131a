// One CUDA check for all of halox's host code: evaluates the call once, throws
// halox::BackendError naming it; stays on in release builds.
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

}  // namespace halox::detail

#define HALOX_CUDA_CHECK(call)                  \
  do {                                          \
    ::halox::detail::check_cuda((call), #call); \
  } while (0)
