#include "ipc_halo.hpp"

#include <cuda_runtime.h>

#include <cstring>
#include <set>
#include <string>

#include "halox/mpi.hpp"
#include "../plan/collective.hpp"

namespace halox::detail {

namespace {

void check_cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) {
    throw BackendError(std::string("CUDA call failed: ") + call + ": " + cudaGetErrorString(rc));
  }
}
#define HALOX_CUDA_CHECK(call) check_cuda((call), #call)

struct BlockInfo {
  cudaIpcMemHandle_t handle;
  char uuid[16];  // the GPU: peers on this GPU need only GPU-scope signals
  long long fwd[kMaxPulses];
  long long rev[kMaxPulses];
};

// How many processes of this node use my GPU: their spinning kernels share it.
double gpu_share(MPI_Comm comm) {
  MPI_Comm node;
  HALOX_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int device = 0;
  HALOX_CUDA_CHECK(cudaGetDevice(&device));
  int size = 0;
  HALOX_MPI_CHECK(MPI_Comm_size(node, &size));
  std::vector<int> devices(size);
  HALOX_MPI_CHECK(MPI_Allgather(&device, 1, MPI_INT, devices.data(), 1, MPI_INT, node));
  MPI_Comm_free(&node);
  int same = 0;
  for (int d : devices) same += d == device;
  return 1.0 / std::max(1, same);
}

}  // namespace

IpcHalo::IpcHalo(MPI_Comm comm, int rank, BasicKind real, GpuHaloOptions options)
    : m_comm(comm),
      m_rank(rank),
      m_halo(std::make_unique<DeviceHalo>(real, options, gpu_share(comm))) {}

IpcHalo::~IpcHalo() {
  close_peers();
}

void IpcHalo::close_peers() {
  for (auto& [rank, block] : m_peers) cudaIpcCloseMemHandle(block.base);
  m_peers.clear();
}

void IpcHalo::set_plan(const ParticlePlan& plan) {
  // Nobody may still write into a block that is about to be freed, and nobody may signal
  // into a new block before its owner zeroed it: barriers around the swap.
  HALOX_CUDA_CHECK(cudaDeviceSynchronize());
  close_peers();
  HALOX_MPI_CHECK(MPI_Barrier(m_comm));
  m_halo->allocate({m_rank}, {&plan});
  std::set<int> neighbours;
  for (const auto& p : plan.pulses) {
    for (int n : {p.header.send_rank, p.header.recv_rank}) {
      if (n >= 0 && n != m_rank) neighbours.insert(n);
    }
  }
  const PeerBlock mine = m_halo->block(0);
  BlockInfo out{};
  HALOX_CUDA_CHECK(cudaIpcGetMemHandle(&out.handle, mine.base));
  int device = 0;
  HALOX_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  HALOX_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::memcpy(out.uuid, &prop.uuid, sizeof out.uuid);
  for (int p = 0; p < kMaxPulses; ++p) {
    out.fwd[p] = mine.fwd_offset[p];
    out.rev[p] = mine.rev_offset[p];
  }
  std::vector<BlockInfo> in(neighbours.size());
  std::vector<MPI_Request> requests;
  std::size_t k = 0;
  for (int n : neighbours) {
    MPI_Request r;
    HALOX_MPI_CHECK(MPI_Irecv(&in[k++], sizeof(BlockInfo), MPI_BYTE, n, 9100, m_comm, &r));
    requests.push_back(r);
    HALOX_MPI_CHECK(MPI_Isend(&out, sizeof(BlockInfo), MPI_BYTE, n, 9100, m_comm, &r));
    requests.push_back(r);
  }
  HALOX_MPI_CHECK(
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
  std::string error;
  k = 0;
  for (int n : neighbours) {
    PeerBlock block;
    void* base = nullptr;
    const cudaError_t rc =
        cudaIpcOpenMemHandle(&base, in[k].handle, cudaIpcMemLazyEnablePeerAccess);
    if (rc != cudaSuccess && error.empty()) {
      error = "halox: rank " + std::to_string(m_rank) + " cannot map rank " + std::to_string(n) +
              "'s buffers with CUDA IPC (" + cudaGetErrorString(rc) +
              "); the ipc transports need the ranks on one node (and MPS for one GPU)";
      cudaGetLastError();
    }
    block.base = static_cast<char*>(base);
    for (int p = 0; p < kMaxPulses; ++p) {
      block.fwd_offset[p] = in[k].fwd[p];
      block.rev_offset[p] = in[k].rev[p];
    }
    if (base) m_peers[n] = block;
    ++k;
  }
  raise_if_any(m_comm, error);
  bool same_gpu = true;
  for (const auto& info : in) same_gpu &= std::memcmp(info.uuid, out.uuid, sizeof out.uuid) == 0;
  m_halo->set_system_scope(!same_gpu);
  m_halo->connect([&](int rank) { return rank == m_rank ? mine : m_peers.at(rank); });
  HALOX_MPI_CHECK(MPI_Barrier(m_comm));
  std::string self_test;
  try {
    m_halo->self_test();
  } catch (const Error& e) {
    self_test = e.what();
  }
  raise_if_any(m_comm, self_test);
}

}  // namespace halox::detail
