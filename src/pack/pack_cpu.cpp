// CPU pack and unpack, driven by the canonical form. This is the reference the GPU kernels
// are tested against, and the packing of the host transport.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "../datatype/runs.hpp"
#include "halox/pack.hpp"

namespace halox {

namespace {

struct Range {
  std::int64_t begin = 0, end = 0;
};

// The typed side of a call: a null buffer or a range smaller than the type's footprint.
void check_typed(const char* where, const char* name, const void* data, std::int64_t size,
                 const Datatype& type, std::int64_t count) {
  if (count == 0 || type.size() == 0) return;
  const std::string prefix = std::string("halox::") + where + ": ";
  if (data == nullptr) throw DatatypeError(prefix + "the " + name + " buffer is null");
  if (size < 0) return;
  const detail::Footprint bytes = detail::footprint(type, count, where);
  if (bytes.lo < 0 || bytes.hi > size) {
    throw DatatypeError(prefix + std::to_string(count) + " instances of the " +
                        type.combiner_name() + " type touch bytes [" + std::to_string(bytes.lo) +
                        ", " + std::to_string(bytes.hi) + ") of the " + name +
                        " buffer, which holds " + std::to_string(size) + " bytes");
  }
}

// The packed side: null, or smaller than the bytes of the range moved.
void check_packed(const char* where, const char* name, const void* data, std::int64_t size,
                  std::int64_t bytes) {
  if (bytes == 0) return;
  const std::string prefix = std::string("halox::") + where + ": ";
  if (data == nullptr) throw DatatypeError(prefix + "the " + name + " buffer is null");
  if (size >= 0 && size < bytes) {
    throw DatatypeError(prefix + "the packed " + name + " buffer holds " + std::to_string(size) +
                        " bytes; the range needs " + std::to_string(bytes));
  }
}

Range check_range(const char* where, const Datatype& type, std::int64_t count,
                  std::int64_t packed_offset, std::int64_t max_bytes) {
  const std::string prefix = std::string("halox::") + where + ": ";
  if (count < 0) throw DatatypeError(prefix + "count = " + std::to_string(count) + " must be >= 0");
  if (max_bytes < 0) {
    throw DatatypeError(prefix + "max_bytes = " + std::to_string(max_bytes) + " must be >= 0");
  }
  type.canonical();  // throws when not committed
  detail::check_footprint(type, count, where);
  const std::int64_t total = packed_size(type, count);
  if (packed_offset < 0 || packed_offset > total) {
    throw DatatypeError(prefix + "packed_offset = " + std::to_string(packed_offset) +
                        " outside the packed stream of " + std::to_string(total) + " bytes");
  }
  return {packed_offset, packed_offset + std::min(max_bytes, total - packed_offset)};
}

// Calls visit(memory_offset, packed_position, bytes) for every contiguous segment of the
// packed range, in packed order (packed_position counts from range.begin).
template <class Visit>
void for_each_segment(const Datatype& type, std::int64_t count, Range range, Visit&& visit) {
  const CanonicalForm& form = type.canonical();
  const std::int64_t size = form.size;
  if (size == 0 || range.begin >= range.end) return;
  const std::int64_t extent = type.extent();
  std::int64_t pos = range.begin;
  for (std::int64_t instance = pos / size; instance < count && pos < range.end; ++instance) {
    const std::int64_t base = instance * extent;
    const std::int64_t instance_start = instance * size;
    auto piece = std::upper_bound(form.pieces.begin(), form.pieces.end(), pos - instance_start,
                                  [](std::int64_t local, const CanonicalPiece& p) {
                                    return local < p.packed_offset;
                                  }) -
                 1;
    for (; piece != form.pieces.end() && pos < range.end; ++piece) {
      const std::int64_t run_bytes =
          piece->is_index ? piece->index.block_bytes : piece->strided.block_bytes;
      const std::int64_t local = pos - instance_start - piece->packed_offset;
      std::int64_t skip = local % run_bytes;
      detail::for_each_run(*piece, local / run_bytes, [&](std::int64_t offset) {
        const std::int64_t bytes = std::min(run_bytes - skip, range.end - pos);
        visit(base + offset + skip, pos - range.begin, bytes);
        pos += bytes;
        skip = 0;
        return pos < range.end;
      });
    }
  }
}

// base + offset as an address, by integer arithmetic: MPI_BOTTOM's null base with absolute
// offsets (MPI codes pass them, the interposer forwards them) is a valid address to MPI but
// pointer arithmetic from null, and a probe's base moved below its buffer wraps (UBSan).
template <class T>
T* at(T* base, std::int64_t offset) {
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(base) +
                              static_cast<std::uintptr_t>(offset));
}

// memcpy with the common element sizes inlined (the X face of a grid is 4- or 8-byte runs).
inline void copy_bytes(char* dst, const char* src, std::int64_t bytes) {
  switch (bytes) {
    case 4: std::memcpy(dst, src, 4); break;
    case 8: std::memcpy(dst, src, 8); break;
    case 12: std::memcpy(dst, src, 12); break;
    case 16: std::memcpy(dst, src, 16); break;
    default: std::memcpy(dst, src, static_cast<std::size_t>(bytes));
  }
}

template <class T>
void accumulate_bytes(char* dst, const char* src, std::int64_t bytes) {
  for (std::int64_t i = 0; i < bytes; i += static_cast<std::int64_t>(sizeof(T))) {
    T a, b;
    std::memcpy(&a, dst + i, sizeof(T));
    std::memcpy(&b, src + i, sizeof(T));
    a += b;
    std::memcpy(dst + i, &a, sizeof(T));
  }
}

}  // namespace

