#include "node.hpp"

#include "halox/mpi.hpp"

namespace halox::detail {

NodeRanks::NodeRanks(MPI_Comm comm, const WaitContext& context, bool roll_call, int key) {
  MPI_Request request;
  HALOX_MPI_CHECK(MPI_Ibarrier(comm, &request));
  wait_collective(roll_call ? comm : MPI_COMM_NULL, request, context,
                  "the split of the ranks by node");
  HALOX_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, &m_node));
  HALOX_MPI_CHECK(MPI_Comm_size(m_node, &m_size));
  HALOX_MPI_CHECK(MPI_Comm_rank(m_node, &m_rank));
}

NodeRanks::~NodeRanks() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && m_node != MPI_COMM_NULL) MPI_Comm_free(&m_node);
}

std::vector<int> NodeRanks::ranks_in(MPI_Comm comm) const {
  MPI_Group outer, inner;
  HALOX_MPI_CHECK(MPI_Comm_group(comm, &outer));
  HALOX_MPI_CHECK(MPI_Comm_group(m_node, &inner));
  std::vector<int> mine(static_cast<std::size_t>(m_size)), theirs(mine.size());
  for (int i = 0; i < m_size; ++i) mine[static_cast<std::size_t>(i)] = i;
  HALOX_MPI_CHECK(MPI_Group_translate_ranks(inner, m_size, mine.data(), outer, theirs.data()));
  HALOX_MPI_CHECK(MPI_Group_free(&inner));
  HALOX_MPI_CHECK(MPI_Group_free(&outer));
  return theirs;
}

}  // namespace halox::detail
