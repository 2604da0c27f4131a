// The CUDA back end: the same per-atom functions as the CPU (lj.hpp), one thread per atom,
// everything on one stream; the halo exchange runs on that stream with device pointers.
#include <cuda_runtime.h>
#include <thrust/binary_search.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>
#include <thrust/sort.h>

#include <string>

#include "../common/cuda_check.hpp"
#include "backend.hpp"
#include "halox/device.hpp"
#include "halox/error.hpp"
#include "lj.hpp"

namespace halox::md {

namespace {

#define MD_CUDA(call) HALOX_APP_CUDA("halox-md: ", call)

template <class T>
class DeviceArray {
 public:
  ~DeviceArray() { cudaFree(m_ptr); }
  T* get() const { return m_ptr; }
  void resize(std::size_t n) {
    if (n > m_capacity) {
      MD_CUDA(cudaFree(m_ptr));
      m_ptr = nullptr;
      m_capacity = 0;
      MD_CUDA(cudaMalloc(&m_ptr, std::max<std::size_t>(n, 1) * sizeof(T)));
      m_capacity = n;
    }
  }

 private:
  T* m_ptr = nullptr;
  std::size_t m_capacity = 0;
};

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

template <class Real>
__global__ void force_kernel(const Real* x, NeighborList list, Real cutoff2, Real shift, Real* f,
                             double* sums) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  Real e = 0, w = 0;
  if (i < list.atoms) force_on_atom<Real>(i, x, list, cutoff2, shift, f, e, w);
  const double se = block_sum(e);
  __syncthreads();
  const double sw = block_sum(w);
  if (threadIdx.x == 0) {
    atomicAdd(&sums[0], se);
    atomicAdd(&sums[1], sw);
  }
}

template <class Real>
__global__ void kick_kernel(std::int64_t n, Real half_dt, const Real* f, Real* v) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) kick<Real>(i, half_dt, f, v);
}

template <class Real>
__global__ void drift_kernel(std::int64_t n, Real dt, const Real* v, Real* x) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) drift<Real>(i, dt, v, x);
}

template <class Real>
__global__ void square_kernel(std::int64_t n, const Real* v, double* sum) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double s = 0;
  if (i < n) s = double(v[i]) * double(v[i]);
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(sum, s);
}

// Neighbour search on the GPU, in the same visiting order as the CPU (lj.hpp), so both
// back ends sum every force in the same order.
template <class Real>
__global__ void cell_kernel(const Real* x, std::int64_t n, CellGrid grid, std::int32_t* cell,
                            std::int32_t* order) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    cell[i] = grid.cell_of(x + 3 * i);
    order[i] = static_cast<std::int32_t>(i);
  }
}

template <class Real>
__global__ void count_kernel(const Real* x, const std::uint8_t* axes, std::int64_t n, CellGrid grid,
                             const std::int32_t* start, const std::int32_t* members,
                             std::int32_t* counts) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  std::int32_t c = 0;
  for_each_listed(i, x, axes, grid, start, members, [&](std::int32_t) { ++c; });
  counts[i] = c;
}

template <class Real>
__global__ void fill_kernel(const Real* x, const std::uint8_t* axes, std::int64_t n, CellGrid grid,
                            const std::int32_t* start, const std::int32_t* members,
                            const std::int32_t* offsets, std::int32_t* neighbors) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  std::int32_t at = offsets[i];
  for_each_listed(i, x, axes, grid, start, members, [&](std::int32_t j) { neighbors[at++] = j; });
}

int blocks(std::int64_t n) {
  return static_cast<int>((std::max<std::int64_t>(n, 1) + 255) / 256);
}

