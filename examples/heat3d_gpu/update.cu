// The heat equation's interior update (update.hpp).
#include "update.hpp"

namespace heat3d {

namespace {

// One thread per interior cell (grid-stride).
__global__ void update_kernel(const double* u, double* next, int nx, int ny, int nz, long sy,
                              long sz, double lambda) {
  const long n = static_cast<long>(nx) * ny * nz;
  for (long c = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; c < n;
       c += static_cast<long>(gridDim.x) * blockDim.x) {
    const long x = 1 + c % nx, y = 1 + c / nx % ny, z = 1 + c / (static_cast<long>(nx) * ny);
    const long i = z * sz + y * sy + x;
    next[i] = u[i] + lambda * (u[i - 1] + u[i + 1] + u[i - sy] + u[i + sy] + u[i - sz] + u[i + sz] -
                               6 * u[i]);
  }
}

}  // namespace

cudaError_t update_async(const double* u, double* next, std::array<int, 3> interior, long sy,
                         long sz, double lambda, cudaStream_t stream) {
  const long cells = static_cast<long>(interior[0]) * interior[1] * interior[2];
  update_kernel<<<static_cast<unsigned>((cells + 255) / 256), 256, 0, stream>>>(
      u, next, interior[0], interior[1], interior[2], sy, sz, lambda);
  return cudaGetLastError();
}

}  // namespace heat3d
