// Where an op's peers are, for the transports that take several ranks per process
// (Ranks::blocks; Ranks::mpi is its case of one rank): a link between two ranks of this
// process never leaves it (the receiver's op takes the sender's packed bytes), any other is
// an MPI message between the processes that hold them. Several ranks per process tell their
// messages apart by tag: the pulse's tag times the ranks per process plus the receiving
// rank's index (one rank per process: the pulse's tag itself).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "halox/config.hpp"
#include "halox/error.hpp"
#include "halox/exchange_options.hpp"
#include "transport.hpp"
#if HALOX_HAS_MPI
#include <mpi.h>

#include "halox/mpi.hpp"
#endif

namespace halox::detail {

class RankLinks {
 public:
  explicit RankLinks(const Ranks& ranks) : m_ranks(ranks) {}

  /// The ranks it was made for.
  const Ranks& ranks() const { return m_ranks; }

  /// The grid rank an op belongs to.
  int me(const Op& op) const { return m_ranks.rank(op.rank); }
  /// The process (a rank of the processes' communicator) that holds grid rank `peer`.
  int process(int peer) const { return m_ranks.process_of(peer); }
  /// Whether `peer` (>= 0) is a rank of another process than op's.
  bool remote(int peer, const Op& op) const {
    return peer >= 0 && process(peer) != process(me(op));
  }
  /// The tag of op's message to its send_rank, and of the one it receives.
  int send_tag(const Op& op) const { return tag(op.tag, m_ranks.index_in_process(op.send_rank)); }
  int recv_tag(const Op& op) const { return tag(op.tag, op.rank); }

  /// Per op that receives from a rank of this process (itself included): the op whose packed
  /// bytes it takes, the sender's op of its tag and field that sends to it; -1 for the
  /// others. Throws halox::Error, naming both ranks, when the plans do not pair.
  std::vector<int> local_sources(const std::vector<Op>& ops, const std::string& transport) const {
    std::vector<int> source(ops.size(), -1);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const int to = me(op);
      if (op.recv_rank < 0 || remote(op.recv_rank, op)) continue;
      const int from = m_ranks.index_in_process(op.recv_rank);
      for (std::size_t j = 0; j < ops.size() && source[i] < 0; ++j) {
        const Op& s = ops[j];
        if (s.rank == from && s.tag == op.tag && s.send_rank == to && s.field == op.field)
          source[i] = static_cast<int>(j);
      }
      if (source[i] < 0 || ops[source[i]].send_bytes != op.recv_bytes) {
        throw Error("halox: " + transport + " transport: rank " + std::to_string(to) + "'s " +
                    op.name + " receives " + std::to_string(op.recv_bytes) + " bytes from rank " +
                    std::to_string(op.recv_rank) + ", which sends it " +
                    std::to_string(source[i] < 0 ? 0 : ops[source[i]].send_bytes) +
                    ": the plans do not match");
      }
    }
    return source;
  }

#if HALOX_HAS_MPI
  /// Refuses tags above the communicator's MPI_TAG_UB (the messages between processes).
  void check_tags(const std::vector<Op>& ops, MPI_Comm comm, const std::string& transport) const {
    int most = 0;
    for (const Op& op : ops) most = std::max(most, tag(op.tag, m_ranks.count() - 1));
    if (m_tag_upper == 0) {  // asked once, not at every plan
      int* upper = nullptr;
      int found = 0;
      HALOX_MPI_CHECK(MPI_Comm_get_attr(comm, MPI_TAG_UB, &upper, &found));
      m_tag_upper = found ? *upper : -1;
    }
    if (m_tag_upper > 0 && most > m_tag_upper) {
      throw Error("halox: " + transport + " transport: " + std::to_string(m_ranks.count()) +
                  " ranks per process need MPI tags up to " + std::to_string(most) +
                  ", above this MPI's MPI_TAG_UB of " + std::to_string(m_tag_upper) +
                  "; hold fewer ranks per process");
    }
  }
#endif

 private:
  int tag(int pulse_tag, int receiver) const {
    return pulse_tag * m_ranks.count() + receiver;
  }

  Ranks m_ranks;
  mutable int m_tag_upper = 0;  // MPI_TAG_UB (0: not asked yet, -1: the MPI gave none)
};

}  // namespace halox::detail
