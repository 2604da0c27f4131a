// halox-bench pack --device gpu: halox's GPU pack against the floor of each shape (one empty
// kernel + bytes / copy ceiling, both measured in this run) and against what a user would
// otherwise write (cudaMemcpy2DAsync, a naive one-thread-per-element kernel).
#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <random>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "halox/pack.hpp"
#include "halox/pack_gpu.hpp"
#include "pack_cases.hpp"
#include "pack_gpu_bench.hpp"
#include "cuda_timing.cuh"
#include "naive_gather.cuh"
#include "strided_words.cuh"
#include "report.hpp"
#include "sector_bound.hpp"
#include "tempi_reference.hpp"

namespace halox::bench {

namespace {

__global__ void empty_kernel() {}

__global__ void copy_kernel(const float4* __restrict__ in, float4* __restrict__ out,
                            std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    out[i] = in[i];
  }
}

// What a user would write for a face: one thread per element, (z, y, x) from the index.
template <class T>
__global__ void naive_face_kernel(const T* __restrict__ a, T* __restrict__ out, long nz, long ny,
                                  long nx, long z0, long y0, long x0, long sz, long sy, long sx) {
  const long total = sz * sy * sx;
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < total;
       i += long(gridDim.x) * blockDim.x) {
    const long x = i % sx, y = (i / sx) % sy, z = i / (sx * sy);
    out[i] = a[((z0 + z) * ny + (y0 + y)) * nx + (x0 + x)];
  }
  (void)nz;
}

struct Shape {
  std::string name, family, kind;  // kind: face / d3q19 / gather
  Datatype type;
  std::int64_t array_bytes = 0;
  // face geometry (for the naive kernel and cudaMemcpy2D)
  long dims[3] = {0, 0, 0}, start[3] = {0, 0, 0}, sub[3] = {0, 0, 0};
  int elem = 4;
  std::vector<long> gather_index;  // gather: element indices
};

Shape face(const std::string& family, long nz, long ny, long nx, int axis, long w, int elem) {
  Shape s;
  s.family = family;
  s.kind = "face";
  s.elem = elem;
  s.dims[0] = nz;
  s.dims[1] = ny;
  s.dims[2] = nx;
  for (int d = 0; d < 3; ++d) {
    s.sub[d] = s.dims[d];
    s.start[d] = 0;
  }
  const int c = 2 - axis;
  s.sub[c] = w;
  s.start[c] = w;
  const Datatype e = elem == 4 ? Datatype::of<float>() : Datatype::of<double>();
  const std::vector<std::int64_t> sizes{nz, ny, nx}, sub{s.sub[0], s.sub[1], s.sub[2]},
      start{s.start[0], s.start[1], s.start[2]};
  s.type = Datatype::subarray(sizes, sub, start, Order::c, e).commit();
  s.array_bytes = nz * ny * nx * elem;
  const char* axes = "xyz";
  s.name = std::string(1, axes[axis]) + "-face w" + std::to_string(w) + " " + std::to_string(nz) +
           "x" + std::to_string(ny) + "x" + std::to_string(nx) + " " +
           (elem == 4 ? "float" : "double");
  return s;
}

Shape d3q19(const std::string& family, long nz, long ny, long nx) {
  Shape s;
  s.family = family;
  s.kind = "d3q19";
  const Datatype e = Datatype::of<float>();
  const std::vector<std::int64_t> sizes{nz, ny, nx}, sub{nz, ny, 1}, start{0, 0, 1};
  const Datatype f = Datatype::subarray(sizes, sub, start, Order::c, e).commit();
  std::vector<std::int64_t> lengths(5, 1), disps;
  for (std::int64_t q : {1, 7, 9, 11, 13}) disps.push_back(q * nz * ny * nx * 4);
  s.type = Datatype::hindexed(lengths, disps, f).commit();
  s.array_bytes = 19 * nz * ny * nx * 4;
  s.name = "d3q19 5-of-19 x-face " + std::to_string(nz) + "x" + std::to_string(ny) + "x" +
           std::to_string(nx) + " float";
  return s;
}

Shape gather(const std::string& family, long entries, bool sorted) {
  Shape s;
  s.family = family;
  s.kind = "gather";
  const Datatype float3 = Datatype::contiguous(3, Datatype::of<float>()).commit();
  const long array = entries * 4;
  std::mt19937_64 rng(1234 + entries);
  std::vector<long> idx(static_cast<std::size_t>(array));
  std::iota(idx.begin(), idx.end(), 0L);
  std::shuffle(idx.begin(), idx.end(), rng);
  idx.resize(static_cast<std::size_t>(entries));
  if (sorted) std::sort(idx.begin(), idx.end());
  std::vector<std::int64_t> disps(idx.begin(), idx.end());
  for (auto& d : disps) d *= 12;
  s.type = Datatype::hindexed_block(1, disps, float3).commit();
  s.gather_index = std::move(idx);
  s.array_bytes = array * 12;
  s.name = "gather float3 " + std::to_string(entries) + (sorted ? " sorted" : " random");
  return s;
}

