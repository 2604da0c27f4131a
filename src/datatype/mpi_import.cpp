// Import of real MPI datatypes: the envelope/contents walk lets an MPI code hand its
// existing types to halox with no rewrite.
#include <utility>
#include <vector>

#include "halox/mpi.hpp"

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
  MPI_Type_get_name(type, name, &length);
  throw DatatypeError(std::string("halox::from_mpi: the named type ") + name +
                      " has no halox equivalent");
}

Order order_of(int order) {
  return order == MPI_ORDER_FORTRAN ? Order::fortran : Order::c;
}

Datatype import(MPI_Datatype type) {
  // Open MPI builds empty derived types as duplicates of MPI_DATATYPE_NULL.
  if (type == MPI_DATATYPE_NULL) return Datatype::contiguous(0, Datatype::basic(BasicKind::byte_));
  int nints = 0, naddrs = 0, ntypes = 0, combiner = 0;
  HALOX_MPI_CHECK(MPI_Type_get_envelope(type, &nints, &naddrs, &ntypes, &combiner));
  if (combiner == MPI_COMBINER_NAMED) return named(type);
  std::vector<int> ints(static_cast<std::size_t>(nints));
  std::vector<MPI_Aint> addrs(static_cast<std::size_t>(naddrs));
  std::vector<MPI_Datatype> mpi_types(static_cast<std::size_t>(ntypes));
  HALOX_MPI_CHECK(MPI_Type_get_contents(type, nints, naddrs, ntypes, ints.data(), addrs.data(),
                                        mpi_types.data()));
  std::vector<Datatype> types;
  for (MPI_Datatype t : mpi_types) {
    types.push_back(import(t));
    if (t == MPI_DATATYPE_NULL) continue;
    int ni = 0, na = 0, nt = 0, c = 0;
    HALOX_MPI_CHECK(MPI_Type_get_envelope(t, &ni, &na, &nt, &c));
    if (c != MPI_COMBINER_NAMED) HALOX_MPI_CHECK(MPI_Type_free(&t));  // contents returns copies
  }
  auto int_range = [&](std::size_t begin, std::size_t n) {
    return std::vector<std::int64_t>(ints.begin() + static_cast<std::ptrdiff_t>(begin),
                                     ints.begin() + static_cast<std::ptrdiff_t>(begin + n));
  };
  auto addr_range = [&](std::size_t begin, std::size_t n) {
    return std::vector<std::int64_t>(addrs.begin() + static_cast<std::ptrdiff_t>(begin),
                                     addrs.begin() + static_cast<std::ptrdiff_t>(begin + n));
  };
  const auto n = nints > 0 ? static_cast<std::size_t>(ints[0]) : 0;
  switch (combiner) {
    case MPI_COMBINER_DUP: return types[0].dup();
    case MPI_COMBINER_CONTIGUOUS: return Datatype::contiguous(ints[0], types[0]);
    case MPI_COMBINER_VECTOR: return Datatype::vector(ints[0], ints[1], ints[2], types[0]);
    case MPI_COMBINER_HVECTOR: return Datatype::hvector(ints[0], ints[1], addrs[0], types[0]);
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

}  // namespace

Datatype from_mpi(MPI_Datatype type) {
  return import(type).commit();
}

}  // namespace halox
