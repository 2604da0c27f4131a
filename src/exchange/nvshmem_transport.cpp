// nvshmem-stream: NVSHMEM's stream-triggered operations, no kernel changes (seed 000's
// first step): per message, on the caller's stream, wait until the receiver has consumed
// the previous exchange (its "ready" signal), pack into the symmetric send area, put with
// signal into the receiver's symmetric area; the receiver waits for the signal on its
// stream, unpacks, and signals "ready" back. No host waits. The two waits are halox's own
// one-thread kernels with a deadline (stream_wait.hpp), not NVSHMEM's stream waits, which
// wait forever for a stalled peer.
#include <cuda_runtime.h>
#include <nvshmem_host.h>

#include <sstream>
#include <string>

#include "../common/cuda_check.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "../common/mpi_tags.hpp"
#include "nvshmem_runtime.hpp"
#include "stream_wait.hpp"
#include "transport.hpp"

namespace halox::detail {

namespace {

class NvshmemStreamTransport final : public Transport {
 public:
  NvshmemStreamTransport(MPI_Comm comm, int rank, double timeout_seconds)
      : m_comm(comm), m_rank(rank), m_timeout(timeout_seconds) {}
  ~NvshmemStreamTransport() override {
    cudaDeviceSynchronize();
    symmetric_free(m_base);
  }
  std::string name() const override { return "nvshmem-stream"; }

  void run(const std::vector<Op>& ops, void* field, GpuStream stream,
           ExchangeStats& stats) override {
    check(ops);
    if (!m_base || layout_changed(ops)) setup(ops);
    const std::uint64_t epoch = ++m_epoch;
    char* base = static_cast<char*>(m_base);
    for (int stage = 0; stage < stage_count(ops); ++stage) {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.send_rank < 0) continue;
        char* out = base + m_send_offset[i];
        const bool remote = op.send_rank != m_rank;
        if (remote) {
          m_waits.wait_async(ready_slot(i), epoch - 1, m_timeout, m_rank, op.send_rank,
                             static_cast<int>(i), kWaitReady, stream);
        }
        op.pack(field, out, 0, op.send_bytes, stream);
        if (remote) {
          nvshmemx_putmem_signal_on_stream(base + m_peer_recv_offset[i], out,
                                           static_cast<std::size_t>(op.send_bytes), data_slot(i),
                                           epoch, NVSHMEM_SIGNAL_SET, op.send_rank, stream);
          stats.messages += 1;
          stats.bytes_sent += op.send_bytes;
        }
      }
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.recv_rank < 0) continue;
        if (op.recv_rank == m_rank) {
          op.unpack(field, base + m_send_offset[i], 0, op.recv_bytes, stream);
          continue;
        }
        m_waits.wait_async(data_slot(i), epoch, m_timeout, m_rank, op.recv_rank,
                           static_cast<int>(i), kWaitData, stream);
        op.unpack(field, base + m_recv_offset[i], 0, op.recv_bytes, stream);
        nvshmemx_signal_op_on_stream(ready_slot(i), epoch, NVSHMEM_SIGNAL_SET, op.recv_rank,
                                     stream);
      }
    }
    stats.exchanges += 1;
  }

 private:
  static constexpr int kWaitReady = 0, kWaitData = 1;

  // A wait that timed out (in an earlier exchange's stream work) is an error naming the
  // ranks and the pulse.
  void check(const std::vector<Op>& ops) const {
    const auto f = m_waits.failure();
    if (!f) return;
    const std::string pulse = f->pulse >= 0 && f->pulse < static_cast<int>(ops.size())
                                  ? ops[f->pulse].name
                                  : "pulse " + std::to_string(f->pulse);
    std::ostringstream s;
    s << "halox: rank " << f->rank << " timed out after " << m_timeout << " s on " << pulse
      << " waiting for rank " << f->peer
      << (f->kind == kWaitData ? " (the halo data it sends)"
                               : " (to take this rank's previous message)")
      << ": signal " << f->seen << ", expected " << f->expected
      << " (nvshmem-stream transport). The exchange is unusable; is rank " << f->peer
      << " stalled or its plan different?";
    throw HaloTimeoutError(s.str());
  }

  // Slot i: [data, ready] at the start of the symmetric area, the same offset on every PE.
  std::uint64_t* data_slot(std::size_t i) const {
    return static_cast<std::uint64_t*>(m_base) + 2 * i;
  }
  std::uint64_t* ready_slot(std::size_t i) const {
    return static_cast<std::uint64_t*>(m_base) + 2 * i + 1;
  }

  bool layout_changed(const std::vector<Op>& ops) const {
    if (ops.size() != m_sizes.size()) return true;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (m_sizes[i] != std::make_pair(ops[i].send_bytes, ops[i].recv_bytes)) return true;
    }
    return false;
  }

  // Collective (every rank runs its first exchange together): a symmetric area of the
  // largest size any rank needs, then each sender learns where its receiver's area is.
  void setup(const std::vector<Op>& ops) {
    auto round = [](std::int64_t n) { return (n + 255) / 256 * 256; };
    std::int64_t at = round(static_cast<std::int64_t>(ops.size()) * 16);
    m_sizes.clear();
    m_send_offset.assign(ops.size(), 0);
    m_recv_offset.assign(ops.size(), 0);
    m_peer_recv_offset.assign(ops.size(), 0);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      m_sizes.emplace_back(ops[i].send_bytes, ops[i].recv_bytes);
      m_recv_offset[i] = at;
      at += round(ops[i].recv_bytes);
      m_send_offset[i] = at;
      at += round(ops[i].send_bytes);
    }
    ensure_nvshmem(m_comm, at);
    long long need = at, most = 0;
    HALOX_MPI_CHECK(MPI_Allreduce(&need, &most, 1, MPI_LONG_LONG, MPI_MAX, m_comm));
    HALOX_CUDA_CHECK(cudaDeviceSynchronize());
    symmetric_free(m_base);
    m_base = symmetric_alloc(most);
    detail::fill_device_now(m_base, 0, static_cast<std::size_t>(ops.size()) * 16);
    m_epoch = 0;
    std::vector<MPI_Request> requests;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      MPI_Request r;
      if (ops[i].send_rank >= 0) {
        HALOX_MPI_CHECK(MPI_Irecv(&m_peer_recv_offset[i], 1, MPI_LONG_LONG, ops[i].send_rank,
                                  detail::tags::kNvshmemOffsets + static_cast<int>(i), m_comm, &r));
        requests.push_back(r);
      }
      if (ops[i].recv_rank >= 0) {
        HALOX_MPI_CHECK(MPI_Isend(&m_recv_offset[i], 1, MPI_LONG_LONG, ops[i].recv_rank,
                                  detail::tags::kNvshmemOffsets + static_cast<int>(i), m_comm, &r));
        requests.push_back(r);
      }
    }
    HALOX_MPI_CHECK(
        MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
    HALOX_MPI_CHECK(MPI_Barrier(m_comm));  // every area zeroed before anyone signals into it
  }

  MPI_Comm m_comm;
  int m_rank;
  double m_timeout;
  StreamWaits m_waits;
  void* m_base = nullptr;
  std::uint64_t m_epoch = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> m_sizes;
  std::vector<long long> m_send_offset, m_recv_offset, m_peer_recv_offset;
};

}  // namespace

std::unique_ptr<Transport> make_nvshmem_stream_transport(MPI_Comm comm, int rank,
                                                         double timeout_seconds) {
  return std::make_unique<NvshmemStreamTransport>(comm, rank, timeout_seconds);
}

}  // namespace halox::detail
