// The CUDA back end: one thread per interior cell, x fastest (coalesced along rows), the
// per-cell functions of lattice.hpp; everything on one stream.
#include <cuda_runtime.h>

#include <string>
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "../common/cuda_check.hpp"
#include "../common/step_graphs.hpp"
#include "backend.hpp"
#include "halox/device.hpp"
#include "halox/error.hpp"
#include "halox/trace.hpp"

namespace halox::lbm {

namespace {

#define LBM_CUDA(call) HALOX_APP_CUDA("halox-lbm: ", call)

// One thread per cell of a region [lo, lo + n): a 2D block of x-rows (x fastest, coalesced),
// grid over (x blocks, y rows, z planes), so no thread divides a 64-bit cell number (such
// divisions cost more than the cell's arithmetic in a bandwidth-bound kernel).
struct Box3 {
  int lo[3], n[3];
};
constexpr unsigned kCellThreads = 256;
// Threads per x-row of a block: whole rows of up to 256 cells, several short rows per block;
// rows of at most 16 cells (the overlap shell's x slabs, a sector wide) share warps, so that
// no lane idles.
inline unsigned row_threads(int width) {
  const unsigned w = static_cast<unsigned>(width), unit = w <= 16 ? 8u : 32u;
  return std::min(kCellThreads, (w + unit - 1) / unit * unit);
}
// At least 3 blocks (24 warps) per SM for float: the fused multiphase update then takes 80
// registers and spills nothing; held to 64 for 4 blocks it spills 16 bytes and its pass ran
// 3% slower on the H200 (82.4% vs 85.1% of the copy bandwidth, 5 and 6 blocks far worse:
// docs/PERFORMANCE.md). The BGK and phi updates need fewer registers either way. Double
// keeps 2 blocks (64 registers would spill hundreds).
template <class Real, class Op>
__global__ void __launch_bounds__(kCellThreads, sizeof(Real) == 4 ? 3 : 2)
    cell_kernel(Fields<Real> F, Box3 b, Op op) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= b.n[0] || j >= b.n[1]) return;
  op(F, i + b.lo[0], j + b.lo[1], static_cast<int>(blockIdx.z) + b.lo[2]);
}

// Several small regions in one launch (the overlap shell's slabs: one launch each left the
// GPU idle between them): each box tiled as cell_kernel tiles one, its tiles numbered one
// after another along x; a block finds its box and tile with a few divisions. (One region
// keeps cell_kernel: with this indexing the one-rank multiphase update measured 2% slower
// on the H200.)
constexpr int kMaxBoxes = 6;  // the overlap shell: two slabs per axis
struct Boxes {
  int count = 0;
  Box3 box[kMaxBoxes];
  unsigned row[kMaxBoxes];        // row_threads of the box
  unsigned tiles[kMaxBoxes][2];   // blocks along x and along y
  unsigned first[kMaxBoxes + 1];  // the box's first block; first[count]: all of them
};
template <class Real, class Op>
__global__ void __launch_bounds__(kCellThreads, sizeof(Real) == 4 ? 3 : 2)
    boxes_kernel(Fields<Real> F, Boxes b, Op op) {
  int k = 0;
  while (blockIdx.x >= b.first[k + 1]) ++k;
  const unsigned tile = blockIdx.x - b.first[k], along_x = tile % b.tiles[k][0],
                 rest = tile / b.tiles[k][0], along_y = rest % b.tiles[k][1],
                 plane = rest / b.tiles[k][1], row = b.row[k];
  const Box3& box = b.box[k];
  const int i = static_cast<int>(along_x * row + threadIdx.x % row);
  const int j = static_cast<int>(along_y * (kCellThreads / row) + threadIdx.x / row);
  if (i >= box.n[0] || j >= box.n[1]) return;
  op(F, i + box.lo[0], j + box.lo[1], static_cast<int>(plane) + box.lo[2]);
}

