// The device side of the GPU pack, shared with the fused exchange kernels: a canonical
// piece as a kernel sees it, and the function that moves one word of it between memory and
// the packed stream. Include only from CUDA sources.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../datatype/node.hpp"
#include "halox/datatype.hpp"

namespace halox::detail {

struct DeviceDesc {
  std::int64_t offset = 0;              // memory offset of the first run
  std::int64_t packed_offset = 0;       // bytes
  const std::int64_t* index = nullptr;  // run offsets of an index piece (device memory)
  std::int64_t block_bytes = 0;
  std::int64_t first_word = 0;     // in units of the launch's word size, filled at launch
  std::int64_t words_per_run = 0;  // likewise
  int ndims = 0;
  std::int64_t count[kMaxStridedDims] = {};
  std::int64_t stride[kMaxStridedDims] = {};
  // Division by the run length ([0]) and the counts ([1..]) as multiply-high and shift
  // (for 32-bit index math): a hardware divide would cost more than the word it moves.
  unsigned div_mul[kMaxStridedDims + 1] = {};
  unsigned div_shr[kMaxStridedDims + 1] = {};
};

/// The device descriptors of (type, count) for one word size: `pieces` descriptors in device
/// memory (cached with the type's plan, valid while the process lives), `words` in all.
struct DevicePackView {
  const DeviceDesc* descs = nullptr;
  int pieces = 0;
  std::int64_t words = 0;
};
/// The widest word (16, 8, 4, 2, 1 bytes) that the type's offsets, strides and block lengths
/// allow at the typed memory `base`, with the packed side in an aligned staging area.
int device_pack_word(const Datatype& type, std::int64_t count, const void* base);
DevicePackView device_pack_view(const Datatype& type, std::int64_t count, int word);

namespace {

template <class I>
__device__ __forceinline__ I divide(I n, std::int64_t d, unsigned mul, unsigned shr) {
  if constexpr (sizeof(I) == 4) {
    return d == 1 ? n : (__umulhi(n, mul) >> shr);
  } else {
    return n / static_cast<I>(d);
  }
}

enum class PackOp { pack, unpack, accumulate_f32, accumulate_f64 };

template <int W>
struct WordOf;
template <>
struct WordOf<16> {
  using type = uint4;
};
template <>
struct WordOf<8> {
  using type = uint2;
};
template <>
struct WordOf<4> {
  using type = unsigned;
};
template <>
struct WordOf<2> {
  using type = unsigned short;
};
template <>
struct WordOf<1> {
  using type = unsigned char;
};

template <class T, int W>
__device__ __forceinline__ void add_word(char* dst, const char* src) {
#pragma unroll
  for (int i = 0; i < W / static_cast<int>(sizeof(T)); ++i) {
    reinterpret_cast<T*>(dst)[i] += reinterpret_cast<const T*>(src)[i];
  }
}

// The piece that word g belongs to (pieces are ordered by first_word): a binary search.
template <class I>
__device__ __forceinline__ const DeviceDesc& piece_holding(const DeviceDesc* descs, int n, I g) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (descs[mid].first_word <= static_cast<std::int64_t>(g))
      lo = mid;
    else
      hi = mid - 1;
  }
  return descs[lo];
}

// Where word `local` of piece d lies: `mem` bytes into the typed memory, `packed` bytes into
// the packed stream. DEPTH >= 0: the strided nesting depth is known at compile time (the loop
// unrolls and the descriptor's unused dimensions are never read); -1: read it from the
// descriptor.
template <int W, class I, int DEPTH>
__device__ __forceinline__ void word_offsets(const DeviceDesc& d, I local, std::int64_t& mem,
                                             std::int64_t& packed) {
  const I wpr = static_cast<I>(d.words_per_run);
  const I run = divide<I>(local, d.words_per_run, d.div_mul[0], d.div_shr[0]);
  const I w = local - run * wpr;
  if (DEPTH < 0 && d.index != nullptr) {
    mem = __ldg(d.index + run);
  } else {
    mem = d.offset;
    I rest = run;
#pragma unroll
    for (int k = 0; k < (DEPTH >= 0 ? DEPTH : kMaxStridedDims); ++k) {
      if (DEPTH < 0 && k >= d.ndims) break;
      const I c = static_cast<I>(d.count[k]);
      const I q = divide<I>(rest, d.count[k], d.div_mul[k + 1], d.div_shr[k + 1]);
      mem += static_cast<std::int64_t>(rest - q * c) * d.stride[k];
      rest = q;
    }
  }
  mem += static_cast<std::int64_t>(w) * W;
  packed = d.packed_offset + static_cast<std::int64_t>(run) * d.block_bytes +
           static_cast<std::int64_t>(w) * W;
}

