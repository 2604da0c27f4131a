// The heat equation's interior update on the GPU (a 7-point stencil), kept in its own CUDA
// file: the program that calls halox is plain C++.
#pragma once

#include <cuda_runtime.h>

#include <array>

namespace heat3d {

/// next = u + lambda * laplacian(u) over the `interior` cells of a block whose rows are `sy`
/// and planes `sz` elements apart (a one-cell halo around the interior), queued on `stream`.
cudaError_t update_async(const double* u, double* next, std::array<int, 3> interior, long sy,
                         long sz, double lambda, cudaStream_t stream);

}  // namespace heat3d
