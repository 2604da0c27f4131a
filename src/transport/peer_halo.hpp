// The fused particle kernels of one rank per process (DeviceHalo) over the peer mapping
// (runtime/peer_mapping.hpp): the neighbours' blocks mapped into this process so that the
// kernels store straight into them, the others reached through the host proxy.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>

#include <array>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "../device/device_halo.hpp"
#include "../common/mpi_wait.hpp"
#include "../runtime/peer_mapping.hpp"
#include "host_proxy.hpp"

namespace halox::detail {

class NcclWindows;

class PeerHalo {
 public:
  PeerHalo(MPI_Comm comm, int rank, Mapping mapping, BasicKind real,
           const ExchangeOptions& options);
  /// Collective over the communicator (every rank calls it with its own plan).
  void set_plan(const ParticlePlan& plan);
  void forward(void* x, GpuStream stream);
  void reverse(void* f, GpuStream stream);
  void check() const;
  int launches_per_exchange() const { return m_halo->launches_per_exchange(); }
  /// CUDA graphs (DeviceHalo::capturable, set_up_for).
  bool capturable() const {
    return m_proxy_policy != ProxyPolicy::every_peer && m_halo->capturable();
  }
  bool set_up_for(bool forward, void* array) const { return m_halo->set_up_for(forward, {array}); }

 private:
  /// Collective: the largest of every rank's `bytes`; symmetric blocks are that size on
  /// every rank.
  std::int64_t largest_block(std::int64_t bytes) const;
  /// Collective: the host proxies of this plan's proxied links, handed to the kernels' host side
  /// (DeviceHalo). `blocks_kept`: DeviceHalo kept its blocks, so its exchange counters run on.
  void set_up_proxies(const ParticlePlan& plan, bool blocks_kept);

  MPI_Comm m_comm;
  int m_rank;
  Mapping m_mapping;
  std::string m_name;  // the transport's, and its time-out: the set-up's waits report them
  double m_timeout;
  // nccl: the windows of the blocks, declared before m_halo so that they outlive its blocks
  // (shared: the type is complete only in builds with NCCL's device API).
  std::shared_ptr<NcclWindows> m_windows;
  std::unique_ptr<DeviceHalo> m_halo;
  PeerBlocks m_peers;          // declared after m_halo: unmapped before the blocks are freed
  std::set<int> m_neighbours;  // of the last plan: the links the self-test last checked
  ProxyPolicy m_proxy_policy;
  std::int64_t m_item;  // bytes per item (3 coordinates)
  // The links through the host proxy, one proxy per direction (each has its own exchange
  // counter); rebuilt with every plan, on every rank when the policy may proxy any.
  std::unique_ptr<HostProxy> m_fwd_proxy, m_rev_proxy;
};

}  // namespace halox::detail
