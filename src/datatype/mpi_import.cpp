// Import of real MPI datatypes: the envelope/contents walk lets an MPI code hand its
// existing types to halox with no rewrite. The MPI library, not halox's reading of the
// standard, is the reference: every level is resized to the bounds the library reports, and
// a level whose data the library places elsewhere than halox would is refused, so that the
// import packs exactly the bytes MPI_Pack does and never leaves the library's footprint.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "halox/mpi.hpp"
#include "halox/pack.hpp"

namespace halox {

namespace detail {
void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw BackendError(std::string("MPI call failed: ") + call + " at " + file + ":" +
                     std::to_string(line) + ": " +
                     std::string(text, static_cast<std::size_t>(length)));
}
}  // namespace detail

namespace {

Datatype named(MPI_Datatype type) {
  static const std::pair<MPI_Datatype, BasicKind> table[] = {
      {MPI_BYTE, BasicKind::byte_},
      {MPI_CHAR, BasicKind::char_},
      {MPI_SIGNED_CHAR, BasicKind::signed_char},
      {MPI_UNSIGNED_CHAR, BasicKind::unsigned_char},
      {MPI_SHORT, BasicKind::short_},
      {MPI_UNSIGNED_SHORT, BasicKind::unsigned_short},
      {MPI_INT, BasicKind::int_},
      {MPI_UNSIGNED, BasicKind::unsigned_},
      {MPI_LONG, BasicKind::long_},
      {MPI_UNSIGNED_LONG, BasicKind::unsigned_long},
      {MPI_LONG_LONG, BasicKind::long_long},
      {MPI_LONG_LONG_INT, BasicKind::long_long},
      {MPI_UNSIGNED_LONG_LONG, BasicKind::unsigned_long_long},
      {MPI_FLOAT, BasicKind::float32},
      {MPI_DOUBLE, BasicKind::float64},
      {MPI_LONG_DOUBLE, BasicKind::long_double},
      {MPI_INT8_T, BasicKind::int8},
      {MPI_INT16_T, BasicKind::int16},
      {MPI_INT32_T, BasicKind::int32},
      {MPI_INT64_T, BasicKind::int64},
      {MPI_UINT8_T, BasicKind::uint8},
      {MPI_UINT16_T, BasicKind::uint16},
      {MPI_UINT32_T, BasicKind::uint32},
      {MPI_UINT64_T, BasicKind::uint64},
      {MPI_C_BOOL, BasicKind::bool_},
      {MPI_WCHAR, BasicKind::wchar},
      {MPI_C_FLOAT_COMPLEX, BasicKind::complex_float},
      {MPI_C_DOUBLE_COMPLEX, BasicKind::complex_double},
      {MPI_PACKED, BasicKind::packed},
      {MPI_AINT, BasicKind::int64},
      {MPI_OFFSET, BasicKind::int64},
      {MPI_COUNT, BasicKind::int64},
  };
  for (const auto& [mpi, kind] : table) {
    if (mpi == type) return Datatype::basic(kind);
  }
  char name[MPI_MAX_OBJECT_NAME] = {};
  int length = 0;
  HALOX_MPI_CHECK(MPI_Type_get_name(type, name, &length));
  throw DatatypeError(std::string("halox::from_mpi: the named type ") + name +
                      " has no halox equivalent");
}

Order order_of(int order) {
  return order == MPI_ORDER_FORTRAN ? Order::fortran : Order::c;
}

const char* combiner_name(int combiner) {
  switch (combiner) {
    case MPI_COMBINER_DUP: return "MPI_Type_dup";
    case MPI_COMBINER_CONTIGUOUS: return "MPI_Type_contiguous";
    case MPI_COMBINER_VECTOR: return "MPI_Type_vector";
    case MPI_COMBINER_HVECTOR: return "MPI_Type_create_hvector";
    case MPI_COMBINER_INDEXED: return "MPI_Type_indexed";
    case MPI_COMBINER_HINDEXED: return "MPI_Type_create_hindexed";
    case MPI_COMBINER_INDEXED_BLOCK: return "MPI_Type_create_indexed_block";
    case MPI_COMBINER_HINDEXED_BLOCK: return "MPI_Type_create_hindexed_block";
    case MPI_COMBINER_STRUCT: return "MPI_Type_create_struct";
    case MPI_COMBINER_SUBARRAY: return "MPI_Type_create_subarray";
    case MPI_COMBINER_DARRAY: return "MPI_Type_create_darray";
    case MPI_COMBINER_RESIZED: return "MPI_Type_create_resized";
    default: return "a named type";
  }
}

// Gives `built` (halox's reading of one level of `type`) the size and bounds the MPI library
// reports for it. MPI libraries pad extents their own way (Open MPI pads after every
// misaligned block, the standard once); resizing to the library's lb and extent makes every
// parent place and repeat its children as the library does. The true bounds are where the
// data lies: they must agree already, or the two type maps differ and halox refuses.
Datatype conform(Datatype built, MPI_Datatype type, int combiner, int depth) {
  MPI_Count size = 0, lb = 0, extent = 0, true_lb = 0, true_extent = 0;
  HALOX_MPI_CHECK(MPI_Type_size_x(type, &size));
  HALOX_MPI_CHECK(MPI_Type_get_extent_x(type, &lb, &extent));
  HALOX_MPI_CHECK(MPI_Type_get_true_extent_x(type, &true_lb, &true_extent));
  auto refuse = [&](const std::string& what) {
    throw DatatypeError(std::string("halox::from_mpi: ") + combiner_name(combiner) + " at depth " +
                        std::to_string(depth) + ": " + what);
  };
  if (built.size() != size) {
    refuse("the MPI library reports " + std::to_string(size) + " bytes of data, halox reads " +
           std::to_string(built.size()) + " from its constructor");
  }
  // Libraries report arbitrary true bounds for types without data (Open MPI: INT64_MAX).
  if (size > 0 && (built.true_lb() != true_lb || built.true_extent() != true_extent)) {
    refuse("the MPI library places the data at [" + std::to_string(true_lb) + ", " +
           std::to_string(true_lb + true_extent) + "), halox's reading of the constructor at [" +
           std::to_string(built.true_lb()) + ", " +
           std::to_string(built.true_lb() + built.true_extent()) +
           "); the type maps differ, so halox cannot pack it as the library does");
  }
  if (built.lb() != lb || built.extent() != extent) return Datatype::resized(built, lb, extent);
  return built;
}

// Deeper nests than any real code builds are refused before they can exhaust the stack (here,
// in commit() and in the destruction of the tree).
constexpr int kMaxImportDepth = kMaxDatatypeDepth;
// The levels one import may read. Every level is read through MPI_Type_get_contents, which
// (Open MPI 4.1) returns a new duplicate of each child every time: a struct naming one child
// eight times, nested seven deep, is 2.4 million levels to read (about 3 s), however few
// distinct ones it holds. Past this bound the import is refused at once, not after minutes.
constexpr std::int64_t kMaxImportLevels = std::int64_t{1} << 24;

// One level of a type as its constructor was called: the combiner, its integers and
// addresses, and the interned children. Two levels with the same contents are the same type.
using Contents = std::tuple<int, std::vector<int>, std::vector<MPI_Aint>, std::vector<int>>;

// One from_mpi call. Each distinct level is built once and shared by every place that names
// it, as halox's own constructors share children (the duplicates the library hands out
// cannot be told apart by handle, so levels are told apart by their contents). Before, a
// six-level nest of wide structs built every occurrence: past 4 GiB, then the OOM killer.
class Importer {
 public:
  Datatype run(MPI_Datatype type) { return m_types[static_cast<std::size_t>(import(type, 1))]; }

