// This node's ranks of a communicator (MPI_COMM_TYPE_SHARED), the one split that device
// selection, the transport chooser, the peer mapping and the trace's clock groups share.
#pragma once

#include <mpi.h>

#include <vector>

#include "../common/mpi_wait.hpp"

namespace halox::detail {

/// The ranks of `comm` on this node, as a communicator of their own (freed with this object).
/// Collective over `comm`. MPI_Comm_split_type cannot be bounded itself: it is entered after
/// a barrier bounded by `context`, so that a rank that never arrives ends the others' wait
/// in a time-out naming it (a roll call on `comm` when `roll_call`: only on halox's own
/// communicators, whose messages no caller takes) instead of a hang.
class NodeRanks {
 public:
  NodeRanks(MPI_Comm comm, const WaitContext& context, bool roll_call, int key = 0);
  ~NodeRanks();
  NodeRanks(const NodeRanks&) = delete;
  NodeRanks& operator=(const NodeRanks&) = delete;

  MPI_Comm comm() const { return m_node; }
  int size() const { return m_size; }
  int rank() const { return m_rank; }
  /// Every rank of this node, numbered as in the communicator that was split.
  std::vector<int> ranks_in(MPI_Comm comm) const;

 private:
  MPI_Comm m_node = MPI_COMM_NULL;
  int m_size = 1, m_rank = 0;
};

}  // namespace halox::detail