template <class Real>
struct Bgk {
  Real omega;
  __device__ void operator()(const Fields<Real>& F, int x, int y, int z) const {
    bgk_cell<Real>(F, x, y, z, omega);
  }
};
template <class Real>
struct Phi {
  __device__ void operator()(const Fields<Real>& F, int x, int y, int z) const {
    phi_cell<Real>(F, x, y, z);
  }
};
template <class Real>
struct StreamCollide {
  Params p;
  __device__ void operator()(const Fields<Real>& F, int x, int y, int z) const {
    stream_collide_cell<Real>(F, x, y, z, p);
  }
};
template <class Real>
struct Moments {
  double* out;
  __device__ void operator()(const Fields<Real>& F, int x, int y, int z) const {
    Real rho, ux, uy, uz, phi;
    moments(F, F.at(x, y, z), rho, ux, uy, uz, phi);
    const long long i = ((long long)(z - 1) * F.ny + (y - 1)) * F.nx + (x - 1);
    out[5 * i] = rho;
    out[5 * i + 1] = ux;
    out[5 * i + 2] = uy;
    out[5 * i + 3] = uz;
    out[5 * i + 4] = phi;
  }
};
template <class Real>
struct Upload {
  const double* in;
  bool multiphase;
  __device__ void operator()(const Fields<Real>& F, int x, int y, int z) const {
    const long long i = ((long long)(z - 1) * F.ny + (y - 1)) * F.nx + (x - 1), c = F.at(x, y, z);
    for (int q = 0; q < Q; ++q) F.f[q * F.plane() + c] = static_cast<Real>(in[26 * i + q]);
    if (multiphase) {
      for (int q = 0; q < QG; ++q) F.g[q * F.plane() + c] = static_cast<Real>(in[26 * i + Q + q]);
    }
  }
};

// The "default" variant's hand-written face pack: thread per (plane, cell of the box).
struct BoxArgs {
  int lo[3], n[3];
  int planes[Q];
  int nplanes;
};
template <class Real, bool PACK>
__global__ void box_kernel(Fields<Real> F, Real* base, BoxArgs b, Real* buffer) {
  const long long per = (long long)b.n[0] * b.n[1] * b.n[2];
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= per * b.nplanes) return;
  const int k = static_cast<int>(i / per);
  const long long j = i % per;
  const int x = b.lo[0] + static_cast<int>(j % b.n[0]);
  const int y = b.lo[1] + static_cast<int>((j / b.n[0]) % b.n[1]);
  const int z = b.lo[2] + static_cast<int>(j / ((long long)b.n[0] * b.n[1]));
  Real* cell = base + b.planes[k] * F.plane() + F.at(x, y, z);
  if (PACK)
    buffer[i] = *cell;
  else
    *cell = buffer[i];
}

