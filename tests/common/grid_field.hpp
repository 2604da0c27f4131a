// The analytic field the grid halo tests fill their interiors with, and what every cell of a
// rank's array must hold after the exchange.
#pragma once

#include <array>
#include <cstdint>

namespace halox::testing {

inline double global_value(std::int64_t x, std::int64_t y, std::int64_t z, int k) {
  return 1.0 + x + 1000.0 * y + 1.0e6 * z + 0.25 * k;
}

/// Cell `at` (array coordinates, halo included) of a rank whose interior starts at global
/// cell `offset`, component k: the global field at the wrapped position, or `poison` where
/// nothing may be written (padding beyond interior + 2 * halo, or beyond a non-periodic edge).
inline double expected_cell(std::array<std::int64_t, 3> at, std::array<std::int64_t, 3> offset,
                            std::array<std::int64_t, 3> interior, int halo,
                            std::array<std::int64_t, 3> global, std::array<bool, 3> periodic, int k,
                            double poison) {
  std::array<std::int64_t, 3> g{};
  for (int a = 0; a < 3; ++a) {
    if (at[a] >= interior[a] + 2 * halo) return poison;
    g[a] = offset[a] + at[a] - halo;
    if (g[a] < 0 || g[a] >= global[a]) {
      if (!periodic[a]) return poison;
      g[a] = (g[a] + global[a]) % global[a];
    }
  }
  return global_value(g[0], g[1], g[2], k);
}

}  // namespace halox::testing