std::vector<Shape> shapes(bool quick) {
  std::vector<Shape> v;
  const std::vector<long> edges = quick ? std::vector<long>{256} : std::vector<long>{256, 512};
  for (long n : edges)
    for (int elem : {4, 8})
      for (int axis = 0; axis < 3; ++axis)
        for (long w : {1L, 2L}) v.push_back(face("halo", n, n, n, axis, w, elem));
  v.push_back(d3q19("halo", 256, 256, 256));
  for (long entries : {65536L, 1048576L})
    for (bool sorted : {true, false}) v.push_back(gather("halo", entries, sorted));
  if (quick) return v;
  // Bandwidth-sized: the same kinds scaled until at least 256 MB move per pack.
  v.push_back(face("bandwidth", 8192, 8192, 8, 0, 1, 4));
  v.push_back(face("bandwidth", 8192, 4096, 8, 0, 2, 4));
  v.push_back(face("bandwidth", 16384, 8, 4096, 1, 1, 4));
  v.push_back(face("bandwidth", 4, 8192, 8192, 2, 1, 4));
  v.push_back(d3q19("bandwidth", 4096, 4096, 4));
  v.push_back(gather("bandwidth", 22369622, true));
  v.push_back(gather("bandwidth", 22369622, false));
  return v;
}

// The ceilings every row is measured against, measured in the same run.
struct Ceilings {
  double empty_us = 0, empty_sync_us = 0;
  double copy_gbs = 0, memcpy_gbs = 0, scattered_gbs = 0;  // read + write
  std::size_t copy_bytes = 0;
};

Ceilings measure_ceilings(cudaStream_t stream, const cudaDeviceProp& prop, bool quick,
                          int halo_reps, int bw_reps) {
  // Ceilings, measured now: an empty kernel, and a float4 copy kernel on 1 GiB.
  const double t_empty =
      median_event_us(stream, halo_reps, 1, [&] { empty_kernel<<<1, 32, 0, stream>>>(); });
  // The host's round trip of an empty kernel, launch to cudaStreamSynchronize's return: what
  // any synchronous pack by a kernel pays before its data moves.
  const double t_empty_sync =
      median_sync_us(stream, halo_reps, [&] { empty_kernel<<<1, 32, 0, stream>>>(); });
  const std::size_t copy_bytes = quick ? (std::size_t{64} << 20) : (std::size_t{1} << 30);
  void *ca = nullptr, *cb = nullptr;
  BENCH_CUDA(cudaMalloc(&ca, copy_bytes));
  BENCH_CUDA(cudaMalloc(&cb, copy_bytes));
  BENCH_CUDA(cudaMemset(ca, 1, copy_bytes));
  const double t_copy = median_event_us(stream, bw_reps, 1, [&] {
    copy_kernel<<<prop.multiProcessorCount * 8, 256, 0, stream>>>(
        static_cast<const float4*>(ca), static_cast<float4*>(cb), copy_bytes / 16);
  });
  const double t_memcpy = median_event_us(stream, bw_reps, 1, [&] {
    BENCH_CUDA(cudaMemcpyAsync(cb, ca, copy_bytes, cudaMemcpyDeviceToDevice, stream));
  });
  BENCH_CUDA(cudaFree(ca));
  BENCH_CUDA(cudaFree(cb));
  const double ceiling = 2.0 * copy_bytes / (t_copy * 1e-6) / 1e9;  // GB/s, read + write
  const double memcpy_gbs = 2.0 * copy_bytes / (t_memcpy * 1e-6) / 1e9;
  // One sector per word, 1M words 1 KiB apart (a 1 GiB array): what the sector bound of an x
  // face of rows of 1 KiB or more assumes to move at the copy ceiling, measured.
  const std::size_t scattered_words = std::size_t{1} << 20, scattered_stride = 256;
  void *sa = nullptr, *sb = nullptr;
  BENCH_CUDA(cudaMalloc(&sa, scattered_words * scattered_stride * 4));
  BENCH_CUDA(cudaMalloc(&sb, scattered_words * 4));
  const double t_scattered = median_event_us(stream, bw_reps, 1, [&] {
    strided_words_kernel<<<prop.multiProcessorCount * 8, 256, 0, stream>>>(
        static_cast<const float*>(sa), static_cast<float*>(sb), scattered_words, scattered_stride);
  });
  BENCH_CUDA(cudaFree(sa));
  BENCH_CUDA(cudaFree(sb));
  const double scattered_gbs = static_cast<double>(scattered_words) *
                               (kSectorBytes + sizeof(float)) / (t_scattered * 1e-6) / 1e9;

  return {t_empty, t_empty_sync, ceiling, memcpy_gbs, scattered_gbs, copy_bytes};
}

