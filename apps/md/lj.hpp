// The Lennard-Jones physics of halox-md, written once for the CPU and the GPU back ends.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HALOX_MD_HD __host__ __device__ __forceinline__
#else
#define HALOX_MD_HD inline
#endif

namespace halox::md {

/// A neighbour list in CSR form over all local atoms (home and halo). Every pair this rank
/// owns appears twice (i in j's row and j in i's), so each atom's force is one row's sum
/// with no atomics, and the forces on halo atoms are ready for the reverse exchange.
struct NeighborList {
  std::int64_t atoms = 0;
  const std::int32_t* offsets = nullptr;  // atoms + 1
  const std::int32_t* neighbors = nullptr;
};

/// Force on atom i from its row, and half the energy and virial of its pairs (each pair is
/// in two rows). Pairs beyond the cutoff (the list holds cutoff + skin) contribute nothing.
/// Reduced units (epsilon = sigma = mass = 1). The forces are plain truncated LJ; the energy
/// is shifted by `energy_shift` = -u(cutoff) so that it does not jump when a pair crosses
/// the cutoff, which makes the total-energy drift a measure of the integration.
template <class Real>
HALOX_MD_HD void force_on_atom(std::int64_t i, const Real* x, NeighborList list, Real cutoff2,
                               Real energy_shift, Real* f, Real& half_energy, Real& half_virial) {
  const Real xi = x[3 * i], yi = x[3 * i + 1], zi = x[3 * i + 2];
  Real fx = 0, fy = 0, fz = 0, e = 0, w = 0;
  for (std::int32_t k = list.offsets[i]; k < list.offsets[i + 1]; ++k) {
    const std::int64_t j = list.neighbors[k];
    const Real dx = xi - x[3 * j], dy = yi - x[3 * j + 1], dz = zi - x[3 * j + 2];
    const Real r2 = dx * dx + dy * dy + dz * dz;
    if (r2 < cutoff2) {
      const Real inv2 = Real(1) / r2;
      const Real inv6 = inv2 * inv2 * inv2;
      const Real fr = Real(48) * inv6 * (inv6 - Real(0.5)) * inv2;  // F / r
      fx += fr * dx;
      fy += fr * dy;
      fz += fr * dz;
      e += Real(4) * inv6 * (inv6 - Real(1)) + energy_shift;
      w += fr * r2;
    }
  }
  f[3 * i] = fx;
  f[3 * i + 1] = fy;
  f[3 * i + 2] = fz;
  half_energy = Real(0.5) * e;
  half_virial = Real(0.5) * w;
}

/// -u(cutoff): added to each pair's energy inside the cutoff.
inline double lj_energy_shift(double cutoff) {
  const double inv6 = 1.0 / (cutoff * cutoff * cutoff * cutoff * cutoff * cutoff);
  return -4.0 * inv6 * (inv6 - 1.0);
}

/// Velocity Verlet half kick (unit mass) and drift, one home atom.
template <class Real>
HALOX_MD_HD void kick(std::int64_t i, Real half_dt, const Real* f, Real* v) {
  for (int a = 0; a < 3; ++a) v[3 * i + a] += half_dt * f[3 * i + a];
}
template <class Real>
HALOX_MD_HD void drift(std::int64_t i, Real dt, const Real* v, Real* x) {
  for (int a = 0; a < 3; ++a) x[3 * i + a] += dt * v[3 * i + a];
}

}  // namespace halox::md
