// The NVSHMEM runtime when halox has it; otherwise functions that say it is missing.
#pragma once

#include "halox/config.hpp"

#if HALOX_HAS_NVSHMEM
#include "nvshmem_runtime.hpp"
#else
#include <cstdint>

#if HALOX_HAS_MPI
#include <mpi.h>
#endif

#include "halox/error.hpp"

namespace halox::detail {
[[noreturn]] inline void no_nvshmem() {
  throw Error("halox: this build has no NVSHMEM (configure with HALOX_ENABLE_NVSHMEM=ON)");
}
#if HALOX_HAS_MPI  // a build without MPI (ranks of one process) has no caller
inline void ensure_nvshmem(MPI_Comm, std::int64_t) {
  no_nvshmem();
}
#endif
inline void* symmetric_alloc(std::int64_t) {
  no_nvshmem();
}
inline void symmetric_free(void*) {}
inline void* symmetric_peer_pointer(void*, int) {
  no_nvshmem();
}
inline bool symmetric_reachable(int) {
  no_nvshmem();
}
}  // namespace halox::detail
#endif
