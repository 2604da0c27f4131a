// Enumerates the contiguous runs of a canonical piece in packed order.
#pragma once

#include "halox/datatype.hpp"

namespace halox::detail {

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
