// One CUDA check for the mini-apps and benchmarks: throws halox::BackendError naming the
// program, the call and CUDA's message (the library has its own, internal one).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "halox/error.hpp"

namespace halox::apps {

inline void check_cuda(cudaError_t rc, const char* prefix, const char* call) {
  if (rc != cudaSuccess) {
    throw BackendError(std::string(prefix) + call + ": " + cudaGetErrorString(rc));
  }
}

}  // namespace halox::apps

/// HALOX_APP_CUDA("halox-md: ", cudaMalloc(...)): evaluates the call once.
#define HALOX_APP_CUDA(prefix, call) ::halox::apps::check_cuda((call), prefix, #call)
