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

/// Whether p and q lie within sqrt(r2) (the lists' test, as the
/// builds and the pruning make them).
template <class Real>
HALOX_MD_HD bool within(const Real* p, const Real* q, double r2) {
  const Real dx = p[0] - q[0], dy = p[1] - q[1], dz = p[2] - q[2];
  return double(dx * dx + dy * dy + dz * dz) < r2;
}

/// Cells are at least rlist / kCellReach wide, so a pair within rlist lies within kCellReach
/// cells of each other along every axis. Half-width cells: the 5 x 5 x 5 cells around an
/// atom cover 15.6 rlist^3 of candidates against 27 rlist^3 for the 3 x 3 x 3 cells of
/// rlist-wide ones, and a row of 5 cells along x is one run of the sorted members.
constexpr int kCellReach = 2;

/// The cell grid of a neighbour search over a rank's local region [lo, hi + rlist): cells at
/// least rlist / kCellReach wide (no periodic wrap: the halo holds explicit images). Which pairs
/// this rank owns comes from each atom's home-axes mask (ParticlePlan::home_axes, decided in double
/// at search time), not from its coordinates, so that rounding them to float cannot count a pair
/// twice or never.
struct CellGrid {
  double lo[3], size[3];
  int cells[3];
  double rlist2;

  template <class Real>
  HALOX_MD_HD int cell_along(const Real* p, int d) const {
    int c = static_cast<int>((double(p[d]) - lo[d]) / size[d]);
    return c < 0 ? 0 : (c >= cells[d] ? cells[d] - 1 : c);
  }
  template <class Real>
  HALOX_MD_HD int cell_of(const Real* p) const {
    return cell_along(p, 0) + cells[0] * (cell_along(p, 1) + cells[1] * cell_along(p, 2));
  }
  /// Whether (p, q) goes into the list: within rlist and owned by this rank (their masks
  /// cover every axis, as ParticlePlan::owns_pair).
  template <class Real>
  HALOX_MD_HD bool listed(const Real* p, const Real* q, std::uint8_t p_axes,
                          std::uint8_t q_axes) const {
    return (p_axes | q_axes) == 7 && within(p, q, rlist2);
  }
};

/// Visits the cells within kCellReach of point p's along every axis, as rows along x in the
/// order the lists keep, z then y then x ascending: visit(first cell id, last cell id), the
/// cells of a row being consecutive ids (and so one run of members sorted by cell).
template <class Real, class Visit>
HALOX_MD_HD void for_each_cell_row_around(const Real* p, const CellGrid& grid, Visit&& visit) {
  const int c[3] = {grid.cell_along(p, 0), grid.cell_along(p, 1), grid.cell_along(p, 2)};
  const int x0 = c[0] - kCellReach < 0 ? 0 : c[0] - kCellReach;
  const int x1 = c[0] + kCellReach >= grid.cells[0] ? grid.cells[0] - 1 : c[0] + kCellReach;
  for (int z = c[2] - kCellReach; z <= c[2] + kCellReach; ++z) {
    if (z < 0 || z >= grid.cells[2]) continue;
    for (int y = c[1] - kCellReach; y <= c[1] + kCellReach; ++y) {
      if (y < 0 || y >= grid.cells[1]) continue;
      const int row = grid.cells[0] * (y + grid.cells[1] * z);
      visit(row + x0, row + x1);
    }
  }
}

/// Visits the neighbours of atom i (cells sorted so cell c's atoms are
/// members[start[c] .. start[c + 1])) in a fixed order: the same list on CPU and GPU.
template <class Real, class Visit>
HALOX_MD_HD void for_each_listed(std::int64_t i, const Real* x, const std::uint8_t* home_axes,
                                 const CellGrid& grid, const std::int32_t* start,
                                 const std::int32_t* members, Visit&& visit) {
  const Real* p = x + 3 * i;
  for_each_cell_row_around(p, grid, [&](int first, int last) {
    for (std::int32_t k = start[first]; k < start[last + 1]; ++k) {
      const std::int32_t j = members[k];
      if (j != i &&
          grid.listed(p, x + 3 * static_cast<std::int64_t>(j), home_axes[i], home_axes[j])) {
        visit(j);
      }
    }
  });
}

