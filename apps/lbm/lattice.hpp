// The lattice Boltzmann physics of halox-lbm, written once for the CPU and GPU back ends:
// D3Q19 BGK with Guo forcing for momentum, D3Q7 for the order parameter of the free-energy
// binary fluid (lattice units, c_s^2 = 1/3 for D3Q19, 1/4 for D3Q7).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define LBM_HD __host__ __device__ __forceinline__
#define LBM_UNROLL _Pragma("unroll")
#else
#define LBM_HD inline
#define LBM_UNROLL
#endif

namespace halox::lbm {

constexpr int Q = 19;
constexpr int QG = 7;

// D3Q19 velocities: rest, 6 faces, 12 edges; D3Q7 is the first seven. Functions with local
// constant tables, so the same code reads them on the host and the device (loops over q are
// unrolled and the tables fold away).
LBM_HD int ex(int q) {
  constexpr int t[Q] = {0, 1, -1, 0, 0, 0, 0, 1, -1, 1, -1, 1, -1, 1, -1, 0, 0, 0, 0};
  return t[q];
}
LBM_HD int ey(int q) {
  constexpr int t[Q] = {0, 0, 0, 1, -1, 0, 0, 1, -1, -1, 1, 0, 0, 0, 0, 1, -1, 1, -1};
  return t[q];
}
LBM_HD int ez(int q) {
  constexpr int t[Q] = {0, 0, 0, 0, 0, 1, -1, 0, 0, 0, 0, 1, -1, -1, 1, 1, -1, -1, 1};
  return t[q];
}

/// A read of a field that no thread writes during the kernel (the read copy): through the
/// read-only data cache on the GPU.
template <class Real>
LBM_HD Real read_only(const Real* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

template <class Real>
LBM_HD Real weight19(int q) {
  return q == 0 ? Real(1) / 3 : (q < 7 ? Real(1) / 18 : Real(1) / 36);
}

/// Model parameters (lattice units).
struct Params {
  double tau = 0.8;       // momentum relaxation time (viscosity (tau - 1/2) / 3)
  double tau_g = 1.0;     // order-parameter relaxation time
  double A = 0.04;        // bulk free-energy coefficient
  double kappa = 0.04;    // interface stiffness
  double mobility = 0.5;  // Gamma in the D3Q7 equilibrium
  bool multiphase = true;
};

/// A rank's fields: SoA with one halo layer, x fastest; extent = interior + 2, rows `pitch`
/// elements apart (>= nx + 2: the GPU pads rows so that each starts its interior on a DRAM
/// sector, which is what lets the update run near the copy bandwidth).
template <class Real>
struct Fields {
  int nx = 0, ny = 0, nz = 0;  // interior
  int pitch = 0;               // elements from one row to the next
  Real* f = nullptr;           // Q planes (read copy)
  Real* f_next = nullptr;      // Q planes (write copy)
  Real* g = nullptr;           // QG planes
  Real* g_next = nullptr;
  Real* phi = nullptr;  // one plane
  // Periodic axes this rank spans alone: across the boundary an edge cell's neighbour is the
  // opposite edge cell of the interior, read in place, so those axes need no halo exchange.
  bool wrap[3] = {false, false, false};
  LBM_HD long long plane() const { return (long long)pitch * (ny + 2) * (nz + 2); }
  LBM_HD long long at(int x, int y, int z) const {
    return ((long long)z * (ny + 2) + y) * pitch + x;
  }
};

/// A cell and its neighbours' offsets, three per axis (-1, 0, +1): into the halo layer, or
/// wrapped to the opposite edge (Fields::wrap). The unrolled loops index them with constants,
/// so they stay in registers; 32-bit, since a plane holds fewer than 2^30 elements (the back
/// ends refuse larger ones), to keep the multiphase update's register count down.
struct Stencil {
  long long c;
  int dx[3], dy[3], dz[3];
  LBM_HD long long at(int sx, int sy, int sz) const {
    return c + (dx[sx + 1] + dy[sy + 1] + dz[sz + 1]);
  }
};
/// The most elements of one plane (a population of one rank): Stencil's offsets are 32-bit.
constexpr long long kMaxPlaneElements = 1LL << 30;
template <class Real>
LBM_HD Stencil stencil(const Fields<Real>& F, int x, int y, int z) {
  const int row = F.pitch, layer = F.pitch * (F.ny + 2);
  Stencil s;
  s.c = F.at(x, y, z);
  s.dx[0] = F.wrap[0] && x == 1 ? F.nx - 1 : -1;
  s.dx[1] = 0;
  s.dx[2] = F.wrap[0] && x == F.nx ? 1 - F.nx : 1;
  s.dy[0] = (F.wrap[1] && y == 1 ? F.ny - 1 : -1) * row;
  s.dy[1] = 0;
  s.dy[2] = (F.wrap[1] && y == F.ny ? 1 - F.ny : 1) * row;
  s.dz[0] = (F.wrap[2] && z == 1 ? F.nz - 1 : -1) * layer;
  s.dz[1] = 0;
  s.dz[2] = (F.wrap[2] && z == F.nz ? 1 - F.nz : 1) * layer;
  return s;
}

template <class Real>
LBM_HD Real equilibrium(int q, Real rho, Real ux, Real uy, Real uz) {
  const Real eu = ex(q) * ux + ey(q) * uy + ez(q) * uz;
  const Real uu = ux * ux + uy * uy + uz * uz;
  return weight19<Real>(q) * rho * (Real(1) + Real(3) * eu + Real(4.5) * eu * eu - Real(1.5) * uu);
}

/// Pull-streaming of f into cell s.c: fq[q] = f_q at x - e_q, with the density and momentum
/// they carry.
template <class Real>
LBM_HD void pull_f(const Fields<Real>& F, const Stencil& s, Real (&fq)[Q], Real& rho, Real& jx,
                   Real& jy, Real& jz) {
  const long long plane = F.plane();
  rho = jx = jy = jz = 0;
  LBM_UNROLL
  for (int q = 0; q < Q; ++q) {
    fq[q] = read_only(&F.f[q * plane + s.at(-ex(q), -ey(q), -ez(q))]);
    rho += fq[q];
    jx += fq[q] * ex(q);
    jy += fq[q] * ey(q);
    jz += fq[q] * ez(q);
  }
}

/// Single-phase BGK, fused pull-stream + collide for interior cell (x, y, z) (halo-based
/// coordinates, 1..n): reads f at x - e_q, writes f_next at x. The bandwidth kernel.
template <class Real>
LBM_HD void bgk_cell(const Fields<Real>& F, int x, int y, int z, Real omega) {
  const Stencil s = stencil(F, x, y, z);
  const long long c = s.c, plane = F.plane();
  Real fq[Q], rho, jx, jy, jz;
  pull_f(F, s, fq, rho, jx, jy, jz);
  const Real ux = jx / rho, uy = jy / rho, uz = jz / rho;
  LBM_UNROLL
  for (int q = 0; q < Q; ++q) {
    F.f_next[q * plane + c] = fq[q] - omega * (fq[q] - equilibrium<Real>(q, rho, ux, uy, uz));
  }
}

/// Multiphase pass 1: the order parameter after streaming, phi = sum of the g pulled into the
/// cell, which is all that pass 2 needs from its neighbours (reads 7 values, writes 1).
template <class Real>
LBM_HD void phi_cell(const Fields<Real>& F, int x, int y, int z) {
  const Stencil s = stencil(F, x, y, z);
  const long long plane = F.plane();
  Real phi = 0;
  LBM_UNROLL
  for (int q = 0; q < QG; ++q) {
    phi += read_only(&F.g[q * plane + s.at(-ex(q), -ey(q), -ez(q))]);
  }
  F.phi[s.c] = phi;
}

/// Multiphase pass 2 (after the phi halo exchange), fused like the BGK update: pull-stream f
/// and g, chemical potential and force mu grad(phi) (Guo forcing), collide, write the next
/// copies. One read and one write of each population per step, and no second pass over them.
/// The 26 pulled populations are loaded first, before the phi stencil (from cache), so that
/// the DRAM reads of a thread are all in flight at once (0.5-1% faster on the H200 than
/// after the stencil, with g loaded after f's writes: docs/PERFORMANCE.md).
template <class Real>
LBM_HD void stream_collide_cell(const Fields<Real>& F, int x, int y, int z, const Params& p) {
  const Stencil s = stencil(F, x, y, z);
  const long long c = s.c, plane = F.plane();
  Real fq[Q], rho, jx, jy, jz, gq[QG];
  pull_f(F, s, fq, rho, jx, jy, jz);
  LBM_UNROLL
  for (int q = 0; q < QG; ++q) gq[q] = read_only(&F.g[q * plane + s.at(-ex(q), -ey(q), -ez(q))]);
  const Real phi = F.phi[c];
  Real gx = 0, gy = 0, gz = 0, lap = 0;
  LBM_UNROLL
  for (int q = 1; q < Q; ++q) {
    const Real n = F.phi[s.at(ex(q), ey(q), ez(q))];
    const Real w = weight19<Real>(q);
    gx += w * ex(q) * n;
    gy += w * ey(q) * n;
    gz += w * ez(q) * n;
    lap += w * (n - phi);
  }
  gx *= Real(3);
  gy *= Real(3);
  gz *= Real(3);
  lap *= Real(6);
  const Real mu = Real(p.A) * (phi * phi * phi - phi) - Real(p.kappa) * lap;
  const Real Fx = mu * gx, Fy = mu * gy, Fz = mu * gz;
  // One division, not three: an IEEE divide is a subroutine with a slow path, a multiply
  // one instruction.
  const Real inv_rho = Real(1) / rho;
  const Real ux = (jx + Real(0.5) * Fx) * inv_rho, uy = (jy + Real(0.5) * Fy) * inv_rho,
             uz = (jz + Real(0.5) * Fz) * inv_rho;
  const Real omega = Real(1) / Real(p.tau), pre = Real(1) - Real(0.5) * omega;
  // Guo's term, sum over a of (3 (e_a - u_a) + 9 (e.u) e_a) F_a, as 3 (e.F - u.F) + 9 (e.u)(e.F):
  // u.F once per cell, and e.F of the constant velocities is a few adds (a third of the
  // update's arithmetic less than the per-component form).
  const Real uF = ux * Fx + uy * Fy + uz * Fz;
  LBM_UNROLL
  for (int q = 0; q < Q; ++q) {
    const Real eu = ex(q) * ux + ey(q) * uy + ez(q) * uz;
    const Real eF = ex(q) * Fx + ey(q) * Fy + ez(q) * Fz;
    const Real force = weight19<Real>(q) * (Real(3) * (eF - uF) + Real(9) * eu * eF);
    F.f_next[q * plane + c] =
        fq[q] - omega * (fq[q] - equilibrium<Real>(q, rho, ux, uy, uz)) + pre * force;
  }
  // D3Q7 order parameter: g_eq_i = (Gamma mu + phi e_i.u) / 2 (w = 1/8, c_s^2 = 1/4), the
  // rest population takes the remainder so that sum g = phi exactly.
  const Real omega_g = Real(1) / Real(p.tau_g);
  Real rest = phi;
  LBM_UNROLL
  for (int q = 1; q < QG; ++q) {
    const Real eq =
        Real(0.5) * (Real(p.mobility) * mu + phi * (ex(q) * ux + ey(q) * uy + ez(q) * uz));
    rest -= eq;
    F.g_next[q * plane + c] = gq[q] - omega_g * (gq[q] - eq);
  }
  F.g_next[c] = gq[0] - omega_g * (gq[0] - rest);
}

/// Density, velocity (with half the force when multiphase: computed from f only here) and
/// phi of a cell from the current copies (diagnostics and output).
template <class Real>
LBM_HD void moments(const Fields<Real>& F, long long c, Real& rho, Real& ux, Real& uy, Real& uz,
                    Real& phi) {
  const long long plane = F.plane();
  rho = ux = uy = uz = phi = 0;
  LBM_UNROLL
  for (int q = 0; q < Q; ++q) {
    const Real v = F.f[q * plane + c];
    rho += v;
    ux += v * ex(q);
    uy += v * ey(q);
    uz += v * ez(q);
  }
  ux /= rho;
  uy /= rho;
  uz /= rho;
  if (F.g) {
    for (int q = 0; q < QG; ++q) phi += F.g[q * plane + c];
  }
}

}  // namespace halox::lbm
