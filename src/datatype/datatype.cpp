// Datatype constructors and MPI attributes (size, bounds, true bounds, alignment).
#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <numeric>

#include "node.hpp"

namespace halox {

namespace {

using Node = Datatype::Node;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw DatatypeError("halox::Datatype::" + where + ": " + what);
}

void require_non_negative(const char* where, const char* name, std::int64_t value) {
  if (value < 0) fail(where, std::string(name) + " = " + std::to_string(value) + " must be >= 0");
}

// Accumulates MPI's bounds over placements of blocks of a child type.
// With resized children, MPI's lb/ub markers are sticky: the bounds come only from the
// markers (the explicit bounds of such children); otherwise from every entry, and the
// extent is then padded to the largest alignment (what Open MPI and MPICH both do).
struct Bounds {
  bool any = false, any_explicit = false, any_data = false;
  std::int64_t lb = 0, ub = 0, elb = 0, eub = 0, tlb = 0, tub = 0, align = 1;
  bool homogeneous = true, kind_set = false;
  BasicKind kind = BasicKind::byte_;

  void add(const char* where, std::int64_t disp, std::int64_t blocklength, const Node& child) {
    // Blocks of length 0 have no entries, hence no bounds. Children without data still
    // place their bounds (Open MPI's behaviour; see store() for wholly empty types).
    if (blocklength == 0) return;
    const std::int64_t ext = child.ub - child.lb;
    const std::int64_t span = checked_mul(blocklength - 1, ext, where);
    const std::int64_t lo = checked_add(disp, std::min<std::int64_t>(0, span), where);
    const std::int64_t hi = checked_add(disp, std::max<std::int64_t>(0, span), where);
    const std::int64_t plb = checked_add(lo, child.lb, where);
    const std::int64_t pub = checked_add(hi, child.ub, where);
    if (child.explicit_bounds) {
      elb = any_explicit ? std::min(elb, plb) : plb;
      eub = any_explicit ? std::max(eub, pub) : pub;
      any_explicit = true;
    }
    lb = any ? std::min(lb, plb) : plb;
    ub = any ? std::max(ub, pub) : pub;
    any = true;
    align = std::max(align, child.align);
    if (child.size > 0) {
      const std::int64_t ptlb = checked_add(lo, child.true_lb, where);
      const std::int64_t ptub = checked_add(hi, child.true_ub, where);
      tlb = any_data ? std::min(tlb, ptlb) : ptlb;
      tub = any_data ? std::max(tub, ptub) : ptub;
      any_data = true;
      if (!child.homogeneous || (kind_set && kind != child.homogeneous_kind)) homogeneous = false;
      kind = child.homogeneous_kind;
      kind_set = true;
    }
  }

  void store(Node& node, const char* where) const {
    if (!any_data && !any_explicit) {
      // A type without data has lb = ub = 0 wherever its empty parts were placed.
      node.lb = node.ub = node.true_lb = node.true_ub = 0;
      node.align = align;
      return;
    }
    if (any_explicit) {
      node.lb = elb;
      node.ub = eub;
      node.explicit_bounds = true;
    } else if (any) {
      node.lb = lb;
      node.ub = ub;
      const std::int64_t ext = checked_sub(ub, lb, where);
      if (align > 1 && ext % align != 0) node.ub = checked_add(node.ub, align - ext % align, where);
    }
    node.true_lb = any_data ? tlb : 0;
    node.true_ub = any_data ? tub : 0;
    // extent() and true_extent() are differences of these: they must fit too (a displacement
    // near -2^63 with a block above 0 does not; the fuzzer found it).
    checked_sub(node.ub, node.lb, where);
    checked_sub(node.true_ub, node.true_lb, where);
    node.align = align;
    node.homogeneous = homogeneous;
    node.homogeneous_kind = kind;
  }
};

std::shared_ptr<Node> make_node(Node::Shape shape, const char* combiner) {
  auto node = std::make_shared<Node>();
  node->shape = shape;
  node->combiner = combiner;
  return node;
}

}  // namespace

