// The bound a pack can reach on a GPU whose memory moves 32-byte sectors: it reads every
// sector that holds a byte of the type's footprint (an x face of a C-order float array reads
// 32 bytes for each 4 it packs) and a gather's index, and writes the packed bytes
// (contiguous). Against the copy ceiling measured in the same run (bytes read + written per
// second), this is the fastest the pack can go; the benchmark prints the fraction of it
// reached.
#pragma once

#include <cstdint>
#include <vector>

#include "halox/datatype.hpp"

namespace halox::bench {

constexpr std::int64_t kSectorBytes = 32;

/// Bytes of the distinct 32-byte sectors (of an array starting on a sector) that one
/// instance of `form` reads, its footprint within [0, array_bytes).
inline std::int64_t sector_bytes_read(const CanonicalForm& form, std::int64_t array_bytes) {
  std::vector<bool> touched(
      static_cast<std::size_t>((array_bytes + kSectorBytes - 1) / kSectorBytes), false);
  std::int64_t sectors = 0;
  auto mark = [&](std::int64_t offset, std::int64_t bytes) {
    if (bytes <= 0) return;
    for (std::int64_t s = offset / kSectorBytes; s <= (offset + bytes - 1) / kSectorBytes; ++s) {
      if (s < 0 || s >= static_cast<std::int64_t>(touched.size())) continue;
      if (!touched[static_cast<std::size_t>(s)]) {
        touched[static_cast<std::size_t>(s)] = true;
        ++sectors;
      }
    }
  };
  for (const CanonicalPiece& piece : form.pieces) {
    if (piece.is_index) {
      for (const std::int64_t offset : piece.index.offsets) mark(offset, piece.index.block_bytes);
      continue;
    }
    const StridedBlock& b = piece.strided;
    std::int64_t index[kMaxStridedDims] = {};
    for (std::int64_t run = 0, runs = b.runs(); run < runs; ++run) {
      std::int64_t offset = b.offset;
      for (int d = 0; d < b.ndims; ++d) offset += index[d] * b.stride[d];
      mark(offset, b.block_bytes);
      for (int d = 0; d < b.ndims && ++index[d] == b.count[d]; ++d) index[d] = 0;
    }
  }
  return sectors * kSectorBytes;
}

/// Bytes of the index an instance of `form` reads besides its data: an index piece's run
/// offsets, 8 bytes each, contiguous in device memory (halox's plan keeps them so, and a
/// hand-written gather reads its index too).
inline std::int64_t index_bytes_read(const CanonicalForm& form) {
  std::int64_t bytes = 0;
  for (const CanonicalPiece& piece : form.pieces) {
    if (!piece.is_index) continue;
    const auto offsets = static_cast<std::int64_t>(piece.index.offsets.size());
    bytes += (offsets * 8 + kSectorBytes - 1) / kSectorBytes * kSectorBytes;
  }
  return bytes;
}

/// Sector bytes a pack moves: the sectors it reads (data and index) plus the packed bytes it
/// writes (whole sectors, the output starting on one).
inline std::int64_t sector_bytes_moved(const CanonicalForm& form, std::int64_t array_bytes) {
  const std::int64_t written = (form.size + kSectorBytes - 1) / kSectorBytes * kSectorBytes;
  return sector_bytes_read(form, array_bytes) + index_bytes_read(form) + written;
}

}  // namespace halox::bench
