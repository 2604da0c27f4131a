#include <algorithm>
#include <utility>

#include "backend.hpp"
#include "halox/error.hpp"
#include "lj.hpp"

namespace halox::md {

namespace {

// Real: double, or float for the same rounding as the GPU's float back end (on every
// machine, so the precision's tests run in CI).
template <class Real>
class CpuBackend final : public Backend {
 public:
  std::string name() const override { return sizeof(Real) == 8 ? "cpu (double)" : "cpu (float)"; }
  BasicKind real() const override {
    return sizeof(Real) == 8 ? BasicKind::float64 : BasicKind::float32;
  }

  void load(const std::vector<double>& x, const ParticlePlan& plan, double rlist) override {
    if (static_cast<std::int64_t>(m_v.size()) != 3 * plan.home_count) {
      throw Error("halox-md: internal: the velocities are not those of the plan's home atoms");
    }
    m_x.assign(x.begin(), x.end());
    m_home = plan.home_count;
    m_x_load.assign(m_x.begin(), m_x.begin() + 3 * m_home);
    m_x_prune = m_x_load;
    m_pruned = false;
    m_domain = plan.domain;
    m_f.assign(x.size(), Real(0));
    std::vector<std::uint8_t> axes(static_cast<std::size_t>(plan.total_count));
    home_axes_of(plan, x, axes.data());
    // Counting sort of the atoms by cell, then the rows in the shared visiting order.
    const CellGrid grid = make_cell_grid(plan, rlist);
    const std::int64_t total = plan.total_count;
    const int ncells = grid.cells[0] * grid.cells[1] * grid.cells[2];
    std::vector<std::int32_t> start(ncells + 1, 0), members(total), cell(total);
    for (std::int64_t i = 0; i < total; ++i) {
      cell[i] = grid.cell_of(&m_x[3 * i]);
      ++start[cell[i] + 1];
    }
    for (int c = 0; c < ncells; ++c) start[c + 1] += start[c];
    std::vector<std::int32_t> fill(start.begin(), start.end() - 1);
    for (std::int64_t i = 0; i < total; ++i)
      members[fill[cell[i]]++] = static_cast<std::int32_t>(i);
    m_offsets.assign(total + 1, 0);
    m_neighbors.clear();
    for (std::int64_t i = 0; i < total; ++i) {
      for_each_listed(i, m_x.data(), axes.data(), grid, start.data(), members.data(),
                      [&](std::int32_t j) { m_neighbors.push_back(j); });
      m_offsets[i + 1] = static_cast<std::int32_t>(m_neighbors.size());
    }
  }
  void prune(double rinner) override {
    for (std::int64_t i = 0; i < m_home; ++i)
      m_prune_most = std::max(m_prune_most, displacement2(&m_x[3 * i], &m_x_prune[3 * i]));
    std::copy(m_x.begin(), m_x.begin() + 3 * m_home, m_x_prune.begin());
    const std::int64_t atoms = static_cast<std::int64_t>(m_offsets.size()) - 1;
    m_inner_offsets.assign(atoms + 1, 0);
    m_inner_neighbors.clear();
    for (std::int64_t i = 0; i < atoms; ++i) {
      for (std::int32_t k = m_offsets[i]; k < m_offsets[i + 1]; ++k) {
        const std::int32_t j = m_neighbors[k];
        if (within(&m_x[3 * i], &m_x[3 * static_cast<std::int64_t>(j)], rinner * rinner))
          m_inner_neighbors.push_back(j);
      }
      m_inner_offsets[i + 1] = static_cast<std::int32_t>(m_inner_neighbors.size());
    }
    m_pruned = true;
  }
  double pruned_displacement2() override { return std::exchange(m_prune_most, 0.0); }
  void half_kick(double dt) override {
    for (std::int64_t i = 0; i < m_home; ++i) kick(i, Real(0.5 * dt), m_f.data(), m_v.data());
  }
  void kick_drift(double dt, bool ends_last_step) override {
    for (std::int64_t i = 0; i < m_home; ++i) {
      if (ends_last_step) kick(i, Real(0.5 * dt), m_f.data(), m_v.data());
      kick(i, Real(0.5 * dt), m_f.data(), m_v.data());
      drift(i, Real(dt), m_v.data(), m_x.data());
    }
  }
  void forces(double cutoff, double energy_shift, bool want_sums) override {
    // The CPU's sums cost next to nothing beside its forces; kept only when asked for, as
    // on the GPU, so that a caller reading sums of a step without them fails here too.
    m_sums_valid = want_sums;
    NeighborList list{static_cast<std::int64_t>(m_offsets.size()) - 1,
                      m_pruned ? m_inner_offsets.data() : m_offsets.data(),
                      m_pruned ? m_inner_neighbors.data() : m_neighbors.data()};
    Sums sums;
    for (std::int64_t i = 0; i < list.atoms; ++i) {
      Real e = 0, w = 0;
      force_on_atom<Real>(i, m_x.data(), list, Real(cutoff * cutoff), Real(energy_shift),
                          m_f.data(), e, w);
      sums.energy += e;
      sums.virial += w;
    }
    m_sums = sums;
  }
  Sums last_sums() override {
    if (!m_sums_valid)
      throw Error("halox-md: internal: energy asked of forces computed without it");
    return m_sums;
  }
  void* coordinates() override { return m_x.data(); }
  void* force_array() override { return m_f.data(); }
  double velocity_squared() override {
    double s = 0;
    for (std::int64_t k = 0; k < 3 * m_home; ++k) s += double(m_v[k]) * double(m_v[k]);
    return s;
  }
  double fetch(const Fetched& into) override {
    into.x->assign(m_x.begin(), m_x.begin() + 3 * m_home);
    into.leaving->clear();
    double most = 0;
    for (std::int64_t i = 0; i < m_home; ++i) {
      most = std::max(most, displacement2(&m_x[3 * i], &m_x_load[3 * i]));
      m_prune_most = std::max(m_prune_most, displacement2(&m_x[3 * i], &m_x_prune[3 * i]));
      if (outside(&m_x[3 * i], m_domain.lo.data(), m_domain.hi.data()))
        into.leaving->push_back(static_cast<std::int32_t>(i));
    }
    return most;
  }
  void velocities_of(std::span<const std::int32_t> which, std::vector<double>& v) override {
    for (const std::int32_t i : which) v.insert(v.end(), &m_v[3 * i], &m_v[3 * i + 3]);
  }
  void refill_velocities(const HomeRefill& refill, std::span<const double> arrived) override {
    m_v.resize(std::max(m_v.size(), 3 * refill.rows));
    refill_velocity_rows(m_v.data(), refill, arrived);
    m_v.resize(3 * refill.rows);
  }
  void fetch_forces(std::vector<double>& f) override {
    f.assign(m_f.begin(), m_f.begin() + 3 * m_home);
  }
  void synchronize() override {}

