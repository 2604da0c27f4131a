// Random nested datatypes for property tests: a recipe tree that can be built both as a
// halox::Datatype and (when MPI is present) as a real MPI_Datatype, so the two engines are
// compared on exactly the same type. Shared by the CPU, MPI and GPU tests and the benchmarks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "halox/datatype.hpp"

namespace halox::testing {

struct Recipe {
  enum class Kind {
    basic,
    contiguous,
    vector,
    hvector,
    indexed,
    hindexed,
    indexed_block,
    hindexed_block,
    struct_,
    subarray,
    darray,
    resized,
    dup
  };
  Kind kind = Kind::basic;
  BasicKind basic = BasicKind::int_;
  std::int64_t count = 0, blocklength = 0, stride = 0, lb = 0, extent = 0;
  std::vector<std::int64_t> lengths, disps, sizes, subsizes, starts, dargs, psizes;
  std::vector<Distribution> distribs;
  int size = 1, rank = 0;
  Order order = Order::c;
  std::vector<Recipe> children;

  std::string describe() const;
};

inline const char* kind_name(Recipe::Kind k) {
  static const char* names[] = {
      "basic",          "contiguous", "vector",   "hvector", "indexed", "hindexed", "indexed_block",
      "hindexed_block", "struct",     "subarray", "darray",  "resized", "dup"};
  return names[static_cast<int>(k)];
}

inline std::string Recipe::describe() const {
  if (kind == Kind::basic) return basic_name(basic);
  std::string s = std::string(kind_name(kind)) + "(";
  auto list = [](const std::vector<std::int64_t>& v) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
    return out + "]";
  };
  switch (kind) {
    case Kind::contiguous: s += std::to_string(count); break;
    case Kind::vector:
    case Kind::hvector:
      s += std::to_string(count) + "," + std::to_string(blocklength) + "," + std::to_string(stride);
      break;
    case Kind::indexed:
    case Kind::hindexed:
    case Kind::struct_: s += list(lengths) + "," + list(disps); break;
    case Kind::indexed_block:
    case Kind::hindexed_block: s += std::to_string(blocklength) + "," + list(disps); break;
    case Kind::subarray:
      s += list(sizes) + "," + list(subsizes) + "," + list(starts) +
           (order == Order::c ? ",C" : ",F");
      break;
    case Kind::darray:
      s += std::to_string(size) + "," + std::to_string(rank) + "," + list(sizes) + ",dist" +
           list(std::vector<std::int64_t>(distribs.size())) + list(dargs) + list(psizes);
      break;
    case Kind::resized: s += std::to_string(lb) + "," + std::to_string(extent); break;
    default: break;
  }
  for (const auto& c : children) s += ";" + c.describe();
  return s + ")";
}

/// Builds the halox type a recipe describes (not committed).
inline Datatype to_halox(const Recipe& r) {
  using K = Recipe::Kind;
  std::vector<Datatype> kids;
  for (const auto& c : r.children) kids.push_back(to_halox(c));
  switch (r.kind) {
    case K::basic: return Datatype::basic(r.basic);
    case K::contiguous: return Datatype::contiguous(r.count, kids[0]);
    case K::vector: return Datatype::vector(r.count, r.blocklength, r.stride, kids[0]);
    case K::hvector: return Datatype::hvector(r.count, r.blocklength, r.stride, kids[0]);
    case K::indexed: return Datatype::indexed(r.lengths, r.disps, kids[0]);
    case K::hindexed: return Datatype::hindexed(r.lengths, r.disps, kids[0]);
    case K::indexed_block: return Datatype::indexed_block(r.blocklength, r.disps, kids[0]);
    case K::hindexed_block: return Datatype::hindexed_block(r.blocklength, r.disps, kids[0]);
    case K::struct_: return Datatype::struct_(r.lengths, r.disps, kids);
    case K::subarray: return Datatype::subarray(r.sizes, r.subsizes, r.starts, r.order, kids[0]);
    case K::darray:
      return Datatype::darray(r.size, r.rank, r.sizes, r.distribs, r.dargs, r.psizes, r.order,
                              kids[0]);
    case K::resized: return Datatype::resized(kids[0], r.lb, r.extent);
    case K::dup: return kids[0].dup();
  }
  return Datatype();
}

