// host: CPU arrays, MPI on host memory. Per stage: post the receives, pack, send, copy the
// messages a rank sends to itself, wait, unpack.
#include <algorithm>

#include "halox/mpi.hpp"
#include "halox/trace.hpp"
#include "../common/growing_buffer.hpp"
#include "../common/mpi_wait.hpp"
#include "transport.hpp"

namespace halox::detail {

int stage_count(const std::vector<Op>& ops) {
  int n = 0;
  for (const auto& op : ops) n = std::max(n, op.stage + 1);
  return n;
}

namespace {

class HostTransport final : public Transport {
 public:
  HostTransport(MPI_Comm comm, int rank, double timeout_seconds)
      : m_comm(comm), m_rank(rank), m_timeout(timeout_seconds) {}
  std::string name() const override { return "host"; }
  Capabilities capabilities() const override { return {}; }

  void run_async(Direction direction, std::span<void* const> fields,
                 std::span<const GpuStream> streams, ExchangeStats& stats) override {
    const GpuStream stream = streams.front();  // one GPU
    const std::vector<Op>& ops = this->ops(direction);
    m_send.resize(ops.size());
    m_recv.resize(ops.size());
    for (int stage = 0; stage < stage_count(ops); ++stage) {
      MessageWait& requests = m_wait;  // reused: no allocation per exchange
      requests.clear();
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.recv_rank < 0 || op.recv_rank == m_rank) continue;
        MPI_Request r;
        HALOX_MPI_CHECK(MPI_Irecv(m_recv[i].at_least(op.recv_bytes),
                                  static_cast<int>(op.recv_bytes), MPI_BYTE, op.recv_rank, op.tag,
                                  m_comm, &r));
        requests.add({r, op.recv_rank, op.recv_bytes, &op.name});
      }
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.send_rank < 0) continue;
        char* out = m_send[i].at_least(op.send_bytes);
        op.pack(fields[op.field], out, 0, op.send_bytes, stream);
        if (op.send_rank == m_rank) continue;
        MPI_Request r;
        HALOX_MPI_CHECK(MPI_Isend(out, static_cast<int>(op.send_bytes), MPI_BYTE, op.send_rank,
                                  op.tag, m_comm, &r));
        requests.add({r, op.send_rank, -1, &op.name});
        stats.messages += 1;
        stats.bytes_sent += op.send_bytes;
      }
      if (!requests.empty()) {
        trace::Scope scope("wait: MPI", m_rank);
        requests.wait({m_rank, "host", m_timeout});
        stats.host_waits += 1;
      }
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.recv_rank < 0) continue;
        // A message to myself is unpacked straight from its send buffer.
        const char* in = op.recv_rank == m_rank ? m_send[i].get() : m_recv[i].get();
        op.unpack(fields[op.field], in, 0, op.recv_bytes, stream);
      }
    }
    stats.exchanges += 1;
  }

 private:
  MPI_Comm m_comm;
  int m_rank;
  double m_timeout;
  std::vector<HostBuffer> m_send, m_recv;
  MessageWait m_wait;
};

}  // namespace

std::unique_ptr<Transport> make_host_transport(MPI_Comm comm, int rank, double timeout_seconds) {
  return std::make_unique<HostTransport>(comm, rank, timeout_seconds);
}

}  // namespace halox::detail
