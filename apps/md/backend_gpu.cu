// The CUDA back end: the same pair and per-atom functions as the CPU (lj.hpp), a warp per
// atom in the list build and a part of one in the forces, everything on one stream; the
// halo exchange runs on that stream with device pointers.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <span>
#include <string>

#include "../../src/common/growing_buffer.hpp"
#include "../common/cuda_check.hpp"
#include "../common/step_graphs.hpp"
#include "backend.hpp"
#include "halox/device.hpp"
#include "halox/error.hpp"
#include "lj.hpp"

namespace halox::md {

namespace {

#define MD_CUDA(call) HALOX_APP_CUDA("halox-md: ", call)

// halox's buffer that only grows (its contents are dropped when it does): device memory, or
// page-locked host memory the GPU copies from and to directly, kept between searches. It
// grows by a quarter more than asked: a rank's atoms vary from search to search, and each
// cudaFree waits for the whole device (cudaFreeHost too, and cudaMallocHost is slow).
template <class T>
using DeviceArray = halox::detail::GrowingArray<T, halox::detail::Memory::device,
                                                halox::detail::Growth::with_headroom>;
template <class T>
using PinnedArray = halox::detail::GrowingArray<T, halox::detail::Memory::pinned,
                                                halox::detail::Growth::with_headroom>;

__device__ __forceinline__ double block_sum(double value) {
  __shared__ double partial[32];
  for (int o = 16; o > 0; o /= 2) value += __shfl_down_sync(0xffffffffu, value, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = value;
  __syncthreads();
  value = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0;
  if (threadIdx.x < 32) {
    for (int o = 16; o > 0; o /= 2) value += __shfl_down_sync(0xffffffffu, value, o);
  }
  return value;
}

// One rank's arrays as the kernels of a phase read them: a launch covers several ranks of
// this process (grid y = the rank), so that a step of many small ranks costs a few
// launches, not a few per rank.
// A neighbour list of rows of one width (every pair of the rank twice, as the CPU's
// NeighborList): atom i's neighbours are neighbors[i * width, i * width + counts[i]).
struct RowList {
  std::int64_t atoms = 0;
  std::int64_t width = 0;
  const std::int32_t* counts = nullptr;
  const std::int32_t* neighbors = nullptr;
};

template <class Real>
struct RankArrays {
  Real* x;
  Real* v;
  Real* f;
  RowList list;  // over every local atom: the rows the forces walk (the pruned ones, if any)
  std::int64_t home;
  double* sums;  // energy, virial (SUMS launches)
  // Dynamic pruning: the whole list, the pruned rows (its width), the home coordinates at
  // the last prune and the largest squared displacement since (a double's bits).
  RowList outer;
  std::int32_t* inner_counts;
  std::int32_t* inner;
  Real* x_prune;
  unsigned long long* prune_most;
};

// kForceLanes threads per atom, each summing every kForceLanes-th entry of its row, then a
// fixed tree over the lanes (the same sums every run). One thread per atom walked ~100
// entries alone, bound by the latency of the dependent index and coordinate loads.
// SUMS: also the energy and virial (steps that report them); the other steps skip the
// block reductions and their atomics.
constexpr int kForceLanes = 8;
template <class Real, bool SUMS>
__global__ void force_kernel(const RankArrays<Real>* ranks, Real cutoff2, Real shift) {
  const RankArrays<Real> r = ranks[blockIdx.y];
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / kForceLanes);
  const std::int64_t i = first + threadIdx.x / kForceLanes;
  const int lane = static_cast<int>(threadIdx.x % kForceLanes);
  PairSums<Real> s;
  if (i < r.list.atoms) {  // every lane of an atom or none
    const Real p[3] = {r.x[3 * i], r.x[3 * i + 1], r.x[3 * i + 2]};
    const std::int32_t* row = r.list.neighbors + i * r.list.width;
    const std::int32_t count = r.list.counts[i];
    for (std::int32_t k = lane; k < count; k += kForceLanes)
      add_pair(p, r.x, row[k], cutoff2, shift, s);
  }
  for (int o = kForceLanes / 2; o > 0; o /= 2) {  // the whole warp takes part
    s.fx += __shfl_xor_sync(0xffffffffu, s.fx, o);
    s.fy += __shfl_xor_sync(0xffffffffu, s.fy, o);
    s.fz += __shfl_xor_sync(0xffffffffu, s.fz, o);
    if constexpr (SUMS) {
      s.energy += __shfl_xor_sync(0xffffffffu, s.energy, o);
      s.virial += __shfl_xor_sync(0xffffffffu, s.virial, o);
    }
  }
  if (i < r.list.atoms && lane == 0) {
    r.f[3 * i] = s.fx;
    r.f[3 * i + 1] = s.fy;
    r.f[3 * i + 2] = s.fz;
  }
  if constexpr (!SUMS) return;
  if (first >= r.list.atoms) return;  // the whole block: beyond this rank's atoms
  const bool counted = i < r.list.atoms && lane == 0;
  const double se = block_sum(counted ? 0.5 * double(s.energy) : 0.0);
  __syncthreads();
  const double sw = block_sum(counted ? 0.5 * double(s.virial) : 0.0);
  if (threadIdx.x == 0) {
    atomicAdd(&r.sums[0], se);
    atomicAdd(&r.sums[1], sw);
  }
}

// Dynamic pruning, one warp per atom: the whole row's pairs within sqrt(rinner2), in their
// order, into the pruned row (a ballot, as the list build); a home atom's lane 0 first
// takes its displacement since the last prune into the running maximum.
template <class Real>
__global__ void prune_kernel(const RankArrays<Real>* ranks, double rinner2) {
  const RankArrays<Real> r = ranks[blockIdx.y];
  const std::int64_t i = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x & 31);
  if (i >= r.outer.atoms) return;  // the whole warp
  const Real* p = r.x + 3 * i;
  if (lane == 0 && i < r.home) {
    const double d = displacement2(p, r.x_prune + 3 * i);
    atomicMax(r.prune_most, static_cast<unsigned long long>(__double_as_longlong(d)));
    for (int a = 0; a < 3; ++a) r.x_prune[3 * i + a] = p[a];
  }
  const std::int32_t* row = r.outer.neighbors + i * r.outer.width;
  std::int32_t* kept = r.inner + i * r.outer.width;
  const std::int32_t count = r.outer.counts[i];
  std::int32_t at = 0;
  for (std::int32_t base = 0; base < count; base += 32) {
    const std::int32_t k = base + lane;
    const std::int32_t j = k < count ? row[k] : -1;
    const bool hit = j >= 0 && within(p, r.x + 3 * static_cast<std::int64_t>(j), rinner2);
    const unsigned mask = __ballot_sync(0xffffffffu, hit);
    if (hit) kept[at + __popc(mask & ((1u << lane) - 1u))] = j;
    at += __popc(mask);
  }
  if (lane == 0) r.inner_counts[i] = at;
}

template <class Real>
__global__ void kick_kernel(const RankArrays<Real>* ranks, Real half_dt) {
  const RankArrays<Real> r = ranks[blockIdx.y];
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < r.home) kick<Real>(i, half_dt, r.f, r.v);
}

