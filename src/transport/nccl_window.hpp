// NCCL's symmetric memory as the peer mapping of nccl-device (built with NCCL 2.28+ only):
// every rank's block comes from ncclMemAlloc and is registered as a symmetric window, the
// same size on every rank; a neighbour in this rank's load/store team (NCCL's LSA team: this
// node's GPUs over NVLink) is stored to through the pointer NCCL gives for its block. The
// fused particle kernels then run as with CUDA IPC (docs/architecture.md, issue 30).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <memory>

namespace halox::detail {

class NcclWindows {
 public:
  /// Collective over `comm`: an NCCL communicator over its ranks (throws BackendError when
  /// NCCL refuses, e.g. two ranks on one GPU).
  NcclWindows(MPI_Comm comm, int rank);
  ~NcclWindows();
  NcclWindows(const NcclWindows&) = delete;
  NcclWindows& operator=(const NcclWindows&) = delete;

  /// Collective: a block of `bytes` (the largest any rank needs: the same on every rank)
  /// registered as a symmetric window. Checks that NCCL's pointer for this rank's own block
  /// is the block (BackendError naming the two addresses otherwise).
  char* allocate(std::int64_t bytes);
  /// Collective: deregisters and frees a block of allocate().
  void release(char* block);
  /// Whether this rank stores into `rank`'s blocks directly (NCCL's LSA team).
  bool reachable(int rank) const;
  /// Where this process stores into `rank`'s block that corresponds to `block` (one of
  /// allocate()'s); `rank` must be reachable.
  char* peer_pointer(const char* block, int rank) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace halox::detail
