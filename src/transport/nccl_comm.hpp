// An NCCL communicator over an MPI communicator, for the nccl and nccl-device transports
// (built with NCCL only).
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <string>

#include "halox/error.hpp"
#include "halox/mpi.hpp"

namespace halox::detail {

inline void check_nccl(ncclResult_t rc, const char* call) {
  if (rc != ncclSuccess) {
    throw BackendError(std::string("NCCL call failed: ") + call + ": " + ncclGetErrorString(rc));
  }
}
#define HALOX_NCCL_CHECK(call) ::halox::detail::check_nccl((call), #call)

/// Collective over `comm`: rank 0's unique id to every rank, then ncclCommInitRank. `who` names
/// the transport in the error NCCL's refusal becomes (one GPU per rank).
inline ncclComm_t make_nccl_comm(MPI_Comm comm, int rank, const char* who) {
  int size = 0;
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  ncclUniqueId id{};
  if (rank == 0) HALOX_NCCL_CHECK(ncclGetUniqueId(&id));
  HALOX_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
  ncclComm_t nccl = nullptr;
  const ncclResult_t rc = ncclCommInitRank(&nccl, size, id, rank);
  if (rc != ncclSuccess) {
    throw BackendError(std::string("halox: the ") + who + " transport could not start (" +
                       ncclGetErrorString(rc) +
                       "); NCCL needs one GPU per rank, so it runs on machines with several GPUs");
  }
  return nccl;
}

}  // namespace halox::detail
