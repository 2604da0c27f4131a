// halox-bench pingpong: osu_latency and osu_bw through each halox transport, 1 B .. 4 MiB,
// on the CPU (the host transport) and on the GPU.
//  - latency (osu_latency): half a round trip: rank 0's N bytes reach rank 1, which then
//    sends N bytes back;
//  - bandwidth (osu_bw): a window of 64 messages of N bytes from rank 0 to rank 1, back to
//    back, then rank 1's 4-byte reply; N x 64 over that time.
// A message is one halo exchange whose plan moves one N-byte face one way: the z+ pulse of a
// non-periodic 1x1x2 grid of N-byte cells (rank 0 to rank 1), or its z- pulse (back). The
// reference, measured in the same run at each size, is what a user writes without halox:
// MPI_Send / MPI_Recv of host memory for the host transport, and for the device transports
// the hand-staged path (cudaMemcpy to pinned host memory, MPI, cudaMemcpy back: seed 002's
// "Default"). Every size's messages are checked: random bytes (seed printed) against the
// receiver's poisoned halo.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "halox/config.hpp"
#include "halox/device.hpp"
#include "halox/error.hpp"
#include "halox/exchange.hpp"
#include "halox/mpi.hpp"
#include "../apps/common/agree.hpp"
#include "../apps/common/cli.hpp"
#include "../apps/common/mpi_main.hpp"
#include "../apps/common/watchdog.hpp"
#include "report.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>

#include "../apps/common/cuda_check.hpp"
#define BENCH_CUDA(call) HALOX_APP_CUDA("halox-bench pingpong: ", call)
#endif

namespace halox::bench {

namespace {

constexpr int kWindow = 64;   // osu_bw's window
constexpr int kAckBytes = 4;  // osu_bw's reply
constexpr int kWarmUp = 10;   // untimed round trips (windows) before each timing
constexpr int kPingTag = 1, kAckTag = 2;

struct Figures {
  double latency_us = 0;
  double bandwidth_mbs = 0;
};

// N-byte cells on a 1x1x1 interior with a halo of 1: 27 cells, x fastest. Rank 0 sends its
// interior cell (13) to rank 1's lower halo cell (4); rank 1 sends its interior cell to
// rank 0's upper halo cell (22).
constexpr std::int64_t kInterior = 13, kLowerHalo = 4, kUpperHalo = 22;

// One direction of the 1x1x2 grid's z pulses: +1 from rank 0 to rank 1, -1 back.
GridPlan one_way(const GridPlan& both, int direction) {
  GridPlan plan = both;
  plan.pulses.clear();
  for (const GridPulse& p : both.pulses) {
    if (p.header.axis == Z && p.header.direction == direction) plan.pulses.push_back(p);
  }
  return plan;
}

// The memory a transport moves: host memory for the host transport, else device memory.
class Field {
 public:
  Field(std::size_t bytes, bool device) : m_bytes(bytes), m_device(device) {
#if HALOX_HAS_CUDA
    if (device) {
      BENCH_CUDA(cudaMalloc(&m_data, bytes));
      return;
    }
#endif
    m_host.assign(bytes, 0);
    m_data = m_host.data();
  }
  ~Field() {
#if HALOX_HAS_CUDA
    if (m_device) cudaFree(m_data);
#endif
  }
  Field(const Field&) = delete;
  Field& operator=(const Field&) = delete;
  void* data() const {
    return m_data;
  }
  void write(std::int64_t offset, const std::vector<unsigned char>& bytes) {
#if HALOX_HAS_CUDA
    if (m_device) {
      BENCH_CUDA(cudaMemcpy(static_cast<char*>(m_data) + offset, bytes.data(), bytes.size(),
                            cudaMemcpyHostToDevice));
      return;
    }
#endif
    std::memcpy(static_cast<char*>(m_data) + offset, bytes.data(), bytes.size());
  }
  std::vector<unsigned char> read(std::int64_t offset, std::size_t n) const {
    std::vector<unsigned char> out(n);
#if HALOX_HAS_CUDA
    if (m_device) {
      BENCH_CUDA(cudaMemcpy(out.data(), static_cast<const char*>(m_data) + offset, n,
                            cudaMemcpyDeviceToHost));
      return out;
    }
#endif
    std::memcpy(out.data(), static_cast<const char*>(m_data) + offset, n);
    return out;
  }

