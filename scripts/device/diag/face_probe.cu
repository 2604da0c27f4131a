// Diagnostic (scripts/device/diag/face_probe.sh): the pack shapes issue 29 still misses, each
// by halox's pack_async and by hand-written kernels that try one idea each, event-timed
// (median of 51) beside the empty kernel and the copy ceiling of the same run:
//   - the D3Q19 5-of-19 x face of a 256^3 float lattice (5 pieces, 327,680 4-byte words,
//     1.48-1.58x of its sector floor): one launch per piece; a 2D grid (y = piece) with 1, 2
//     or 4 words per thread, each thread's loads issued before its stores; the same with each
//     piece's rows rotated, and on a lattice whose arrays are padded apart;
//   - the 512^3 float x face w1 (one piece, 262,144 words), the same kernels on one piece;
//   - the bandwidth-sized y face (16384 x 8 x 4096 floats, 16 KB runs 128 KB apart; 85.8-89.5%
//     of the copy ceiling): 16-byte words with 1, 2 or 4 per thread, in one wave of resident
//     blocks or one thread per word group; then pack_async on five more arrays of that size
//     (does where an array lands change the figure?), and on an array allocated after thirty
//     allocations and frees of 64 MiB to 2 GiB, as halox-bench's shapes do.
//   - the memory system's rate for one sector per word at those faces' strides (8M words).
// Each probe kernel's output is checked against pack_async's.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "halox/datatype.hpp"
#include "halox/pack_gpu.hpp"
#include "../../../bench/cuda_timing.cuh"
#include "../../../bench/strided_words.cuh"

using namespace halox;
using halox::bench::median_event_us;

__global__ void empty() {}
__global__ void copy(const float4* __restrict__ in, float4* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = in[i];
}

// Where each piece's array starts (floats), up to 8 pieces.
struct Pieces {
  size_t offset[8];
};

// x faces at x = 1 of the pieces' arrays of `rows` rows of nx floats: word i of piece p is row
// i's element 1. K words per thread (i, i + rows/K, ...), loads first. With `rotate`, piece
// p's threads start p * rotate rows further on (wrapping), so that blocks running at once read
// rows of different pieces that are not a power-of-two array size apart.
template <int K>
__global__ void x_faces(const float* __restrict__ a, float* __restrict__ out, unsigned rows,
                        unsigned nx, Pieces pieces, unsigned rotate) {
  const unsigned p = blockIdx.y;
  const unsigned per = (rows + K - 1) / K;
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= per) return;
  const float* src = a + pieces.offset[p] + 1;
  float* dst = out + size_t(p) * rows;
  float v[K];
  unsigned r[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    r[k] = (i + k * per + p * rotate) % rows;
    if (i + k * per < rows) v[k] = src[size_t(r[k]) * nx];
  }
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (i + k * per < rows) dst[r[k]] = v[k];
}

// A y face of 16-byte words: `runs` runs of `wpr` words, `stride` words apart. K words per
// thread, loads first; threads loop when the grid is capped.
template <int K>
__global__ void y_face(const uint4* __restrict__ a, uint4* __restrict__ out, unsigned runs,
                       unsigned wpr, unsigned stride) {
  const unsigned total = runs * wpr;
  const unsigned threads = gridDim.x * blockDim.x;
  for (unsigned g = blockIdx.x * blockDim.x + threadIdx.x; g < (total + K - 1) / K; g += threads) {
    uint4 v[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const unsigned w = g + k * ((total + K - 1) / K);
      if (w < total) v[k] = a[(w / wpr) * stride + w % wpr];
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const unsigned w = g + k * ((total + K - 1) / K);
      if (w < total) out[w] = v[k];
    }
  }
}

// The median of `reps` event-timed calls of f (the benchmarks' timing).
template <class F>
double median_us(cudaStream_t s, F&& f, int reps = 51) {
  return median_event_us(s, reps, 1, f);
}

