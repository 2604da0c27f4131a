// Enumerates the contiguous runs of a canonical piece in packed order.
#pragma once

#include <algorithm>
#include <string>

#include "halox/datatype.hpp"

namespace halox::detail {

/// Throws DatatypeError unless every byte `count` instances of `type` address, and every
/// packed position, has a 64-bit offset from the buffer's address: pack and unpack compute
/// instance * extent + offset and instance * size + position.
/// The bytes [lo, hi) that `count` instances of `type` touch, relative to the buffer address
/// (count >= 1); throws when they do not fit a 64-bit offset.
struct Footprint {
  std::int64_t lo = 0, hi = 0;
};
inline Footprint footprint(const Datatype& type, std::int64_t count, const char* where) {
  std::int64_t span = 0, lo = 0, hi = 0, true_ub = 0, bytes = 0;
  const bool overflow =
      __builtin_mul_overflow(count - 1, type.extent(), &span) ||
      __builtin_add_overflow(type.true_lb(), type.true_extent(), &true_ub) ||
      __builtin_add_overflow(type.true_lb(), std::min<std::int64_t>(0, span), &lo) ||
      __builtin_add_overflow(true_ub, std::max<std::int64_t>(0, span), &hi) ||
      __builtin_mul_overflow(count, type.size(), &bytes);
  if (overflow) {
    throw DatatypeError(std::string("halox::") + where + ": " + std::to_string(count) +
                        " instances of the " + type.combiner_name() + " type (extent " +
                        std::to_string(type.extent()) + ", size " + std::to_string(type.size()) +
                        ") span more bytes than a 64-bit offset addresses");
  }
  return {lo, hi};
}

inline void check_footprint(const Datatype& type, std::int64_t count, const char* where) {
  if (count > 0) footprint(type, count, where);
}

/// Calls visit(memory_offset) for every run of `piece`, in packed order, starting at run
/// `first_run`; stops early when visit returns false.
template <class Visit>
void for_each_run(const CanonicalPiece& piece, std::int64_t first_run, Visit&& visit) {
  if (piece.is_index) {
    const auto& offsets = piece.index.offsets;
    for (std::size_t i = static_cast<std::size_t>(first_run); i < offsets.size(); ++i) {
      if (!visit(offsets[i])) return;
    }
    return;
  }
  const StridedBlock& s = piece.strided;
  if (s.ndims == 0) {
    if (first_run == 0) visit(s.offset);
    return;
  }
  if (s.ndims == 1) {
    for (std::int64_t i = first_run; i < s.count[0]; ++i) {
      if (!visit(s.offset + i * s.stride[0])) return;
    }
    return;
  }
  // Generic: an odometer over the dimensions, innermost first.
  std::array<std::int64_t, kMaxStridedDims> index{};
  std::int64_t rest = first_run;
  std::int64_t offset = s.offset;
  for (int d = 0; d < s.ndims; ++d) {
    index[d] = rest % s.count[d];
    rest /= s.count[d];
    offset += index[d] * s.stride[d];
  }
  if (rest > 0) return;
  for (;;) {
    for (; index[0] < s.count[0]; ++index[0], offset += s.stride[0]) {
      if (!visit(offset)) return;
    }
    offset -= s.count[0] * s.stride[0];
    index[0] = 0;
    int d = 1;
    for (; d < s.ndims; ++d) {
      offset += s.stride[d];
      if (++index[d] < s.count[d]) break;
      offset -= s.count[d] * s.stride[d];
      index[d] = 0;
    }
    if (d == s.ndims) return;
  }
}

}  // namespace halox::detail
