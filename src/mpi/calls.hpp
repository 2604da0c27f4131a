// What the interposed calls share: where a buffer lives, the send modes, the waits.
#pragma once

#include <mpi.h>

#include "memory.hpp"

namespace halox::mpi {

/// Where `count` instances of `type` at MPI buffer address `buffer` live: the memory of the
/// first byte they touch (so that MPI_BOTTOM with absolute addresses is classified by the
/// data, not by address 0); host memory for MPI_IN_PLACE and for none.
Memory where(const void* buffer, int count, MPI_Datatype type);

/// One of MPI's four send modes, through the MPI library's calls.
struct SendMode {
  const char* name;
  int (*blocking)(const void*, int, MPI_Datatype, int, int, MPI_Comm);
  int (*start)(const void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*);
  int (*init)(const void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*);
};

enum class WaitKind { wait, test, waitall, testall, waitany, testany, waitsome, testsome };

/// An MPI error through `comm`'s handler for a call on device memory that failed in halox.
int failed(const char* call, MPI_Comm comm, const std::exception& e);

}  // namespace halox::mpi