template <class Real>
__global__ void kick_drift_kernel(const RankArrays<Real>* ranks, Real half_dt, Real dt,
                                  bool ends_last_step) {
  const RankArrays<Real> r = ranks[blockIdx.y];
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= r.home) return;
  if (ends_last_step) kick<Real>(i, half_dt, r.f, r.v);
  kick<Real>(i, half_dt, r.f, r.v);
  drift<Real>(i, dt, r.v, r.x);
}

// A rank's domain, as the kernels take it.
struct Bounds {
  double lo[3], hi[3];
};

// For a search: which home atoms left the domain (left[i]), and the largest squared
// displacement since the load (x0) as the bits of the double: non-negative doubles order
// as their bit patterns, so an unsigned atomicMax.
// most[0]: since the load (x0); most[1], a running maximum: since the last prune (xp).
template <class Real>
__global__ void moved_kernel(const Real* x, const Real* x0, const Real* xp, std::int64_t n,
                             Bounds domain, std::uint8_t* left, unsigned long long* most) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double d = 0, dp = 0;
  if (i < n) {
    d = displacement2(x + 3 * i, x0 + 3 * i);
    dp = displacement2(x + 3 * i, xp + 3 * i);
    left[i] = outside(x + 3 * i, domain.lo, domain.hi) ? 1 : 0;
  }
  for (int o = 16; o > 0; o /= 2) {
    d = fmax(d, __shfl_xor_sync(0xffffffffu, d, o));
    dp = fmax(dp, __shfl_xor_sync(0xffffffffu, dp, o));
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMax(most, static_cast<unsigned long long>(__double_as_longlong(d)));
    atomicMax(most + 1, static_cast<unsigned long long>(__double_as_longlong(dp)));
  }
}

template <class Real>
__global__ void square_kernel(std::int64_t n, const Real* v, double* sum) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double s = 0;
  if (i < n) s = double(v[i]) * double(v[i]);
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(sum, s);
}

// One rank's part of a neighbour search on the GPU: every rank of the process is searched
// by the same few launches (grid y = the rank), its atoms and cells numbered after those of
// the ranks before it in one sort.
template <class Real>
struct SearchJob {
  const Real* x;
  const std::uint8_t* axes;  // home_axes_of
  Real* x_load;              // home coordinates kept for the validity checks
  Real* x_prune;
  Real* f;
  std::int64_t atoms, home;
  std::int64_t first_atom;  // its atoms' place among all ranks' atoms
  std::int32_t first_cell;  // its cells' place among all ranks' cells
  CellGrid grid;
  std::int64_t width;  // of its rows
  std::int32_t* counts;
  std::int32_t* neighbors;
  int* longest;  // its longest row, counted in full
};

