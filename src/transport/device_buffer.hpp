// Exchange buffers that only grow (no allocation on the exchange path once warm), from
// cudaMalloc (device) or cudaMallocHost (pinned host). Shared by the device transports.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/cuda_check.hpp"

namespace halox::detail {

// A buffer that only grows, from cudaMalloc (device) or cudaMallocHost (pinned host).
template <cudaError_t (*Allocate)(void**, std::size_t), cudaError_t (*Free)(void*)>
class GrowingBuffer {
 public:
  GrowingBuffer() = default;
  GrowingBuffer(const GrowingBuffer&) = delete;
  GrowingBuffer(GrowingBuffer&& o) noexcept : m_ptr(o.m_ptr), m_size(o.m_size) {
    o.m_ptr = nullptr;
  }
  ~GrowingBuffer() { Free(m_ptr); }
  char* at_least(std::int64_t n) {
    if (n > m_size) {
      Free(m_ptr);
      m_ptr = nullptr;
      HALOX_CUDA_CHECK(Allocate(&m_ptr, static_cast<std::size_t>(n)));
      m_size = n;
    }
    return static_cast<char*>(m_ptr);
  }
  char* get() const { return static_cast<char*>(m_ptr); }

 private:
  void* m_ptr = nullptr;
  std::int64_t m_size = 0;
};

inline cudaError_t device_alloc(void** p, std::size_t n) {
  return cudaMalloc(p, n);
}
inline cudaError_t pinned_alloc(void** p, std::size_t n) {
  return cudaMallocHost(p, n);
}
using DeviceBuffer = GrowingBuffer<device_alloc, cudaFree>;
using PinnedBuffer = GrowingBuffer<pinned_alloc, cudaFreeHost>;

}  // namespace halox::detail