void print_legend(const Ceilings& c) {
  const double t_empty = c.empty_us, ceiling = c.copy_gbs, memcpy_gbs = c.memcpy_gbs,
               scattered_gbs = c.scattered_gbs;
  const std::size_t copy_bytes = c.copy_bytes;
  std::printf(
      "ceilings measured now: empty kernel %.2f us; copy kernel %.0f GB/s; cudaMemcpy D2D %.0f "
      "GB/s (read+write, %zu MiB)\n"
      "one sector per word, 1M words 1 KiB apart: %.0f GB/s of sectors read + bytes written, "
      "%.1f%% of the copy ceiling\n(an x face of rows of 1 KiB or more reads its sectors at "
      "about this rate, not the ceiling its sector floor assumes)\n",
      t_empty, ceiling, memcpy_gbs, copy_bytes >> 20, scattered_gbs,
      100.0 * scattered_gbs / ceiling);
  std::printf(
      "floor = empty kernel + bytes / copy ceiling; 'x floor' = time / floor (goal <= 1.25 "
      "halo-sized)\n"
      "sector floor = empty kernel + sector bytes / copy ceiling, the floor of a pack that must\n"
      "move whole sectors; 'x sfloor' = time / it (an x face's floor is below its sector floor)\n"
      "sector bound = the copy ceiling scaled by the bytes counted (read + written) over the\n"
      "bytes of the 32-byte sectors the pack must move (every sector its reads touch, a\n"
      "gather's index of 8 bytes per entry, the packed bytes written); '%%sector' = GB/s over\n"
      "it (goal >= 90%% for every face)\n\n");
  std::printf("%-38s %-9s %11s %9s %8s %8s %7s %7s %9s %9s %8s %9s %9s %8s\n", "shape", "family",
              "bytes", "time us", "GB/s", "floor us", "xfloor", "xsfloor", "%ceiling", "sector",
              "%sector", "sync us", "2D us", "naive us");
}

struct TempiRow {
  std::string shape;
  std::int64_t bytes;
  double sync_us, tempi_us;
  double sync_floor_us;  // the empty kernel's round trip + the sectors at the copy ceiling
};

