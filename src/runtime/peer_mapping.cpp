// The peer mapping (peer_mapping.hpp).
#include "peer_mapping.hpp"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../common/cuda_check.hpp"
#include "../common/mpi_tags.hpp"
#include "env.hpp"
#include "gpu_share.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "node.hpp"
#include "nvshmem_runtime_stub.hpp"

namespace halox::detail {

ProxyPolicy proxy_policy(Mapping mapping, const ExchangeOptions& options) {
  if (options.testing.host_proxy || env_host_proxy()) return ProxyPolicy::every_peer;
  // NVSHMEM puts reach other nodes from the kernel itself; CUDA IPC maps this node only.
  return mapping == Mapping::ipc ? ProxyPolicy::other_nodes : ProxyPolicy::none;
}

Mapping peer_mapping(TransportKind kind, const ExchangeOptions& options) {
  if (kind == TransportKind::ipc_fused || kind == TransportKind::ipc_pulse) return Mapping::ipc;
  if (kind == TransportKind::nccl_device) return Mapping::nccl;
  const bool puts = options.testing.nvshmem_puts_only || env_nvshmem_puts();
  return puts ? Mapping::nvshmem_puts : Mapping::nvshmem;
}

namespace {

// What a rank tells its neighbours about its block.
struct BlockInfo {
  cudaIpcMemHandle_t handle;  // ipc only
  char uuid[16];              // its GPU: peers on one GPU need only GPU-scope signals
  unsigned long long node;    // its node: IPC maps only this node's blocks
  BlockOffsets offsets;
};

}  // namespace

// The particle kernels' proxy policy (proxy_policy over CUDA IPC): none where every rank is
// on this node and no test asks for the proxy, so that a plan (every list update) builds no
// proxies. Collective.
ProxyPolicy particle_proxy_policy(MPI_Comm comm, Mapping mapping, const ExchangeOptions& options) {
  if (mapping != Mapping::ipc) return ProxyPolicy::none;
  const ProxyPolicy policy = proxy_policy(mapping, options);
  if (policy != ProxyPolicy::other_nodes) return policy;
  int rank = 0, all = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &all));
  const WaitContext context{rank, "ipc-fused", options.timeout_seconds};
  const int here = NodeRanks(comm, context, true).size();
  // Ranks agree: a node of fewer ranks than the communicator has makes every rank keep it.
  int one_node = here == all ? 1 : 0;
  bounded_allreduce(comm, MPI_IN_PLACE, &one_node, 1, MPI_INT, MPI_MIN, context,
                    "the agreement on the proxy");
  return one_node ? ProxyPolicy::none : policy;
}

double gpu_share(MPI_Comm comm, const WaitContext& context) {
  const NodeRanks node(comm, context, true);
  int device = 0;
  HALOX_CUDA_CHECK(cudaGetDevice(&device));
  std::vector<int> devices(static_cast<std::size_t>(node.size()));
  bounded_allgather(node.comm(), &device, devices.data(), 1, MPI_INT, context,
                    "the exchange of GPU numbers");
  int same = 0;
  for (int d : devices) same += d == device;
  return gpu_share_of(same, env_mps_thread_percentage());
}

PeerBlocks::PeerBlocks(MPI_Comm comm, int rank, Mapping mapping)
    : m_comm(comm), m_rank(rank), m_mapping(mapping) {
  int device = 0;
  HALOX_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  HALOX_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::memcpy(m_uuid, &prop.uuid, sizeof m_uuid);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  HALOX_MPI_CHECK(MPI_Get_processor_name(name, &length));
  m_node = std::hash<std::string>{}(std::string(name, static_cast<std::size_t>(length)));
}

void PeerBlocks::unmap() {
  if (m_mapping == Mapping::ipc) {
    for (auto& [rank, peer] : m_peers) cudaIpcCloseMemHandle(peer.base);
  }
  m_peers.clear();
}

