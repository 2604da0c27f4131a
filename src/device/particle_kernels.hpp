// Host entry points of the exchange's device code (particle_kernels.cu). Only called when
// halox is built with CUDA.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "halox/datatype.hpp"
#include "halox/pack_gpu.hpp"

namespace halox::detail {

void copy_async(void* dst, const void* src, std::int64_t bytes, GpuStream stream);
/// A device copy of an index map.
std::shared_ptr<const std::int32_t> upload_index(const std::vector<std::int32_t>& index);
/// out[k] = x[index[first + k]] + shift for k < n (3 reals per item).
void gather_shift_async(BasicKind real, const void* x, const std::int32_t* index,
                        std::int64_t first, std::int64_t n, const std::array<double, 3>& shift,
                        void* out, GpuStream stream);
/// f[index[first + k]] += in[k] for k < n (3 reals per item; indices within a pulse differ).
void scatter_add_async(BasicKind real, void* f, const std::int32_t* index, std::int64_t first,
                       std::int64_t n, const void* in, GpuStream stream);

}  // namespace halox::detail
