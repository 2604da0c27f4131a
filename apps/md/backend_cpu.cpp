#include <algorithm>

#include "backend.hpp"
#include "lj.hpp"

namespace halox::md {

namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu (double)"; }
  BasicKind real() const override { return BasicKind::float64; }

  void load(const std::vector<double>& x, const std::vector<double>& v, std::int64_t home,
            const std::vector<std::int32_t>& offsets,
            const std::vector<std::int32_t>& neighbors) override {
    m_x = x;
    m_v = v;
    m_home = home;
    m_f.assign(x.size(), 0.0);
    m_offsets = offsets;
    m_neighbors = neighbors;
  }
  void half_kick(double dt) override {
    for (std::int64_t i = 0; i < m_home; ++i) kick(i, 0.5 * dt, m_f.data(), m_v.data());
  }
  void drift(double dt) override {
    for (std::int64_t i = 0; i < m_home; ++i) md::drift(i, dt, m_v.data(), m_x.data());
  }
  void halo_forward(ParticleExchange& exchange) override { exchange.forward(m_x.data()); }
  void forces(double cutoff) override {
    NeighborList list{static_cast<std::int64_t>(m_offsets.size()) - 1, m_offsets.data(),
                      m_neighbors.data()};
    Sums sums;
    for (std::int64_t i = 0; i < list.atoms; ++i) {
      double e = 0, w = 0;
      force_on_atom<double>(i, m_x.data(), list, cutoff * cutoff, lj_energy_shift(cutoff),
                            m_f.data(), e, w);
      sums.energy += e;
      sums.virial += w;
    }
    m_sums = sums;
  }
  Sums last_sums() override { return m_sums; }
  void halo_reverse(ParticleExchange& exchange) override { exchange.reverse(m_f.data()); }
  double velocity_squared() override {
    double s = 0;
    for (std::int64_t k = 0; k < 3 * m_home; ++k) s += m_v[k] * m_v[k];
    return s;
  }
  void fetch(std::vector<double>& x, std::vector<double>& v) override {
    x.assign(m_x.begin(), m_x.begin() + 3 * m_home);
    v = m_v;
  }
  void fetch_forces(std::vector<double>& f) override {
    f.assign(m_f.begin(), m_f.begin() + 3 * m_home);
  }
  void synchronize() override {}

 private:
  std::vector<double> m_x, m_v, m_f;
  std::int64_t m_home = 0;
  Sums m_sums;
  std::vector<std::int32_t> m_offsets, m_neighbors;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace halox::md
