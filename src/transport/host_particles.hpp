// The particle halo's two host loops, written once for every host path (the host-orchestrated
// transports' callbacks of one rank per process, and Ranks::local's CPU copies): items
// gathered by index with the periodic shift added, and forces added back by index.
#pragma once

#include <array>
#include <cstdint>

namespace halox::detail {

/// out[k] = x[index[k]] + shift for k < n (items of three Reals).
template <class Real>
void gather_shift(const void* x, const std::int32_t* index, std::int64_t n,
                  const std::array<double, 3>& shift, void* out) {
  const Real* in = static_cast<const Real*>(x);
  Real* o = static_cast<Real*>(out);
  for (std::int64_t k = 0; k < n; ++k) {
    for (int a = 0; a < 3; ++a) o[3 * k + a] = in[3 * index[k] + a] + static_cast<Real>(shift[a]);
  }
}

/// f[index[k]] += in[k] for k < n (items of three Reals).
template <class Real>
void scatter_add(void* f, const std::int32_t* index, std::int64_t n, const void* in) {
  Real* out = static_cast<Real*>(f);
  const Real* i = static_cast<const Real*>(in);
  for (std::int64_t k = 0; k < n; ++k) {
    for (int a = 0; a < 3; ++a) out[3 * index[k] + a] += i[3 * k + a];
  }
}

}  // namespace halox::detail
