// nvshmem-stream: NVSHMEM's stream-triggered operations, no kernel changes (seed 000's
// first step): per message, on the caller's stream, wait until the receiver has consumed
// the previous exchange (its "ready" signal), pack into the symmetric send area, put with
// signal into the receiver's symmetric area; the receiver waits for the signal on its
// stream, unpacks, and signals "ready" back. No host waits. The two waits are halox's own
// one-thread kernels with a deadline (stream_wait.hpp), not NVSHMEM's stream waits, which
// wait forever for a stalled peer.
#include <cuda_runtime.h>
#include <nvshmem_host.h>

#include <deque>
#include <sstream>
#include <string>

#include "../common/cuda_check.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "../common/mpi_tags.hpp"
#include "../common/mpi_wait.hpp"
#include "../runtime/nvshmem_runtime.hpp"
#include "../device/stream_wait.hpp"
#include "transport.hpp"
#include "../device/errors.hpp"

namespace halox::detail {

namespace {

class NvshmemStreamTransport final : public Transport {
 public:
  NvshmemStreamTransport(MPI_Comm comm, int rank, double timeout_seconds)
      : m_comm(comm), m_rank(rank), m_timeout(timeout_seconds) {}
  ~NvshmemStreamTransport() override {
    cudaDeviceSynchronize();
    for (Area& area : m_areas) symmetric_free(area.base);
    for (const Spare& spare : m_spares) symmetric_free(spare.base);
  }
  std::string name() const override { return "nvshmem-stream"; }
  Capabilities capabilities() const override { return {false, false, false, 0}; }
  // A new plan: the areas of the old op lists go at the next run.
  void connect(const Connection& connection) override {
    Transport::connect(connection);
    m_stale = true;
  }
  void check() const override {
    if (m_connection) check(ops(Direction::forward));
  }