 private:
  std::vector<Real> m_x, m_v, m_f;
  std::vector<Real> m_x_load;  // home coordinates at the last load
  // Dynamic pruning: the pruned rows, whether forces() walks them, home coordinates at the
  // last prune and the largest squared displacement since (pruned_displacement2).
  std::vector<std::int32_t> m_inner_offsets, m_inner_neighbors;
  bool m_pruned = false;
  std::vector<Real> m_x_prune;
  double m_prune_most = 0;
  Domain m_domain;  // of the last load's plan
  std::int64_t m_home = 0;
  Sums m_sums;
  bool m_sums_valid = false;
  std::vector<std::int32_t> m_offsets, m_neighbors;
};

}  // namespace

HomeRefill refill_home(std::size_t rows, std::span<const std::int32_t> leaving,
                       std::size_t arrived) {
  HomeRefill refill;
  refill.rows = rows - leaving.size() + arrived;
  const std::size_t filled = std::min(leaving.size(), arrived);
  refill.arrival_rows.assign(leaving.begin(),
                             leaving.begin() + static_cast<std::ptrdiff_t>(filled));
  for (std::size_t a = filled; a < arrived; ++a)
    refill.arrival_rows.push_back(static_cast<std::int32_t>(rows + a - filled));
  // Holes left over: those below the new end take the last atoms that stay (the holes
  // at or past it need nothing). There are as many of each.
  std::size_t hole = filled, last = leaving.size();
  std::int64_t from = static_cast<std::int64_t>(rows) - 1;
  for (; hole < leaving.size() && static_cast<std::size_t>(leaving[hole]) < refill.rows; ++hole) {
    while (last > hole && leaving[last - 1] == from) {  // a hole itself: skip it
      --last;
      --from;
    }
    refill.moves.emplace_back(static_cast<std::int32_t>(from--), leaving[hole]);
  }
  return refill;
}

CellGrid make_cell_grid(const ParticlePlan& plan, double rlist) {
  CellGrid g{};
  for (int d = 0; d < 3; ++d) {
    g.lo[d] = plan.domain.lo[d];
    const double extent = plan.domain.hi[d] + rlist - g.lo[d];
    g.cells[d] = std::max(1, static_cast<int>(extent / (rlist / kCellReach)));
    g.size[d] = extent / g.cells[d];
  }
  g.rlist2 = rlist * rlist;
  return g;
}

void home_axes_of(const ParticlePlan& plan, const std::vector<double>& x, std::uint8_t* axes) {
  std::fill(axes, axes + plan.home_count, std::uint8_t{7});
  for (std::int64_t i = plan.home_count; i < plan.total_count; ++i)
    axes[i] = plan.home_axes(&x[3 * i]);
}
std::unique_ptr<Backend> make_cpu_backend(bool single_precision) {
  if (single_precision) return std::make_unique<CpuBackend<float>>();
  return std::make_unique<CpuBackend<double>>();
}

}  // namespace halox::md
