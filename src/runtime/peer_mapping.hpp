// The peer mapping: how a GPU-initiated transport's kernels reach the blocks (signal slots and
// staging) of the neighbours of one rank per process:
//  - ipc:     blocks from cudaMalloc, mapped with CUDA IPC handles sent over MPI (peers must
//             be load/store reachable: one node, the same GPU under MPS, or NVLink);
//  - nvshmem: blocks from NVSHMEM's symmetric heap, mapped with nvshmem_ptr; a peer it
//             cannot map (another node) is reached by put-with-signal (remote_put.cuh);
//  - nvshmem_puts: the same, every peer reached by put-with-signal (tests, measurements);
//  - nccl:    blocks from NCCL's symmetric memory (registered windows), mapped with the
//             pointers NCCL gives for this rank's load/store team (nccl_window.hpp);
// and a neighbour none of these reaches goes through the host proxy (ProxyPolicy). Also the
// GPU share of a process, which the kernels' residency sizing takes.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>

#include <array>
#include <functional>
#include <map>
#include <set>

#include "../common/mpi_wait.hpp"
#include "halox/exchange_options.hpp"

namespace halox::detail {

enum class Mapping { ipc, nvshmem, nvshmem_puts, nccl };
/// The blocks come from NVSHMEM's symmetric heap (collective allocations).
inline bool symmetric(Mapping m) {
  return m == Mapping::nvshmem || m == Mapping::nvshmem_puts;
}

/// How a GPU-initiated transport's kernels reach the peers' blocks: CUDA IPC for ipc-*,
/// NVSHMEM (put-with-signal only, with ExchangeOptions::testing.nvshmem_puts_only or
/// HALOX_NVSHMEM_PUTS=1) for nvshmem-*, NCCL's windows for nccl-device.
Mapping peer_mapping(TransportKind kind, const ExchangeOptions& options);

/// Which neighbours the fused grid kernel reaches through the host proxy (host_proxy.hpp)
/// instead of mapping their blocks: none; those on another node (ipc: CUDA IPC maps only
/// this node's); every one (tests and measurements of that path on one node).
enum class ProxyPolicy { none, other_nodes, every_peer };

/// The fused kernels' proxied neighbours: every one with ExchangeOptions::testing.host_proxy
/// or HALOX_HOST_PROXY=1; otherwise those CUDA IPC cannot map (another node) for ipc-*; none
/// for NVSHMEM (its puts reach them). The particle kernels follow it over CUDA IPC only.
ProxyPolicy proxy_policy(Mapping mapping, const ExchangeOptions& options);
/// The particle kernels' (over CUDA IPC only): none when every rank is on one node and no
/// test asks for the proxy. Collective over `comm`.
ProxyPolicy particle_proxy_policy(MPI_Comm comm, Mapping mapping, const ExchangeOptions& options);

/// The most staging areas a block offers its neighbours (a particle plan's 2 x 32 pulses,
/// a grid plan's ops).
constexpr int kMaxBlockAreas = 64;
/// The offsets into a block of the staging areas its neighbours need.
using BlockOffsets = std::array<long long, kMaxBlockAreas>;

/// The neighbours' blocks of one rank, mapped into this process. Used by the particle
/// (PeerHalo) and the grid (grid_fused) transports.
class PeerBlocks {
 public:
  PeerBlocks(MPI_Comm comm, int rank, Mapping mapping);
  ~PeerBlocks() { unmap(); }
  PeerBlocks(const PeerBlocks&) = delete;
  PeerBlocks& operator=(const PeerBlocks&) = delete;
  /// Collective: tells every neighbour my block and its offsets, maps theirs. `kept`: every
  /// rank kept its block since the last call (collective decision), so mappings stay.
  /// Raises on every rank when some rank cannot map a neighbour. Neighbours that `proxy`
  /// names are not mapped (proxied()). Its waits end after `context`'s time-out in an error
  /// naming this rank and the neighbour that did not answer.
  void publish(char* my_base, const BlockOffsets& offsets, const std::set<int>& neighbours,
               bool kept, const WaitContext& context, ProxyPolicy proxy = ProxyPolicy::none);
  void unmap();
  /// Mapping::nccl: where this process stores into a peer's block, given mine (the
  /// windows that the blocks are registered in; nullptr: not reachable).
  void use_windows(std::function<char*(char* my_base, int peer)> peer_pointer) {
    m_window_pointer = std::move(peer_pointer);
  }
  char* base(int rank) const { return m_peers.at(rank).base; }
  /// >= 0: that rank is reached by NVSHMEM puts to this PE, and base() is a symmetric
  /// address; -1: base() is a pointer this process stores through.
  int put_pe(int rank) const { return m_peers.at(rank).put_pe; }
  const BlockOffsets& offsets(int rank) const { return m_peers.at(rank).offsets; }
  /// Every neighbour is on this process's GPU (GPU-scope signals suffice).
  bool same_gpu() const { return m_same_gpu; }
  /// That neighbour is reached through the host proxy (not mapped).
  bool proxied(int rank) const { return m_proxied.count(rank) != 0; }

 private:
  struct Peer {
    char* base = nullptr;
    BlockOffsets offsets{};
    int put_pe = -1;
  };
  MPI_Comm m_comm;
  int m_rank;
  Mapping m_mapping;
  std::map<int, Peer> m_peers;
  std::set<int> m_proxied;
  bool m_same_gpu = true;
  char m_uuid[16] = {};           // this process's GPU, read once (cudaGetDeviceProperties is slow)
  unsigned long long m_node = 0;  // this process's node (a hash of MPI's processor name)
  cudaIpcMemHandle_t m_handle{};  // of the block last published (ipc)
  std::function<char*(char*, int)> m_window_pointer;  // nccl
};

/// How much of the GPU it reads (SM count) this process's spinning kernels may use: 1 /
/// (processes of this node on the same GPU), or under an MPS thread percentage, which already
/// shrinks what it reads, 80% of its part of that. Collective, bounded by `context`.
double gpu_share(MPI_Comm comm, const WaitContext& context);

}  // namespace halox::detail