// Wraps finished nodes into Datatype values (the constructor is private).
// Every node passes here: the nesting depth is bounded so that commit(), the import and the
// destruction of the tree (all recursive) cannot exhaust the stack.
struct DatatypeFactory {
  static Datatype wrap(std::shared_ptr<Node> node) {
    int depth = 0;
    for (const Datatype& child : node->children) depth = std::max(depth, child.node()->depth);
    node->depth = depth + 1;
    if (node->depth > kMaxDatatypeDepth) {
      fail(node->combiner, "the type would be nested " + std::to_string(node->depth) +
                               " levels deep, more than the " + std::to_string(kMaxDatatypeDepth) +
                               " halox supports");
    }
    return Datatype(std::move(node));
  }
};

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* where) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail(where, "size or extent overflows 64 bits");
  return r;
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* where) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail(where, "size or extent overflows 64 bits");
  return r;
}

std::int64_t checked_sub(std::int64_t a, std::int64_t b, const char* where) {
  std::int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) fail(where, "size or extent overflows 64 bits");
  return r;
}

}  // namespace halox

namespace halox {

namespace {

Datatype blocks_type(const char* where, const char* combiner,
                     std::span<const std::int64_t> blocklengths,
                     std::span<const std::int64_t> displacements_bytes,
                     std::span<const Datatype> types, bool one_type) {
  if (blocklengths.size() != displacements_bytes.size() ||
      (!one_type && types.size() != blocklengths.size()) || (one_type && types.size() != 1)) {
    fail(where, "the argument arrays differ in length (" + std::to_string(blocklengths.size()) +
                    " block lengths, " + std::to_string(displacements_bytes.size()) +
                    " displacements, " + std::to_string(types.size()) + " types)");
  }
  auto node = make_node(Node::Shape::blocks, combiner);
  node->blocklens.assign(blocklengths.begin(), blocklengths.end());
  node->disps.assign(displacements_bytes.begin(), displacements_bytes.end());
  node->children.assign(types.begin(), types.end());
  node->child_of.resize(blocklengths.size());
  Bounds bounds;
  std::int64_t size = 0;
  for (std::size_t b = 0; b < blocklengths.size(); ++b) {
    if (blocklengths[b] < 0) {
      fail(where, "blocklengths[" + std::to_string(b) + "] = " + std::to_string(blocklengths[b]) +
                      " must be >= 0");
    }
    node->child_of[b] = one_type ? 0 : b;
    const Node& child = *node->children[node->child_of[b]].node();
    bounds.add(where, displacements_bytes[b], blocklengths[b], child);
    size = checked_add(size, checked_mul(blocklengths[b], child.size, where), where);
  }
  node->size = size;
  // A type without data keeps the sticky bounds of resized children it places, as the type
  // map does (Open MPI drops them for some constructors; from_mpi follows the library).
  bounds.store(*node, where);
  return DatatypeFactory::wrap(std::move(node));
}

Datatype strided_type(const char* where, const char* combiner, std::int64_t count,
                      std::int64_t blocklength, std::int64_t stride_bytes, const Datatype& old) {
  require_non_negative(where, "count", count);
  require_non_negative(where, "blocklength", blocklength);
  auto node = make_node(Node::Shape::strided, combiner);
  node->count = count;
  node->blocklength = blocklength;
  node->stride_bytes = stride_bytes;
  node->children = {old};
  const Node& child = *old.node();
  Bounds bounds;
  if (count > 0) {
    bounds.add(where, 0, blocklength, child);
    bounds.add(where, checked_mul(count - 1, stride_bytes, where), blocklength, child);
  }
  node->size = checked_mul(checked_mul(count, blocklength, where), child.size, where);
  bounds.store(*node, where);
  return DatatypeFactory::wrap(std::move(node));
}

std::vector<std::int64_t> scaled(std::span<const std::int64_t> values, std::int64_t factor,
                                 const char* where) {
  std::vector<std::int64_t> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = checked_mul(values[i], factor, where);
  return out;
}

Datatype resized_type(const char* combiner, const Datatype& old, std::int64_t lb,
                      std::int64_t extent) {
  auto node = make_node(Node::Shape::resized, combiner);
  node->children = {old};
  const Node& child = *old.node();
  node->size = child.size;
  node->lb = lb;
  node->ub = checked_add(lb, extent, "resized");
  checked_sub(0, extent, "resized");  // |extent| must fit as well (the extent may be negative)
  node->true_lb = child.true_lb;
  node->true_ub = child.true_ub;
  node->align = child.align;
  node->explicit_bounds = true;
  node->homogeneous = child.homogeneous;
  node->homogeneous_kind = child.homogeneous_kind;
  return DatatypeFactory::wrap(std::move(node));
}

void check_dims(const char* where, std::size_t ndims, std::initializer_list<std::size_t> sizes) {
  if (ndims == 0) fail(where, "ndims = 0 must be >= 1");
  for (std::size_t s : sizes) {
    if (s != ndims) {
      fail(where, "the argument arrays differ in length (ndims = " + std::to_string(ndims) +
                      ", got an array of " + std::to_string(s) + ")");
    }
  }
}

}  // namespace

std::int64_t basic_size(BasicKind kind) {
  switch (kind) {
    case BasicKind::byte_:
    case BasicKind::char_:
    case BasicKind::signed_char:
    case BasicKind::unsigned_char:
    case BasicKind::int8:
    case BasicKind::uint8:
    case BasicKind::bool_:
    case BasicKind::packed: return 1;
    case BasicKind::short_:
    case BasicKind::unsigned_short:
    case BasicKind::int16:
    case BasicKind::uint16: return 2;
    case BasicKind::int_:
    case BasicKind::unsigned_:
    case BasicKind::int32:
    case BasicKind::uint32:
    case BasicKind::float32: return 4;
    case BasicKind::wchar: return sizeof(wchar_t);
    case BasicKind::long_:
    case BasicKind::unsigned_long: return sizeof(long);
    case BasicKind::long_long:
    case BasicKind::unsigned_long_long:
    case BasicKind::int64:
    case BasicKind::uint64:
    case BasicKind::float64: return 8;
    case BasicKind::long_double: return sizeof(long double);
    case BasicKind::complex_float: return 8;
    case BasicKind::complex_double: return 16;
  }
  return 1;
}

const char* basic_name(BasicKind kind) {
  switch (kind) {
    case BasicKind::byte_: return "MPI_BYTE";
    case BasicKind::char_: return "MPI_CHAR";
    case BasicKind::signed_char: return "MPI_SIGNED_CHAR";
    case BasicKind::unsigned_char: return "MPI_UNSIGNED_CHAR";
    case BasicKind::short_: return "MPI_SHORT";
    case BasicKind::unsigned_short: return "MPI_UNSIGNED_SHORT";
    case BasicKind::int_: return "MPI_INT";
    case BasicKind::unsigned_: return "MPI_UNSIGNED";
    case BasicKind::long_: return "MPI_LONG";
    case BasicKind::unsigned_long: return "MPI_UNSIGNED_LONG";
    case BasicKind::long_long: return "MPI_LONG_LONG";
    case BasicKind::unsigned_long_long: return "MPI_UNSIGNED_LONG_LONG";
    case BasicKind::float32: return "MPI_FLOAT";
    case BasicKind::float64: return "MPI_DOUBLE";
    case BasicKind::long_double: return "MPI_LONG_DOUBLE";
    case BasicKind::int8: return "MPI_INT8_T";
    case BasicKind::int16: return "MPI_INT16_T";
    case BasicKind::int32: return "MPI_INT32_T";
    case BasicKind::int64: return "MPI_INT64_T";
    case BasicKind::uint8: return "MPI_UINT8_T";
    case BasicKind::uint16: return "MPI_UINT16_T";
    case BasicKind::uint32: return "MPI_UINT32_T";
    case BasicKind::uint64: return "MPI_UINT64_T";
    case BasicKind::bool_: return "MPI_C_BOOL";
    case BasicKind::wchar: return "MPI_WCHAR";
    case BasicKind::complex_float: return "MPI_C_FLOAT_COMPLEX";
    case BasicKind::complex_double: return "MPI_C_DOUBLE_COMPLEX";
    case BasicKind::packed: return "MPI_PACKED";
  }
  return "?";
}

Datatype::Datatype() : Datatype(basic(BasicKind::byte_)) {}

Datatype Datatype::basic(BasicKind kind) {
  auto node = make_node(Node::Shape::basic, "MPI_COMBINER_NAMED");
  node->basic_kind = kind;
  node->size = basic_size(kind);
  node->ub = node->size;
  node->true_ub = node->size;
  // Complex types align like their components; long double like its natural alignment.
  node->align = kind == BasicKind::complex_float    ? 4
                : kind == BasicKind::complex_double ? 8
                : kind == BasicKind::long_double ? static_cast<std::int64_t>(alignof(long double))
                                                 : node->size;
  node->homogeneous_kind = kind;
  auto type = DatatypeFactory::wrap(std::move(node));
  type.commit();  // named types are usable without a commit, as in MPI
  return type;
}

Datatype Datatype::contiguous(std::int64_t count, const Datatype& old) {
  require_non_negative("contiguous", "count", count);
  return strided_type("contiguous", "MPI_COMBINER_CONTIGUOUS", count, 1, old.extent(), old);
}

Datatype Datatype::vector(std::int64_t count, std::int64_t blocklength, std::int64_t stride,
                          const Datatype& old) {
  return strided_type("vector", "MPI_COMBINER_VECTOR", count, blocklength,
                      checked_mul(stride, old.extent(), "vector"), old);
}

Datatype Datatype::hvector(std::int64_t count, std::int64_t blocklength, std::int64_t stride_bytes,
                           const Datatype& old) {
  return strided_type("hvector", "MPI_COMBINER_HVECTOR", count, blocklength, stride_bytes, old);
}

Datatype Datatype::indexed(IntList blocklengths, IntList displacements, const Datatype& old) {
  const auto bytes = scaled(displacements, old.extent(), "indexed");
  return blocks_type("indexed", "MPI_COMBINER_INDEXED", blocklengths, bytes,
                     std::span<const Datatype>(&old, 1), true);
}

Datatype Datatype::hindexed(IntList blocklengths, IntList displacements_bytes,
                            const Datatype& old) {
  return blocks_type("hindexed", "MPI_COMBINER_HINDEXED", blocklengths, displacements_bytes,
                     std::span<const Datatype>(&old, 1), true);
}

Datatype Datatype::indexed_block(std::int64_t blocklength, IntList displacements,
                                 const Datatype& old) {
  require_non_negative("indexed_block", "blocklength", blocklength);
  const std::vector<std::int64_t> lengths(displacements.size(), blocklength);
  const auto bytes = scaled(displacements, old.extent(), "indexed_block");
  return blocks_type("indexed_block", "MPI_COMBINER_INDEXED_BLOCK", lengths, bytes,
                     std::span<const Datatype>(&old, 1), true);
}

Datatype Datatype::hindexed_block(std::int64_t blocklength, IntList displacements_bytes,
                                  const Datatype& old) {
  require_non_negative("hindexed_block", "blocklength", blocklength);
  const std::vector<std::int64_t> lengths(displacements_bytes.size(), blocklength);
  return blocks_type("hindexed_block", "MPI_COMBINER_HINDEXED_BLOCK", lengths, displacements_bytes,
                     std::span<const Datatype>(&old, 1), true);
}

Datatype Datatype::struct_(IntList blocklengths, IntList displacements_bytes,
                           std::span<const Datatype> types) {
  return blocks_type("struct_", "MPI_COMBINER_STRUCT", blocklengths, displacements_bytes, types,
                     false);
}

Datatype Datatype::subarray(IntList sizes, IntList subsizes, IntList starts, Order order,
                            const Datatype& old) {
  const char* where = "subarray";
  const std::size_t ndims = sizes.size();
  check_dims(where, ndims, {subsizes.size(), starts.size()});
  for (std::size_t d = 0; d < ndims; ++d) {
    const std::string dim = "dimension " + std::to_string(d) + ": ";
    if (sizes[d] < 1) fail(where, dim + "size " + std::to_string(sizes[d]) + " must be >= 1");
    if (subsizes[d] < 1 || subsizes[d] > sizes[d]) {
      fail(where, dim + "subsize " + std::to_string(subsizes[d]) + " must be in [1, " +
                      std::to_string(sizes[d]) + "]");
    }
    if (starts[d] < 0 || starts[d] > sizes[d] - subsizes[d]) {
      fail(where, dim + "start " + std::to_string(starts[d]) + " + subsize " +
                      std::to_string(subsizes[d]) + " exceeds size " + std::to_string(sizes[d]));
    }
  }
  // Dimension order from the fastest-varying outwards.
  std::vector<std::size_t> dims(ndims);
  std::iota(dims.begin(), dims.end(), 0);
  if (order == Order::c) std::reverse(dims.begin(), dims.end());
  const std::int64_t ext = old.extent();
  Datatype type = contiguous(subsizes[dims[0]], old);
  std::int64_t stride = checked_mul(sizes[dims[0]], ext, where);
  std::int64_t disp = checked_mul(starts[dims[0]], ext, where);
  for (std::size_t k = 1; k < ndims; ++k) {
    const std::size_t d = dims[k];
    type = hvector(subsizes[d], 1, stride, type);
    disp = checked_add(disp, checked_mul(starts[d], stride, where), where);
    stride = checked_mul(stride, sizes[d], where);
  }
  const std::int64_t one = 1;
  type = hindexed(std::span<const std::int64_t>(&one, 1), std::span<const std::int64_t>(&disp, 1),
                  type);
  return resized_type("MPI_COMBINER_SUBARRAY", type, 0, stride);
}

Datatype Datatype::darray(int size, int rank, IntList gsizes,
                          std::span<const Distribution> distribs, IntList dargs, IntList psizes,
                          Order order, const Datatype& old) {
  const char* where = "darray";
  const std::size_t ndims = gsizes.size();
  check_dims(where, ndims, {distribs.size(), dargs.size(), psizes.size()});
  if (size < 1) fail(where, "size = " + std::to_string(size) + " must be >= 1");
  if (rank < 0 || rank >= size) {
    fail(where, "rank = " + std::to_string(rank) + " must be in [0, " + std::to_string(size) + ")");
  }
  std::int64_t nprocs = 1;
  for (std::size_t d = 0; d < ndims; ++d) {
    if (gsizes[d] < 1 || psizes[d] < 1 || gsizes[d] > INT32_MAX || psizes[d] > INT32_MAX) {
      fail(where, "dimension " + std::to_string(d) + ": gsize and psize must be in [1, 2^31)");
    }
    nprocs = checked_mul(nprocs, psizes[d], where);
  }
  if (nprocs != size) {
    fail(where, "the product of psizes (" + std::to_string(nprocs) + ") must equal size (" +
                    std::to_string(size) + ")");
  }
  // The process grid is row-major whatever the array order (MPI 4.1.4).
  std::vector<std::int64_t> coords(ndims);
  std::int64_t rest = rank;
  for (std::size_t d = ndims; d-- > 0;) {
    coords[d] = rest % psizes[d];
    rest /= psizes[d];
  }
  // Global indices this process owns, per dimension, ascending.
  std::vector<std::vector<std::int64_t>> owned(ndims);
  for (std::size_t d = 0; d < ndims; ++d) {
    const std::string dim = "dimension " + std::to_string(d) + ": ";
    switch (distribs[d]) {
      case Distribution::none:
        if (psizes[d] != 1) fail(where, dim + "DISTRIBUTE_NONE needs psize 1");
        for (std::int64_t i = 0; i < gsizes[d]; ++i) owned[d].push_back(i);
        break;
      case Distribution::block: {
        const std::int64_t block =
            dargs[d] == kDefaultDarg ? (gsizes[d] + psizes[d] - 1) / psizes[d] : dargs[d];
        if (block < 1 || checked_mul(block, psizes[d], where) < gsizes[d]) {
          fail(where, dim + "block size " + std::to_string(block) + " times psize " +
                          std::to_string(psizes[d]) + " must cover gsize " +
                          std::to_string(gsizes[d]));
        }
        for (std::int64_t i = coords[d] * block; i < std::min(gsizes[d], (coords[d] + 1) * block);
             ++i) {
          owned[d].push_back(i);
        }
        break;
      }
      case Distribution::cyclic: {
        const std::int64_t block = dargs[d] == kDefaultDarg ? 1 : dargs[d];
        if (block < 1) fail(where, dim + "cyclic block " + std::to_string(block) + " must be >= 1");
        for (std::int64_t i = 0; i < gsizes[d]; ++i) {
          if ((i / block) % psizes[d] == coords[d]) owned[d].push_back(i);
        }
        break;
      }
    }
  }
  std::vector<std::size_t> dims(ndims);
  std::iota(dims.begin(), dims.end(), 0);
  if (order == Order::c) std::reverse(dims.begin(), dims.end());
  Datatype type = old;
  std::int64_t stride = old.extent();
  for (std::size_t k = 0; k < ndims; ++k) {
    const std::size_t d = dims[k];
    // Runs of consecutive indices become blocks (for the innermost dimension, of old).
    std::vector<std::int64_t> lengths, disps;
    std::int64_t previous = -2;
    for (std::int64_t i : owned[d]) {
      const bool continues_run = k == 0 && i == previous + 1;
      previous = i;
      if (continues_run) {
        ++lengths.back();
      } else {
        lengths.push_back(1);
        disps.push_back(checked_mul(i, stride, where));
      }
    }
    type = hindexed(lengths, disps, type);
    stride = checked_mul(stride, gsizes[d], where);
  }
  return resized_type("MPI_COMBINER_DARRAY", type, 0, stride);
}

Datatype Datatype::resized(const Datatype& old, std::int64_t lb, std::int64_t extent) {
  return resized_type("MPI_COMBINER_RESIZED", old, lb, extent);
}

Datatype Datatype::dup() const {
  auto node = make_node(Node::Shape::blocks, "MPI_COMBINER_DUP");
  const Node& child = *m_node;
  node->blocklens = {1};
  node->disps = {0};
  node->child_of = {0};
  node->children = {*this};
  node->size = child.size;
  node->lb = child.lb;
  node->ub = child.ub;
  node->true_lb = child.true_lb;
  node->true_ub = child.true_ub;
  node->align = child.align;
  node->explicit_bounds = child.explicit_bounds;
  node->homogeneous = child.homogeneous;
  node->homogeneous_kind = child.homogeneous_kind;
  auto type = DatatypeFactory::wrap(std::move(node));
  if (committed()) type.commit();  // MPI_Type_dup of a committed type is committed
  return type;
}

Datatype& Datatype::commit() {
  const Node& node = *m_node;
  std::call_once(node.commit_once, [&node] {
    node.canonical = std::make_unique<CanonicalForm>(build_canonical(node));
    node.is_committed.store(true, std::memory_order_release);
  });
  return *this;
}

bool Datatype::committed() const {
  return m_node->is_committed.load(std::memory_order_acquire);
}

const CanonicalForm& Datatype::canonical() const {
  if (!committed()) {
    throw DatatypeError("halox::Datatype: " + m_node->combiner +
                        " type used before commit() (call commit() first, as MPI requires)");
  }
  return *m_node->canonical;
}

std::int64_t Datatype::size() const {
  return m_node->size;
}
std::int64_t Datatype::lb() const {
  return m_node->lb;
}
std::int64_t Datatype::extent() const {
  return m_node->ub - m_node->lb;
}
std::int64_t Datatype::alignment() const {
  return m_node->align;
}
std::int64_t Datatype::true_lb() const {
  return m_node->true_lb;
}
std::int64_t Datatype::true_extent() const {
  return m_node->true_ub - m_node->true_lb;
}
std::string Datatype::combiner_name() const {
  return m_node->combiner;
}

bool Datatype::homogeneous(BasicKind* kind) const {
  if (!m_node->homogeneous || m_node->size == 0) return false;
  if (kind != nullptr) *kind = m_node->homogeneous_kind;
  return true;
}

bool Datatype::overlaps(std::int64_t count) const {
  const CanonicalForm& form = canonical();
  std::call_once(m_node->overlap_once, [&] { m_node->instance_overlaps = form_overlaps(form); });
  if (m_node->instance_overlaps) return true;
  if (count <= 1 || size() == 0) return false;
  // Instances lie extent apart; they cannot collide when the extent spans the true extent.
  const std::int64_t ext = extent() < 0 ? -extent() : extent();
  if (ext >= true_extent()) return false;
  return form_overlaps(repeat_canonical(form, count, extent()));
}

}  // namespace halox