  void run_async(Direction direction, std::span<void* const> fields,
                 std::span<const GpuStream> streams, ExchangeStats& stats) override {
    const GpuStream stream = streams.front();  // one GPU
    const std::vector<Op>& ops = this->ops(direction);
    check(ops);
    Area& area = area_for(ops);
    const std::uint64_t epoch = ++area.epoch;
    char* base = static_cast<char*>(area.base);
    for (int stage = 0; stage < stage_count(ops); ++stage) {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.send_rank < 0) continue;
        char* out = base + area.send_offset[i];
        const bool remote = op.send_rank != m_rank;
        if (remote) {
          m_waits.wait_async(area.ready_slot(i), epoch - 1, m_timeout, m_rank, op.send_rank,
                             static_cast<int>(i), kWaitReady, stream);
        }
        op.pack(fields[op.field], out, 0, op.send_bytes, stream);
        if (remote) {
          nvshmemx_putmem_signal_on_stream(
              base + area.peer_recv_offset[i], out, static_cast<std::size_t>(op.send_bytes),
              area.data_slot(i), epoch, NVSHMEM_SIGNAL_SET, op.send_rank, stream);
          stats.messages += 1;
          stats.bytes_sent += op.send_bytes;
        }
      }
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.recv_rank < 0) continue;
        if (op.recv_rank == m_rank) {
          op.unpack(fields[op.field], base + area.send_offset[i], 0, op.recv_bytes, stream);
          continue;
        }
        m_waits.wait_async(area.data_slot(i), epoch, m_timeout, m_rank, op.recv_rank,
                           static_cast<int>(i), kWaitData, stream);
        op.unpack(fields[op.field], base + area.recv_offset[i], 0, op.recv_bytes, stream);
        nvshmemx_signal_op_on_stream(area.ready_slot(i), epoch, NVSHMEM_SIGNAL_SET, op.recv_rank,
                                     stream);
      }
    }
    stats.exchanges += 1;
  }

 private:
  static constexpr int kWaitReady = 0, kWaitData = 1;

  // One symmetric area per op list (an exchange's forward and its reverse each have one, with
  // their own sizes and epochs), set up at its first use after a new plan. Set-up is
  // collective: it happens when a plan is new, which every rank learns at the same exchange,
  // never on a rank's own reading of its sizes (a rank whose sizes happened not to change
  // would skip it while the others wait).
  struct Area {
    const std::vector<Op>* ops = nullptr;
    void* base = nullptr;
    long long bytes = 0;  // what base holds (at least what the ops need)
    std::uint64_t epoch = 0;
    std::vector<long long> send_offset, recv_offset, peer_recv_offset;
    // Slot i: [data, ready] at the start of the area, the same offset on every PE.
    std::uint64_t* data_slot(std::size_t i) const {
      return static_cast<std::uint64_t*>(base) + 2 * i;
    }
    std::uint64_t* ready_slot(std::size_t i) const {
      return static_cast<std::uint64_t*>(base) + 2 * i + 1;
    }
  };

  WaitContext context() const { return {m_rank, "nvshmem-stream", m_timeout}; }

  Area& area_for(const std::vector<Op>& ops) {
    if (m_stale) {  // a new plan: the old areas' memory is kept for the new ones, in order
      HALOX_CUDA_CHECK(cudaDeviceSynchronize());
      if (!m_areas.empty()) bounded_barrier(m_comm, context(), "the nvshmem-stream re-plan");
      for (Area& area : m_areas) m_spares.push_back({area.base, area.bytes});
      m_areas.clear();
      m_stale = false;
    }
    for (Area& area : m_areas) {
      if (area.ops == &ops) return area;
    }
    return set_up(ops);
  }

  // Collective: a symmetric area of the largest size any rank needs, then each sender
  // learns where its receiver's area is. Every wait is bounded, and NVSHMEM's own barrier
  // (in nvshmem_malloc) is entered only once every rank has arrived.
  Area& set_up(const std::vector<Op>& ops) {
    auto round = [](std::int64_t n) { return (n + 255) / 256 * 256; };
    Area area;
    area.ops = &ops;
    std::int64_t at = round(static_cast<std::int64_t>(ops.size()) * 16);
    area.send_offset.assign(ops.size(), 0);
    area.recv_offset.assign(ops.size(), 0);
    area.peer_recv_offset.assign(ops.size(), 0);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      area.recv_offset[i] = at;
      at += round(ops[i].recv_bytes);
      area.send_offset[i] = at;
      at += round(ops[i].send_bytes);
    }
    ensure_nvshmem(m_comm, at);
    const long long most = bounded_max(m_comm, at, context(), "the nvshmem-stream set-up");
    take_memory(area, most);
    detail::fill_device_now(area.base, 0, static_cast<std::size_t>(ops.size()) * 16);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      MPI_Request r;
      if (ops[i].send_rank >= 0) {
        HALOX_MPI_CHECK(MPI_Irecv(&area.peer_recv_offset[i], 1, MPI_LONG_LONG, ops[i].send_rank,
                                  detail::tags::kNvshmemOffsets + static_cast<int>(i), m_comm, &r));
        m_offsets.add(
            {r, ops[i].send_rank, static_cast<std::int64_t>(sizeof(long long)), &ops[i].name});
      }
      if (ops[i].recv_rank >= 0) {
        HALOX_MPI_CHECK(MPI_Isend(&area.recv_offset[i], 1, MPI_LONG_LONG, ops[i].recv_rank,
                                  detail::tags::kNvshmemOffsets + static_cast<int>(i), m_comm, &r));
        m_offsets.add({r, ops[i].recv_rank, -1, &ops[i].name});
      }
    }
    m_offsets.wait(context());
    // Every area zeroed before anyone signals into it.
    bounded_barrier(m_comm, context(), "the nvshmem-stream set-up");
    m_areas.push_back(std::move(area));
    return m_areas.back();
  }

  // The area's symmetric memory: a kept one that holds `most` bytes, else a new one with
  // room to grow. nvshmem_malloc and nvshmem_free are collective and wait without a bound
  // in NVSHMEM's own barrier: a rank stopped between the bounded barrier before them and
  // theirs left its peers there for ever (a stop at a random moment of a run searching
  // every step, 2026-12-05). Kept memory makes a re-plan that fits call neither. Every rank
  // decides alike: the spares and `most` are the same on all.
  void take_memory(Area& area, long long most) {
    for (auto it = m_spares.begin(); it != m_spares.end(); ++it) {
      if (it->bytes < most) continue;
      area.base = it->base;
      area.bytes = it->bytes;
      m_spares.erase(it);
      return;
    }
    for (const Spare& spare : m_spares) symmetric_free(spare.base);  // all too small
    m_spares.clear();
    area.bytes = 2 * most;  // room for the plans of later searches
    area.base = symmetric_alloc(area.bytes);
  }

  // A wait that timed out (in an earlier exchange's stream work) is an error naming the
  // ranks and the pulse.
  void check(const std::vector<Op>& ops) const {
    const auto f = m_waits.failure();
    if (!f) return;
    const ErrorRecord e{1, f->rank, f->peer, f->pulse, f->kind, f->seen, f->expected};
    ErrorWording w;
    w.transport = "nvshmem-stream";
    w.timeout_seconds = m_timeout;
    w.pulse = [&ops](int, int pulse) {
      return pulse >= 0 && pulse < static_cast<int>(ops.size()) ? ops[pulse].name
                                                                : "pulse " + std::to_string(pulse);
    };
    w.waited_for = [](int kind) {
      return std::string(kind == kWaitData ? "the halo data it sends"
                                           : "to take this rank's previous message");
    };
    check_device_error(e, w);
  }

  MPI_Comm m_comm;
  int m_rank;
  double m_timeout;
  StreamWaits m_waits;
  MessageWait m_offsets;
  std::deque<Area> m_areas;  // stable references while more are added
  struct Spare {
    void* base;
    long long bytes;
  };
  std::vector<Spare> m_spares;  // the memory of the areas of earlier plans, in creation order
  bool m_stale = false;
};

}  // namespace

std::unique_ptr<Transport> make_nvshmem_stream_transport(MPI_Comm comm, int rank,
                                                         double timeout_seconds) {
  return std::make_unique<NvshmemStreamTransport>(comm, rank, timeout_seconds);
}

}  // namespace halox::detail