// Neighbour search on the GPU, in the same visiting order as the CPU (lj.hpp), so both
// back ends sum every force in the same order. Each atom's cell, numbered among all ranks'
// cells, and its index: the sort's keys and values. Also the load's copies of the home
// coordinates and zeroed forces.
template <class Real>
__global__ void cell_kernel(const SearchJob<Real>* jobs, std::int32_t* cell, std::int32_t* order) {
  const SearchJob<Real>& r = jobs[blockIdx.y];
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= r.atoms) return;
  const Real* p = r.x + 3 * i;
  cell[r.first_atom + i] = r.first_cell + r.grid.cell_of(p);
  order[r.first_atom + i] = static_cast<std::int32_t>(i);
  for (int a = 0; a < 3; ++a) {
    if (i < r.home) r.x_load[3 * i + a] = r.x_prune[3 * i + a] = p[a];
    r.f[3 * i + a] = Real(0);
  }
}

// Where each cell's atoms start among the atoms sorted by cell: the first sorted index whose
// cell is not below it (cell `cells` gets n), by binary search; no host wait.
__global__ void cell_start_kernel(const std::int32_t* sorted_cell, std::int64_t n, int cells,
                                  std::int32_t* start) {
  const int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (c > cells) return;
  std::int64_t lo = 0, hi = n;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi) / 2;
    if (sorted_cell[mid] < c)
      lo = mid + 1;
    else
      hi = mid;
  }
  start[c] = static_cast<std::int32_t>(lo);
}

// One warp per atom writes its row: 32 lanes test 32 members of a row of cells at once and a ballot
// keeps the hits in member order, so the row is the CPU's (for_each_listed). (A thread per
// atom walked its ~800 candidates one by one, bound by the latency of two dependent loads
// each.) Rows are `width` long: no count pass, scan or wait first. A longer row is counted
// in full but cut, and *longest tells the search to write them again, wider.
// start: where each cell of all ranks starts among the sorted members (a rank's atom indices).
template <class Real>
__global__ void list_kernel(const SearchJob<Real>* jobs, const std::int32_t* start,
                            const std::int32_t* members) {
  const SearchJob<Real>& r = jobs[blockIdx.y];
  const std::int64_t i = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x & 31);
  if (i >= r.atoms) return;  // the whole warp
  const Real* x = r.x;
  const std::uint8_t* axes = r.axes;
  const CellGrid grid = r.grid;
  const std::int32_t* cell_start = start + r.first_cell;
  const std::int64_t width = r.width;
  const Real p[3] = {x[3 * i], x[3 * i + 1], x[3 * i + 2]};
  const std::uint8_t p_axes = axes[i];
  std::int32_t* row = r.neighbors + i * width;
  std::int32_t at = 0;
  for_each_cell_row_around(p, grid, [&](int first, int last) {
    const std::int32_t end = cell_start[last + 1];
    for (std::int32_t base = cell_start[first]; base < end; base += 32) {
      const std::int32_t k = base + lane;
      std::int32_t j = -1;
      bool hit = false;
      if (k < end) {
        j = members[k];
        hit = j != i && grid.listed(p, x + 3 * static_cast<std::int64_t>(j), p_axes, axes[j]);
      }
      const unsigned mask = __ballot_sync(0xffffffffu, hit);
      const std::int32_t slot = at + __popc(mask & ((1u << lane) - 1u));
      if (hit && slot < width) row[slot] = j;
      at += __popc(mask);
    }
  });
  if (lane == 0) {
    r.counts[i] = at;
    atomicMax(r.longest, at);
  }
}

int blocks(std::int64_t n) {
  return static_cast<int>((std::max<std::int64_t>(n, 1) + 255) / 256);
}

