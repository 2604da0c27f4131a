// halox: pack and unpack of GPU memory by CUDA kernels driven by the canonical form
// (available when halox is built with HALOX_ENABLE_CUDA). Host-only header.
//
// All functions are asynchronous on `stream` and never synchronise the host. The device
// copy of a type's canonical form and its launch shape are computed on first use of a
// (type, count) pair and cached. `out` of pack_async may be any device-accessible pointer,
// including a peer GPU's buffer (direct stores) or mapped pinned host memory. pack_async and
// unpack_async may be captured into a CUDA graph (tested), a type's first call included: its
// tables are made outside the capture. A replay moves the data then at the captured addresses.
#pragma once

#include <cstdint>

#include "halox/datatype.hpp"
#include "halox/device.hpp"

namespace halox {

/// Packs `count` instances of `type` at `in` (device memory) into `out`.
void pack_async(const void* in, std::int64_t count, const Datatype& type, void* out,
                GpuStream stream);

/// Scatters packed bytes from `in` into `out` (device memory). Throws DatatypeError when
/// the type writes some byte twice.
void unpack_async(const void* in, void* out, std::int64_t count, const Datatype& type,
                  GpuStream stream);

/// Like unpack_async but adds into `out` (homogeneous float32 or float64 types only).
void unpack_accumulate_async(const void* in, void* out, std::int64_t count, const Datatype& type,
                             GpuStream stream);

/// Copies one instance of `in_type` at `in` into one instance of `out_type` at `out` (device
/// memory), element by element in type-signature order, as a send to oneself would, in one
/// kernel and without a packed copy in between. The two types must hold the same number of
/// bytes (DatatypeError otherwise); the destination must not address a byte twice; source and
/// destination bytes must not overlap.
void copy_async(const void* in, const Datatype& in_type, void* out, const Datatype& out_type,
                GpuStream stream);

/// Launch shape halox chose for a (type, count) pair, for benchmarks and diagnostics.
/// Packs bytes [packed_offset, packed_offset + bytes) of the packed stream (as halox::pack
/// with packed_offset and max_bytes): `out` receives byte packed_offset at out[0]. The range
/// must not split an element. Used by the chunked pipeline.
void pack_range_async(const void* in, std::int64_t count, const Datatype& type, void* out,
                      std::int64_t packed_offset, std::int64_t bytes, GpuStream stream);

/// Unpacks bytes [packed_offset, packed_offset + bytes) of the packed stream, read from in[0].
void unpack_range_async(const void* in, void* out, std::int64_t count, const Datatype& type,
                        std::int64_t packed_offset, std::int64_t bytes, GpuStream stream);

struct GpuPackShape {
  int word_bytes = 0;        ///< bytes each thread moves per access (16, 8, 4, 2 or 1)
  std::int64_t words = 0;    ///< total words
  int pieces = 0;            ///< canonical pieces (1: the single-descriptor fast path)
  bool memcpy_path = false;  ///< contiguous: a cudaMemcpyAsync
};
GpuPackShape gpu_pack_shape(const void* in, std::int64_t count, const Datatype& type,
                            const void* out);

}  // namespace halox
