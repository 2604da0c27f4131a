// halox: pack and unpack on the CPU (the reference implementation the GPU kernels are
// checked against). All functions work on a byte range of the packed stream so that a
// pipeline can pack and unpack in chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <ranges>
#include <type_traits>

#include "halox/datatype.hpp"

namespace halox {

/// "Up to the end of the packed stream".
inline constexpr std::int64_t kAllBytes = std::numeric_limits<std::int64_t>::max();

/// The memory a CPU pack or unpack reads: a pointer (MPI's buffer address; the caller vouches
/// for its bounds) or a contiguous range (`std::vector`, `std::array`, `std::span`), whose size
/// is then checked against the bytes the type and count touch.
struct ConstBytes {
  const void* data = nullptr;
  std::int64_t size = -1;  ///< bytes of the range; -1 for a bare pointer

  ConstBytes(const void* pointer) : data(pointer) {}  // NOLINT: converts as a pointer does
  template <std::ranges::contiguous_range R>
  requires(!std::is_pointer_v<std::remove_cvref_t<R>>) ConstBytes(const R& range)  // NOLINT
      : data(std::ranges::data(range)),
        size(static_cast<std::int64_t>(sizeof(std::ranges::range_value_t<R>) *
                                       std::ranges::size(range))) {}
};

/// The memory a CPU pack or unpack writes: a pointer or a contiguous range of non-const
/// elements, checked as ConstBytes is.
struct MutableBytes {
  void* data = nullptr;
  std::int64_t size = -1;  ///< bytes of the range; -1 for a bare pointer

  MutableBytes(void* pointer) : data(pointer) {}  // NOLINT: converts as a pointer does
  template <std::ranges::contiguous_range R>
  requires(!std::is_pointer_v<std::remove_cvref_t<R>> &&
           !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>)
      MutableBytes(R&& range)  // NOLINT
      : data(std::ranges::data(range)),
        size(static_cast<std::int64_t>(sizeof(std::ranges::range_value_t<R>) *
                                       std::ranges::size(range))) {}
};

/// Packed bytes of `count` instances of `type` (MPI_Pack_size without the header slack).
std::int64_t packed_size(const Datatype& type, std::int64_t count);

/// Pack bytes [packed_offset, packed_offset + max_bytes) of the packed stream of `count`
/// instances of `type` read from `in` (MPI's buffer address: displacements are relative to
/// it) into `out` (which receives the first of those bytes at out[0]).
/// Returns the number of bytes written. Throws DatatypeError when a buffer is null, or a
/// range is smaller than what the type reads or writes, instead of touching memory.
std::int64_t pack(ConstBytes in, std::int64_t count, const Datatype& type, MutableBytes out,
                  std::int64_t packed_offset = 0, std::int64_t max_bytes = kAllBytes);

/// The inverse of pack: scatter packed bytes into `out`. Throws DatatypeError when the
/// type writes some byte twice.
std::int64_t unpack(ConstBytes in, MutableBytes out, std::int64_t count, const Datatype& type,
                    std::int64_t packed_offset = 0, std::int64_t max_bytes = kAllBytes);

/// Like unpack, but adds each packed value to the destination instead of overwriting it
/// (the force halo's reduction). The type must be homogeneous float32 or float64, and the
/// range must start and end on element boundaries.
std::int64_t unpack_accumulate(ConstBytes in, MutableBytes out, std::int64_t count,
                               const Datatype& type, std::int64_t packed_offset = 0,
                               std::int64_t max_bytes = kAllBytes);

}  // namespace halox
