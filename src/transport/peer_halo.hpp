// The fused particle kernels (DeviceHalo) of this process's ranks, one per process
// (Ranks::mpi) or a block of them (Ranks::blocks), over the peer mapping
// (runtime/peer_mapping.hpp): the other processes' blocks mapped into this one so that the
// kernels store straight into them (one PeerBlocks per index in the process: every process
// holds as many ranks), the others reached through the host proxy (one rank per process only).
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>

#include <array>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "../device/device_halo.hpp"
#include "halox/exchange_options.hpp"
#include "../common/mpi_wait.hpp"
#include "../runtime/peer_mapping.hpp"
#include "host_proxy.hpp"

namespace halox::detail {

class NcclWindows;

class PeerHalo {
 public:
  /// `ranks`: Ranks::mpi or Ranks::blocks; the processes talk on ranks.processes().comm().
  PeerHalo(const Ranks& ranks, Mapping mapping, BasicKind real, const ExchangeOptions& options);
  /// Collective over the processes (each gives its ranks' plans, in their order).
  void set_plans(std::span<const ParticlePlan> plans);
  void forward(const std::vector<void*>& x, GpuStream stream);
  void reverse(const std::vector<void*>& f, GpuStream stream);
  void check() const;
  int launches_per_exchange() const { return m_halo->launches_per_exchange(); }
  /// This process's grid ranks, in the order of its plans and arrays.
  const std::vector<int>& ranks() const { return m_mine; }
  /// CUDA graphs (DeviceHalo::capturable, set_up_for).
  bool capturable() const {
    return m_proxy_policy != ProxyPolicy::every_peer && m_halo->capturable();
  }
  bool set_up_for(bool forward, const std::vector<void*>& arrays) const {
    return m_halo->set_up_for(forward, arrays);
  }

 private:
  /// Collective: the largest of every rank's `bytes`; symmetric blocks are that size on
  /// every rank.
  std::int64_t largest_block(std::int64_t bytes) const;
  /// Collective: the host proxies of this plan's proxied links, handed to the kernels' host side
  /// (DeviceHalo). `blocks_kept`: DeviceHalo kept its blocks, so its exchange counters run on.
  void set_up_proxies(const ParticlePlan& plan, bool blocks_kept);
  /// The block of grid rank `rank` as this process's kernels see it: one of its own, or a
  /// mapped one of another process's.
  PeerBlock block_of(int rank) const;

  Ranks m_ranks;
  std::vector<int> m_mine;  // the grid ranks of this process, in their order
  MPI_Comm m_comm;          // the processes'
  int m_process;            // this process's rank in m_comm
  int m_rank;               // its first grid rank (one rank per process: its only one)
  Mapping m_mapping;
  std::string m_name;  // the transport's, and its time-out: the set-up's waits report them
  double m_timeout;
  // nccl: the windows of the blocks, declared before m_halo so that they outlive its blocks
  // (shared: the type is complete only in builds with NCCL's device API).
  std::shared_ptr<NcclWindows> m_windows;
  std::unique_ptr<DeviceHalo> m_halo;
  // Per index in a process, the other processes' blocks of that index; declared after
  // m_halo: unmapped before the blocks are freed.
  std::vector<std::unique_ptr<PeerBlocks>> m_peers;
  std::set<int> m_neighbours;  // of the last plans (grid ranks): the links last self-tested
  ProxyPolicy m_proxy_policy;
  std::int64_t m_item;  // bytes per item (3 coordinates)
  // The links through the host proxy, one proxy per direction (each has its own exchange
  // counter); rebuilt with every plan, on every rank when the policy may proxy any.
  std::unique_ptr<HostProxy> m_fwd_proxy, m_rev_proxy;
};

}  // namespace halox::detail
