// NcclWindows (nccl_window.hpp): ncclMemAlloc, ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)
// and the LSA pointers (device/nccl_peer_pointer.*: NCCL gives them only on the device).
#include "nccl_window.hpp"

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdio>
#include <string>

#include "../common/cuda_check.hpp"
#include "../common/pointer_text.hpp"
#include "../device/nccl_peer_pointer.hpp"
#include "../common/mpi_wait.hpp"
#include "halox/error.hpp"
#include "nccl_comm.hpp"

namespace halox::detail {

namespace {

// 22809 -> "2.28.9" (NCCL_VERSION_CODE's form since 2.9: major * 10000 + minor * 100 + patch).
std::string nccl_version(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

}  // namespace

struct NcclWindows::Impl {
  ncclComm_t comm = nullptr;
  int rank = 0;
  ncclTeam_t lsa{}, world{};
  std::map<const char*, ncclWindow_t> windows;  // per block of allocate()
  void** lookup = nullptr;                      // device word for nccl_peer_pointer
};

NcclWindows::NcclWindows(MPI_Comm comm, int rank) : m_impl(std::make_unique<Impl>()) {
  m_impl->rank = rank;
  m_impl->comm = make_nccl_comm(comm, rank, "nccl-device");
  // Two refusals, on every rank, before any window. The device API is inline code over
  // NCCL's structures, so the loaded library must be the one whose headers halox was built
  // with. And a window registered as symmetric on a communicator without symmetric memory is
  // a plain registration whose record no kernel can read (an illegal address in the pointer
  // lookup); ncclDevCommCreate refuses such a communicator, so it is asked first.
  int loaded = 0;
  HALOX_NCCL_CHECK(ncclGetVersion(&loaded));
  std::string error;
  ncclResult_t rc = ncclInvalidUsage;
  if (loaded != NCCL_VERSION_CODE) {
    error = "halox: nccl-device: halox was built with the device API of NCCL " +
            nccl_version(NCCL_VERSION_CODE) + ", but NCCL " + nccl_version(loaded) +
            " is loaded; its kernels read NCCL's structures inline, so the two must be the same "
            "(LD_LIBRARY_PATH, or rebuild halox against the loaded NCCL)";
  } else {
    // Asked only: the kernels take NCCL's pointers, not a device communicator.
    ncclDevCommRequirements none{};
    ncclDevComm device{};
    rc = ncclDevCommCreate(m_impl->comm, &none, &device);
    if (rc == ncclSuccess) ncclDevCommDestroy(m_impl->comm, &device);
  }
  if (error.empty() && rc != ncclSuccess) {
    error = std::string("halox: nccl-device: NCCL gives this communicator no symmetric memory (") +
            ncclGetErrorString(rc) + ": " + ncclGetLastError(m_impl->comm) +
            "). Its device API needs CUDA virtual memory management with GPUDirect RDMA "
            "(NCCL_CUMEM_ENABLE), NCCL_WIN_ENABLE, and every rank on one node with peer access; "
            "ipc-fused and nvshmem-fused move the same halo without it";
  }
  try {
    raise_if_any(comm, error);
  } catch (...) {
    ncclCommDestroy(m_impl->comm);
    throw;
  }
  m_impl->lsa = ncclTeamLsa(m_impl->comm);
  m_impl->world = ncclTeamWorld(m_impl->comm);
  HALOX_CUDA_CHECK(cudaMalloc(&m_impl->lookup, sizeof(void*)));
}

NcclWindows::~NcclWindows() {
  for (auto& [block, window] : m_impl->windows) {
    ncclCommWindowDeregister(m_impl->comm, window);
    ncclMemFree(const_cast<char*>(block));
  }
  cudaFree(m_impl->lookup);
  ncclCommDestroy(m_impl->comm);
}

char* NcclWindows::allocate(std::int64_t bytes) {
  void* block = nullptr;
  HALOX_NCCL_CHECK(ncclMemAlloc(&block, static_cast<std::size_t>(bytes)));
  ncclWindow_t window{};
  HALOX_NCCL_CHECK(ncclCommWindowRegister(m_impl->comm, block, static_cast<std::size_t>(bytes),
                                          &window, NCCL_WIN_COLL_SYMMETRIC));
  char* mine = static_cast<char*>(block);
  m_impl->windows[mine] = window;
  // The lookup kernel reads the window's record: the device must reach it (device memory, or
  // host memory mapped for the device).
  cudaPointerAttributes record{};
  const bool reached =
      cudaPointerGetAttributes(&record, window) == cudaSuccess &&
      (record.type == cudaMemoryTypeDevice || record.type == cudaMemoryTypeManaged ||
       (record.type == cudaMemoryTypeHost && record.devicePointer != nullptr));
  if (!reached) {
    cudaGetLastError();  // not sticky: clear it
    throw BackendError("halox: nccl-device: NCCL's record of the window at " + pointer_text(mine) +
                       " is not memory the device reaches; the device API cannot use it");
  }
  // NCCL's pointer for this rank's own block must be the block: the mapping's self-check.
  char* self = peer_pointer(mine, m_impl->rank);
  if (self != mine) {
    throw BackendError("halox: nccl-device: NCCL's pointer for rank " +
                       std::to_string(m_impl->rank) + "'s own window is " + pointer_text(self) +
                       ", not the block at " + pointer_text(mine));
  }
  return mine;
}

void NcclWindows::release(char* block) {
  const auto it = m_impl->windows.find(block);
  if (it == m_impl->windows.end()) return;
  HALOX_NCCL_CHECK(ncclCommWindowDeregister(m_impl->comm, it->second));
  HALOX_NCCL_CHECK(ncclMemFree(block));
  m_impl->windows.erase(it);
}

bool NcclWindows::reachable(int rank) const {
  return ncclTeamRankIsMember(m_impl->lsa, m_impl->world, rank);
}

char* NcclWindows::peer_pointer(const char* block, int rank) const {
  const auto it = m_impl->windows.find(block);
  if (it == m_impl->windows.end()) {
    throw Error("halox: internal: nccl-device: no window for the block at " + pointer_text(block));
  }
  return static_cast<char*>(nccl_peer_pointer(it->second, rank, m_impl->lookup));
}

}  // namespace halox::detail