// Moves the word at `mem` bytes into the typed memory and `packed` bytes into the stream.
template <int W, PackOp OP>
__device__ __forceinline__ void move_at(std::int64_t mem, std::int64_t packed, const char* src,
                                        char* dst) {
  using Word = typename WordOf<W>::type;
  if constexpr (OP == PackOp::pack) {
    *reinterpret_cast<Word*>(dst + packed) = *reinterpret_cast<const Word*>(src + mem);
  } else if constexpr (OP == PackOp::unpack) {
    *reinterpret_cast<Word*>(dst + mem) = *reinterpret_cast<const Word*>(src + packed);
  } else if constexpr (OP == PackOp::accumulate_f32) {
    add_word<float, W>(dst + mem, src + packed);
  } else {
    add_word<double, W>(dst + mem, src + packed);
  }
}

template <int W, PackOp OP, class I, int DEPTH>
__device__ __forceinline__ void move_word(const DeviceDesc& d, I local, const char* src,
                                          char* dst) {
  std::int64_t mem, packed;
  word_offsets<W, I, DEPTH>(d, local, mem, packed);
  move_at<W, OP>(mem, packed, src, dst);
}

// The canonical piece word g belongs to.
__device__ __forceinline__ const DeviceDesc& piece_of(const DevicePackView& v, long long g) {
  return piece_holding(v.descs, v.pieces, g);
}

// Moves words [first, end) of one face, spread over the threads of a launch (first = the
// thread's first word, stride = the threads that share the face): pack (field at the send type
// -> staging), unpack (staging -> field at the receive type) or, for a message to this rank
// itself, copy (field at the send type -> field at the receive type; word g is the same
// packed word in both). Each thread reads BATCH words before it writes any, so that BATCH
// reads are in flight per thread: the fused exchanges' launches are capped to stay resident,
// and a face of small words is latency-bound otherwise. With 4 in flight for every size, a
// fused exchange of a 4 MiB face on the H200 took 390 us in 4-byte words, 212 in 8-byte and
// 116 in 16-byte ones (docs/PERFORMANCE.md): bound by words in flight, not bytes. So words
// under 8 bytes get 8 in flight (16 would raise the grid kernel from 48 to 80 registers, and
// cost resident blocks).
enum class Move { pack, unpack, copy };
constexpr int kBatch = 4;
template <int W>
constexpr int kBatchFor = W >= 8 ? 4 : 8;
// I: the index type of the word arithmetic (unsigned while every piece has fewer than 2^32
// words, as the exchanges' faces do; std::int64_t otherwise).
template <int W, Move M, class I = unsigned, int BATCH = kBatchFor<W>>
__device__ __forceinline__ void move_face(const DevicePackView& from, const DevicePackView& to,
                                          long long first, long long end, long long stride,
                                          const char* src, char* dst) {
  using Word = typename WordOf<W>::type;
  const DevicePackView& v = M == Move::unpack ? to : from;  // the typed side that counts words
  for (long long base = first; base < end; base += BATCH * stride) {
    Word word[BATCH];
    std::int64_t write[BATCH];
#pragma unroll
    for (int k = 0; k < BATCH; ++k) {
      const long long g = base + k * stride;
      write[k] = 0;
      if (g < end) {
        const DeviceDesc& d = piece_of(v, g);
        std::int64_t mem, packed;
        word_offsets<W, I, -1>(d, static_cast<I>(g - d.first_word), mem, packed);
        std::int64_t read = M == Move::unpack ? packed : mem;
        write[k] = M == Move::unpack ? mem : packed;
        if constexpr (M == Move::copy) {
          const DeviceDesc& e = piece_of(to, g);
          word_offsets<W, I, -1>(e, static_cast<I>(g - e.first_word), write[k], packed);
        }
        word[k] = *reinterpret_cast<const Word*>(src + read);
      }
    }
#pragma unroll
    for (int k = 0; k < BATCH; ++k) {
      // Not a sentinel offset: a general type's byte offsets may be negative (MPI lower bounds).
      if (base + k * stride < end) *reinterpret_cast<Word*>(dst + write[k]) = word[k];
    }
  }
}

}  // namespace

}  // namespace halox::detail