template <class Real>
class GpuBackend final : public Backend {
 public:
  // The main stream (exchanges, boundary updates) at the highest priority: in the overlap
  // variant its small kernels then take SMs ahead of the interior update's waiting blocks
  // on the side stream instead of queueing behind all of them.
  GpuBackend() {
    int lowest = 0, highest = 0;
    LBM_CUDA(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    LBM_CUDA(cudaStreamCreateWithPriority(&m_stream, cudaStreamNonBlocking, highest));
  }
  ~GpuBackend() override {
    release();
    for (cudaEvent_t e : m_marks) {
      if (e) cudaEventDestroy(e);
    }
    if (m_side) {
      cudaStreamDestroy(m_side);
      cudaEventDestroy(m_fork);
      cudaEventDestroy(m_join);
    }
    if (m_order) cudaEventDestroy(m_order);
    cudaStreamDestroy(m_stream);
  }
  std::string name() const override { return sizeof(Real) == 4 ? "gpu (float)" : "gpu (double)"; }
  BasicKind real() const override {
    return sizeof(Real) == 4 ? BasicKind::float32 : BasicKind::float64;
  }
  bool on_device() const override { return true; }

  // Every row's interior (x = 1) starts on a 32-byte DRAM sector: the row pitch is a whole
  // number of sectors and each array begins one element before a sector. Unaligned rows
  // leave a partly written sector at each end of every row of every plane the update writes,
  // which HBM (with ECC) completes by reading it: on the H200 that held the BGK update at
  // 58% of the copy bandwidth; aligned, 87% (docs/PERFORMANCE.md).
  static constexpr int sector_elements = 32 / sizeof(Real);
  void allocate(std::array<int, 3> n, bool multiphase, std::array<bool, 3> wrap) override {
    release();
    for (int a = 0; a < 3; ++a) m_f.wrap[a] = wrap[a];
    m_f.nx = n[0];
    m_f.ny = n[1];
    m_f.nz = n[2];
    m_f.pitch = (n[0] + 2 + sector_elements - 1) / sector_elements * sector_elements;
    m_multiphase = multiphase;
    const std::size_t plane = static_cast<std::size_t>(m_f.plane()) * sizeof(Real);
    auto alloc = [&](Real*& p, std::size_t bytes) {
      bytes += sector_elements * sizeof(Real);
      void* raw = nullptr;
      LBM_CUDA(cudaMalloc(&raw, bytes));  // 256-byte aligned
      // On this stream: the kernels that follow run on it, and a non-blocking stream does
      // not wait for the default one (a cudaMemset there could land after them).
      LBM_CUDA(cudaMemsetAsync(raw, 0, bytes, m_stream));
      m_raw.push_back(raw);
      p = static_cast<Real*>(raw) + (sector_elements - 1);
      m_bytes += static_cast<std::int64_t>(bytes);
    };
    // g right after f, in one allocation (and g_next after f_next): one datatype spans both,
    // so one exchange moves the two (halox-lbm --fg-exchange). A plane is a whole number of
    // sectors, so g's rows stay aligned as f's.
    const int qs = Q + (multiphase ? QG : 0);
    alloc(m_f.f, qs * plane);
    alloc(m_f.f_next, qs * plane);
    if (multiphase) {
      m_f.g = m_f.f + Q * m_f.plane();
      m_f.g_next = m_f.f_next + Q * m_f.plane();
    }
    alloc(m_f.phi, plane);
  }
  void upload(const std::vector<double>& cells) override {
    double* d = nullptr;
    LBM_CUDA(cudaMalloc(&d, cells.size() * sizeof(double)));
    // Stream-ordered before the kernel that reads it: a cudaMemcpy from pageable memory may
    // return before its DMA lands, on the default stream, which this stream does not wait
    // for (8 ranks in one process read each other's stale upload buffers that way).
    LBM_CUDA(cudaMemcpyAsync(d, cells.data(), cells.size() * sizeof(double), cudaMemcpyHostToDevice,
                             m_stream));
    run(Upload<Real>{d, m_multiphase}, m_f);
    synchronize();
    cudaFree(d);
  }
  std::vector<double> download_moments() override {
    const std::size_t cells = static_cast<std::size_t>(m_f.nx) * m_f.ny * m_f.nz;
    double* d = nullptr;
    LBM_CUDA(cudaMalloc(&d, 5 * cells * sizeof(double)));
    Fields<Real> F = m_f;
    if (!m_multiphase) F.g = nullptr;
    run(Moments<Real>{d}, F);
    std::vector<double> out(5 * cells);
    LBM_CUDA(cudaMemcpyAsync(out.data(), d, out.size() * sizeof(double), cudaMemcpyDeviceToHost,
                             m_stream));
    synchronize();
    cudaFree(d);
    return out;
  }
  int row_pitch() const override { return m_f.pitch; }
  int row_alignment() const override { return sector_elements; }
  void* f() override { return m_f.f; }
  void* g() override { return m_f.g; }
  void* phi() override { return m_f.phi; }
  void bgk_step(double omega, Regions r, bool side) override {
    launch(m_f, Bgk<Real>{static_cast<Real>(omega)}, r, side);
  }
  void update_phi(Regions r, bool side) override { launch(m_f, Phi<Real>{}, r, side); }
  void stream_collide(const Params& p, Regions r, bool side) override {
    launch(m_f, StreamCollide<Real>{p}, r, side);
  }
  void fork() override {
    ensure_side();
    LBM_CUDA(cudaEventRecord(m_fork, m_stream));
    LBM_CUDA(cudaStreamWaitEvent(m_side, m_fork, 0));
  }
  void join() override {
    LBM_CUDA(cudaEventRecord(m_join, m_side));
    LBM_CUDA(cudaStreamWaitEvent(m_stream, m_join, 0));
  }
  void wait_for(Backend& other) override {
    // Recorded now, waited on now: later records of the same event do not affect this wait.
    if (!m_order) LBM_CUDA(cudaEventCreateWithFlags(&m_order, cudaEventDisableTiming));
    LBM_CUDA(cudaEventRecord(m_order, static_cast<cudaStream_t>(other.stream_handle())));
    LBM_CUDA(cudaStreamWaitEvent(m_stream, m_order, 0));
  }
  void swap() override {
    std::swap(m_f.f, m_f.f_next);
    std::swap(m_f.g, m_f.g_next);
  }
  void pack_box(int field, std::array<int, 3> lo, std::array<int, 3> hi,
                const std::vector<int>& planes, void* out) override {
    box<true>(field, lo, hi, planes, static_cast<Real*>(out));
  }
  void unpack_box(int field, std::array<int, 3> lo, std::array<int, 3> hi,
                  const std::vector<int>& planes, const void* in) override {
    box<false>(field, lo, hi, planes, static_cast<Real*>(const_cast<void*>(in)));
  }
  double copy_ceiling_gbs() override {
    const std::size_t bytes = std::size_t(1) << 30;
    void *a = nullptr, *b = nullptr;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
      cudaGetLastError();
      cudaFree(a);
      return 0;
    }
    cudaEvent_t start, stop;
    LBM_CUDA(cudaEventCreate(&start));
    LBM_CUDA(cudaEventCreate(&stop));
    LBM_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, m_stream));  // warm-up
    float best = 1e30f;
    for (int i = 0; i < 5; ++i) {
      LBM_CUDA(cudaEventRecord(start, m_stream));
      LBM_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, m_stream));
      LBM_CUDA(cudaEventRecord(stop, m_stream));
      LBM_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      LBM_CUDA(cudaEventElapsedTime(&ms, start, stop));
      best = std::min(best, ms);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFree(a);
    cudaFree(b);
    return 2.0 * bytes / (best * 1e-3) / 1e9;
  }
  GpuStream stream_handle() override { return m_stream; }
  void synchronize() override { LBM_CUDA(cudaStreamSynchronize(m_stream)); }
  void begin_capture() override { m_graphs.begin(m_stream); }
  void end_capture(int k) override { m_graphs.end(k); }
  void abandon_capture() override { m_graphs.abandon(); }
  void replay(int k) override { m_graphs.replay(k, m_stream); }
  void mark(int point) override {
    if (!m_marks[0]) {
      for (cudaEvent_t& e : m_marks) LBM_CUDA(cudaEventCreate(&e));
    }
    LBM_CUDA(cudaEventRecord(m_marks.at(point), m_stream));
  }
  void trace_span(const char* name, int rank, bool begin, bool side) override {
    if (!trace::enabled()) return;
    if (side) ensure_side();
    const cudaStream_t stream = side ? m_side : m_stream;
    if (begin) {
      trace::stream_span_begin(name, rank, stream);
    } else {
      trace::stream_span_end(name, rank, stream);
    }
  }
  double seconds_between(int from, int to) override {
    LBM_CUDA(cudaEventSynchronize(m_marks.at(to)));
    float ms = 0;
    LBM_CUDA(cudaEventElapsedTime(&ms, m_marks.at(from), m_marks.at(to)));
    return 1e-3 * ms;
  }
  std::int64_t bytes() const override { return m_bytes; }

 private:
  template <class Op>
  void run(Op op, const Fields<Real>& F) {  // over every interior cell
    const Region whole{{1, 1, 1}, {F.nx + 1, F.ny + 1, F.nz + 1}};
    launch(F, op, {&whole, 1}, false);
  }
  template <class Op>
  void launch(const Fields<Real>& F, Op op, Regions regions, bool side) {
    if (regions.size() > kMaxBoxes) {
      throw Error("halox-lbm: more update regions than one launch takes");
    }
    Boxes b{};
    for (const Region& r : regions) {
      if (r.cells() == 0) continue;
      const int k = b.count++;
      for (int a = 0; a < 3; ++a) {
        b.box[k].lo[a] = r.lo[a];
        b.box[k].n[a] = r.hi[a] - r.lo[a];
      }
      b.row[k] = row_threads(b.box[k].n[0]);
      b.tiles[k][0] = (static_cast<unsigned>(b.box[k].n[0]) + b.row[k] - 1) / b.row[k];
      b.tiles[k][1] = (static_cast<unsigned>(b.box[k].n[1]) + kCellThreads / b.row[k] - 1) /
                      (kCellThreads / b.row[k]);
      b.first[k + 1] =
          b.first[k] + b.tiles[k][0] * b.tiles[k][1] * static_cast<unsigned>(b.box[k].n[2]);
    }
    if (b.count == 0) return;
    if (side) ensure_side();
    const cudaStream_t stream = side ? m_side : m_stream;
    if (b.count == 1) {
      const dim3 block(b.row[0], kCellThreads / b.row[0]);
      const dim3 grid(b.tiles[0][0], b.tiles[0][1], static_cast<unsigned>(b.box[0].n[2]));
      cell_kernel<Real, Op><<<grid, block, 0, stream>>>(F, b.box[0], op);
    } else {
      boxes_kernel<Real, Op><<<b.first[b.count], kCellThreads, 0, stream>>>(F, b, op);
    }
    LBM_CUDA(cudaGetLastError());
  }
  void ensure_side() {
    if (m_side) return;
    LBM_CUDA(cudaStreamCreateWithFlags(&m_side, cudaStreamNonBlocking));
    LBM_CUDA(cudaEventCreateWithFlags(&m_fork, cudaEventDisableTiming));
    LBM_CUDA(cudaEventCreateWithFlags(&m_join, cudaEventDisableTiming));
  }
  template <bool PACK>
  void box(int field, std::array<int, 3> lo, std::array<int, 3> hi, const std::vector<int>& planes,
           Real* buffer) {
    BoxArgs b{};
    long long cells = static_cast<long long>(planes.size());
    for (int a = 0; a < 3; ++a) {
      b.lo[a] = lo[a];
      b.n[a] = hi[a] - lo[a];
      cells *= b.n[a];
    }
    b.nplanes = static_cast<int>(planes.size());
    for (int k = 0; k < b.nplanes; ++k) b.planes[k] = planes[k];
    Real* base = field == 0 ? m_f.f : field == 1 ? m_f.g : m_f.phi;
    if (cells == 0) return;
    box_kernel<Real, PACK>
        <<<static_cast<unsigned>((cells + 255) / 256), 256, 0, m_stream>>>(m_f, base, b, buffer);
    LBM_CUDA(cudaGetLastError());
  }
  void release() {
    for (void* p : m_raw) cudaFree(p);
    m_raw.clear();
    m_f = {};
    m_bytes = 0;
  }
  cudaStream_t m_stream = nullptr;
  cudaStream_t m_side = nullptr;  // the overlap variant's interior stream
  cudaEvent_t m_fork = nullptr, m_join = nullptr;
  cudaEvent_t m_order = nullptr;              // wait_for's
  apps::StepGraphs m_graphs{"halox-lbm: "};   // --graph: the step of each parity
  std::array<cudaEvent_t, kMarks> m_marks{};  // the phase-timing points, made at first use
  Fields<Real> m_f;
  std::vector<void*> m_raw;  // what cudaMalloc returned (m_f's pointers are offset)
  bool m_multiphase = false;
  std::int64_t m_bytes = 0;
};

}  // namespace

std::unique_ptr<Backend> make_gpu_backend(bool single) {
  if (visible_gpus() == 0) throw Error("halox-lbm: --device gpu, but no CUDA device is visible");
  if (single) return std::make_unique<GpuBackend<float>>();
  return std::make_unique<GpuBackend<double>>();
}

}  // namespace halox::lbm