/// Random recipes. `regular_only` restricts to contiguous/vector/hvector/subarray, whose
/// canonical form must be a single strided block; it keeps the strided dimensions within
/// kMaxStridedDims. `awkward` adds what the default keeps away from because MPI libraries
/// and the standard differ there (for from_mpi, which must follow the library): misaligned,
/// unordered and negative displacements of odd sizes, byte strides of -1 to -5 and touching
/// negative strides, resized types without data and empty types at any level.
class RecipeGenerator {
 public:
  explicit RecipeGenerator(std::uint64_t seed, bool awkward = false)
      : m_rng(seed), m_awkward(awkward) {}

  Recipe random(int depth, bool regular_only = false) {
    int dim_budget = kMaxStridedDims;
    return make(depth, regular_only, dim_budget);
  }

  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(m_rng);
  }
  std::mt19937_64& rng() { return m_rng; }

 private:
  Recipe leaf() {
    static const BasicKind kinds[] = {BasicKind::char_,   BasicKind::short_,  BasicKind::int_,
                                      BasicKind::float32, BasicKind::float64, BasicKind::int64,
                                      BasicKind::byte_};
    Recipe r;
    r.basic = kinds[uniform(0, 6)];
    return r;
  }

  // Extent and alignment of a recipe's type (built on the fly; recipes are small).
  static std::int64_t extent_of(const Recipe& r) { return to_halox(r).extent(); }
  static std::int64_t align_of(const Recipe& r) { return to_halox(r).alignment(); }
  // Byte displacements stay multiples of the child's alignment: MPI pads the extent once
  // (the standard's epsilon), Open MPI after every block, and the two differ only for
  // misaligned displacements, which no real code uses.

  Recipe make(int depth, bool regular_only, int& dim_budget) {
    using K = Recipe::Kind;
    if (depth == 0 || uniform(0, 5) == 0) return leaf();
    static const K all[] = {K::contiguous, K::vector,        K::hvector,        K::indexed,
                            K::hindexed,   K::indexed_block, K::hindexed_block, K::struct_,
                            K::subarray,   K::darray,        K::resized,        K::dup};
    static const K regular[] = {K::contiguous, K::vector, K::hvector, K::subarray};
    Recipe r;
    r.kind = regular_only ? regular[uniform(0, 3)] : all[uniform(0, 11)];
    if (regular_only) {
      const int cost = r.kind == K::contiguous ? 1 : r.kind == K::subarray ? 3 : 2;
      if (cost > dim_budget) return leaf();
      dim_budget -= cost;
    }
    const int nkids = r.kind == K::struct_ ? static_cast<int>(uniform(1, 3)) : 1;
    for (int i = 0; i < nkids; ++i) r.children.push_back(make(depth - 1, regular_only, dim_budget));
    // MPI refuses subarrays and darrays of types without data.
    if ((r.kind == K::subarray || r.kind == K::darray) && to_halox(r.children[0]).size() == 0) {
      r.children[0] = leaf();
    }
    const std::int64_t ext = std::max<std::int64_t>(1, extent_of(r.children[0]));
    const std::int64_t align = align_of(r.children[0]);
    switch (r.kind) {
      case K::contiguous: r.count = uniform(1, 5); break;
      case K::vector:
        r.count = uniform(1, 4);
        r.blocklength = uniform(1, 3);
        r.stride = r.blocklength + uniform(-1, 3);
        // Negative strides step past the block: Open MPI 4.1 mis-computes the bounds of
        // negative-stride vectors whose blocks touch (|stride| <= blocklength), a bug of the
        // reference, not of halox (see docs/datatypes.md).
        if (uniform(0, 3) == 0) r.stride = -(r.blocklength + uniform(1, 3));
        if (m_awkward && uniform(0, 2) == 0) r.stride = -uniform(1, 5);
        if (regular_only) r.stride = r.blocklength + uniform(0, 3);
        break;
      case K::hvector:
        r.count = uniform(1, 4);
        r.blocklength = uniform(1, 3);
        r.stride = r.blocklength * ext + uniform(0, 3) * uniform(1, 2) * align;
        if (uniform(0, 4) == 0) r.stride = -(r.blocklength * ext + uniform(1, 2) * align);
        if (m_awkward && uniform(0, 2) == 0) {
          r.stride = uniform(0, 1) ? -uniform(1, 5) : r.blocklength * ext + uniform(-3, 3);
        }
        if (regular_only) r.stride = r.blocklength * ext + uniform(0, 16);
        break;
      case K::indexed:
      case K::hindexed:
      case K::indexed_block:
      case K::hindexed_block: {
        const bool bytes = r.kind == K::hindexed || r.kind == K::hindexed_block;
        const std::int64_t n = uniform(1, 5);
        r.blocklength = uniform(1, 3);
        std::int64_t at = uniform(-1, 2);
        for (std::int64_t i = 0; i < n; ++i) {
          const std::int64_t len =
              r.kind == K::indexed || r.kind == K::hindexed ? uniform(0, 3) : r.blocklength;
          r.lengths.push_back(len);
          r.disps.push_back(bytes ? at * ext + uniform(0, 2) * align : at);
          if (m_awkward && bytes) r.disps.back() += uniform(-3, 3);
          at += len + uniform(0, 2);
          if (m_awkward && uniform(0, 3) == 0) at = -at - uniform(0, 3);
        }
        if (uniform(0, m_awkward ? 1 : 4) == 0) {
          std::shuffle(r.disps.begin(), r.disps.end(), m_rng);
        }
        break;
      }
      case K::struct_: {
        std::int64_t at = uniform(-1, 1) * 8;
        for (const auto& c : r.children) {
          const std::int64_t a = align_of(c);
          at = (at % a == 0) ? at : at + (a - ((at % a) + a) % a);
          if (m_awkward) at += uniform(-3, 3);
          const std::int64_t len = uniform(1, 3);
          r.lengths.push_back(len);
          r.disps.push_back(at);
          at += len * std::max<std::int64_t>(1, extent_of(c)) + uniform(0, 3) * 4;
        }
        break;
      }
      case K::subarray: {
        const std::int64_t nd = uniform(1, 3);
        for (std::int64_t d = 0; d < nd; ++d) {
          r.sizes.push_back(uniform(1, 6));
          r.subsizes.push_back(uniform(1, r.sizes.back()));
          r.starts.push_back(uniform(0, r.sizes.back() - r.subsizes.back()));
        }
        r.order = uniform(0, 1) ? Order::c : Order::fortran;
        break;
      }
      case K::darray: {
        const std::int64_t nd = uniform(1, 3);
        r.size = 1;
        for (std::int64_t d = 0; d < nd; ++d) {
          r.sizes.push_back(uniform(1, 7));
          const int dist = static_cast<int>(uniform(0, 2));
          r.distribs.push_back(dist == 0   ? Distribution::block
                               : dist == 1 ? Distribution::cyclic
                                           : Distribution::none);
          const std::int64_t p = dist == 2 ? 1 : uniform(1, 3);
          r.psizes.push_back(p);
          r.size *= static_cast<int>(p);
          std::int64_t darg = kDefaultDarg;
          if (dist == 0 && uniform(0, 1)) darg = (r.sizes.back() + p - 1) / p + uniform(0, 1);
          if (dist == 1 && uniform(0, 1)) darg = uniform(1, 3);
          r.dargs.push_back(darg);
        }
        r.rank = static_cast<int>(uniform(0, r.size - 1));
        r.order = uniform(0, 1) ? Order::c : Order::fortran;
        break;
      }
      case K::resized:
        r.lb = uniform(-8, 8);
        r.extent = ext + uniform(0, 16);
        if (m_awkward && uniform(0, 2) == 0) {  // a resized type without data
          Recipe empty;
          empty.kind = K::contiguous;
          empty.count = 0;
          empty.children = {leaf()};
          r.children = {empty};
          r.extent = uniform(1, 40);
        }
        break;
      default: break;
    }
    // Types without data are left out: MPI leaves their bounds to the implementation and
    // Open MPI's constructors do not even agree among themselves (docs/datatypes.md).
    if (!m_awkward && to_halox(r).size() == 0) return leaf();
    return r;
  }

  std::mt19937_64 m_rng;
  bool m_awkward = false;
};

}  // namespace halox::testing
