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

/// The interposed point-to-point calls, which the neighbourhood collectives reuse: a send in
/// `mode` (blocking when `request` is null), a receive, and the waits and tests.
int send(const SendMode& mode, const void* buffer, int count, MPI_Datatype type, int dest, int tag,
         MPI_Comm comm, MPI_Request* request);
int receive(void* buffer, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
            MPI_Status* status, MPI_Request* request, bool persistent);
int wait_or_test(WaitKind kind, int n, MPI_Request* requests, int* flag, int* index, int* outcount,
                 int* indices, MPI_Status* statuses);
/// MPI_Send's mode.
const SendMode& standard_mode();

/// MPI_Ineighbor_*'s requests: whether `request` is one (a generalized request whose
/// completion halox drives), and that drive: the exchange's own requests waited for (`wait`)
/// or tested, the generalized request completed when they are.
bool is_neighbor_request(MPI_Request request);
void drive_neighbor_request(MPI_Request request, bool wait);

/// An MPI error through `comm`'s handler for a call on device memory that failed in halox.
int failed(const char* call, MPI_Comm comm, const std::exception& e);

}  // namespace halox::mpi