 private:
  std::map<Contents, int> m_ids;
  std::vector<Datatype> m_types;  // by id
  std::int64_t m_levels = 0;

  int intern(Contents contents, const std::function<Datatype()>& build) {
    if (auto it = m_ids.find(contents); it != m_ids.end()) return it->second;
    m_types.push_back(build());
    const int id = static_cast<int>(m_types.size()) - 1;
    m_ids.emplace(std::move(contents), id);
    return id;
  }

  int import(MPI_Datatype type, int depth) {
    // Open MPI builds empty derived types as duplicates of MPI_DATATYPE_NULL.
    if (type == MPI_DATATYPE_NULL) {
      return intern({-1, {}, {}, {}},
                    [] { return Datatype::contiguous(0, Datatype::basic(BasicKind::byte_)); });
    }
    if (depth > kMaxImportDepth) {
      throw DatatypeError("halox::from_mpi: the type is nested deeper than " +
                          std::to_string(kMaxImportDepth) + " levels");
    }
    if (++m_levels > kMaxImportLevels) {
      throw DatatypeError("halox::from_mpi: the type names more than " +
                          std::to_string(kMaxImportLevels) +
                          " levels in all (children repeated at every depth); build it with "
                          "halox's constructors, which share repeated children");
    }
    int nints = 0, naddrs = 0, ntypes = 0, combiner = 0;
    HALOX_MPI_CHECK(MPI_Type_get_envelope(type, &nints, &naddrs, &ntypes, &combiner));
    if (combiner == MPI_COMBINER_NAMED) {
      MPI_Aint handle = 0;  // a named type's handle is the type (a pointer or an integer)
      std::memcpy(&handle, &type, std::min(sizeof handle, sizeof type));
      return intern({combiner, {}, {handle}, {}}, [&] { return named(type); });
    }
    std::vector<int> ints(static_cast<std::size_t>(nints));
    std::vector<MPI_Aint> addrs(static_cast<std::size_t>(naddrs));
    std::vector<MPI_Datatype> children(static_cast<std::size_t>(ntypes));
    HALOX_MPI_CHECK(MPI_Type_get_contents(type, nints, naddrs, ntypes, ints.data(), addrs.data(),
                                          children.data()));
    // Contents returns copies of the derived children: freed on every path, errors included.
    struct FreeCopies {
      std::vector<MPI_Datatype>& types;
      ~FreeCopies() {
        for (MPI_Datatype t : types) {
          if (t == MPI_DATATYPE_NULL) continue;
          int ni = 0, na = 0, nt = 0, c = 0;
          if (MPI_Type_get_envelope(t, &ni, &na, &nt, &c) == MPI_SUCCESS && c != MPI_COMBINER_NAMED)
            MPI_Type_free(&t);
        }
      }
    } free_copies{children};
    std::vector<int> ids;
    for (MPI_Datatype t : children) ids.push_back(import(t, depth + 1));
    Contents contents{combiner, ints, addrs, ids};
    return intern(std::move(contents), [&] {
      std::vector<Datatype> types;
      for (const int id : ids) types.push_back(m_types[static_cast<std::size_t>(id)]);
      return conform(build_level(combiner, ints, addrs, types), type, combiner, depth);
    });
  }

