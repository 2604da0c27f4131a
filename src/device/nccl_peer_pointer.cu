#include "nccl_peer_pointer.hpp"

#include <cuda_runtime.h>
#include <nccl_device.h>

#include "../common/cuda_check.hpp"

namespace halox::detail {

namespace {

__global__ void peer_pointer_kernel(ncclWindow_t window, int peer, void** out) {
  *out = ncclGetPeerPointer(window, 0, peer);
}

}  // namespace

void* nccl_peer_pointer(ncclWindow_t window, int peer, void** word) {
  peer_pointer_kernel<<<1, 1>>>(window, peer, word);
  HALOX_CUDA_CHECK(cudaGetLastError());
  void* out = nullptr;
  HALOX_CUDA_CHECK(cudaMemcpy(&out, word, sizeof out, cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace halox::detail
