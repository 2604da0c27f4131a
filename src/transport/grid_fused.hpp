// The grid kernel's transport (grid_fused.cu): every face of every stage of every rank of this
// process in one launch. A link is a property of its two ends: between two ranks of this
// process it is a copy face (no staging, no signals); to a rank of another process it goes as
// GridProcesses says (its block mapped through CUDA IPC or NVSHMEM, NVSHMEM puts, or the host
// proxy). Ranks::local has no other process (local-fused, built also without MPI);
// Ranks::mpi and Ranks::blocks have them (ipc-* and nvshmem-*, grid_processes.cpp).
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "../device/proxy_ends.hpp"
#include "halox/config.hpp"
#include "halox/exchange_options.hpp"
#include "transport.hpp"
#if HALOX_HAS_MPI
#include "../runtime/peer_mapping.hpp"
#endif

namespace halox::detail {

/// What the grid kernel's transport asks of the other processes holding ranks of its grid.
/// The collective calls are bounded by the exchange's time-out and name this process's first
/// rank when a process does not arrive.
class GridProcesses {
 public:
  virtual ~GridProcesses() = default;

  /// Collective: each value becomes the largest of every process's.
  virtual void agree_on_largest(std::span<long long> values, const char* what) = 0;
  virtual void barrier(const char* what) = 0;
  /// Collective: runs `check`; every process throws when any process's check threw.
  virtual void check_collectively(const std::function<void()>& check, const char* what) = 0;
  /// The part of the GPU this process's kernel may fill (the processes sharing the GPU).
  virtual double gpu_share() = 0;

  /// Collective, before allocate: NVSHMEM's heap started for blocks of `bytes` (puts()
  /// needs it).
  virtual void reserve(long long bytes) = 0;
  /// Whether the ranks of `process` are reached by NVSHMEM puts instead of direct stores.
  virtual bool puts(int process) const = 0;
  /// Collective: this process's blocks of `bytes` (symmetric ones: the largest of every
  /// process's); release: after the kernels are done, with the neighbours unmapped first.
  virtual char* allocate(long long bytes) = 0;
  virtual void release(char* blocks) = 0;
  /// Collective, once every process zeroed its blocks' slots: tells the `neighbours`
  /// (processes) where my blocks and their staging areas are, and maps theirs.
  virtual void publish(char* blocks, std::span<const long long> offsets,
                       const std::set<int>& neighbours) = 0;
  /// After publish: where `process`'s blocks are, for stores (or a symmetric address for
  /// puts); its PE for puts (-1: stores); whether it is reached through the host proxy;
  /// whether every neighbour is on this process's GPU.
  virtual char* base(int process) const = 0;
  virtual int put_pe(int process) const = 0;
  virtual bool proxied(int process) const = 0;
  virtual bool same_gpu() const = 0;

  /// Collective: the host proxy of these links (none: no thread), and each link's ends.
  virtual void start_proxy(std::vector<ProxyLinkPlan> links) = 0;
  virtual const ProxyEnds& proxy_ends(std::size_t link) const = 0;
  /// Whether some link goes through the proxy; before start_proxy, whether one may.
  virtual bool proxy_any() const = 0;
  virtual bool may_proxy() const = 0;
  /// Exchange `epoch` was launched: the proxy serves it. check: throws when the proxy failed.
  virtual void launched(unsigned long long epoch) = 0;
  virtual void check() const = 0;
  /// Collective: the proxy's own self-test over its links.
  virtual void proxy_self_test() = 0;
};

/// The grid transport of `ranks`' GPU arrays: `processes` reaches the other processes
/// (nullptr for Ranks::local, which has none). `name` is the transport's in messages; the
/// options give its time-out, self-test, trace name and test knobs; ops must carry their
/// datatypes. Collective over the processes at its first run.
std::unique_ptr<Transport> make_grid_fused_transport(const Ranks& ranks,
                                                     std::unique_ptr<GridProcesses> processes,
                                                     const std::string& name,
                                                     const ExchangeOptions& options);

#if HALOX_HAS_MPI
/// The other processes of Ranks::mpi and Ranks::blocks, over `ranks.processes()`: their blocks
/// reached through `mapping`, the neighbours `proxy` names through the host proxy (one rank
/// per process only).
std::unique_ptr<GridProcesses> make_grid_processes(const Ranks& ranks, Mapping mapping,
                                                   ProxyPolicy proxy, const std::string& name,
                                                   double timeout_seconds);
#endif

}  // namespace halox::detail
