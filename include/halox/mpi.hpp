// halox: MPI interoperability (available when halox is built with HALOX_ENABLE_MPI).
#pragma once

#include <mpi.h>

#include <string>

#include "halox/datatype.hpp"
#include "halox/error.hpp"

/// Calls an MPI function once and throws halox::BackendError naming the call on failure.
/// Stays on in release builds.
#define HALOX_MPI_CHECK(call)                                                     \
  do {                                                                            \
    const int halox_mpi_rc_ = (call);                                             \
    if (halox_mpi_rc_ != MPI_SUCCESS) {                                           \
      ::halox::detail::throw_mpi_error(halox_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                                             \
  } while (0)

namespace halox {

namespace detail {
[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);
}  // namespace detail

/// Imports an MPI datatype by walking MPI_Type_get_envelope / MPI_Type_get_contents
/// recursively (every combiner MPI defines for C). The result is committed.
/// Throws DatatypeError for types halox cannot represent (Fortran-only named types).
Datatype from_mpi(MPI_Datatype type);

/// The inverse direction: an MPI datatype with the layout of `type` (committed), built from
/// its canonical form (each piece a nest of MPI_Type_create_hvector over MPI_BYTE runs, or an
/// MPI_Type_create_hindexed_block of them), resized to its lb and extent. MPI_Pack of it
/// gives halox's pack of `type` byte for byte; its elements are bytes, not `type`'s basic
/// types (MPI_Get_elements counts bytes). Committed; the caller frees it with MPI_Type_free.
/// Throws DatatypeError for an uncommitted type or one whose counts exceed MPI's int.
MPI_Datatype to_mpi(const Datatype& type);

/// Waits for a nonblocking collective's `request` on `comm` (MPI_Iallreduce, MPI_Ibarrier,
/// ...) for at most `timeout_seconds`, then throws HaloTimeoutError naming this rank, `what`
/// and the ranks that did not arrive: each rank that timed out reports to rank 0 of `comm`,
/// which answers with the ranks that did not report (stalled, dead or waiting elsewhere)
/// after a grace period of 0.2 x the time-out (0.2 to 1 s).
/// The roll call's messages travel on `comm` with tags 9500 and 9501: give it a communicator
/// whose point-to-point traffic cannot take them (a duplicate of one's own). A request that
/// timed out is left in flight, with its buffers: the caller ends the run.
void wait_collective(MPI_Comm comm, MPI_Request& request, double timeout_seconds, const char* what);

/// One GPU per rank on multi-GPU nodes: makes GPU (node-local rank mod GPUs visible) current
/// for this process and returns its index; -1 when halox has no CUDA or no GPU is visible.
/// Ranks beyond the GPU count share GPUs round-robin (more than one process per GPU needs
/// MPS). Call it once after MPI_Init, before any CUDA work; HALOX_DEVICE=<n> overrides.
int select_device(MPI_Comm comm);

}  // namespace halox