 private:
  std::size_t m_bytes;
  bool m_device;
  void* m_data = nullptr;
  std::vector<unsigned char> m_host;
};

class Stream {
 public:
  explicit Stream(bool device) {
#if HALOX_HAS_CUDA
    if (device) BENCH_CUDA(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
#endif
  }
  ~Stream() {
#if HALOX_HAS_CUDA
    if (m_stream) cudaStreamDestroy(m_stream);
#endif
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  GpuStream get() const {
    return m_stream;
  }
  void synchronize() const {
#if HALOX_HAS_CUDA
    if (m_stream) BENCH_CUDA(cudaStreamSynchronize(m_stream));
#endif
  }

 private:
  GpuStream m_stream = nullptr;
};

// Rank 0's time of `reps` rounds after kWarmUp untimed ones, the stream drained after each
// batch (the device transports queue their work on it).
template <class F>
double time_rounds(int reps, const Stream& stream, F&& round) {
  for (int i = 0; i < kWarmUp; ++i) round();
  stream.synchronize();
  halox::apps::barrier("the barrier before a timing");
  const double start = MPI_Wtime();
  for (int i = 0; i < reps; ++i) round();
  stream.synchronize();
  return MPI_Wtime() - start;
}

// osu_bw runs a tenth of osu_latency's iterations (its windows are 64 messages each).
int windows_of(int reps) {
  return std::max(1, reps / 10);
}

Figures figures(std::int64_t bytes, int reps, double latency_seconds, double window_seconds) {
  return {latency_seconds / (2.0 * reps) * 1e6,
          static_cast<double>(bytes) * kWindow * windows_of(reps) / window_seconds / 1e6};
}

// halox: the ping, pong and reply exchanges of one size through one transport.
Figures through_halox(TransportKind kind, std::int64_t bytes, int reps, const Stream& stream,
                      std::mt19937_64& rng, const char* name) {
  const Topology topology = Topology::from_mpi(MPI_COMM_WORLD, {1, 1, 2}, {false, false, false});
  const int rank = topology.rank();
  const Datatype cell = Datatype::contiguous(bytes, Datatype::of<char>()).commit();
  const GridPlan both = build_grid_plan(topology, {1, 1, 1}, 1, cell);
  const ExchangeOptions options{kind};
  GridExchange ping(topology, one_way(both, +1), options);
  GridExchange pong(topology, one_way(both, -1), options);
  const Datatype ack_cell = Datatype::contiguous(kAckBytes, Datatype::of<char>()).commit();
  GridExchange reply(topology, one_way(build_grid_plan(topology, {1, 1, 1}, 1, ack_cell), -1),
                     options);
  const bool device = kind != TransportKind::host;
  Field field(static_cast<std::size_t>(27 * bytes), device);
  Field ack_field(27 * kAckBytes, device);

  // The check: rank 0's random bytes arrive in rank 1's poisoned halo, and back.
  auto random_bytes = [&] {
    std::vector<unsigned char> v(static_cast<std::size_t>(bytes));
    for (auto& c : v) c = static_cast<unsigned char>(rng());
    return v;
  };
  const std::vector<unsigned char> poison(static_cast<std::size_t>(bytes), 0xA5);
  int wrong = 0;
  for (const int direction : {+1, -1}) {
    const bool sends = (direction > 0) == (rank == 0);
    const std::vector<unsigned char> sent = random_bytes();  // the same on both ranks
    const std::int64_t halo = (direction > 0 ? kLowerHalo : kUpperHalo) * bytes;
    if (sends)
      field.write(kInterior * bytes, sent);
    else
      field.write(halo, poison);
    (direction > 0 ? ping : pong).exchange_async(field.data(), stream.get());
    stream.synchronize();
    if (!sends && field.read(halo, sent.size()) != sent) ++wrong;
  }
  int wrong_anywhere = 0;
  halox::apps::allreduce(&wrong, &wrong_anywhere, 1, MPI_INT, MPI_SUM, "the message check");
  if (wrong_anywhere) {
    throw Error(std::string("halox-bench pingpong: ") + name + ": a message of " +
                std::to_string(bytes) + " bytes arrived wrong");
  }

  const double round_trips = time_rounds(reps, stream, [&] {
    ping.exchange_async(field.data(), stream.get());
    pong.exchange_async(field.data(), stream.get());
  });
  const double windows = time_rounds(windows_of(reps), stream, [&] {
    for (int i = 0; i < kWindow; ++i) ping.exchange_async(field.data(), stream.get());
    reply.exchange_async(ack_field.data(), stream.get());
  });
  return figures(bytes, reps, round_trips, windows);
}

// What a user writes without halox: MPI on host memory, and for device memory each message
// copied through pinned host memory by the application.
class Reference {
 public:
  Reference(std::int64_t bytes, bool device) : m_bytes(bytes), m_device(device) {
#if HALOX_HAS_CUDA
    if (device) {
      BENCH_CUDA(cudaMalloc(&m_gpu, static_cast<std::size_t>(bytes)));
      BENCH_CUDA(cudaMallocHost(&m_pinned, static_cast<std::size_t>(bytes) * kWindow));
      return;
    }
#endif
    m_host.assign(static_cast<std::size_t>(bytes) * kWindow, 1);
  }
  ~Reference() {
#if HALOX_HAS_CUDA
    if (m_device) {
      cudaFree(m_gpu);
      cudaFreeHost(m_pinned);
    }
#endif
  }
  Reference(const Reference&) = delete;
  Reference& operator=(const Reference&) = delete;

  Figures measure(int reps, const Stream& stream) {
    int rank = 0;
    HALOX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    const double round_trips = time_rounds(reps, stream, [&] {
      if (rank == 0) {
        send(0, 1, kPingTag);
        receive(0, 1, kPingTag);
      } else {
        receive(0, 0, kPingTag);
        send(0, 0, kPingTag);
      }
    });
    const double windows = time_rounds(windows_of(reps), stream, [&] { window(rank); });
    return figures(m_bytes, reps, round_trips, windows);
  }

 private:
  char* staging(int k) {
    return (m_device ? m_pinned : m_host.data()) + static_cast<std::size_t>(k) * m_bytes;
  }
  void to_host(int k) {
#if HALOX_HAS_CUDA
    if (m_device)
      BENCH_CUDA(
          cudaMemcpy(staging(k), m_gpu, static_cast<std::size_t>(m_bytes), cudaMemcpyDeviceToHost));
#endif
    (void)k;
  }
  void to_device(int k) {
#if HALOX_HAS_CUDA
    if (m_device)
      BENCH_CUDA(
          cudaMemcpy(m_gpu, staging(k), static_cast<std::size_t>(m_bytes), cudaMemcpyHostToDevice));
#endif
    (void)k;
  }
  void send(int k, int peer, int tag) {
    to_host(k);
    HALOX_MPI_CHECK(
        MPI_Send(staging(k), static_cast<int>(m_bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD));
  }
  void receive(int k, int peer, int tag) {
    HALOX_MPI_CHECK(MPI_Recv(staging(k), static_cast<int>(m_bytes), MPI_BYTE, peer, tag,
                             MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    to_device(k);
  }
  // osu_bw's loop: rank 0 sends the window (each message staged first), rank 1 receives
  // it (each message copied to the GPU as it is taken) and replies.
  void window(int rank) {
    MPI_Request requests[kWindow];
    char ack[kAckBytes] = {};
    for (int k = 0; k < kWindow; ++k) {
      if (rank == 0) {
        to_host(k);
        HALOX_MPI_CHECK(MPI_Isend(staging(k), static_cast<int>(m_bytes), MPI_BYTE, 1, kPingTag,
                                  MPI_COMM_WORLD, &requests[k]));
      } else {
        HALOX_MPI_CHECK(MPI_Irecv(staging(k), static_cast<int>(m_bytes), MPI_BYTE, 0, kPingTag,
                                  MPI_COMM_WORLD, &requests[k]));
      }
    }
    HALOX_MPI_CHECK(MPI_Waitall(kWindow, requests, MPI_STATUSES_IGNORE));
    if (rank == 0) {
      HALOX_MPI_CHECK(
          MPI_Recv(ack, kAckBytes, MPI_BYTE, 1, kAckTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    } else {
      for (int k = 0; k < kWindow; ++k) to_device(k);
      HALOX_MPI_CHECK(MPI_Send(ack, kAckBytes, MPI_BYTE, 0, kAckTag, MPI_COMM_WORLD));
    }
  }

  std::int64_t m_bytes;
  bool m_device;
  std::vector<char> m_host;
  char* m_pinned = nullptr;
  void* m_gpu = nullptr;
};

struct PingpongOptions {
  std::vector<std::string> transports;
  int max_bytes = 4 << 20;
  int iterations = 0;
  std::string json;
  unsigned long long seed = 0;
};

}  // namespace

int pingpong_main(int argc, char** argv) {
  int rank = 0, size = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  // A peer that stalls or dies ends the job with a message: each size is watched (its
  // set-up, its checks and MPI's blocking calls); halox's exchanges time out themselves.
  halox::apps::Watchdog watchdog("halox-bench pingpong", rank, "start-up",
                                 halox::apps::kSetupSeconds);
  const bool gpu = visible_gpus() > 0;
  PingpongOptions o;
  halox::apps::check_input_collectively(MPI_COMM_WORLD, "halox-bench pingpong", argc, argv, [&] {
    halox::apps::CommandLine line(
        "halox-bench pingpong",
        "osu_latency (half a round trip) and osu_bw (a window of 64 messages, then a 4-byte\n"
        "reply) through each halox transport, 1 B .. 4 MiB, beside what a user writes without\n"
        "halox, measured in the same run: MPI_Send/MPI_Recv of host memory for the host\n"
        "transport; for device memory, cudaMemcpy to pinned host memory, MPI, cudaMemcpy back.\n"
        "Run it as mpiexec -n 2 halox-bench pingpong [options].");
    line.list("--transports", o.transports,
              "default host on the CPU; staged,pipelined,ipc-pulse,ipc-fused on a GPU (also by "
              "name: host, nvshmem-stream, nvshmem-pulse, nvshmem-fused, nccl, mpi-direct)");
    line.count("--max-bytes", o.max_bytes, "the largest message (osu's -m)", 1);
    line.count("--iterations", o.iterations,
               "timed round trips and windows per size (osu's -i); 0: 1000 up to 64 KiB, then "
               "100 (osu_latency's defaults; osu_bw's are 100 and 20)");
    line.output("--json", o.json, "also write the rows as JSON");
    line.parse(argc, argv);
    if (o.transports.empty()) {
      o.transports =
          gpu ? std::vector<std::string>{"host", "staged", "pipelined", "ipc-pulse", "ipc-fused"}
              : std::vector<std::string>{"host"};
    }
    for (const std::string& name : o.transports) {
      const TransportKind kind = parse_transport(name);  // an unknown name: input error
      if (kind == TransportKind::nccl_device || kind == TransportKind::local_pulse ||
          kind == TransportKind::local_fused || kind == TransportKind::automatic) {
        throw Error("halox-bench pingpong: --transports " + name +
                    ": not a transport between two processes' grids (nccl-device moves "
                    "particles only; local-* hold every rank in one process)");
      }
    }
  });
  if (size != 2) {
    throw halox::apps::InputError("halox-bench pingpong: run it on 2 ranks (mpiexec -n 2), not " +
                                  std::to_string(size));
  }
  // One seed for both ranks (rank 0's), so that each knows the bytes it should receive.
  o.seed = std::random_device{}();
  HALOX_MPI_CHECK(MPI_Bcast(&o.seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD));
  std::mt19937_64 rng(o.seed);
  if (rank == 0) {
    std::printf("# halox-bench pingpong %s: 2 ranks, %s, %s, message check seed %llu\n",
                HALOX_VERSION, host_name().c_str(), today().c_str(), o.seed);
    std::printf(
        "# latency: half a round trip (osu_latency); bandwidth: %d messages back to back, then "
        "a %d-byte reply (osu_bw)\n"
        "# reference, same run: MPI_Send/MPI_Recv of host memory (host transport); "
        "cudaMemcpy to pinned host memory + MPI + cudaMemcpy back (device transports)\n",
        kWindow, kAckBytes);
  }
  std::vector<Row> rows;
  std::map<std::pair<std::int64_t, bool>, Figures> references;  // one per size and memory
  for (const std::string& name : o.transports) {
    const TransportKind kind = parse_transport(name);
    const bool device = kind != TransportKind::host;
    std::string why;
    if (!transport_available(kind, &why) || (device && !gpu)) {
      if (rank == 0)
        std::printf("\n# %s: skipped (%s)\n", name.c_str(),
                    why.empty() ? "no GPU visible" : why.c_str());
      continue;
    }
    if (rank == 0) {
      std::printf("\n# transport %s (%s memory)\n%-10s %13s %13s %7s %17s %17s %7s\n", name.c_str(),
                  device ? "device" : "host", "# Size", "Latency (us)", "ref. (us)", "ratio",
                  "Bandwidth (MB/s)", "ref. (MB/s)", "ratio");
    }
    Stream stream(device);
    for (std::int64_t bytes = 1; bytes <= o.max_bytes; bytes *= 2) {
      watchdog.beat("a message size", halox::apps::kSetupSeconds);
      const int reps = o.iterations > 0 ? o.iterations : bytes <= 65536 ? 1000 : 100;
      const Figures got = through_halox(kind, bytes, reps, stream, rng, name.c_str());
      auto ref = references.find({bytes, device});
      if (ref == references.end()) {
        Reference reference(bytes, device);
        ref = references.emplace(std::pair{bytes, device}, reference.measure(reps, stream)).first;
      }
      const Figures& r = ref->second;
      if (rank == 0) {
        std::printf("%-10lld %13.2f %13.2f %7.2f %17.2f %17.2f %7.2f\n",
                    static_cast<long long>(bytes), got.latency_us, r.latency_us,
                    got.latency_us / r.latency_us, got.bandwidth_mbs, r.bandwidth_mbs,
                    got.bandwidth_mbs / r.bandwidth_mbs);
        std::fflush(stdout);
        rows.push_back(Row()
                           .set("transport", name)
                           .set("memory", device ? "device" : "host")
                           .set("bytes", double(bytes))
                           .set("iterations", double(reps))
                           .set("latency_us", got.latency_us)
                           .set("bandwidth_mbs", got.bandwidth_mbs)
                           .set("reference_latency_us", r.latency_us)
                           .set("reference_bandwidth_mbs", r.bandwidth_mbs)
                           .set("latency_ratio", got.latency_us / r.latency_us)
                           .set("bandwidth_ratio", got.bandwidth_mbs / r.bandwidth_mbs));
      }
    }
  }
  if (rank == 0 && !o.json.empty()) {
    write_json(o.json, "pingpong",
               {{"host", host_name()},
                {"reference",
                 "MPI_Send/MPI_Recv of host memory; for device memory staged by "
                 "cudaMemcpy through pinned host memory"},
                {"window", std::to_string(kWindow)},
                {"seed", std::to_string(o.seed)}},
               rows);
    std::printf("\nwrote %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace halox::bench
