#include "nvshmem_runtime.hpp"

#include <nvshmem_host.h>

#include <cstdlib>
#include <string>

#include "halox/error.hpp"
#include "halox/mpi.hpp"

namespace halox::detail {

namespace {
bool g_initialised = false;
int g_pes = 0;

}  // namespace

void ensure_nvshmem(MPI_Comm comm, std::int64_t heap_bytes_hint) {
  int rank = 0, size = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  if (g_initialised) {
    if (size != g_pes) {
      throw Error("halox: NVSHMEM was started with " + std::to_string(g_pes) +
                  " PEs; this communicator has " + std::to_string(size) + " ranks");
    }
    return;
  }
  // The heap from the plan, not NVSHMEM's default of a gigabyte per PE: four times the first
  // exchange's need, at least 32 MiB; every PE must agree. A later plan that needs more
  // grows it: on x86 the heap is dynamic (CUDA VMM), nvshmem_malloc maps more memory when it
  // is full (test_peer_hammer checks a plan beyond it).
  long long want = std::max<long long>(32ll << 20, 4 * heap_bytes_hint), agreed = 0;
  HALOX_MPI_CHECK(MPI_Allreduce(&want, &agreed, 1, MPI_LONG_LONG, MPI_MAX, comm));
  agreed = (agreed + (1 << 20) - 1) / (1 << 20) * (1 << 20);
  setenv("NVSHMEM_SYMMETRIC_SIZE", std::to_string(agreed).c_str(), /*overwrite=*/0);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);  // never NVLink multicast on these machines
  nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
  if (rank == 0 && nvshmemx_get_uniqueid(&id) != 0) {
    throw BackendError("halox: nvshmemx_get_uniqueid failed");
  }
  HALOX_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  // What nvshmemx_init_attr does, without its exit() on failure: nvshmemi_init_thread comes
  // from libnvshmem_device.a, linked into halox with the fused kernels, and also sets up the
  // device library's state that their put-with-signal uses (the host library alone does not).
  const nvshmemi_version_t version = {NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION,
                                      NVSHMEM_VENDOR_PATCH_VERSION};
  int provided = 0;
  const int set = nvshmemx_set_attr_uniqueid_args(rank, size, &id, &attr);
  nvshmemx_init_init_attr_ver_only(attr);
  if (set != 0 || nvshmemi_init_thread(NVSHMEM_THREAD_SERIALIZED, &provided,
                                       NVSHMEMX_INIT_WITH_UNIQUEID, &attr, version) != 0) {
    throw BackendError("halox: NVSHMEM initialisation failed on rank " + std::to_string(rank) +
                       " (several PEs on one GPU need MPS)");
  }
  if (nvshmem_my_pe() != rank || nvshmem_n_pes() != size) {
    throw BackendError("halox: NVSHMEM PE numbering differs from the MPI ranks");
  }
  g_initialised = true;
  g_pes = size;
  std::atexit([] { nvshmem_finalize(); });
}

void* symmetric_alloc(std::int64_t bytes) {
  void* p = nvshmem_malloc(static_cast<std::size_t>(bytes));
  if (!p && bytes > 0) {
    throw BackendError("halox: nvshmem_malloc of " + std::to_string(bytes) +
                       " bytes failed (raise NVSHMEM_SYMMETRIC_SIZE)");
  }
  return p;
}

void symmetric_free(void* p) {
  if (p) nvshmem_free(p);
}

void* symmetric_peer_pointer(void* p, int pe) {
  return nvshmem_ptr(p, pe);
}

bool symmetric_reachable(int pe) {
  return nvshmem_team_translate_pe(NVSHMEM_TEAM_WORLD, pe, NVSHMEM_TEAM_SHARED) >= 0;
}

}  // namespace halox::detail
