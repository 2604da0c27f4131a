// A test buffer of the interposer's tests: host memory, or device memory, real (cudaMalloc,
// in the GPU build of a test: HALOX_TEST_DEVICE_MEMORY) or pretend (HALOX_MPI_PRETEND_DEVICE),
// read and written only by copies.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "../../src/mpi/memory.hpp"
#if HALOX_TEST_DEVICE_MEMORY
#include <cuda_runtime.h>
#endif

namespace {

// `bytes` of host memory, or of device memory: real (cudaMalloc, in the GPU build of this
// test) or pretend, read and written only by copies.
class Buffer {
 public:
  Buffer(std::size_t bytes, bool device) : m_bytes(bytes), m_device(device) {
    if (device) {
#if HALOX_TEST_DEVICE_MEMORY
      if (cudaMalloc(reinterpret_cast<void**>(&m_data), bytes) != cudaSuccess) m_data = nullptr;
#else
      m_data = static_cast<char*>(halox_mpi_pretend_alloc(bytes));
#endif
      if (m_data == nullptr) ADD_FAILURE() << "no device memory of " << bytes << " bytes";
    } else {
      m_host.assign(bytes, 0);
      m_data = m_host.data();
    }
  }
  ~Buffer() {
#if HALOX_TEST_DEVICE_MEMORY
    if (m_device) cudaFree(m_data);
#else
    if (m_device) halox_mpi_pretend_free(m_data);
#endif
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* data() const {
    return m_data;
  }
  void write(const std::vector<char>& v, std::size_t at = 0) {
    if (m_device)
      copy(m_data + at, v.data(), v.size());
    else
      std::memcpy(m_data + at, v.data(), v.size());
  }
  std::vector<char> read() const {
    std::vector<char> v(m_bytes);
    if (m_device)
      copy(v.data(), m_data, m_bytes);
    else
      std::memcpy(v.data(), m_data, m_bytes);
    return v;
  }
  static void copy(void* to, const void* from, std::size_t n) {
#if HALOX_TEST_DEVICE_MEMORY
    EXPECT_EQ(cudaMemcpy(to, from, n, cudaMemcpyDefault), cudaSuccess);
#else
    EXPECT_EQ(halox_mpi_pretend_copy(to, from, n), 0);
#endif
  }

 private:
  std::size_t m_bytes;
  bool m_device;
  char* m_data = nullptr;
  std::vector<char> m_host;
};

}  // namespace
