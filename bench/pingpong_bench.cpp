// halox-bench pingpong: two ranks exchange N bytes (1 B .. 4 MiB) through each transport, in
// the columns of osu_latency and osu_bw. Each iteration is one halo exchange in which both
// ranks send N bytes to each other at once (the halo's pattern), so "latency" is the time
// per exchange and "bandwidth" the bytes one rank sends per second. Grid transports move an
// N-byte face; particle-only transports move N/12 items of 3 floats (sizes from 12 B).
#include <cuda_runtime.h>

#include "../apps/common/cuda_check.hpp"
#define BENCH_CUDA(call) HALOX_APP_CUDA("halox-bench: ", call)
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "halox/exchange.hpp"
#include "../apps/common/agree.hpp"
#include "../apps/common/cli.hpp"
#include "../apps/common/watchdog.hpp"
#include "report.hpp"

namespace halox::bench {

namespace {

struct Result {
  double us = 0;
  std::int64_t bytes = 0;
};

// Time per exchange: `reps` exchanges back to back, the stream drained at the end.
template <class F>
double time_exchanges(int reps, cudaStream_t stream, F&& exchange) {
  for (int i = 0; i < 5; ++i) exchange();
  BENCH_CUDA(cudaStreamSynchronize(stream));
  HALOX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  const double start = MPI_Wtime();
  for (int i = 0; i < reps; ++i) exchange();
  BENCH_CUDA(cudaStreamSynchronize(stream));
  double t = (MPI_Wtime() - start) / reps, worst = 0;
  HALOX_MPI_CHECK(MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return worst * 1e6;
}

Result grid_exchange(TransportKind kind, std::int64_t bytes, int reps, cudaStream_t stream) {
  // Two ranks along z; the z face of a 1x1x1 interior of N-byte cells is the message.
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD, {1, 1, 2}, {false, false, false});
  const Datatype cell = Datatype::contiguous(bytes, Datatype::of<char>()).commit();
  GridPlan plan = build_grid_plan(topology, {1, 1, 1}, 1, cell);
  GridExchange exchange(topology, plan, {kind});
  const std::size_t field_bytes = static_cast<std::size_t>(27 * bytes);
  void* field = nullptr;
  std::vector<char> host;
  if (kind == TransportKind::host) {
    host.assign(field_bytes, 1);
    field = host.data();
  } else {
    BENCH_CUDA(cudaMalloc(&field, field_bytes));
    BENCH_CUDA(cudaMemset(field, 1, field_bytes));
    BENCH_CUDA(cudaDeviceSynchronize());  // done before the non-blocking stream reads it
  }
  Result r{time_exchanges(reps, stream, [&] { exchange.exchange_async(field, stream); }), bytes};
  if (kind != TransportKind::host) cudaFree(field);
  return r;
}

Result particle_exchange(TransportKind kind, std::int64_t bytes, int reps, cudaStream_t stream) {
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD, {1, 1, 2}, {false, false, true});
  const Box box{{10.0, 10.0, 10.0}};
  const std::int64_t items = std::max<std::int64_t>(1, bytes / 12);
  const Domain d = domain_of(topology, box, topology.rank());
  std::mt19937_64 rng(11 + topology.rank());
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> xyz;
  for (std::int64_t i = 0; i < items; ++i) {  // all within reach of the lower neighbour
    xyz.push_back(10.0 * u(rng));
    xyz.push_back(10.0 * u(rng));
    xyz.push_back(d.lo[2] + 1.5 * u(rng));
  }
  ParticlePlan plan = build_particle_plan(topology, box, 2.0, xyz);
  ParticleExchange exchange(topology, plan, BasicKind::float32, {kind});
  std::vector<float> x(xyz.begin(), xyz.end());
  void* device = nullptr;
  BENCH_CUDA(cudaMalloc(&device, x.size() * sizeof(float)));
  BENCH_CUDA(cudaMemcpy(device, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaDeviceSynchronize());  // landed before the non-blocking stream reads it
  Result r{time_exchanges(reps, stream, [&] { exchange.forward_async(device, stream); }),
           items * 12};
  cudaFree(device);
  return r;
}

// The peer-copy ceiling between the two ranks' GPUs (NVLink on multi-GPU nodes), measured by
// rank 0 with cudaMemcpyPeerAsync; 0 when both ranks share a GPU or the peer is not visible.
double peer_copy_gbs(int my_device, int peer_device) {
  if (my_device < 0 || peer_device < 0 || my_device == peer_device) return 0;
  int access = 0;
  BENCH_CUDA(cudaDeviceCanAccessPeer(&access, my_device, peer_device));
  if (!access) return 0;
  BENCH_CUDA(cudaDeviceEnablePeerAccess(peer_device, 0));
  cudaGetLastError();  // already enabled is fine
  const std::size_t bytes = std::size_t(256) << 20;
  void *mine = nullptr, *theirs = nullptr;
  BENCH_CUDA(cudaMalloc(&mine, bytes));
  BENCH_CUDA(cudaSetDevice(peer_device));
  BENCH_CUDA(cudaMalloc(&theirs, bytes));
  BENCH_CUDA(cudaSetDevice(my_device));
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  BENCH_CUDA(cudaMemcpyPeerAsync(theirs, peer_device, mine, my_device, bytes, nullptr));
  BENCH_CUDA(cudaEventRecord(a, nullptr));
  for (int i = 0; i < 5; ++i)
    cudaMemcpyPeerAsync(theirs, peer_device, mine, my_device, bytes, nullptr);
  BENCH_CUDA(cudaEventRecord(b, nullptr));
  BENCH_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
  cudaFree(mine);
  BENCH_CUDA(cudaSetDevice(peer_device));
  cudaFree(theirs);
  BENCH_CUDA(cudaSetDevice(my_device));
  return ms > 0 ? 5.0 * bytes / (ms * 1e-3) / 1e9 : 0;
}

}  // namespace

int pingpong_main(int argc, char** argv) {
  int rank = 0, size = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  std::vector<std::string> names = {"host", "staged", "pipelined", "ipc-pulse", "ipc-fused"};
  int max_bytes = 4 << 20;
  std::string json;
  // A peer that stalls or dies ends the job with a message: the start-up's collectives and
  // each transport's set-up are watched; the exchanges time out themselves.
  halox::apps::Watchdog watchdog("halox-bench pingpong", rank, "start-up",
                                 halox::apps::kSetupSeconds);
  halox::apps::check_input_collectively(MPI_COMM_WORLD, "halox-bench pingpong", argc, argv, [&] {
    halox::apps::CommandLine line(
        "halox-bench pingpong",
        "Latency and bandwidth of an N-byte exchange (both ranks send at once), 1 B .. 4 MiB,\n"
        "per transport, beside cudaMemcpy device-to-device of the same size (same run).\n"
        "Run it as mpiexec -n 2 halox-bench pingpong [options].");
    line.list("--transports", names,
              "default host,staged,pipelined,ipc-pulse,ipc-fused (NVSHMEM and NCCL by name: "
              "nvshmem-stream, nvshmem-pulse, nvshmem-fused, nccl, nccl-device, mpi-direct)");
    line.count("--max-bytes", max_bytes, "the largest message", 1);
    line.output("--json", json, "also write the rows as JSON");
    line.parse(argc, argv);
  });
  if (size != 2) throw Error("halox-bench pingpong: run it on 2 ranks");
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<Row> rows;
  int device = -1;
  BENCH_CUDA(cudaGetDevice(&device));
  int devices[2] = {-1, -1};
  HALOX_MPI_CHECK(MPI_Allgather(&device, 1, MPI_INT, devices, 1, MPI_INT, MPI_COMM_WORLD));
  const double peer = rank == 0 ? peer_copy_gbs(devices[0], devices[1]) : 0;
  if (rank == 0) {
    std::printf("halox-bench pingpong: 2 ranks, %s, %s\n", host_name().c_str(), today().c_str());
    std::printf("one exchange = both ranks send N bytes to each other at once\n");
    if (peer > 0) {
      std::printf(
          "peer copy GPU %d -> GPU %d (measured now): %.1f GB/s, the ceiling of one direction\n",
          devices[0], devices[1], peer);
    } else {
      std::printf("both ranks on GPU %d (no peer copy ceiling; MPS shares the GPU)\n", devices[0]);
    }
  }
  for (const auto& name : names) {
    watchdog.beat("a transport");
    const TransportKind kind = parse_transport(name);
    std::string why;
    if (!transport_available(kind, &why)) {
      if (rank == 0) std::printf("\n# %s: skipped (%s)\n", name.c_str(), why.c_str());
      continue;
    }
    if (rank == 0) {
      std::printf("\n# %s\n%12s %14s %14s %16s\n", name.c_str(), "# Size", "Latency (us)",
                  "Bandwidth (MB/s)", "D2D memcpy (us)");
    }
    // The GPU-initiated transports are timed on their particle kernels (12-byte items).
    for (std::int64_t bytes = gpu_initiated(kind) ? 12 : 1; bytes <= max_bytes; bytes *= 2) {
      const int reps = bytes <= 65536 ? 200 : 20;
      const Result r = gpu_initiated(kind) ? particle_exchange(kind, bytes, reps, stream)
                                           : grid_exchange(kind, bytes, reps, stream);
      // The same bytes through cudaMemcpyAsync device to device, same run.
      void *a = nullptr, *b = nullptr;
      BENCH_CUDA(cudaMalloc(&a, r.bytes));
      BENCH_CUDA(cudaMalloc(&b, r.bytes));
      const double copy = time_exchanges(reps, stream, [&] {
        BENCH_CUDA(cudaMemcpyAsync(b, a, r.bytes, cudaMemcpyDeviceToDevice, stream));
      });
      cudaFree(a);
      cudaFree(b);
      if (rank == 0) {
        const double mbs = r.bytes / r.us;  // bytes per us = MB/s
        std::printf("%12lld %14.2f %14.2f %16.2f\n", static_cast<long long>(r.bytes), r.us, mbs,
                    copy);
        std::fflush(stdout);
        rows.push_back(Row()
                           .set("transport", name)
                           .set("bytes", double(r.bytes))
                           .set("latency_us", r.us)
                           .set("bandwidth_mbs", mbs)
                           .set("memcpy_d2d_us", copy));
      }
    }
  }
  if (rank == 0 && !json.empty()) {
    write_json(
        json, "pingpong",
        {{"host", host_name()}, {"halox", HALOX_VERSION}, {"peer_copy_gbs", std::to_string(peer)}},
        rows);
    std::printf("\nwrote %s\n", json.c_str());
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace halox::bench