// One shape: pack_async, cudaMemcpy2DAsync where the face is one 2D copy, and the naive
// kernel, alternated; then the synchronous pack. Prints its line; its JSON row.
Row time_shape(const Shape& s, void* src, void* dst, cudaStream_t stream,
               const cudaDeviceProp& prop, int r, const Ceilings& c,
               std::vector<TempiRow>& tempi_rows) {
  const double t_empty = c.empty_us, ceiling = c.copy_gbs, t_empty_sync = c.empty_sync_us;
  const std::int64_t bytes = packed_size(s.type, 1);
  std::vector<std::function<void()>> timed{[&] { pack_async(src, 1, s.type, dst, stream); }};
  const CanonicalForm& form = s.type.canonical();
  int at_2d = -1, at_naive = -1;
  if (s.kind == "face" && form.is_single_strided() && form.pieces[0].strided.ndims <= 1) {
    const StridedBlock& b = form.pieces[0].strided;
    const std::size_t height = b.ndims == 0 ? 1 : static_cast<std::size_t>(b.count[0]);
    const std::size_t pitch = b.ndims == 0 ? static_cast<std::size_t>(b.block_bytes)
                                           : static_cast<std::size_t>(b.stride[0]);
    at_2d = static_cast<int>(timed.size());
    timed.push_back([&, b, height, pitch] {
      cudaMemcpy2DAsync(
          dst, static_cast<std::size_t>(b.block_bytes), static_cast<char*>(src) + b.offset, pitch,
          static_cast<std::size_t>(b.block_bytes), height, cudaMemcpyDeviceToDevice, stream);
    });
  }
  const int grid = prop.multiProcessorCount * 8;
  long* d_idx = nullptr;
  if (s.kind == "face") {
    at_naive = static_cast<int>(timed.size());
    timed.push_back([&] {
      if (s.elem == 4) {
        naive_face_kernel<float><<<grid, 256, 0, stream>>>(
            static_cast<const float*>(src), static_cast<float*>(dst), s.dims[0], s.dims[1],
            s.dims[2], s.start[0], s.start[1], s.start[2], s.sub[0], s.sub[1], s.sub[2]);
      } else {
        naive_face_kernel<double><<<grid, 256, 0, stream>>>(
            static_cast<const double*>(src), static_cast<double*>(dst), s.dims[0], s.dims[1],
            s.dims[2], s.start[0], s.start[1], s.start[2], s.sub[0], s.sub[1], s.sub[2]);
      }
    });
  } else if (s.kind == "gather") {
    BENCH_CUDA(cudaMalloc(&d_idx, s.gather_index.size() * sizeof(long)));
    BENCH_CUDA(cudaMemcpy(d_idx, s.gather_index.data(), s.gather_index.size() * sizeof(long),
                          cudaMemcpyHostToDevice));
    at_naive = static_cast<int>(timed.size());
    timed.push_back([&] {
      naive_gather_kernel<<<grid, 256, 0, stream>>>(static_cast<const float*>(src), d_idx,
                                                    static_cast<float*>(dst),
                                                    static_cast<long>(s.gather_index.size()));
    });
  }
  const std::vector<double> medians = median_event_us_alternated(stream, r, timed);
  if (d_idx != nullptr) BENCH_CUDA(cudaFree(d_idx));
  const double t = medians[0];
  const double t_2d = at_2d < 0 ? -1 : medians[at_2d];
  const double t_naive = at_naive < 0 ? -1 : medians[at_naive];
  // Synchronous latency, as MPI_Pack would be used: host clock around pack + synchronize.
  const double t_sync = median_sync_us(stream, r, [&] { pack_async(src, 1, s.type, dst, stream); });
  BENCH_CUDA(cudaGetLastError());
  const double gbs = 2.0 * bytes / (t * 1e-6) / 1e9;
  const double floor_us = t_empty + 2.0 * bytes / (ceiling * 1e9) * 1e6;
  const GpuPackShape shape = gpu_pack_shape(src, 1, s.type, dst);
  const double sector_bytes = static_cast<double>(sector_bytes_moved(form, s.array_bytes));
  const double sector_gbs = ceiling * 2.0 * bytes / sector_bytes;
  const double sector_us = sector_bytes / (ceiling * 1e9) * 1e6;
  const double sector_floor_us = t_empty + sector_us;
  const double sync_floor_us = t_empty_sync + sector_us;
  std::printf(
      "%-38s %-9s %11lld %9.2f %8.0f %8.2f %7.2f %7.2f %8.1f%% %9.0f %7.1f%% %9.2f %9.2f "
      "%9.2f\n",
      s.name.c_str(), s.family.c_str(), static_cast<long long>(bytes), t, gbs, floor_us,
      t / floor_us, t / sector_floor_us, 100.0 * gbs / ceiling, sector_gbs,
      100.0 * gbs / sector_gbs, t_sync, t_2d, t_naive);
  std::fflush(stdout);
  const std::optional<double> tempi_us =
      s.kind == "face" ? tempi_pack_us(bytes) : std::optional<double>();
  if (tempi_us) {
    tempi_rows.push_back({s.name, bytes, t_sync, *tempi_us, sync_floor_us});
  }
  return Row()
      .set("shape", s.name)
      .set("family", s.family)
      .set("kind", s.kind)
      .set("canonical", form.describe().substr(0, 200))
      .set("bytes", static_cast<double>(bytes))
      .set("time_us", t)
      .set("gbps", gbs)
      .set("floor_us", floor_us)
      .set("x_floor", t / floor_us)
      .set("sector_floor_us", sector_floor_us)
      .set("x_sector_floor", t / sector_floor_us)
      .set("fraction_of_copy_ceiling", gbs / ceiling)
      .set("sector_bound_gbps", sector_gbs)
      .set("fraction_of_sector_bound", gbs / sector_gbs)
      .set("sync_latency_us", t_sync)
      .set("sync_floor_us", sync_floor_us)
      .set("memcpy2d_us", t_2d)
      .set("naive_us", t_naive)
      .set("tempi_reference_us", tempi_us.value_or(-1))
      .set("sync_over_tempi", tempi_us ? t_sync / *tempi_us : -1)
      .set("word_bytes", shape.word_bytes)
      .set("pieces", shape.pieces);
}

