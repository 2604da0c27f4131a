// The shapes halox-bench pack measures: faces of 3D arrays, the D3Q19 population face
// subset, and index gathers. Shared by the CPU and GPU modes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "halox/datatype.hpp"

namespace halox::bench {

struct PackCase {
  std::string name;              // e.g. "x-face w1 256^3 double"
  std::string family;            // "halo" or "bandwidth"
  Datatype type;                 // committed
  std::int64_t array_bytes = 0;  // bytes of the source array the type addresses
};

// Face of an n^3 C-order array ([z][y][x], x fastest) of width w on `axis` (0 = x).
inline Datatype face_type(std::int64_t n, int axis, std::int64_t width, const Datatype& elem) {
  const std::vector<std::int64_t> sizes{n, n, n};
  std::vector<std::int64_t> sub{n, n, n}, start{0, 0, 0};
  const std::size_t d = static_cast<std::size_t>(2 - axis);  // axis x is the last C dimension
  sub[d] = width;
  start[d] = width;  // the first interior layer, as a halo send does
  Datatype t = Datatype::subarray(sizes, sub, start, Order::c, elem);
  t.commit();
  return t;
}

// The 5 of 19 D3Q19 populations that cross an X face, in a structure-of-arrays layout
// f[19][n][n][n]: one X-face subarray per population, 5 populations apart in memory.
inline Datatype d3q19_face_type(std::int64_t n, const Datatype& elem) {
  static const std::int64_t crossing[5] = {1, 7, 9, 11, 13};  // populations with c_x = +1
  const Datatype face = face_type(n, 0, 1, elem);
  std::vector<std::int64_t> lengths(5, 1), disps;
  for (std::int64_t q : crossing) disps.push_back(q * n * n * n * elem.extent());
  Datatype t = Datatype::hindexed(lengths, disps, face);
  t.commit();
  return t;
}

// A gather of `entries` elements of `elem` from an array of `array_elems` (sorted or random
// order), as an MD index map.
inline Datatype gather_type(std::int64_t entries, std::int64_t array_elems, bool sorted,
                            const Datatype& elem, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> all(static_cast<std::size_t>(array_elems));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(static_cast<std::size_t>(entries));
  if (sorted) std::sort(all.begin(), all.end());
  for (auto& i : all) i *= elem.extent();
  Datatype t = Datatype::hindexed_block(1, all, elem);
  t.commit();
  return t;
}

inline std::string elem_name(const Datatype& e) {
  return e.size() == 4 ? "float" : "double";
}

/// The CPU benchmark set (issue: foundation): faces of 256^3 doubles, a 10% random gather.
inline std::vector<PackCase> cpu_cases(std::int64_t n) {
  std::vector<PackCase> cases;
  const Datatype d = Datatype::of<double>();
  const std::int64_t bytes = n * n * n * 8;
  const char* axes = "xyz";
  for (int axis = 0; axis < 3; ++axis) {
    for (std::int64_t w : {1, 2}) {
      cases.push_back({std::string(1, axes[axis]) + "-face w" + std::to_string(w) + " " +
                           std::to_string(n) + "^3 double",
                       "halo", face_type(n, axis, w, d), bytes});
    }
  }
  cases.push_back({"gather 10% random " + std::to_string(n) + "^3 double", "halo",
                   gather_type(n * n * n / 10, n * n * n, true, d, 42), bytes});
  return cases;
}

}  // namespace halox::bench