template <class Real>
class GpuBackend final : public Backend {
 public:
  explicit GpuBackend(cudaStream_t shared) : m_stream(shared), m_own_stream(shared == nullptr) {
    if (m_own_stream) MD_CUDA(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
    m_scalar.resize(3);
    MD_CUDA(cudaMemsetAsync(m_scalar.get(), 0, 3 * sizeof(double), m_stream));
    MD_CUDA(cudaMallocHost(&m_host_scalar, 3 * sizeof(double)));
  }
  ~GpuBackend() override {
    cudaStreamSynchronize(m_stream);
    for (cudaEvent_t e : m_events) cudaEventDestroy(e);
    if (m_event_start) {
      cudaEventDestroy(m_event_start);
      cudaEventDestroy(m_event_stop);
    }
    if (m_own_stream) cudaStreamDestroy(m_stream);
    cudaFreeHost(m_host_scalar);
  }
  std::string name() const override { return sizeof(Real) == 8 ? "gpu (double)" : "gpu (float)"; }
  BasicKind real() const override {
    return sizeof(Real) == 8 ? BasicKind::float64 : BasicKind::float32;
  }

  void load(const std::vector<double>& x, const ParticlePlan& plan, double rlist) override {
    const LoadInput input{&x, &plan};
    load_ranks(self(), {&input, 1}, rlist, [] {});
  }
  // Every rank's search in one launch per kernel (its cells, one sort of all ranks' atoms by
  // cell, the cells' starts, the rows), then the one host wait for all ranks (they share the
  // stream): their longest rows, read back to see that none was cut (rows cut short are
  // written again, after the wait, wider). The uploads go from page-locked buffers that stay
  // until the next search (that wait orders them before it).
  void load_ranks(std::span<Backend* const> ranks, std::span<const LoadInput> inputs, double rlist,
                  const std::function<void()>& meanwhile) override {
    const std::size_t n = ranks.size();
    SearchJob<Real>* jobs = m_jobs_staging.at_least(n);
    std::int64_t atoms = 0, most_atoms = 0;
    std::int32_t cells = 0;
    m_longest.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      auto* r = static_cast<GpuBackend*>(ranks[k]);
      r->upload_load(*inputs[k].x, *inputs[k].plan);
      const CellGrid grid = make_cell_grid(*inputs[k].plan, rlist);
      jobs[k] = {r->m_x.get(),
                 r->m_axes.get(),
                 r->m_x_load.get(),
                 r->m_x_prune.get(),
                 r->m_f.get(),
                 r->m_atoms,
                 r->m_home,
                 atoms,
                 cells,
                 grid,
                 r->m_width,
                 r->m_counts.get(),
                 r->m_neighbors.get(),
                 m_longest.get() + k};
      atoms += r->m_atoms;
      cells += grid.cells[0] * grid.cells[1] * grid.cells[2];
      most_atoms = std::max(most_atoms, r->m_atoms);
    }
    m_jobs.resize(n);
    MD_CUDA(
        cudaMemcpyAsync(m_jobs.get(), jobs, n * sizeof *jobs, cudaMemcpyHostToDevice, m_stream));
    // Cells: atom indices sorted by cell (a radix sort over the cell index's bits only;
    // stable, so by index within a cell, the CPU's order), each cell's start, the rows.
    const std::size_t total = static_cast<std::size_t>(atoms);
    m_cell.resize(2 * total);
    m_members.resize(2 * total);
    m_start.resize(static_cast<std::size_t>(cells) + 1);
    const dim3 per_atom(static_cast<unsigned>(blocks(most_atoms)), static_cast<unsigned>(n));
    cell_kernel<Real><<<per_atom, 256, 0, m_stream>>>(m_jobs.get(), m_cell.get(), m_members.get());
    MD_CUDA(cudaGetLastError());
    int bits = 1;
    while ((1 << bits) <= cells) ++bits;
    std::size_t sort_bytes = 0;
    const int count = static_cast<int>(total);
    MD_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, m_cell.get(), m_cell.get() + total,
                                            m_members.get(), m_members.get() + total, count, 0,
                                            bits, m_stream));
    m_scratch.resize(sort_bytes);
    MD_CUDA(cub::DeviceRadixSort::SortPairs(m_scratch.get(), sort_bytes, m_cell.get(),
                                            m_cell.get() + total, m_members.get(),
                                            m_members.get() + total, count, 0, bits, m_stream));
    cell_start_kernel<<<blocks(cells + 1), 256, 0, m_stream>>>(m_cell.get() + total, atoms, cells,
                                                               m_start.get());
    MD_CUDA(cudaGetLastError());
    write_rows(n, most_atoms, m_members.get() + total);
    meanwhile();
    synchronize();
    // Rows cut short: those ranks' rows a quarter wider than their longest (for the searches
    // to come), and every rank's written again (rare: the first searches).
    bool cut = false;
    for (std::size_t k = 0; k < n; ++k) {
      auto* r = static_cast<GpuBackend*>(ranks[k]);
      const int longest = m_longest_host.get()[k];
      if (longest <= r->m_width) continue;
      r->m_width = (longest + longest / 4 + 31) / 32 * 32;
      r->m_neighbors.resize(static_cast<std::size_t>(r->m_atoms * r->m_width));
      ++r->m_loads;  // the table holds the width
      jobs[k].width = r->m_width;
      jobs[k].neighbors = r->m_neighbors.get();
      cut = true;
    }
    if (!cut) return;
    MD_CUDA(
        cudaMemcpyAsync(m_jobs.get(), jobs, n * sizeof *jobs, cudaMemcpyHostToDevice, m_stream));
    write_rows(n, most_atoms, m_members.get() + total);
  }
  // Every rank's rows at its width (`members`: the sorted ones), and the longest rows' lengths
  // copied to page-locked memory.
  void write_rows(std::size_t ranks, std::int64_t most_atoms, const std::int32_t* members) {
    MD_CUDA(cudaMemsetAsync(m_longest.get(), 0, ranks * sizeof(int), m_stream));
    const dim3 per_warp(static_cast<unsigned>(blocks(32 * most_atoms)),
                        static_cast<unsigned>(ranks));
    list_kernel<Real><<<per_warp, 256, 0, m_stream>>>(m_jobs.get(), m_start.get(), members);
    MD_CUDA(cudaGetLastError());
    MD_CUDA(cudaMemcpyAsync(m_longest_host.at_least(ranks), m_longest.get(), ranks * sizeof(int),
                            cudaMemcpyDeviceToHost, m_stream));
  }
  // A load's arrays: the coordinates and home-axes masks uploaded, the velocities when a
  // migration changed them, room for the forces and the rows.
  void upload_load(const std::vector<double>& x, const ParticlePlan& plan) {
    if (m_v_rows != plan.home_count) {
      throw Error("halox-md: internal: the velocities are not those of the plan's home atoms");
    }
    m_home = plan.home_count;
    m_atoms = plan.total_count;
    for (int d = 0; d < 3; ++d) {
      m_domain.lo[d] = plan.domain.lo[d];
      m_domain.hi[d] = plan.domain.hi[d];
    }
    ++m_loads;
    upload(m_x, m_x_staging, x);
    m_x_load.resize(static_cast<std::size_t>(3 * m_home));
    m_x_prune.resize(static_cast<std::size_t>(3 * m_home));
    m_pruned = false;
    if (m_v_changed) {  // a migration changed the home set (refill_velocities)
      const std::size_t n = static_cast<std::size_t>(3 * m_home);
      m_v.resize(n);
      MD_CUDA(cudaMemcpyAsync(m_v.get(), m_v_staging.get(), n * sizeof(Real),
                              cudaMemcpyHostToDevice, m_stream));
      m_v_changed = false;
    }
    const std::size_t atoms = static_cast<std::size_t>(m_atoms);
    home_axes_of(plan, x, m_axes_staging.at_least(atoms));
    m_axes.resize(atoms);
    MD_CUDA(cudaMemcpyAsync(m_axes.get(), m_axes_staging.get(), atoms, cudaMemcpyHostToDevice,
                            m_stream));
    m_f.resize(x.size());
    m_counts.resize(atoms);
    m_neighbors.resize(atoms * static_cast<std::size_t>(m_width));
  }
  void prune(double rinner) override { prune_ranks(self(), rinner); }
  double pruned_displacement2() override {
    MD_CUDA(cudaMemsetAsync(m_scalar.get() + 2, 0, sizeof(double), m_stream));
    return m_host_scalar[2];  // queue_fetch's copy
  }
  void prune_ranks(std::span<Backend* const> ranks, double rinner) override {
    for (Backend* b : ranks) {
      auto* r = static_cast<GpuBackend*>(b);
      if (r->m_pruned) continue;
      const std::size_t n = static_cast<std::size_t>(r->m_atoms);
      r->m_inner_counts.resize(n);
      r->m_inner.resize(n * static_cast<std::size_t>(r->m_width));
      r->m_pruned = true;
      ++r->m_loads;  // the table's rows for the forces are now the pruned ones
    }
    const Table& t = table_for(ranks);
    prune_kernel<Real>
        <<<grid(32 * t.most_atoms, t), 256, 0, m_stream>>>(t.device.get(), rinner * rinner);
    MD_CUDA(cudaGetLastError());
  }
  void half_kick(double dt) override { half_kick_ranks(self(), dt); }
  void kick_drift(double dt, bool ends_last_step) override {
    kick_drift_ranks(self(), dt, ends_last_step);
  }
  void forces(double cutoff, double energy_shift, bool want_sums) override {
    forces_ranks(self(), cutoff, energy_shift, want_sums);
  }
  void half_kick_ranks(std::span<Backend* const> ranks, double dt) override {
    const Table& t = table_for(ranks);
    kick_kernel<Real><<<grid(t.most_home, t), 256, 0, m_stream>>>(t.device.get(), Real(0.5 * dt));
    MD_CUDA(cudaGetLastError());
  }
  void kick_drift_ranks(std::span<Backend* const> ranks, double dt, bool ends_last_step) override {
    const Table& t = table_for(ranks);
    kick_drift_kernel<Real><<<grid(t.most_home, t), 256, 0, m_stream>>>(
        t.device.get(), Real(0.5 * dt), Real(dt), ends_last_step);
    MD_CUDA(cudaGetLastError());
  }
  // With sums: every rank's in one device array, zeroed before and copied to page-locked
  // memory after, where each rank's last_sums() reads its pair.
  void forces_ranks(std::span<Backend* const> ranks, double cutoff, double energy_shift,
                    bool want_sums) override {
    Table& t = table_for(ranks);
    const dim3 g = grid(kForceLanes * t.most_atoms, t);
    const Real cutoff2 = Real(cutoff * cutoff), shift = Real(energy_shift);
    double* sums_host = t.sums_host.at_least(2 * ranks.size());
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      auto* rank = static_cast<GpuBackend*>(ranks[k]);
      rank->m_sums_valid = want_sums;
      rank->m_sums_at = sums_host + 2 * k;
    }
    if (!want_sums) {
      force_kernel<Real, false><<<g, 256, 0, m_stream>>>(t.device.get(), cutoff2, shift);
      MD_CUDA(cudaGetLastError());
      return;
    }
    const std::size_t bytes = 2 * ranks.size() * sizeof(double);
    MD_CUDA(cudaMemsetAsync(t.sums.get(), 0, bytes, m_stream));
    force_kernel<Real, true><<<g, 256, 0, m_stream>>>(t.device.get(), cutoff2, shift);
    MD_CUDA(cudaGetLastError());
    // Read after the step's last kernel (synchronize or velocity_squared).
    MD_CUDA(cudaMemcpyAsync(sums_host, t.sums.get(), bytes, cudaMemcpyDeviceToHost, m_stream));
  }
  Sums last_sums() override {
    if (!m_sums_valid)
      throw Error("halox-md: internal: energy asked of forces computed without it");
    synchronize();
    return {m_sums_at[0], m_sums_at[1]};
  }
  double velocity_squared() override {
    MD_CUDA(cudaMemsetAsync(m_scalar.get(), 0, sizeof(double), m_stream));
    square_kernel<Real>
        <<<blocks(3 * m_home), 256, 0, m_stream>>>(3 * m_home, m_v.get(), m_scalar.get());
    MD_CUDA(cudaMemcpyAsync(m_host_scalar, m_scalar.get(), sizeof(double), cudaMemcpyDeviceToHost,
                            m_stream));
    synchronize();
    return *m_host_scalar;
  }
  double fetch(const Fetched& into) override { return fetch_ranks(self(), {&into, 1}); }
  // Every rank's coordinates and velocities copied to page-locked memory, then one wait;
  // the velocities stay there for velocities_of and refill_velocities.
  double fetch_ranks(std::span<Backend* const> ranks, std::span<const Fetched> into) override {
    for (Backend* rank : ranks) static_cast<GpuBackend*>(rank)->queue_fetch();
    synchronize();
    double most = 0;
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      const auto* r = static_cast<const GpuBackend*>(ranks[k]);
      const Real* hx = r->m_x_staging.get();
      into[k].x->assign(hx, hx + 3 * r->m_home);
      into[k].leaving->clear();
      const std::uint8_t* left = r->m_left_staging.get();
      for (std::int64_t i = 0; i < r->m_home; ++i)
        if (left[i]) into[k].leaving->push_back(static_cast<std::int32_t>(i));
      most = std::max(most, r->m_host_scalar[1]);  // queue_fetch's displacement
    }
    return most;
  }
  void velocities_of(std::span<const std::int32_t> which, std::vector<double>& v) override {
    const Real* hv = m_v_staging.get();
    for (const std::int32_t i : which) v.insert(v.end(), hv + 3 * i, hv + 3 * i + 3);
  }
  void refill_velocities(const HomeRefill& refill, std::span<const double> arrived) override {
    const std::int64_t rows = static_cast<std::int64_t>(refill.rows);
    Real* hv = m_v_staging.keeping(3 * std::max(rows, m_v_rows), 3 * m_v_rows);
    refill_velocity_rows(hv, refill, arrived);
    m_v_rows = rows;
    m_v_changed = true;
  }
  void fetch_forces(std::vector<double>& f) override {
    const std::size_t n = static_cast<std::size_t>(3 * m_home);
    Real* hf = m_f_staging.at_least(n);
    MD_CUDA(cudaMemcpyAsync(hf, m_f.get(), n * sizeof(Real), cudaMemcpyDeviceToHost, m_stream));
    synchronize();
    f.assign(hf, hf + n);
  }
  void* coordinates() override { return m_x.get(); }
  void* force_array() override { return m_f.get(); }
  GpuStream stream() override { return m_stream; }
  void synchronize() override { MD_CUDA(cudaStreamSynchronize(m_stream)); }
  void begin_capture() override { m_graphs.begin(m_stream); }
  void end_capture(int k) override { m_graphs.end(k); }
  void abandon_capture() override { m_graphs.abandon(); }
  void replay(int k) override { m_graphs.replay(k, m_stream); }
  std::pair<long, long> graph_counts() const override {
    return {m_graphs.updated(), m_graphs.instantiated()};
  }
  double timed(const std::function<void()>& work) override {
    if (!m_event_start) {
      MD_CUDA(cudaEventCreate(&m_event_start));
      MD_CUDA(cudaEventCreate(&m_event_stop));
    }
    MD_CUDA(cudaEventRecord(m_event_start, m_stream));
    work();
    MD_CUDA(cudaEventRecord(m_event_stop, m_stream));
    MD_CUDA(cudaEventSynchronize(m_event_stop));
    float ms = 0;
    MD_CUDA(cudaEventElapsedTime(&ms, m_event_start, m_event_stop));
    return 1e-3 * ms;
  }
  // One event per phase boundary: a phase that follows the last one starts at its end event
  // (each event recorded costs the host a call, and a step of small kernels is bound by the
  // host's calls).
  void time_async(const std::function<void()>& work, double* slot, double* also,
                  bool follows) override {
    const std::uint64_t start = follows && m_recorded > 0 ? m_recorded - 1 : record();
    work();
    m_pending.push_back({start, record(), slot, also});
  }
  // The GPU passes the phases in order: when it has passed the last one's end, every phase
  // is read without a query each.
  void collect_times(bool wait) override {
    if (m_pending.empty()) return;
    cudaEvent_t last = event(m_pending.back().stop);
    bool all = wait;
    if (wait) {
      MD_CUDA(cudaEventSynchronize(last));
    } else {
      const cudaError_t passed = cudaEventQuery(last);
      if (passed != cudaErrorNotReady) MD_CUDA(passed);
      all = passed == cudaSuccess;
    }
    while (!m_pending.empty()) {
      const Pending p = m_pending.front();
      if (!all) {
        const cudaError_t passed = cudaEventQuery(event(p.stop));
        if (passed == cudaErrorNotReady) break;
        MD_CUDA(passed);
      }
      float ms = 0;
      MD_CUDA(cudaEventElapsedTime(&ms, event(p.start), event(p.stop)));
      *p.slot += 1e-3 * ms;
      if (p.also != nullptr) *p.also += 1e-3 * ms;
      m_pending.pop_front();
    }
  }

 private:
  // The device table of one set of ranks (this one first), rebuilt when one of them has
  // loaded new arrays since; uploaded from page-locked memory, which a rebuild overwrites
  // only after a search's host wait has seen the last upload done.
  struct Table {
    std::vector<std::uint64_t> loads;  // each rank's load count when it was built
    DeviceArray<RankArrays<Real>> device;
    PinnedArray<RankArrays<Real>> staging;
    DeviceArray<double> sums;
    PinnedArray<double> sums_host;
    std::int64_t most_atoms = 0, most_home = 0;
  };
  std::span<Backend* const> self() {
    m_self = this;
    return {&m_self, 1};
  }
  Table& table_for(std::span<Backend* const> ranks) {
    m_key.assign(ranks.begin(), ranks.end());
    Table& t = m_tables[m_key];
    bool current = t.loads.size() == ranks.size();
    for (std::size_t k = 0; current && k < ranks.size(); ++k)
      current = t.loads[k] == static_cast<GpuBackend*>(ranks[k])->m_loads;
    if (current) return t;
    const std::size_t n = ranks.size();
    t.loads.clear();
    t.sums.resize(2 * n);
    t.device.resize(n);
    RankArrays<Real>* host = t.staging.at_least(n);
    t.most_atoms = t.most_home = 0;
    for (std::size_t k = 0; k < n; ++k) {
      auto* r = static_cast<GpuBackend*>(ranks[k]);
      t.loads.push_back(r->m_loads);
      const RowList outer{r->m_atoms, r->m_width, r->m_counts.get(), r->m_neighbors.get()};
      const RowList inner{r->m_atoms, r->m_width, r->m_inner_counts.get(), r->m_inner.get()};
      host[k] = {r->m_x.get(),
                 r->m_v.get(),
                 r->m_f.get(),
                 r->m_pruned ? inner : outer,
                 r->m_home,
                 t.sums.get() + 2 * k,
                 outer,
                 r->m_inner_counts.get(),
                 r->m_inner.get(),
                 r->m_x_prune.get(),
                 reinterpret_cast<unsigned long long*>(r->m_scalar.get() + 2)};
      t.most_atoms = std::max(t.most_atoms, r->m_atoms);
      t.most_home = std::max(t.most_home, r->m_home);
    }
    MD_CUDA(cudaMemcpyAsync(t.device.get(), host, n * sizeof(RankArrays<Real>),
                            cudaMemcpyHostToDevice, m_stream));
    return t;
  }
  static dim3 grid(std::int64_t items, const Table& t) {
    return dim3(static_cast<unsigned>(blocks(items)), static_cast<unsigned>(t.loads.size()));
  }
  // A timed phase whose events (numbers of recordings, see event()) the GPU may not have
  // passed yet.
  struct Pending {
    std::uint64_t start, stop;
    double* slot;
    double* also;
  };
  // The events of the timed phases: a ring, recording n in slot n % kEventRing; a slot is
  // recorded again only once the phases that read its last recording are collected.
  static constexpr std::uint64_t kEventRing = 256;
  cudaEvent_t event(std::uint64_t n) const { return m_events[n % kEventRing]; }
  std::uint64_t record() {
    if (m_events.empty()) {
      m_events.resize(kEventRing);
      for (cudaEvent_t& e : m_events) MD_CUDA(cudaEventCreate(&e));
    }
    while (!m_pending.empty() && m_pending.front().start + kEventRing <= m_recorded)
      collect_times(true);
    MD_CUDA(cudaEventRecord(event(m_recorded), m_stream));
    return m_recorded++;
  }
  void queue_fetch() {
    auto* most = reinterpret_cast<unsigned long long*>(m_scalar.get() + 1);
    MD_CUDA(cudaMemsetAsync(most, 0, sizeof *most, m_stream));
    const std::size_t home = static_cast<std::size_t>(m_home);
    m_left.resize(home);
    moved_kernel<Real><<<blocks(m_home), 256, 0, m_stream>>>(
        m_x.get(), m_x_load.get(), m_x_prune.get(), m_home, m_domain, m_left.get(), most);
    MD_CUDA(cudaGetLastError());
    MD_CUDA(cudaMemcpyAsync(m_left_staging.at_least(home), m_left.get(), home,
                            cudaMemcpyDeviceToHost, m_stream));
    MD_CUDA(cudaMemcpyAsync(m_host_scalar + 1, most, 2 * sizeof *most, cudaMemcpyDeviceToHost,
                            m_stream));
    const std::size_t n = static_cast<std::size_t>(3 * m_home);
    Real* hx = m_x_staging.at_least(n);
    Real* hv = m_v_staging.at_least(n);
    MD_CUDA(cudaMemcpyAsync(hx, m_x.get(), n * sizeof(Real), cudaMemcpyDeviceToHost, m_stream));
    MD_CUDA(cudaMemcpyAsync(hv, m_v.get(), n * sizeof(Real), cudaMemcpyDeviceToHost, m_stream));
  }
  void upload(DeviceArray<Real>& to, PinnedArray<Real>& staging, const std::vector<double>& from) {
    Real* host = staging.at_least(from.size());
    std::copy(from.begin(), from.end(), host);
    to.resize(from.size());
    MD_CUDA(cudaMemcpyAsync(to.get(), host, from.size() * sizeof(Real), cudaMemcpyHostToDevice,
                            m_stream));
  }

  cudaStream_t m_stream = nullptr;
  bool m_own_stream = true;  // false: a stream shared with other ranks, owned by its creator
  cudaEvent_t m_event_start = nullptr, m_event_stop = nullptr;
  apps::StepGraphs m_graphs{"halox-md: "};  // --graph: the steps between searches
  std::vector<cudaEvent_t> m_events;        // the ring of the timed phases
  std::uint64_t m_recorded = 0;             // recordings so far
  std::deque<Pending> m_pending;
  DeviceArray<Real> m_x, m_v, m_f;
  DeviceArray<Real> m_x_load;  // home coordinates at the last load (the list's validity)
  // Dynamic pruning: home coordinates at the last prune, the pruned rows (the list's width),
  // and whether the forces walk them.
  DeviceArray<Real> m_x_prune;
  DeviceArray<std::int32_t> m_inner_counts, m_inner;
  bool m_pruned = false;
  Bounds m_domain{};                 // of the last load's plan
  DeviceArray<std::uint8_t> m_left;  // per home atom at a fetch: left the domain
  PinnedArray<std::uint8_t> m_left_staging;
  PinnedArray<Real> m_x_staging, m_v_staging, m_f_staging;
  PinnedArray<std::uint8_t> m_axes_staging;
  DeviceArray<std::int32_t> m_counts, m_neighbors;
  // The search of the ranks this one leads (load_ranks): their jobs, cells and members (the
  // unsorted then the sorted halves of the radix sort), the cells' starts, longest rows.
  DeviceArray<SearchJob<Real>> m_jobs;
  PinnedArray<SearchJob<Real>> m_jobs_staging;
  DeviceArray<std::int32_t> m_cell, m_members, m_start;
  DeviceArray<int> m_longest;
  PinnedArray<int> m_longest_host;
  std::int64_t m_width = 64;  // of the list's rows; grows to fit the longest (load_ranks)
  DeviceArray<std::uint8_t> m_axes;
  DeviceArray<char> m_scratch;  // cub's temporary storage
  // velocity_squared's sum, then the largest displacement's bits since the load and since
  // the last prune (queue_fetch, prune_kernel)
  DeviceArray<double> m_scalar;
  double* m_host_scalar = nullptr;  // page-locked: m_scalar read back
  bool m_sums_valid = false;
  const double* m_sums_at = nullptr;  // where the last forces() put this rank's sums
  std::uint64_t m_loads = 0;          // load() calls: the arrays' generation
  std::map<std::vector<Backend*>, Table> m_tables;
  std::vector<Backend*> m_key;  // table_for's scratch
  Backend* m_self = nullptr;
  std::int64_t m_home = 0, m_atoms = 0;
  // The home set's velocities on the host (m_v_staging): rows, and whether they differ
  // from m_v (a migration changed the set; the next load uploads them).
  std::int64_t m_v_rows = 0;
  bool m_v_changed = false;
};

}  // namespace

bool gpu_present() {
  return visible_gpus() > 0;
}

std::unique_ptr<Backend> make_gpu_backend(bool single_precision, GpuStream shared) {
  if (!gpu_present()) throw Error("halox-md: --device gpu, but no CUDA device is visible");
  if (single_precision) return std::make_unique<GpuBackend<float>>(shared);
  return std::make_unique<GpuBackend<double>>(shared);
}

}  // namespace halox::md
