// The host side of the GPU-initiated particle kernels, shared by the local (ranks in one process)
// and the IPC (one rank per process) transports. Host-only header; the kernels are in
// device_halo.cu.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "halox/datatype.hpp"
#include "halox/device.hpp"
#include "halox/exchange_options.hpp"
#include "halox/plan.hpp"
#include "../common/growing_buffer.hpp"

namespace halox::detail {

constexpr int kMaxPulses = 32;
struct ProxyEnds;

/// A rank's shared block as another rank sees it: its base address in this process and the
/// offsets of its per-pulse staging areas (forward: received coordinates; reverse: returned
/// forces).
struct PeerBlock {
  char* base = nullptr;
  std::array<long long, kMaxPulses> fwd_offset{};
  std::array<long long, kMaxPulses> rev_offset{};
  /// >= 0: the rank is not load/store reachable; `base` is then a symmetric NVSHMEM address
  /// (valid only as the target of puts to PE put_pe), and the sender packs into its own
  /// send staging (below) and puts it with a signal.
  int put_pe = -1;
  /// Of this process's own blocks: where it packs what goes to a put_pe peer (forward: the
  /// items it sends; reverse: the forces it returns). Only with set_put_staging(true).
  std::array<long long, kMaxPulses> fwd_send_offset{};
  std::array<long long, kMaxPulses> rev_send_offset{};
};

/// One kernel for every pulse (ipc-fused, nvshmem-fused, nccl-device, local-fused) or one per
/// pulse.
bool all_pulses_in_one_kernel(TransportKind kind);

class DeviceHalo {
 public:
  /// `gpu_share`: the fraction of the GPU's resident blocks this process may use (the
  /// spinning kernels of every rank sharing the GPU must be resident together). The
  /// options' transport says the kernels: one for every pulse (*-fused) or one per pulse.
  DeviceHalo(BasicKind real, const ExchangeOptions& options, double gpu_share);
  ~DeviceHalo();
  DeviceHalo(const DeviceHalo&) = delete;
  DeviceHalo& operator=(const DeviceHalo&) = delete;

  /// Where the shared blocks come from: cudaMalloc by default; NVSHMEM gives symmetric ones.
  /// The allocator is called once per local rank with that rank's size, in rank order.
  void set_allocator(std::function<char*(std::int64_t)> allocate, std::function<void(char*)> free);
  /// Allocates and zeroes the blocks of this process's ranks for their plans (waits for the
  /// device first). ranks[k] is the global rank of plans[k]. keep_if_fits: the current
  /// blocks stay when the plans fit them (same addresses; the signals are not zeroed and
  /// the exchange counters run on, so no peer must wait for a reset); returns whether they
  /// stayed. Every process (and every GPU of Ranks::local) must pass the same decision:
  /// the counters of the peers must stay in step. The plans are read again by the connect()
  /// that follows, and not after it: they must live until then.
  bool allocate(const std::vector<int>& ranks, const std::vector<const ParticlePlan*>& plans,
                bool keep_if_fits = false);
  /// The block one rank's plan needs, headroom included (send staging as set).
  std::int64_t block_bytes(const ParticlePlan& plan) const;
  /// Whether these plans fit the current blocks (never after a recorded time-out: the
  /// signals are then out of step, and only new, zeroed blocks recover).
  bool fits(const std::vector<const ParticlePlan*>& plans) const;
  /// The block of local rank k (to publish to peers).
  PeerBlock block(int k) const;
  /// Blocks get send staging too, for peers reached by put-with-signal (NVSHMEM blocks, only
  /// when some neighbour is): about twice the halo bytes in all. Call before fits() and
  /// allocate().
  void set_put_staging(bool on);
  /// Signals and fences at system scope (a peer on another GPU) or GPU scope (every peer
  /// on this GPU: cheaper). Default: system.
  void set_system_scope(bool system);
  /// The links through the host proxy (transport/host_proxy.hpp), of a transport of one rank:
  /// `proxied(rank)` says which neighbours; fwd[p] are the forward proxy's ends of pulse p (to
  /// my destination, from my source), rev[p] the reverse proxy's (to my source, from my
  /// destination). Call before connect(); they must live while the views do.
  void set_proxy(std::function<bool(int)> proxied, std::vector<const ProxyEnds*> fwd,
                 std::vector<const ProxyEnds*> rev);
  /// Builds the device views; block_of(global rank) must give every neighbour's block but a
  /// proxied one's.
  void connect(const std::function<PeerBlock(int)>& block_of);
  /// The counter of the last exchange launched in that direction (the next is one more).
  std::uint64_t epoch(bool forward) const;
  /// Runs the self-test: a probe over every link, both directions. Throws HaloTimeoutError.
  void self_test();
  /// The same in two halves, for halos on several GPUs whose probes wait on each other:
  /// launch every GPU's probes first, then wait for each (on the current GPU).
  void launch_self_test();
  void finish_self_test();
  void forward(const std::vector<void*>& x, GpuStream stream);
  void reverse(const std::vector<void*>& f, GpuStream stream);
  /// CUDA graphs: whether launches may be captured and replayed (no link through the host
  /// proxy, whose thread is told each exchange from the host); whether `arrays` are those
  /// the last launch of that direction took (new arrays are uploaded, which a capture cannot).
  bool capturable() const;
  bool set_up_for(bool forward, const std::vector<void*>& arrays) const;
  void check() const;
  int launches_per_exchange() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace halox::detail