/// The sums of one atom's pairs: force, energy and virial.
template <class Real>
struct PairSums {
  Real fx = 0, fy = 0, fz = 0, energy = 0, virial = 0;
};

/// Adds the pair of the atom at p and atom j of x, when within the cutoff. Reduced units
/// (epsilon = sigma = mass = 1). The forces are plain truncated LJ; each pair's energy gets
/// `energy_shift` added: -u(cutoff) (lj_energy_shift, the default) so that it does not jump
/// when a pair crosses the cutoff, which makes the total-energy drift a measure of the
/// integration, or 0 for the plain truncated potential of LAMMPS's lj/cut and GROMACS's
/// vdw-modifier = None.
template <class Real>
HALOX_MD_HD void add_pair(const Real* p, const Real* x, std::int64_t j, Real cutoff2,
                          Real energy_shift, PairSums<Real>& s) {
  const Real dx = p[0] - x[3 * j], dy = p[1] - x[3 * j + 1], dz = p[2] - x[3 * j + 2];
  const Real r2 = dx * dx + dy * dy + dz * dz;
  if (r2 < cutoff2) {
    const Real inv2 = Real(1) / r2;
    const Real inv6 = inv2 * inv2 * inv2;
    const Real fr = Real(48) * inv6 * (inv6 - Real(0.5)) * inv2;  // F / r
    s.fx += fr * dx;
    s.fy += fr * dy;
    s.fz += fr * dz;
    s.energy += Real(4) * inv6 * (inv6 - Real(1)) + energy_shift;
    s.virial += fr * r2;
  }
}

/// Force on atom i from its row, and half the energy and virial of its pairs (each pair is
/// in two rows). Pairs beyond the cutoff (the list holds cutoff + skin) contribute nothing.
template <class Real>
HALOX_MD_HD void force_on_atom(std::int64_t i, const Real* x, NeighborList list, Real cutoff2,
                               Real energy_shift, Real* f, Real& half_energy, Real& half_virial) {
  const Real p[3] = {x[3 * i], x[3 * i + 1], x[3 * i + 2]};
  PairSums<Real> s;
  for (std::int32_t k = list.offsets[i]; k < list.offsets[i + 1]; ++k)
    add_pair(p, x, list.neighbors[k], cutoff2, energy_shift, s);
  f[3 * i] = s.fx;
  f[3 * i + 1] = s.fy;
  f[3 * i + 2] = s.fz;
  half_energy = Real(0.5) * s.energy;
  half_virial = Real(0.5) * s.virial;
}

/// -u(cutoff): added to each pair's energy inside the cutoff (--lj-shift cutoff).
inline double lj_energy_shift(double cutoff) {
  const double inv6 = 1.0 / (cutoff * cutoff * cutoff * cutoff * cutoff * cutoff);
  return -4.0 * inv6 * (inv6 - 1.0);
}

/// Whether p lies outside the box [lo, hi) (a home atom that left its rank's domain).
template <class Real>
HALOX_MD_HD bool outside(const Real* p, const double* lo, const double* hi) {
  bool in = true;
  for (int d = 0; d < 3; ++d) in &= (double(p[d]) >= lo[d]) & (double(p[d]) < hi[d]);
  return !in;
}

/// |p - q|^2 in double (the list's validity check).
template <class Real>
HALOX_MD_HD double displacement2(const Real* p, const Real* q) {
  const double dx = double(p[0]) - double(q[0]), dy = double(p[1]) - double(q[1]),
               dz = double(p[2]) - double(q[2]);
  return dx * dx + dy * dy + dz * dz;
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
