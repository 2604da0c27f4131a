// halox: MPI-compatible derived datatypes and their canonical strided form.
//
// A Datatype is a cheap, copyable value (a shared pointer to an immutable type tree). Its
// constructors follow the MPI standard's type map: size, extent, lb, true_lb and true_extent
// are those of the standard, with the extent padded once per constructor to the largest
// alignment (the standard's epsilon) and the sticky bounds of resized types. MPI libraries
// pad differently where displacements are misaligned (Open MPI pads after every block);
// from_mpi (halox/mpi.hpp) takes the bounds the library reports instead, at every level.
// commit() computes the canonical form once; pack and unpack are driven by it.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "halox/error.hpp"

namespace halox {

/// The basic (named) types of C. The kind matters for unpack-with-sum (float32, float64).
enum class BasicKind : std::uint8_t {
  byte_,
  char_,
  signed_char,
  unsigned_char,
  short_,
  unsigned_short,
  int_,
  unsigned_,
  long_,
  unsigned_long,
  long_long,
  unsigned_long_long,
  float32,
  float64,
  long_double,
  int8,
  int16,
  int32,
  int64,
  uint8,
  uint16,
  uint32,
  uint64,
  bool_,
  wchar,
  complex_float,
  complex_double,
  packed,
};

/// Size in bytes of a basic kind on this platform.
std::int64_t basic_size(BasicKind kind);
/// Name of a basic kind as MPI spells it (e.g. "MPI_DOUBLE").
const char* basic_name(BasicKind kind);

/// Array storage order of subarray and darray constructors.
enum class Order { c, fortran };

/// Distribution of one dimension in Datatype::darray.
enum class Distribution { block, cyclic, none };
/// darray argument meaning "the default" (MPI_DISTRIBUTE_DFLT_DARG).
inline constexpr std::int64_t kDefaultDarg = -1;

/// Maximum number of strided dimensions one canonical block carries.
inline constexpr int kMaxStridedDims = 6;

/// One piece of the canonical form: `elements()` runs of `block_bytes` contiguous bytes at
/// offset + sum_k i_k * stride[k] (0 <= i_k < count[k]; dimension 0 is the innermost, i.e.
/// varies fastest in the packed stream).
struct StridedBlock {
  std::int64_t offset = 0;       ///< byte offset of the first run, relative to the buffer
  std::int64_t block_bytes = 0;  ///< contiguous bytes per run
  int ndims = 0;                 ///< number of strided dimensions (0: one run)
  std::array<std::int64_t, kMaxStridedDims> count{};   ///< runs per dimension
  std::array<std::int64_t, kMaxStridedDims> stride{};  ///< byte stride per dimension

  /// Number of runs.
  std::int64_t runs() const;
  /// Packed bytes of this block.
  std::int64_t bytes() const { return runs() * block_bytes; }
};

/// Irregular part of the canonical form: runs of `block_bytes` bytes at listed offsets.
struct IndexBlock {
  std::int64_t block_bytes = 0;       ///< contiguous bytes per run
  std::vector<std::int64_t> offsets;  ///< byte offset of each run, in packed order
  std::int64_t bytes() const { return block_bytes * static_cast<std::int64_t>(offsets.size()); }
};

/// One piece: strided (the common, regular case) or an index list (the fallback).
struct CanonicalPiece {
  bool is_index = false;
  StridedBlock strided;            ///< valid when !is_index
  IndexBlock index;                ///< valid when is_index
  std::int64_t packed_offset = 0;  ///< where this piece starts in one instance's packed stream
  std::int64_t bytes() const { return is_index ? index.bytes() : strided.bytes(); }
};

/// The integer lists the constructors take (sizes, starts, block lengths, displacements):
/// written as a braced list (`{n, n, 1}`) or given as any contiguous range of integers
/// (`std::vector<int>`, `std::array<std::size_t, 3>`, `std::span<const std::int64_t>`).
/// A parameter type only: it views a range of `std::int64_t` and copies any other, so it
/// lives as long as the call.
class IntList {
 public:
  IntList(std::initializer_list<std::int64_t> values) : m_view(values.begin(), values.size()) {}
  template <std::integral T>
  requires(!std::same_as<T, std::int64_t>) IntList(std::initializer_list<T> values)
      : IntList(std::span<const T>(values.begin(), values.size())) {}
  template <std::ranges::contiguous_range R>
  requires std::integral<std::remove_cv_t<std::ranges::range_value_t<R>>> IntList(
      const R& range) {  // NOLINT: converts implicitly, as std::span does
    using T = std::remove_cv_t<std::ranges::range_value_t<R>>;
    if constexpr (std::same_as<T, std::int64_t>) {
      m_view = std::span<const std::int64_t>(std::ranges::data(range), std::ranges::size(range));
    } else {
      m_storage.reserve(std::ranges::size(range));
      for (const T v : range) {
        if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(std::int64_t)) {
          // A value past int64's range becomes -1: the constructors refuse it as negative.
          m_storage.push_back(v > static_cast<T>(INT64_MAX) ? -1 : static_cast<std::int64_t>(v));
        } else {
          m_storage.push_back(static_cast<std::int64_t>(v));
        }
      }
      m_view = m_storage;
    }
  }
  IntList(const IntList&) = delete;
  IntList& operator=(const IntList&) = delete;

