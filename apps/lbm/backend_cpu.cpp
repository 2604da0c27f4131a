#include <utility>

#include "backend.hpp"

namespace halox::lbm {

namespace {

template <class Real>
class CpuBackend final : public Backend {
 public:
  std::string name() const override { return sizeof(Real) == 4 ? "cpu (float)" : "cpu (double)"; }
  BasicKind real() const override {
    return sizeof(Real) == 4 ? BasicKind::float32 : BasicKind::float64;
  }
  bool on_device() const override { return false; }

  void allocate(std::array<int, 3> n, bool multiphase, std::array<bool, 3> wrap) override {
    for (int a = 0; a < 3; ++a) m_f.wrap[a] = wrap[a];
    m_f.nx = n[0];
    m_f.pitch = n[0] + 2;
    m_f.ny = n[1];
    m_f.nz = n[2];
    m_multiphase = multiphase;
    const std::size_t plane = static_cast<std::size_t>(m_f.plane());
    // g right after f in one array (as on the GPU): one datatype spans both.
    m_a.assign((Q + (multiphase ? QG : 0)) * plane, Real(0));
    m_b.assign(m_a.size(), Real(0));
    m_phi.assign(plane, Real(0));
    point();
  }
  int row_pitch() const override { return m_f.pitch; }
  void upload(const std::vector<double>& cells) override {
    const long long plane = m_f.plane();
    std::size_t k = 0;
    for (int z = 1; z <= m_f.nz; ++z)
      for (int y = 1; y <= m_f.ny; ++y)
        for (int x = 1; x <= m_f.nx; ++x) {
          const long long c = m_f.at(x, y, z);
          for (int q = 0; q < Q; ++q) m_f.f[q * plane + c] = static_cast<Real>(cells[k++]);
          for (int q = 0; q < QG; ++q) {
            const Real v = static_cast<Real>(cells[k++]);
            if (m_multiphase) m_f.g[q * plane + c] = v;
          }
        }
  }
  std::vector<double> download_moments() override {
    std::vector<double> out;
    Fields<Real> F = m_f;
    if (!m_multiphase) F.g = nullptr;
    for (int z = 1; z <= m_f.nz; ++z)
      for (int y = 1; y <= m_f.ny; ++y)
        for (int x = 1; x <= m_f.nx; ++x) {
          Real rho, ux, uy, uz, phi;
          moments(F, m_f.at(x, y, z), rho, ux, uy, uz, phi);
          for (Real v : {rho, ux, uy, uz, phi}) out.push_back(v);
        }
    return out;
  }
  void* f() override { return m_f.f; }
  void* g() override { return m_f.g; }
  void* phi() override { return m_f.phi; }
  template <class Op>
  void each(Regions regions, Op op) {
    for (const Region& r : regions) {
      for (int z = r.lo[2]; z < r.hi[2]; ++z)
        for (int y = r.lo[1]; y < r.hi[1]; ++y)
          for (int x = r.lo[0]; x < r.hi[0]; ++x) op(x, y, z);
    }
  }
  void bgk_step(double omega, Regions r, bool) override {
    each(r, [&](int x, int y, int z) { bgk_cell<Real>(m_f, x, y, z, static_cast<Real>(omega)); });
  }
  void update_phi(Regions r, bool) override {
    each(r, [&](int x, int y, int z) { phi_cell<Real>(m_f, x, y, z); });
  }
  void stream_collide(const Params& p, Regions r, bool) override {
    each(r, [&](int x, int y, int z) { stream_collide_cell<Real>(m_f, x, y, z, p); });
  }
  void swap() override {
    std::swap(m_f.f, m_f.f_next);
    std::swap(m_f.g, m_f.g_next);
  }
  void pack_box(int field, std::array<int, 3> lo, std::array<int, 3> hi,
                const std::vector<int>& planes, void* out) override {
    Real* o = static_cast<Real*>(out);
    const Real* base = field == 0 ? m_f.f : field == 1 ? m_f.g : m_f.phi;
    for (int q : planes)
      for (int z = lo[2]; z < hi[2]; ++z)
        for (int y = lo[1]; y < hi[1]; ++y)
          for (int x = lo[0]; x < hi[0]; ++x) *o++ = base[q * m_f.plane() + m_f.at(x, y, z)];
  }
  void unpack_box(int field, std::array<int, 3> lo, std::array<int, 3> hi,
                  const std::vector<int>& planes, const void* in) override {
    const Real* i = static_cast<const Real*>(in);
    Real* base = field == 0 ? m_f.f : field == 1 ? m_f.g : m_f.phi;
    for (int q : planes)
      for (int z = lo[2]; z < hi[2]; ++z)
        for (int y = lo[1]; y < hi[1]; ++y)
          for (int x = lo[0]; x < hi[0]; ++x) base[q * m_f.plane() + m_f.at(x, y, z)] = *i++;
  }
  GpuStream stream_handle() override { return nullptr; }
  void synchronize() override {}
  std::int64_t bytes() const override {
    return static_cast<std::int64_t>((m_a.size() + m_b.size() + m_phi.size()) * sizeof(Real));
  }

 private:
  void point() {
    m_f.f = m_a.data();
    m_f.f_next = m_b.data();
    m_f.g = m_multiphase ? m_a.data() + Q * m_f.plane() : nullptr;
    m_f.g_next = m_multiphase ? m_b.data() + Q * m_f.plane() : nullptr;
    m_f.phi = m_phi.data();
  }
  Fields<Real> m_f;
  bool m_multiphase = false;
  std::vector<Real> m_a, m_b, m_phi;  // f (then g), f_next (then g_next), phi
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(bool single) {
  if (single) return std::make_unique<CpuBackend<float>>();
  return std::make_unique<CpuBackend<double>>();
}

}  // namespace halox::lbm