  static Datatype build_level(int combiner, const std::vector<int>& ints,
                              const std::vector<MPI_Aint>& addrs,
                              const std::vector<Datatype>& types) {
    auto int_range = [&](std::size_t begin, std::size_t n) {
      return std::vector<std::int64_t>(ints.begin() + static_cast<std::ptrdiff_t>(begin),
                                       ints.begin() + static_cast<std::ptrdiff_t>(begin + n));
    };
    auto addr_range = [&](std::size_t begin, std::size_t n) {
      return std::vector<std::int64_t>(addrs.begin() + static_cast<std::ptrdiff_t>(begin),
                                       addrs.begin() + static_cast<std::ptrdiff_t>(begin + n));
    };
    const auto n = !ints.empty() ? static_cast<std::size_t>(ints[0]) : 0;
    switch (combiner) {
      case MPI_COMBINER_DUP: return types[0].dup();
      case MPI_COMBINER_CONTIGUOUS: return Datatype::contiguous(ints[0], types[0]);
      // Open MPI takes a byte stride of exactly -1 (stride * extent == -1) for "the natural
      // extent" and lays the blocks out contiguously; conform() checks the library did so.
      case MPI_COMBINER_VECTOR: {
        std::int64_t stride_bytes = 0;  // checked: a stride near 2^62 overflows the product
        if (!__builtin_mul_overflow(std::int64_t{ints[2]}, types[0].extent(), &stride_bytes) &&
            stride_bytes == -1) {
          return Datatype::contiguous(std::int64_t{ints[0]} * ints[1], types[0]);
        }
        return Datatype::vector(ints[0], ints[1], ints[2], types[0]);
      }
      case MPI_COMBINER_HVECTOR:
        if (addrs[0] == -1) return Datatype::contiguous(std::int64_t{ints[0]} * ints[1], types[0]);
        return Datatype::hvector(ints[0], ints[1], addrs[0], types[0]);
      case MPI_COMBINER_INDEXED:
        return Datatype::indexed(int_range(1, n), int_range(1 + n, n), types[0]);
      case MPI_COMBINER_HINDEXED:
        return Datatype::hindexed(int_range(1, n), addr_range(0, n), types[0]);
      case MPI_COMBINER_INDEXED_BLOCK:
        return Datatype::indexed_block(ints[1], int_range(2, n), types[0]);
      case MPI_COMBINER_HINDEXED_BLOCK:
        return Datatype::hindexed_block(ints[1], addr_range(0, n), types[0]);
      case MPI_COMBINER_STRUCT: return Datatype::struct_(int_range(1, n), addr_range(0, n), types);
      case MPI_COMBINER_SUBARRAY:
        return Datatype::subarray(int_range(1, n), int_range(1 + n, n), int_range(1 + 2 * n, n),
                                  order_of(ints[1 + 3 * n]), types[0]);
      case MPI_COMBINER_DARRAY: {
        const auto nd = static_cast<std::size_t>(ints[2]);
        std::vector<Distribution> distribs;
        std::vector<std::int64_t> dargs;
        for (std::size_t d = 0; d < nd; ++d) {
          const int dist = ints[3 + nd + d];
          distribs.push_back(dist == MPI_DISTRIBUTE_BLOCK    ? Distribution::block
                             : dist == MPI_DISTRIBUTE_CYCLIC ? Distribution::cyclic
                                                             : Distribution::none);
          const int darg = ints[3 + 2 * nd + d];
          dargs.push_back(darg == MPI_DISTRIBUTE_DFLT_DARG ? kDefaultDarg : darg);
        }
        return Datatype::darray(ints[0], ints[1], int_range(3, nd), distribs, dargs,
                                int_range(3 + 3 * nd, nd), order_of(ints[3 + 4 * nd]), types[0]);
      }
      case MPI_COMBINER_RESIZED: return Datatype::resized(types[0], addrs[0], addrs[1]);
      default:
        throw DatatypeError("halox::from_mpi: combiner " + std::to_string(combiner) +
                            " (a Fortran-only constructor) is not supported");
    }
  }
};

// The last word is the library's own MPI_Pack: two instances of a probe buffer packed by both
// must agree byte for byte (Open MPI 4.1 packs some types with sticky bounds contiguously,
// against the extent it reports; no bound can tell). The probe's bytes are its offsets, one
// byte of them per round, so that a byte read from any other offset differs in some round (a
// single pattern repeated itself within the probe: a type Open MPI packed from the wrong
// offsets passed). Types whose two instances span more than kProbeBytes are not probed: their
// bounds were checked level by level.
void check_against_mpi_pack(const Datatype& imported, MPI_Datatype type) {
  constexpr std::int64_t kProbeBytes = 1 << 20;
  if (imported.size() == 0) return;
  const std::int64_t extent = imported.extent();
  std::int64_t lo = 0, hi = 0, span = 0;
  // Bounds near 2^62 overflow these sums: such types are not probed (no buffer holds them).
  if (__builtin_add_overflow(imported.true_lb(), std::min<std::int64_t>(0, extent), &lo) ||
      __builtin_add_overflow(imported.true_lb(), imported.true_extent(), &hi) ||
      __builtin_add_overflow(hi, std::max<std::int64_t>(0, extent), &hi) ||
      __builtin_sub_overflow(hi, lo, &span)) {
    return;
  }
  if (span > kProbeBytes || 2 * imported.size() > kProbeBytes) return;
  const std::int64_t bytes = 2 * imported.size();
  // A library that packs such a type contiguously reads up to `bytes` past either bound: the
  // probe has that much slack on both sides, so the disagreement is reported, not a read
  // outside the buffer (ASan caught Open MPI 4.1 reading 9 bytes past a tight probe).
  const std::int64_t slack = bytes + std::abs(extent);
  std::vector<unsigned char> probe(static_cast<std::size_t>(span + 2 * slack));
  // Integer arithmetic: for a type of absolute addresses (MPI_BOTTOM) the base lies far below
  // the probe, and pointer arithmetic to it wraps around the address space (UBSan).
  const auto* base = reinterpret_cast<const unsigned char*>(
      reinterpret_cast<std::uintptr_t>(probe.data()) + static_cast<std::uintptr_t>(slack) -
      static_cast<std::uintptr_t>(lo));
  std::vector<unsigned char> theirs(static_cast<std::size_t>(bytes)), ours(theirs.size());
  int shift = 0;
  do {
    for (std::size_t i = 0; i < probe.size(); ++i) {
      probe[i] = static_cast<unsigned char>(i >> shift);
    }
    int position = 0;
    HALOX_MPI_CHECK(
        MPI_Pack(base, 2, type, theirs.data(), static_cast<int>(bytes), &position, MPI_COMM_SELF));
    pack(base, 2, imported, ours.data());
    if (position != bytes || theirs != ours) {
      std::int64_t at = 0;
      while (at < bytes &&
             theirs[static_cast<std::size_t>(at)] == ours[static_cast<std::size_t>(at)])
        ++at;
      throw DatatypeError(
          "halox::from_mpi: the MPI library's MPI_Pack of two instances differs from the type "
          "map of the bounds it reports (from byte " +
          std::to_string(at) +
          " of the packed stream): an MPI library bug halox cannot follow; build the type with "
          "halox's constructors instead");
    }
    shift += 8;
  } while ((probe.size() - 1) >> shift != 0);
}

}  // namespace

Datatype from_mpi(MPI_Datatype type) {
  Datatype imported = Importer().run(type).commit();
  check_against_mpi_pack(imported, type);
  return imported;
}

}  // namespace halox