void PeerBlocks::publish(char* my_base, const BlockOffsets& offsets,
                         const std::set<int>& neighbours, bool kept, const WaitContext& context,
                         ProxyPolicy proxy) {
  if (!kept) unmap();
  m_proxied.clear();
  struct Buffers {
    BlockInfo out{};
    std::vector<BlockInfo> in;
  };
  auto buffers = std::make_unique<Buffers>();
  BlockInfo& out = buffers->out;
  std::vector<BlockInfo>& in = buffers->in;
  // A kept block keeps its handle (and the peers their mappings of it).
  if (m_mapping == Mapping::ipc && !kept) HALOX_CUDA_CHECK(cudaIpcGetMemHandle(&m_handle, my_base));
  out.handle = m_handle;
  std::memcpy(out.uuid, m_uuid, sizeof out.uuid);
  out.node = m_node;
  out.offsets = offsets;
  in.resize(neighbours.size());
  static const std::string step = "the set-up (the exchange of block addresses)";
  MessageWait wait;
  std::size_t k = 0;
  for (int n : neighbours) {
    PendingMessage m{MPI_REQUEST_NULL, n, static_cast<std::int64_t>(sizeof(BlockInfo)), &step};
    HALOX_MPI_CHECK(MPI_Irecv(&in[k++], sizeof(BlockInfo), MPI_BYTE, n, detail::tags::kPeerBlocks,
                              m_comm, &m.request));
    wait.add(m);
    m.expected_bytes = -1;
    HALOX_MPI_CHECK(MPI_Isend(&out, sizeof(BlockInfo), MPI_BYTE, n, detail::tags::kPeerBlocks,
                              m_comm, &m.request));
    wait.add(m);
  }
  wait_leaving_buffers(buffers, [&] { wait.wait(context); });
  std::string error;
  m_same_gpu = true;
  k = 0;
  for (int n : neighbours) {
    m_same_gpu &= std::memcmp(in[k].uuid, out.uuid, sizeof out.uuid) == 0;
    if (proxy == ProxyPolicy::every_peer ||
        (proxy == ProxyPolicy::other_nodes && in[k].node != m_node)) {
      m_proxied.insert(n);
      m_same_gpu = false;  // the proxy's signals are in host memory: system scope
      ++k;
      continue;
    }
    void* base = nullptr;
    int put = -1;
    const auto mapped = m_peers.find(n);
    if (kept && mapped != m_peers.end()) {
      base = mapped->second.base;  // the peer kept its block too: the mapping holds
      put = mapped->second.put_pe;
    } else if (m_mapping == Mapping::ipc) {
      const cudaError_t rc =
          cudaIpcOpenMemHandle(&base, in[k].handle, cudaIpcMemLazyEnablePeerAccess);
      if (rc != cudaSuccess) {
        cudaGetLastError();
        base = nullptr;
        if (error.empty()) {
          error = "halox: rank " + std::to_string(m_rank) + " cannot map rank " +
                  std::to_string(n) + "'s buffers with CUDA IPC (" + cudaGetErrorString(rc) +
                  "); the ipc transports need the ranks on one node (and MPS for one GPU)";
        }
      }
    } else if (m_mapping == Mapping::nccl) {
      if (m_window_pointer) base = m_window_pointer(my_base, n);
      if (!base && error.empty()) {
        error = "halox: nccl-device: rank " + std::to_string(m_rank) + " cannot store into rank " +
                std::to_string(n) +
                "'s window: it is not in NCCL's load/store (LSA) team of rank " +
                std::to_string(m_rank) +
                " (another node); nccl-device reaches those peers only (choose nvshmem-fused or "
                "staged across nodes)";
      }
    } else {
      // Symmetric: my address names theirs. A peer nvshmem_ptr cannot map (another node),
      // or any peer with nvshmem_puts, is reached by puts to that address.
      base = m_mapping == Mapping::nvshmem ? symmetric_peer_pointer(my_base, n) : nullptr;
      if (!base) put = n, base = my_base;
    }
    if (base) m_peers[n] = Peer{static_cast<char*>(base), in[k].offsets, put};
    ++k;
  }
  raise_if_any(m_comm, error,
               bounded_wait(m_comm, context, "the set-up (the mapping of the blocks)"));
}

}  // namespace halox::detail
