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

// Ranks of this process and of others: a link between two ranks of this process is a copy
// (the sender's packed bytes unpacked by the receiver's op), any other an MPI message
// between the processes that hold them. Several ranks per process (Ranks::blocks) tell their
// messages apart by tag: the pulse's, times the ranks per process, plus the receiver's index
// (one rank per process: the pulse's tag itself).
class HostTransport final : public Transport {
 public:
  HostTransport(const Ranks& ranks, double timeout_seconds)
      : m_ranks(ranks),
        m_comm(ranks.processes().comm()),
        m_rank(ranks.rank(0)),
        m_timeout(timeout_seconds) {}
  std::string name() const override { return "host"; }
  Capabilities capabilities() const override { return {}; }

  void connect(const Connection& connection) override {
    Transport::connect(connection);
    int most = 0;
    for (const Direction d : {Direction::forward, Direction::reverse}) {
      m_source[d == Direction::forward] = local_sources(connection.ops(d));
      for (const Op& op : connection.ops(d))
        most = std::max(most, tag(op.tag, connection.ranks - 1));
    }
    int* upper = nullptr;
    int found = 0;
    HALOX_MPI_CHECK(MPI_Comm_get_attr(m_comm, MPI_TAG_UB, &upper, &found));
    if (found && most > *upper) {
      throw Error("halox: host transport: " + std::to_string(connection.ranks) +
                  " ranks per process need MPI tags up to " + std::to_string(most) +
                  ", above this MPI's MPI_TAG_UB of " + std::to_string(*upper) +
                  "; hold fewer ranks per process");
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
        HALOX_MPI_CHECK(
            MPI_Irecv(m_recv[i].at_least(op.recv_bytes), static_cast<int>(op.recv_bytes), MPI_BYTE,
                      m_ranks.process_of(op.recv_rank), tag(op.tag, op.rank), m_comm, &r));
        requests.add({r, op.recv_rank, op.recv_bytes, &op.name});
      }
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.send_rank < 0) continue;
        char* out = m_send[i].at_least(op.send_bytes);
        op.pack(field(op), out, 0, op.send_bytes, stream);
        const int from = m_ranks.rank(op.rank);
        if (op.send_rank == from) continue;
        stats.messages += 1;
        stats.bytes_sent += op.send_bytes;
        if (m_ranks.process_of(op.send_rank) == m_ranks.process_of(from)) continue;  // a copy
        MPI_Request r;
        HALOX_MPI_CHECK(MPI_Isend(out, static_cast<int>(op.send_bytes), MPI_BYTE,
                                  m_ranks.process_of(op.send_rank),
                                  tag(op.tag, m_ranks.index_in_process(op.send_rank)), m_comm, &r));
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
  // The MPI tag of a message of pulse tag `pulse_tag` to the receiver of index `receiver`.
  int tag(int pulse_tag, int receiver) const { return pulse_tag * m_connection->ranks + receiver; }

  // Per op that receives from a rank of this process: the op whose packed bytes it takes
  // (the sender's op of the same tag that sends to it); -1 for the others. Throws
  // halox::Error when plans do not pair.
  std::vector<int> local_sources(const std::vector<Op>& ops) const {
    std::vector<int> source(ops.size(), -1);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const int me = m_ranks.rank(op.rank);
      if (op.recv_rank < 0 || m_ranks.process_of(op.recv_rank) != m_ranks.process_of(me)) continue;
      const int from = m_ranks.index_in_process(op.recv_rank);
      for (std::size_t j = 0; j < ops.size() && source[i] < 0; ++j) {
        const Op& s = ops[j];
        if (s.rank == from && s.tag == op.tag && s.send_rank == me && s.field == op.field)
          source[i] = static_cast<int>(j);
      }
      if (source[i] < 0 || ops[source[i]].send_bytes != op.recv_bytes) {
        throw Error("halox: host transport: rank " + std::to_string(me) + "'s " + op.name +
                    " receives " + std::to_string(op.recv_bytes) + " bytes from rank " +
                    std::to_string(op.recv_rank) + ", which sends it " +
                    std::to_string(source[i] < 0 ? 0 : ops[source[i]].send_bytes) +
                    ": the plans do not match");
      }
    }
    return source;
  }

  Ranks m_ranks;
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