  operator std::span<const std::int64_t>() const { return m_view; }  // NOLINT
  std::span<const std::int64_t> span() const { return m_view; }
  std::size_t size() const { return m_view.size(); }
  bool empty() const { return m_view.empty(); }
  const std::int64_t* data() const { return m_view.data(); }
  const std::int64_t* begin() const { return m_view.data(); }
  const std::int64_t* end() const { return m_view.data() + m_view.size(); }
  std::int64_t operator[](std::size_t i) const { return m_view[i]; }

 private:
  std::vector<std::int64_t> m_storage;
  std::span<const std::int64_t> m_view;
};

/// The canonical form of one instance of a committed type: pieces in type-map order, with
/// adjacent bytes merged and nested strided patterns recognised (a face of a 3D subarray is
/// one StridedBlock, not thousands of segments).
struct CanonicalForm {
  std::vector<CanonicalPiece> pieces;
  std::int64_t size = 0;  ///< packed bytes of one instance

  /// True when the whole type is one strided block (possibly with 0 dimensions).
  bool is_single_strided() const { return pieces.size() == 1 && !pieces[0].is_index; }
  /// True when the packed bytes are one contiguous range of memory.
  bool is_contiguous() const {
    return pieces.size() == 1 && !pieces[0].is_index && pieces[0].strided.ndims == 0;
  }
  /// Total number of contiguous runs.
  std::int64_t runs() const;
  /// Human-readable description, e.g. "strided{off=8 bytes=8 dims=[(256,2048)]}".
  std::string describe() const;
};

/// The deepest nest of constructors a Datatype may have (each constructor adds one to three
/// levels); deeper ones raise DatatypeError, in the constructors and in from_mpi, instead of
/// exhausting the stack. Real codes nest a handful of levels.
inline constexpr int kMaxDatatypeDepth = 1024;

/// An MPI-style derived datatype.
class Datatype {
 public:
  struct Node;

  /// MPI_BYTE.
  Datatype();

  /// A named basic type.
  static Datatype basic(BasicKind kind);
  /// The basic type matching C++ type T (float, double, int, ...).
  template <class T>
  static Datatype of();

