// host: CPU arrays, MPI on host memory. Per stage: post the receives, pack, send, copy the
// messages a rank sends to itself, wait, unpack.
#include <algorithm>

#include "halox/mpi.hpp"
#include "halox/trace.hpp"
#include "../common/growing_buffer.hpp"
#include "../common/mpi_wait.hpp"
#include "rank_links.hpp"
#include "transport.hpp"

namespace halox::detail {

int stage_count(const std::vector<Op>& ops) {
  int n = 0;
  for (const auto& op : ops) n = std::max(n, op.stage + 1);
  return n;
}

namespace {

// Host arrays of every rank of this process: a link within the process is a copy, any other
// an MPI message (rank_links.hpp).
class HostTransport final : public Transport {
 public:
  HostTransport(const Ranks& ranks, double timeout_seconds)
      : m_links(ranks),
        m_comm(ranks.processes().comm()),
        m_rank(ranks.rank(0)),
        m_timeout(timeout_seconds) {}
  std::string name() const override { return "host"; }
  Capabilities capabilities() const override { return {}; }

  void connect(const Connection& connection) override {
    Transport::connect(connection);
    for (const Direction d : {Direction::forward, Direction::reverse}) {
      m_links.check_tags(connection.ops(d), m_comm, "host");
      m_source[d == Direction::forward] = m_links.local_sources(connection.ops(d), "host");
    }
  }

  void run_async(Direction direction, std::span<void* const> fields,
                 std::span<const GpuStream> streams, ExchangeStats& stats) override {
    const GpuStream stream = streams.front();  // one GPU
    const std::vector<Op>& ops = this->ops(direction);
    const std::vector<int>& source = m_source[direction == Direction::forward];
    const int ranks = m_connection->ranks;
    auto field = [&](const Op& op) { return fields[op.field * ranks + op.rank]; };
    m_send.resize(ops.size());
    m_recv.resize(ops.size());
    for (int stage = 0; stage < stage_count(ops); ++stage) {
      MessageWait& requests = m_wait;  // reused: no allocation per exchange
      requests.clear();
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.recv_rank < 0 || source[i] >= 0) continue;
        MPI_Request r;
        HALOX_MPI_CHECK(MPI_Irecv(m_recv[i].at_least(op.recv_bytes),
                                  static_cast<int>(op.recv_bytes), MPI_BYTE,
                                  m_links.process(op.recv_rank), m_links.recv_tag(op), m_comm, &r));
        requests.add({r, op.recv_rank, op.recv_bytes, &op.name});
      }
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.send_rank < 0) continue;
        char* out = m_send[i].at_least(op.send_bytes);
        op.pack(field(op), out, 0, op.send_bytes, stream);
        if (op.send_rank == m_links.me(op)) continue;
        stats.messages += 1;
        stats.bytes_sent += op.send_bytes;
        if (!m_links.remote(op.send_rank, op)) continue;  // the receiver's op copies it
        MPI_Request r;
        HALOX_MPI_CHECK(MPI_Isend(out, static_cast<int>(op.send_bytes), MPI_BYTE,
                                  m_links.process(op.send_rank), m_links.send_tag(op), m_comm, &r));
        requests.add({r, op.send_rank, -1, &op.name});
      }
      if (!requests.empty()) {
        trace::Scope scope("wait: MPI", m_rank);
        requests.wait({m_rank, "host", m_timeout});
        stats.host_waits += 1;
      }
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.recv_rank < 0) continue;
        // A message from a rank of this process is unpacked straight from its send buffer.
        const char* in = source[i] >= 0 ? m_send[source[i]].get() : m_recv[i].get();
        op.unpack(field(op), in, 0, op.recv_bytes, stream);
      }
    }
    stats.exchanges += 1;
  }

 private:
  RankLinks m_links;
  MPI_Comm m_comm;
  int m_rank;  // this process's first rank (for its messages and traces)
  double m_timeout;
  std::vector<int> m_source[2];  // local_sources per direction (reverse, forward)
  std::vector<HostBuffer> m_send, m_recv;
  MessageWait m_wait;
};

}  // namespace

std::unique_ptr<Transport> make_host_transport(const Ranks& ranks, double timeout_seconds) {
  return std::make_unique<HostTransport>(ranks, timeout_seconds);
}

}  // namespace halox::detail