std::int64_t packed_size(const Datatype& type, std::int64_t count) {
  if (count < 0) {
    throw DatatypeError("halox::packed_size: count = " + std::to_string(count) + " must be >= 0");
  }
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(type.size(), count, &bytes)) {
    throw DatatypeError("halox::packed_size: size x count overflows 64 bits");
  }
  return bytes;
}

std::int64_t pack(ConstBytes in, std::int64_t count, const Datatype& type, MutableBytes out,
                  std::int64_t packed_offset, std::int64_t max_bytes) {
  const Range range = check_range("pack", type, count, packed_offset, max_bytes);
  check_typed("pack", "input", in.data, in.size, type, count);
  check_packed("pack", "output", out.data, out.size, range.end - range.begin);
  const char* src = static_cast<const char*>(in.data);
  char* dst = static_cast<char*>(out.data);
  for_each_segment(type, count, range, [&](std::int64_t mem, std::int64_t packed, std::int64_t n) {
    copy_bytes(dst + packed, at(src, mem), n);
  });
  return range.end - range.begin;
}

std::int64_t unpack(ConstBytes in, MutableBytes out, std::int64_t count, const Datatype& type,
                    std::int64_t packed_offset, std::int64_t max_bytes) {
  const Range range = check_range("unpack", type, count, packed_offset, max_bytes);
  check_packed("unpack", "input", in.data, in.size, range.end - range.begin);
  check_typed("unpack", "output", out.data, out.size, type, count);
  if (type.overlaps(count)) {
    throw DatatypeError("halox::unpack: the " + type.combiner_name() +
                        " type addresses some bytes twice; unpacking into it is undefined");
  }
  const char* src = static_cast<const char*>(in.data);
  char* dst = static_cast<char*>(out.data);
  for_each_segment(type, count, range, [&](std::int64_t mem, std::int64_t packed, std::int64_t n) {
    copy_bytes(at(dst, mem), src + packed, n);
  });
  return range.end - range.begin;
}

std::int64_t unpack_accumulate(ConstBytes in, MutableBytes out, std::int64_t count,
                               const Datatype& type, std::int64_t packed_offset,
                               std::int64_t max_bytes) {
  const Range range = check_range("unpack_accumulate", type, count, packed_offset, max_bytes);
  check_packed("unpack_accumulate", "input", in.data, in.size, range.end - range.begin);
  check_typed("unpack_accumulate", "output", out.data, out.size, type, count);
  BasicKind kind{};
  if (!type.homogeneous(&kind) || (kind != BasicKind::float32 && kind != BasicKind::float64)) {
    throw DatatypeError("halox::unpack_accumulate: the " + type.combiner_name() +
                        " type must hold only MPI_FLOAT or only MPI_DOUBLE elements");
  }
  const std::int64_t element = basic_size(kind);
  if (range.begin % element != 0 || range.end % element != 0) {
    throw DatatypeError("halox::unpack_accumulate: the range [" + std::to_string(range.begin) +
                        ", " + std::to_string(range.end) + ") must start and end on " +
                        std::to_string(element) + "-byte element boundaries");
  }
  if (type.overlaps(count)) {
    throw DatatypeError("halox::unpack_accumulate: the " + type.combiner_name() +
                        " type addresses some elements twice");
  }
  const char* src = static_cast<const char*>(in.data);
  char* dst = static_cast<char*>(out.data);
  for_each_segment(type, count, range, [&](std::int64_t mem, std::int64_t packed, std::int64_t n) {
    if (kind == BasicKind::float32) {
      accumulate_bytes<float>(at(dst, mem), src + packed, n);
    } else {
      accumulate_bytes<double>(at(dst, mem), src + packed, n);
    }
  });
  return range.end - range.begin;
}

}  // namespace halox
