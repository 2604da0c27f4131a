// NVSHMEM in halox: one process-wide initialisation, bootstrapped with a unique id that MPI
// broadcasts (UID bootstrap: no dependence on the MPI ABI NVSHMEM was built against).
#pragma once

#include <mpi.h>

#include <cstdint>

namespace halox::detail {

/// Collective over `comm` on first use: initialises NVSHMEM with one PE per rank of `comm`
/// (PE = rank). The symmetric heap is sized from `heap_bytes_hint` (the first plan's need,
/// with room to spare; NVSHMEM's dynamic heap grows past it) unless NVSHMEM_SYMMETRIC_SIZE is
/// set. Throws halox::Error when a later communicator differs in size.
void ensure_nvshmem(MPI_Comm comm, std::int64_t heap_bytes_hint);

/// nvshmem_malloc / nvshmem_free (collective; the same size on every PE). Being collective,
/// a free waits for every PE: after a HaloTimeoutError caused by a stalled PE, a process
/// that destroys its NVSHMEM exchanges waits for that PE too. End such a process without
/// unwinding (the mini-apps let the error escape main: see apps/common/mpi_main.hpp).
void* symmetric_alloc(std::int64_t bytes);
void symmetric_free(void* p);
/// nvshmem_ptr: a load/store pointer to `p` on `pe`, or null when not reachable.
void* symmetric_peer_pointer(void* p, int pe);
/// Whether nvshmem_ptr reaches `pe` (it is in NVSHMEM_TEAM_SHARED), known before any
/// allocation. NVSHMEM must be initialised.
bool symmetric_reachable(int pe);

}  // namespace halox::detail