void print_tempi(const std::vector<TempiRow>& tempi_rows, double t_empty_sync) {
  // TEMPI's figures recorded on this H200, beside halox's synchronous pack (MPI_Pack's use).
  std::printf(
      "\nreference: TEMPI's pack of faces, recorded on this H200: %.0f-%.0f us for "
      "%.2f-%.0f MiB faces\n(TEMPI at a face's size: linear between the recorded ends; "
      "goal: halox's sync pack <= %.2f of it)\n",
      TempiReference::low_us, TempiReference::high_us, TempiReference::low_bytes / (1 << 20),
      TempiReference::high_bytes / (1 << 20), TempiReference::goal);
  std::printf(
      "sync floor = an empty kernel's launch + cudaStreamSynchronize, measured now (%.2f us), + "
      "the\nface's sector bytes at the copy ceiling: no pack by a kernel returns sooner\n",
      t_empty_sync);
  std::printf("%-38s %11s %9s %9s %9s %9s %10s\n", "face", "bytes", "sync us", "TEMPI us", "ratio",
              "goal us", "sync floor");
  for (const TempiRow& r : tempi_rows) {
    const double goal_us = TempiReference::goal * r.tempi_us;
    std::printf("%-38s %11lld %9.2f %9.1f %9.3f %9.2f %10.2f%s\n", r.shape.c_str(),
                static_cast<long long>(r.bytes), r.sync_us, r.tempi_us, r.sync_us / r.tempi_us,
                goal_us, r.sync_floor_us,
                r.sync_us <= goal_us        ? ""
                : r.sync_floor_us > goal_us ? "  (over the goal, which is below the floor)"
                                            : "  (over the goal)");
  }
  if (tempi_rows.empty()) std::printf("(no face of this run lies in the recorded range)\n");
}

}  // namespace

int pack_gpu(int reps, bool quick, const std::string& json) {
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  BENCH_CUDA(cudaDriverGetVersion(&driver));
  BENCH_CUDA(cudaRuntimeGetVersion(&runtime));
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreate(&stream));
  const int halo_reps = quick ? 5 : std::max(reps, 51);
  const int bw_reps = quick ? 3 : std::max(reps / 2, 11);
  const Ceilings c = measure_ceilings(stream, prop, quick, halo_reps, bw_reps);
  std::printf("halox-bench pack --device gpu: %s, %d SMs, driver %d, runtime %d, %s\n", prop.name,
              prop.multiProcessorCount, driver, runtime, today().c_str());
  print_legend(c);
  std::vector<Row> rows;
  std::vector<TempiRow> tempi_rows;  // faces within TEMPI's recorded range
  // One array and one packed buffer, as large as the largest shape needs, for every shape, as
  // a simulation allocates its fields once. Timed right after its own allocation, which
  // followed some thirty shapes' allocations and frees, the bandwidth-sized y face ran at 88%
  // of the copy ceiling, against 99% in one array; the first timing after such allocations
  // is slow and the same call right after is not (face_probe).
  std::vector<Shape> all = shapes(quick);
  std::int64_t most_array = 0, most_bytes = 0;
  for (const Shape& s : all) {
    most_array = std::max(most_array, s.array_bytes);
    most_bytes = std::max(most_bytes, packed_size(s.type, 1));
  }
  void *src = nullptr, *dst = nullptr;
  BENCH_CUDA(cudaMalloc(&src, static_cast<std::size_t>(most_array)));
  BENCH_CUDA(cudaMalloc(&dst, static_cast<std::size_t>(most_bytes)));
  for (Shape& s : all) {
    BENCH_CUDA(cudaMemset(src, 0x3C, static_cast<std::size_t>(s.array_bytes)));
    const int r = s.family == "halo" ? halo_reps : bw_reps;
    rows.push_back(time_shape(s, src, dst, stream, prop, r, c, tempi_rows));
  }
  BENCH_CUDA(cudaFree(src));
  BENCH_CUDA(cudaFree(dst));
  print_tempi(tempi_rows, c.empty_sync_us);
  if (!json.empty()) {
    write_json(json, "pack --device gpu",
               {{"gpu", prop.name},
                {"host", host_name()},
                {"driver", std::to_string(driver)},
                {"runtime", std::to_string(runtime)},
                {"empty_kernel_us", std::to_string(c.empty_us)},
                {"empty_kernel_sync_us", std::to_string(c.empty_sync_us)},
                {"copy_ceiling_gbps", std::to_string(c.copy_gbs)},
                {"memcpy_d2d_gbps", std::to_string(c.memcpy_gbs)},
                {"scattered_sector_gbps", std::to_string(c.scattered_gbs)}},
               rows);
    std::printf("\nwrote %s\n", json.c_str());
  }
  BENCH_CUDA(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace halox::bench
