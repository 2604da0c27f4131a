// The one buffer that only grows, for every exchange's staging and plan data: once warm, the
// exchange path allocates nothing. Its contents are dropped when it grows. Host memory in
// every build; device and pinned host memory where CUDA is built.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "halox/config.hpp"
#include "halox/error.hpp"
#if HALOX_HAS_CUDA
#include "cuda_check.hpp"
#endif

namespace halox::detail {

enum class Memory { host, device, pinned };

/// How much a buffer grows by: exactly what is asked, or a quarter more, for the plans of
/// later neighbour searches (whose halos grow a little; each cudaFree waits for the whole
/// device).
enum class Growth { exact, with_headroom };

inline std::int64_t with_plan_headroom(std::int64_t bytes) {
  return bytes + bytes / 4;
}

template <Memory M, Growth G = Growth::exact>
class GrowingBuffer {
 public:
  GrowingBuffer() = default;
  GrowingBuffer(const GrowingBuffer&) = delete;
  GrowingBuffer& operator=(const GrowingBuffer&) = delete;
  GrowingBuffer(GrowingBuffer&& o) noexcept
      : m_ptr(std::exchange(o.m_ptr, nullptr)), m_size(std::exchange(o.m_size, 0)) {}
  ~GrowingBuffer() { release(m_ptr); }

  /// Room for `n` bytes (the old contents dropped when it grows); the address.
  char* at_least(std::int64_t n) {
    if (n > m_size) {
      release(std::exchange(m_ptr, nullptr));
      m_size = 0;
      m_ptr = allocate(grown(n));
      m_size = grown(n);
    }
    return m_ptr;
  }
  /// Room for `n` bytes keeping the first `used` (host memory, pinned or not); the address.
  char* keeping(std::int64_t n, std::int64_t used) {
    static_assert(M != Memory::device, "a device buffer's contents are copied on the device");
    if (n <= m_size) return m_ptr;
    char* bigger = allocate(grown(n));
    if (used > 0) std::memcpy(bigger, m_ptr, static_cast<std::size_t>(used));
    release(std::exchange(m_ptr, bigger));
    m_size = grown(n);
    return m_ptr;
  }
  char* get() const { return m_ptr; }
  std::int64_t size() const { return m_size; }

 private:
  static std::int64_t grown(std::int64_t n) {
    return G == Growth::with_headroom ? with_plan_headroom(n) : n;
  }
  static char* allocate(std::int64_t n) {
    void* p = nullptr;
    if constexpr (M == Memory::host) {
      p = std::malloc(static_cast<std::size_t>(n));
      if (p == nullptr && n > 0) {
        throw BackendError("out of host memory for " + std::to_string(n) + " bytes of staging");
      }
    } else {
#if HALOX_HAS_CUDA
      if constexpr (M == Memory::device)
        HALOX_CUDA_CHECK(cudaMalloc(&p, static_cast<std::size_t>(n)));
      else
        HALOX_CUDA_CHECK(cudaMallocHost(&p, static_cast<std::size_t>(n)));
#endif
    }
    return static_cast<char*>(p);
  }
  static void release(char* p) {
    if constexpr (M == Memory::host) {
      std::free(p);
    } else {
#if HALOX_HAS_CUDA
      if constexpr (M == Memory::device)
        cudaFree(p);
      else
        cudaFreeHost(p);
#endif
    }
  }

  char* m_ptr = nullptr;
  std::int64_t m_size = 0;
};

/// The same, typed: room for n elements of T (at least one, so that the address is never
/// null: a library asked for a size of none may take null for "how much do you need?").
template <class T, Memory M, Growth G = Growth::exact>
class GrowingArray {
 public:
  T* at_least(std::size_t n) { return cast(m_bytes.at_least(bytes(n))); }
  void resize(std::size_t n) { at_least(n); }
  T* keeping(std::size_t n, std::size_t used) {
    return cast(m_bytes.keeping(bytes(n), static_cast<std::int64_t>(used * sizeof(T))));
  }
  T* get() const { return cast(m_bytes.get()); }

 private:
  static std::int64_t bytes(std::size_t n) {
    return static_cast<std::int64_t>((n > 0 ? n : 1) * sizeof(T));
  }
  static T* cast(char* p) { return reinterpret_cast<T*>(p); }
  GrowingBuffer<M, G> m_bytes;
};

using HostBuffer = GrowingBuffer<Memory::host>;
using DeviceBuffer = GrowingBuffer<Memory::device>;
using PinnedBuffer = GrowingBuffer<Memory::pinned>;

}  // namespace halox::detail