bool same(const void* x, const void* y, size_t bytes) {
  std::vector<char> a(bytes), b(bytes);
  BENCH_CUDA(cudaMemcpy(a.data(), x, bytes, cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(b.data(), y, bytes, cudaMemcpyDeviceToHost));
  return std::memcmp(a.data(), b.data(), bytes) == 0;
}

int main() {
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreate(&s));
  int sms = 0, per_sm = 0;
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  BENCH_CUDA(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, 0));
  const int wave = sms * per_sm / 256;
  const double t_empty = median_us(s, [&] { empty<<<1, 32, 0, s>>>(); });
  const size_t cbytes = size_t(1) << 30;
  void *ca, *cb;
  BENCH_CUDA(cudaMalloc(&ca, cbytes));
  BENCH_CUDA(cudaMalloc(&cb, cbytes));
  BENCH_CUDA(cudaMemset(ca, 1, cbytes));
  const double t_copy = median_us(
      s, [&] { copy<<<sms * 8, 256, 0, s>>>((const float4*)ca, (float4*)cb, cbytes / 16); }, 11);
  BENCH_CUDA(cudaFree(ca));
  BENCH_CUDA(cudaFree(cb));
  const double ceiling = 2.0 * cbytes / (t_copy * 1e-6) / 1e9;
  std::printf("empty kernel %.2f us, copy ceiling %.0f GB/s, %d blocks of 256 per wave\n", t_empty,
              ceiling, wave);
  auto report = [&](const char* shape, const char* variant, double us, double sector_bytes,
                    bool ok) {
    const double sfloor = t_empty + sector_bytes / (ceiling * 1e3);
    std::printf("%-28s %-34s %8.2f us  %5.2fx sector floor  %s\n", shape, variant, us, us / sfloor,
                ok ? "" : "WRONG OUTPUT");
  };

  // The rate of one sector per word, 8M words at the x faces' strides (256^3 and 512^3 rows)
  // and at one sector (the bandwidth-sized x face's), in sector bytes read plus bytes
  // written per second, against the copy ceiling.
  {
    // 8M words, and 1M (a 1-2 GiB array, within reach of the GPU's TLB).
    for (size_t n : {size_t(8) << 20, size_t(1) << 20}) {
      float* out;
      BENCH_CUDA(cudaMalloc(&out, n * 4));
      for (size_t stride : {size_t(8), size_t(256), size_t(512)}) {
        float* a;
        BENCH_CUDA(cudaMalloc(&a, n * stride * 4));
        const double t = median_us(
            s, [&] { strided_words_kernel<<<wave, 256, 0, s>>>(a, out, n, stride); }, 11);
        const double rate = double(n) * (32 + 4) / (t * 1e-6) / 1e9;
        std::printf("%-28s %-34s %8.2f us  %5.0f GB/s of sectors, %5.1f%% of the copy ceiling\n",
                    n > (size_t(1) << 20) ? "one sector per word, 8M" : "one sector per word, 1M",
                    stride == 8     ? "32 B apart"
                    : stride == 256 ? "1 KiB apart"
                                    : "2 KiB apart",
                    t, rate, 100.0 * rate / ceiling);
        BENCH_CUDA(cudaFree(a));
      }
      BENCH_CUDA(cudaFree(out));
    }
  }

  // The x faces: D3Q19 subset (5 pieces of 256^3) and one 512^3 piece.
  // The padded case spaces the lattice's arrays 4,160 floats more than their size apart: if it
  // is faster, reads of the pieces 64 MiB apart meet in the same memory banks.
  struct XCase {
    const char* name;
    long n;
    std::vector<long> pops;
    long pad;
  };
  for (const XCase& c : {XCase{"d3q19 5-of-19 x 256^3", 256, {1, 7, 9, 11, 13}, 0},
                         XCase{"d3q19 arrays padded", 256, {1, 7, 9, 11, 13}, 4160},
                         XCase{"x-face w1 512^3 float", 512, {0}, 0}}) {
    const long n = c.n, rows = n * n, cells = n * n * n + c.pad;
    const long arrays = c.pops.back() + 1;
    float* a;
    BENCH_CUDA(cudaMalloc(&a, size_t(arrays) * cells * 4));
    std::vector<float> h(static_cast<std::size_t>(n * n * n), 0.0f);
    for (long i = 0; i < n * n * n; ++i) h[size_t(i)] = float(i % 9973) + 0.5f;
    for (long p = 0; p < arrays; ++p)
      BENCH_CUDA(
          cudaMemcpy(a + p * cells, h.data(), size_t(n * n * n) * 4, cudaMemcpyHostToDevice));
    const std::vector<std::int64_t> sizes{n, n, n}, sub{n, n, 1}, start{0, 0, 1};
    const Datatype face =
        Datatype::subarray(sizes, sub, start, Order::c, Datatype::of<float>()).commit();
    std::vector<std::int64_t> disps;
    for (long q : c.pops) disps.push_back(q * cells * 4);
    const Datatype type =
        Datatype::hindexed(std::vector<std::int64_t>(c.pops.size(), 1), disps, face).commit();
    const size_t bytes = c.pops.size() * size_t(rows) * 4;
    float *ref, *out;
    BENCH_CUDA(cudaMalloc(&ref, bytes));
    BENCH_CUDA(cudaMalloc(&out, bytes));
    pack_async(a, 1, type, ref, s);
    BENCH_CUDA(cudaStreamSynchronize(s));
    const double sector_bytes = double(c.pops.size()) * rows * 32 + bytes;
    report(c.name, "pack_async", median_us(s, [&] { pack_async(a, 1, type, out, s); }),
           sector_bytes, true);
    if (c.pops.size() > 1) {
      BENCH_CUDA(cudaMemset(out, 0xFF, bytes));
      const double t = median_us(s, [&] {
        for (size_t k = 0; k < c.pops.size(); ++k)
          pack_async(a + c.pops[k] * cells, 1, face, out + k * rows, s);
      });
      report(c.name, "pack_async per piece", t, sector_bytes, same(ref, out, bytes));
    }
    Pieces pieces{};
    for (size_t k = 0; k < c.pops.size(); ++k) pieces.offset[k] = size_t(c.pops[k] * cells);
    auto probe = [&](auto kernel, int k, unsigned rotate, const char* name) {
      const unsigned per = unsigned((rows + k - 1) / k);
      const dim3 grid((per + 255) / 256, unsigned(c.pops.size()));
      BENCH_CUDA(cudaMemset(out, 0xFF, bytes));
      const double t = median_us(s, [&] {
        kernel<<<grid, 256, 0, s>>>(a, out, unsigned(rows), unsigned(n), pieces, rotate);
      });
      report(c.name, name, t, sector_bytes, same(ref, out, bytes));
    };
    probe(x_faces<1>, 1, 0, "2D grid, 1 word/thread");
    probe(x_faces<2>, 2, 0, "2D grid, 2 words/thread");
    probe(x_faces<4>, 4, 0, "2D grid, 4 words/thread");
    if (c.pops.size() > 1) {
      const unsigned rotate = unsigned(rows / long(c.pops.size()));
      probe(x_faces<1>, 1, rotate, "2D grid, 1 word/thread, rotated");
      probe(x_faces<2>, 2, rotate, "2D grid, 2 words/thread, rotated");
      probe(x_faces<4>, 4, rotate, "2D grid, 4 words/thread, rotated");
    }
    BENCH_CUDA(cudaFree(a));
    BENCH_CUDA(cudaFree(ref));
    BENCH_CUDA(cudaFree(out));
  }

  // The bandwidth-sized y face: 16384 x 8 x 4096 floats, y = 1.
  {
    const long nz = 16384, ny = 8, nx = 4096;
    const size_t cells = size_t(nz) * ny * nx;
    void* a;
    BENCH_CUDA(cudaMalloc(&a, cells * 4));
    BENCH_CUDA(cudaMemset(a, 0x3C, cells * 4));
    const std::vector<std::int64_t> sizes{nz, ny, nx}, sub{nz, 1, nx}, start{0, 1, 0};
    const Datatype type =
        Datatype::subarray(sizes, sub, start, Order::c, Datatype::of<float>()).commit();
    const size_t bytes = size_t(nz) * nx * 4;
    void *ref, *out;
    BENCH_CUDA(cudaMalloc(&ref, bytes));
    BENCH_CUDA(cudaMalloc(&out, bytes));
    pack_async(a, 1, type, ref, s);
    BENCH_CUDA(cudaStreamSynchronize(s));
    const double counted = 2.0 * bytes;
    auto row = [&](const char* variant, double us, bool ok) {
      std::printf("%-28s %-34s %8.2f us  %5.1f%% of the copy ceiling  %s\n",
                  "y-face w1 16384x8x4096", variant, us,
                  100.0 * counted / (us * 1e-6) / 1e9 / ceiling, ok ? "" : "WRONG OUTPUT");
    };
    row("pack_async",
        median_us(
            s, [&] { pack_async(a, 1, type, out, s); }, 11),
        true);
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<char*>(a) + nx * 4);
    const unsigned runs = unsigned(nz), wpr = unsigned(nx / 4), stride = unsigned(ny * nx / 4);
    auto probe = [&](auto kernel, int k, bool one_wave, const char* name) {
      const unsigned groups = unsigned((size_t(runs) * wpr + k - 1) / k);
      const unsigned blocks = one_wave ? unsigned(wave) : (groups + 255) / 256;
      BENCH_CUDA(cudaMemset(out, 0xFF, bytes));
      const double t = median_us(
          s,
          [&] { kernel<<<blocks, 256, 0, s>>>(src, static_cast<uint4*>(out), runs, wpr, stride); },
          11);
      row(name, t, same(ref, out, bytes));
    };
    probe(y_face<1>, 1, false, "1 word/thread, all threads");
    probe(y_face<2>, 2, false, "2 words/thread, all threads");
    probe(y_face<4>, 4, false, "4 words/thread, all threads");
    probe(y_face<1>, 1, true, "1 word/thread, one wave");
    probe(y_face<4>, 4, true, "4 words/thread, one wave");
    // Placement: the same call on five more 2 GiB arrays alive at once (other physical pages,
    // so other memory channels under the 128 KB row stride). halox-bench took 155.8-157.4 us
    // for this face where this program took 138-139: if these spread as far, where the array
    // lands decides the figure, not the kernel.
    std::vector<void*> more(5, nullptr);
    for (std::size_t k = 0; k < more.size(); ++k) {
      BENCH_CUDA(cudaMalloc(&more[k], cells * 4));
      BENCH_CUDA(cudaMemset(more[k], 0x3C, cells * 4));
    }
    for (std::size_t k = 0; k < more.size(); ++k) {
      char variant[64];
      std::snprintf(variant, sizeof variant, "pack_async, array %zu of 5 more", k + 1);
      BENCH_CUDA(cudaMemset(out, 0xFF, bytes));
      const double t = median_us(
          s, [&] { pack_async(more[k], 1, type, out, s); }, 11);
      row(variant, t, same(ref, out, bytes));
    }
    for (void* p : more) BENCH_CUDA(cudaFree(p));
    BENCH_CUDA(cudaFree(a));
    BENCH_CUDA(cudaFree(out));
    // Allocation history: halox-bench allocated and freed an array and a packed buffer for each
    // of some thirty shapes (64 MiB to 2 GiB) before this face. The same churn here, then a
    // fresh array and buffer for the face.
    for (int k = 0; k < 30; ++k) {
      const size_t array = (size_t(64) << 20) << (k % 6), packed = (size_t(256) << 10) << (k % 4);
      void *x, *y;
      BENCH_CUDA(cudaMalloc(&x, array));
      BENCH_CUDA(cudaMalloc(&y, packed));
      BENCH_CUDA(cudaMemset(x, 0x3C, array));
      BENCH_CUDA(cudaFree(x));
      BENCH_CUDA(cudaFree(y));
    }
    BENCH_CUDA(cudaMalloc(&a, cells * 4));
    BENCH_CUDA(cudaMalloc(&out, bytes));
    BENCH_CUDA(cudaMemset(a, 0x3C, cells * 4));
    for (int k = 0; k < 2; ++k) {
      BENCH_CUDA(cudaMemset(out, 0xFF, bytes));
      const double t = median_us(
          s, [&] { pack_async(a, 1, type, out, s); }, 11);
      row(k == 0 ? "pack_async after 30 allocs+frees" : "the same, again", t,
          same(ref, out, bytes));
    }
    BENCH_CUDA(cudaFree(a));
    BENCH_CUDA(cudaFree(ref));
    BENCH_CUDA(cudaFree(out));
  }
  return 0;
}
