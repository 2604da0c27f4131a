// halox: pack and unpack on the CPU (the reference implementation the GPU kernels are
// checked against). All functions work on a byte range of the packed stream so that a
// pipeline can pack and unpack in chunks.
#pragma once

#include <cstdint>
#include <limits>

#include "halox/datatype.hpp"

namespace halox {

/// "Up to the end of the packed stream".
inline constexpr std::int64_t kAllBytes = std::numeric_limits<std::int64_t>::max();

/// Packed bytes of `count` instances of `type` (MPI_Pack_size without the header slack).
std::int64_t packed_size(const Datatype& type, std::int64_t count);

/// Pack bytes [packed_offset, packed_offset + max_bytes) of the packed stream of `count`
/// instances of `type` read from `in` (MPI's buffer address: displacements are relative to
/// it) into `out` (which receives the first of those bytes at out[0]).
/// Returns the number of bytes written.
std::int64_t pack(const void* in, std::int64_t count, const Datatype& type, void* out,
                  std::int64_t packed_offset = 0, std::int64_t max_bytes = kAllBytes);

/// The inverse of pack: scatter packed bytes into `out`. Throws DatatypeError when the
/// type writes some byte twice.
std::int64_t unpack(const void* in, void* out, std::int64_t count, const Datatype& type,
                    std::int64_t packed_offset = 0, std::int64_t max_bytes = kAllBytes);

/// Like unpack, but adds each packed value to the destination instead of overwriting it
/// (the force halo's reduction). The type must be homogeneous float32 or float64, and the
/// range must start and end on element boundaries.
std::int64_t unpack_accumulate(const void* in, void* out, std::int64_t count, const Datatype& type,
                               std::int64_t packed_offset = 0, std::int64_t max_bytes = kAllBytes);

}  // namespace halox
