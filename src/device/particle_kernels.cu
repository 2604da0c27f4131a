#include <cuda_runtime.h>

#include <string>

#include "../common/cuda_check.hpp"
#include "particle_kernels.hpp"
#include "halox/error.hpp"

namespace halox::detail {

namespace {

template <class Real>
__global__ void gather_shift_kernel(const Real* x, const std::int32_t* index, int n, Real sx,
                                    Real sy, Real sz, Real* out) {
  for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x) {
    const Real* p = x + 3 * static_cast<std::int64_t>(__ldg(index + k));
    out[3 * k + 0] = p[0] + sx;
    out[3 * k + 1] = p[1] + sy;
    out[3 * k + 2] = p[2] + sz;
  }
}

template <class Real>
__global__ void scatter_add_kernel(Real* f, const std::int32_t* index, int n, const Real* in) {
  for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x) {
    Real* p = f + 3 * static_cast<std::int64_t>(__ldg(index + k));
    p[0] += in[3 * k + 0];
    p[1] += in[3 * k + 1];
    p[2] += in[3 * k + 2];
  }
}

int blocks_for(std::int64_t n) {
  return static_cast<int>(std::min<std::int64_t>((n + 255) / 256, 4096));
}

}  // namespace

void copy_async(void* dst, const void* src, std::int64_t bytes, GpuStream stream) {
  if (bytes > 0) {
    HALOX_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyDefault, stream));
  }
}

std::shared_ptr<const std::int32_t> upload_index(const std::vector<std::int32_t>& index) {
  if (index.empty()) return nullptr;
  void* p = nullptr;
  HALOX_CUDA_CHECK(cudaMalloc(&p, index.size() * sizeof(std::int32_t)));
  std::shared_ptr<const std::int32_t> owned(static_cast<const std::int32_t*>(p),
                                            [](const std::int32_t* q) { cudaFree((void*)q); });
  detail::copy_to_device_now(p, index.data(), index.size() * sizeof(std::int32_t));
  return owned;
}

void gather_shift_async(BasicKind real, const void* x, const std::int32_t* index,
                        std::int64_t first, std::int64_t n, const std::array<double, 3>& shift,
                        void* out, GpuStream stream) {
  if (n <= 0) return;
  if (real == BasicKind::float32) {
    gather_shift_kernel<float><<<blocks_for(n), 256, 0, stream>>>(
        static_cast<const float*>(x), index + first, static_cast<int>(n),
        static_cast<float>(shift[0]), static_cast<float>(shift[1]), static_cast<float>(shift[2]),
        static_cast<float*>(out));
  } else {
    gather_shift_kernel<double><<<blocks_for(n), 256, 0, stream>>>(
        static_cast<const double*>(x), index + first, static_cast<int>(n), shift[0], shift[1],
        shift[2], static_cast<double*>(out));
  }
  HALOX_CUDA_CHECK(cudaGetLastError());
}

void scatter_add_async(BasicKind real, void* f, const std::int32_t* index, std::int64_t first,
                       std::int64_t n, const void* in, GpuStream stream) {
  if (n <= 0) return;
  if (real == BasicKind::float32) {
    scatter_add_kernel<float><<<blocks_for(n), 256, 0, stream>>>(
        static_cast<float*>(f), index + first, static_cast<int>(n), static_cast<const float*>(in));
  } else {
    scatter_add_kernel<double>
        <<<blocks_for(n), 256, 0, stream>>>(static_cast<double*>(f), index + first,
                                            static_cast<int>(n), static_cast<const double*>(in));
  }
  HALOX_CUDA_CHECK(cudaGetLastError());
}

}  // namespace halox::detail