  /// MPI_Type_contiguous.
  static Datatype contiguous(std::int64_t count, const Datatype& old);
  /// MPI_Type_vector: stride counted in extents of old.
  static Datatype vector(std::int64_t count, std::int64_t blocklength, std::int64_t stride,
                         const Datatype& old);
  /// MPI_Type_create_hvector: stride in bytes.
  static Datatype hvector(std::int64_t count, std::int64_t blocklength, std::int64_t stride_bytes,
                          const Datatype& old);
  /// MPI_Type_indexed: displacements counted in extents of old.
  static Datatype indexed(IntList blocklengths, IntList displacements, const Datatype& old);
  /// MPI_Type_create_hindexed: displacements in bytes.
  static Datatype hindexed(IntList blocklengths, IntList displacements_bytes, const Datatype& old);
  /// MPI_Type_create_indexed_block.
  static Datatype indexed_block(std::int64_t blocklength, IntList displacements,
                                const Datatype& old);
  /// MPI_Type_create_hindexed_block.
  static Datatype hindexed_block(std::int64_t blocklength, IntList displacements_bytes,
                                 const Datatype& old);
  /// MPI_Type_create_struct.
  static Datatype struct_(IntList blocklengths, IntList displacements_bytes,
                          std::span<const Datatype> types);
  /// MPI_Type_create_subarray.
  static Datatype subarray(IntList sizes, IntList subsizes, IntList starts, Order order,
                           const Datatype& old);
  /// MPI_Type_create_darray.
  static Datatype darray(int size, int rank, IntList gsizes, std::span<const Distribution> distribs,
                         IntList dargs, IntList psizes, Order order, const Datatype& old);
  /// MPI_Type_create_resized.
  static Datatype resized(const Datatype& old, std::int64_t lb, std::int64_t extent);
  /// MPI_Type_dup.
  Datatype dup() const;

  /// MPI_Type_commit: computes the canonical form (once; copies share it).
  Datatype& commit();
  bool committed() const;
  /// The canonical form of one instance; throws DatatypeError if not committed.
  const CanonicalForm& canonical() const;

  std::int64_t size() const;    ///< MPI_Type_size
  std::int64_t lb() const;      ///< MPI_Type_get_extent (lb)
  std::int64_t extent() const;  ///< MPI_Type_get_extent (extent)
  std::int64_t ub() const { return lb() + extent(); }
  std::int64_t true_lb() const;      ///< MPI_Type_get_true_extent (lb)
  std::int64_t true_extent() const;  ///< MPI_Type_get_true_extent (extent)
  /// The alignment MPI pads the extent of derived types to (the largest basic alignment).
  std::int64_t alignment() const;
  /// The basic kind if every basic element of the type has the same kind.
  bool homogeneous(BasicKind* kind) const;
  /// The MPI combiner name of the outermost constructor ("MPI_COMBINER_VECTOR", ...).
  std::string combiner_name() const;

  /// True when `count` instances write some byte twice (unpack refuses such types).
  bool overlaps(std::int64_t count) const;

  const std::shared_ptr<const Node>& node() const { return m_node; }

 private:
  friend struct DatatypeFactory;
  explicit Datatype(std::shared_ptr<const Node> node) : m_node(std::move(node)) {}
  std::shared_ptr<const Node> m_node;
};

template <>
inline Datatype Datatype::of<char>() {
  return basic(BasicKind::char_);
}
template <>
inline Datatype Datatype::of<signed char>() {
  return basic(BasicKind::signed_char);
}
template <>
inline Datatype Datatype::of<unsigned char>() {
  return basic(BasicKind::unsigned_char);
}
template <>
inline Datatype Datatype::of<short>() {
  return basic(BasicKind::short_);
}
template <>
inline Datatype Datatype::of<int>() {
  return basic(BasicKind::int_);
}
template <>
inline Datatype Datatype::of<unsigned>() {
  return basic(BasicKind::unsigned_);
}
template <>
inline Datatype Datatype::of<long>() {
  return basic(BasicKind::long_);
}
template <>
inline Datatype Datatype::of<long long>() {
  return basic(BasicKind::long_long);
}
template <>
inline Datatype Datatype::of<float>() {
  return basic(BasicKind::float32);
}
template <>
inline Datatype Datatype::of<double>() {
  return basic(BasicKind::float64);
}

/// Repeat a canonical form `count` times at `stride` bytes, folding into strided dimensions
/// where the pattern allows. Used to describe `count` instances of a type in one form.
CanonicalForm repeat_canonical(const CanonicalForm& form, std::int64_t count, std::int64_t stride);

}  // namespace halox