template <class Real>
class GpuBackend final : public Backend {
 public:
  explicit GpuBackend(cudaStream_t shared) : m_stream(shared), m_own_stream(shared == nullptr) {
    if (m_own_stream) MD_CUDA(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
    m_sums.resize(3);
    MD_CUDA(cudaMallocHost(&m_host_sums, 3 * sizeof(double)));
  }
  ~GpuBackend() override {
    if (m_event_start) {
      cudaEventDestroy(m_event_start);
      cudaEventDestroy(m_event_stop);
    }
    if (m_own_stream) cudaStreamDestroy(m_stream);
    cudaFreeHost(m_host_sums);
  }
  std::string name() const override { return sizeof(Real) == 8 ? "gpu (double)" : "gpu (float)"; }
  BasicKind real() const override {
    return sizeof(Real) == 8 ? BasicKind::float64 : BasicKind::float32;
  }

  void load(const std::vector<double>& x, const std::vector<double>& v, const ParticlePlan& plan,
            double rlist) override {
    m_home = plan.home_count;
    m_atoms = plan.total_count;
    upload(m_x, x);
    upload(m_v, v);
    const std::vector<std::uint8_t> axes = home_axes_of(plan, x);
    m_axes.resize(axes.size());
    MD_CUDA(
        cudaMemcpyAsync(m_axes.get(), axes.data(), axes.size(), cudaMemcpyHostToDevice, m_stream));
    m_f.resize(x.size());
    MD_CUDA(cudaMemsetAsync(m_f.get(), 0, x.size() * sizeof(Real), m_stream));
    // Cells: sort atom indices by cell (stable: by index within a cell), find each cell's
    // start, count each row, scan, fill.
    const CellGrid grid = make_cell_grid(plan, rlist);
    const int ncells = grid.cells[0] * grid.cells[1] * grid.cells[2];
    const std::size_t n = static_cast<std::size_t>(m_atoms);
    m_cell.resize(n);
    m_members.resize(n);
    m_start.resize(ncells + 1);
    m_offsets.resize(n + 1);
    const auto policy = thrust::cuda::par.on(m_stream);
    cell_kernel<Real><<<blocks(m_atoms), 256, 0, m_stream>>>(m_x.get(), m_atoms, grid, m_cell.get(),
                                                             m_members.get());
    MD_CUDA(cudaGetLastError());
    thrust::stable_sort_by_key(policy, m_cell.get(), m_cell.get() + n, m_members.get());
    thrust::lower_bound(policy, m_cell.get(), m_cell.get() + n, thrust::counting_iterator<int>(0),
                        thrust::counting_iterator<int>(ncells + 1), m_start.get());
    MD_CUDA(cudaMemsetAsync(m_offsets.get() + n, 0, sizeof(std::int32_t), m_stream));
    count_kernel<Real><<<blocks(m_atoms), 256, 0, m_stream>>>(
        m_x.get(), m_axes.get(), m_atoms, grid, m_start.get(), m_members.get(), m_offsets.get());
    MD_CUDA(cudaGetLastError());
    thrust::exclusive_scan(policy, m_offsets.get(), m_offsets.get() + n + 1, m_offsets.get());
    std::int32_t entries = 0;
    MD_CUDA(cudaMemcpyAsync(&entries, m_offsets.get() + n, sizeof entries, cudaMemcpyDeviceToHost,
                            m_stream));
    synchronize();
    m_neighbors.resize(static_cast<std::size_t>(entries));
    fill_kernel<Real><<<blocks(m_atoms), 256, 0, m_stream>>>(m_x.get(), m_axes.get(), m_atoms, grid,
                                                             m_start.get(), m_members.get(),
                                                             m_offsets.get(), m_neighbors.get());
    MD_CUDA(cudaGetLastError());
  }
  void half_kick(double dt) override {
    kick_kernel<Real>
        <<<blocks(m_home), 256, 0, m_stream>>>(m_home, Real(0.5 * dt), m_f.get(), m_v.get());
    MD_CUDA(cudaGetLastError());
  }
  void drift(double dt) override {
    drift_kernel<Real>
        <<<blocks(m_home), 256, 0, m_stream>>>(m_home, Real(dt), m_v.get(), m_x.get());
    MD_CUDA(cudaGetLastError());
  }
  void forces(double cutoff, double energy_shift) override {
    MD_CUDA(cudaMemsetAsync(m_sums.get(), 0, 2 * sizeof(double), m_stream));
    NeighborList list{m_atoms, m_offsets.get(), m_neighbors.get()};
    force_kernel<Real><<<blocks(m_atoms), 256, 0, m_stream>>>(
        m_x.get(), list, Real(cutoff * cutoff), Real(energy_shift), m_f.get(), m_sums.get());
    MD_CUDA(cudaGetLastError());
    // The sums are read after the step's last kernel (synchronize or velocity_squared).
    MD_CUDA(cudaMemcpyAsync(m_host_sums, m_sums.get(), 2 * sizeof(double), cudaMemcpyDeviceToHost,
                            m_stream));
  }
  Sums last_sums() override {
    synchronize();
    return {m_host_sums[0], m_host_sums[1]};
  }
  double velocity_squared() override {
    MD_CUDA(cudaMemsetAsync(m_sums.get() + 2, 0, sizeof(double), m_stream));
    square_kernel<Real>
        <<<blocks(3 * m_home), 256, 0, m_stream>>>(3 * m_home, m_v.get(), m_sums.get() + 2);
    MD_CUDA(cudaMemcpyAsync(m_host_sums + 2, m_sums.get() + 2, sizeof(double),
                            cudaMemcpyDeviceToHost, m_stream));
    synchronize();
    return m_host_sums[2];
  }
  void fetch(std::vector<double>& x, std::vector<double>& v) override {
    download(m_x, 3 * m_home, x);
    download(m_v, 3 * m_home, v);
  }
  void fetch_forces(std::vector<double>& f) override { download(m_f, 3 * m_home, f); }
  void* coordinates() override { return m_x.get(); }
  void* force_array() override { return m_f.get(); }
  GpuStream stream() override { return m_stream; }
  void synchronize() override { MD_CUDA(cudaStreamSynchronize(m_stream)); }
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

 private:
  void upload(DeviceArray<Real>& to, const std::vector<double>& from) {
    std::vector<Real> converted(from.begin(), from.end());
    to.resize(converted.size());
    MD_CUDA(cudaMemcpyAsync(to.get(), converted.data(), converted.size() * sizeof(Real),
                            cudaMemcpyHostToDevice, m_stream));
    MD_CUDA(cudaStreamSynchronize(m_stream));
  }
  void download(const DeviceArray<Real>& from, std::int64_t n, std::vector<double>& to) {
    std::vector<Real> host(static_cast<std::size_t>(n));
    MD_CUDA(cudaMemcpyAsync(host.data(), from.get(), host.size() * sizeof(Real),
                            cudaMemcpyDeviceToHost, m_stream));
    synchronize();
    to.assign(host.begin(), host.end());
  }

  cudaStream_t m_stream = nullptr;
  bool m_own_stream = true;  // false: a stream shared with other ranks, owned by its creator
  cudaEvent_t m_event_start = nullptr, m_event_stop = nullptr;
  DeviceArray<Real> m_x, m_v, m_f;
  DeviceArray<std::int32_t> m_offsets, m_neighbors, m_cell, m_members, m_start;
  DeviceArray<std::uint8_t> m_axes;
  DeviceArray<double> m_sums;
  double* m_host_sums = nullptr;
  std::int64_t m_home = 0, m_atoms = 0;
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
