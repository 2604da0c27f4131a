#include "../common/cuda_check.hpp"
#include "peer_halo.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "../runtime/nvshmem_runtime_stub.hpp"
#include "../common/mpi_wait.hpp"
#include "halox/error.hpp"
#include "transport.hpp"
#include "halox/mpi.hpp"
#if HALOX_HAS_NCCL_DEVICE
#include "nccl_window.hpp"
#endif

namespace halox::detail {

static_assert(2 * kMaxPulses <= kMaxBlockAreas, "a block's staging: forward and reverse per pulse");

PeerHalo::PeerHalo(MPI_Comm comm, int rank, Mapping mapping, BasicKind real,
                   const ExchangeOptions& options)
    : m_comm(comm),
      m_rank(rank),
      m_mapping(mapping),
      m_name(to_string(options.transport)),
      m_timeout(options.timeout_seconds),
      m_halo(std::make_unique<DeviceHalo>(
          real, options,
          gpu_share(comm, {rank, to_string(options.transport).c_str(), options.timeout_seconds}))),
      m_peers(comm, rank, mapping),
      m_proxy_policy(particle_proxy_policy(comm, mapping, options)),
      m_item(3 * (real == BasicKind::float32 ? 4 : 8)) {
  if (mapping == Mapping::nccl) {
#if HALOX_HAS_NCCL_DEVICE
    m_windows = std::make_shared<NcclWindows>(comm, rank);
    m_peers.use_windows([windows = m_windows.get()](char* my_base, int peer) -> char* {
      return windows->reachable(peer) ? windows->peer_pointer(my_base, peer) : nullptr;
    });
    // Symmetric windows: every rank registers the largest size any rank needs (collective).
    m_halo->set_allocator(
        [this](std::int64_t bytes) { return m_windows->allocate(largest_block(bytes)); },
        [this](char* p) { m_windows->release(p); });
#else
    throw Error("halox: nccl-device needs a build with NCCL 2.28 or later (its device API)");
#endif
  }
  if (symmetric(mapping)) {
    // Symmetric blocks: every PE allocates the largest size any PE needs (collective).
    m_halo->set_allocator(
        [this](std::int64_t bytes) {
          const std::int64_t most = largest_block(bytes);
          ensure_nvshmem(m_comm, most);
          return static_cast<char*>(symmetric_alloc(most));
        },
        [](char* p) { symmetric_free(p); });
  }
}

std::int64_t PeerHalo::largest_block(std::int64_t bytes) const {
  return bounded_max(m_comm, bytes, WaitContext{m_rank, m_name.c_str(), m_timeout},
                     "the agreement on the block size");
}

void PeerHalo::set_plan(const ParticlePlan& plan) {
  HALOX_CUDA_CHECK(cudaDeviceSynchronize());
  std::set<int> neighbours;
  for (const auto& p : plan.pulses) {
    for (int n : {p.header.send_rank, p.header.recv_rank}) {
      if (n >= 0 && n != m_rank) neighbours.insert(n);
    }
  }
  if (symmetric(m_mapping)) {
    // NVSHMEM up (collective on first use; the heap from this plan, room for send staging)
    // before deciding whether any neighbour is reached by puts: only then do the blocks
    // carry send staging, so that direct stores keep to the halo bytes plus headroom.
    ensure_nvshmem(m_comm, 2 * m_halo->block_bytes(plan));
    bool puts = m_mapping == Mapping::nvshmem_puts;
    for (int n : neighbours) puts = puts || !symmetric_reachable(n);
    m_halo->set_put_staging(puts);
  }
  // Every rank's new plan fits its current block (the usual case after a neighbour search):
  // the blocks stay where they are, the peers' mappings stay valid and the signals run on.
  // If, besides, no rank has a new neighbour, the links are those the self-test checked
  // and it is not run again. Both decisions collective (the NVSHMEM allocator is, and the
  // peers' exchange counters must stay in step).
  const WaitContext context{m_rank, m_name.c_str(), m_timeout};
  // 2: this rank's plan does not fit its block; 1: it has new neighbours.
  const long long worst =
      bounded_max(m_comm, (m_halo->fits({&plan}) ? 0 : 2) | (neighbours == m_neighbours ? 0 : 1),
                  context, "the agreement on the new plan's blocks");
  const bool all_fit = worst < 2;
  if (!all_fit) {
    // Nobody may still write into a block about to be freed, and nobody may signal into a
    // new block before its owner zeroed it: barriers around the swap.
    m_peers.unmap();
    bounded_barrier(m_comm, context, "the swap of the blocks");
  }
  const bool kept = m_halo->allocate({m_rank}, {&plan}, all_fit);
  const bool links_changed = !kept || worst > 0;
  m_neighbours = neighbours;
  const PeerBlock mine_block = m_halo->block(0);
  BlockOffsets offsets{};
  for (int p = 0; p < kMaxPulses; ++p) {
    offsets[p] = mine_block.fwd_offset[p];
    offsets[kMaxPulses + p] = mine_block.rev_offset[p];
  }
  m_peers.publish(mine_block.base, offsets, neighbours, kept, context, m_proxy_policy);
  m_halo->set_system_scope(!m_peers.same_gpu());
  if (m_proxy_policy != ProxyPolicy::none) set_up_proxies(plan, kept);
  m_halo->connect([&](int rank) {
    if (rank == m_rank) return mine_block;
    PeerBlock block;
    block.base = m_peers.base(rank);
    block.put_pe = m_peers.put_pe(rank);
    const BlockOffsets& o = m_peers.offsets(rank);
    for (int p = 0; p < kMaxPulses; ++p) {
      block.fwd_offset[p] = o[p];
      block.rev_offset[p] = o[kMaxPulses + p];
    }
    return block;
  });
  if (!links_changed) return;
  bounded_barrier(m_comm, context, "the self-test");
  std::string self_test;
  try {
    m_halo->self_test();
  } catch (const Error& e) {
    self_test = e.what();
  }
  raise_if_any(m_comm, self_test, bounded_wait(m_comm, context, "the self-test's verdict"));
  if (m_fwd_proxy) {  // collective, links or not
    m_fwd_proxy->self_test();
    m_rev_proxy->self_test();
  }
}

// The links to proxied neighbours, per pulse: forward, my items to my destination and my
// source's to me; reverse, the forces of my received items to my source and those of my sent
// items back from my destination. Collective (every rank, links or not).
void PeerHalo::set_up_proxies(const ParticlePlan& plan, bool blocks_kept) {
  std::vector<ProxyLinkPlan> fwd, rev;
  std::vector<int> link_of(plan.pulses.size(), -1);
  auto proxied = [this](int rank) { return rank >= 0 && rank != m_rank && m_peers.proxied(rank); };
  for (std::size_t p = 0; p < plan.pulses.size(); ++p) {
    const ParticlePulse& pulse = plan.pulses[p];
    const int to = pulse.header.send_rank, from = pulse.header.recv_rank;
    if (!proxied(to) && !proxied(from)) continue;
    const std::int64_t sent = static_cast<std::int64_t>(pulse.send_index.size()) * m_item;
    const std::int64_t received = static_cast<std::int64_t>(pulse.recv_count) * m_item;
    const std::string name = "pulse " + std::to_string(p);
    link_of[p] = static_cast<int>(fwd.size());
    ProxyLinkPlan& f = fwd.emplace_back();
    ProxyLinkPlan& r = rev.emplace_back();
    f.op = r.op = static_cast<int>(p);
    f.name = name + " (forward)";
    r.name = name + " (reverse)";
    if (proxied(to)) f.send_rank = to, f.send_bytes = sent, r.recv_rank = to, r.recv_bytes = sent;
    if (proxied(from))
      f.recv_rank = from, f.recv_bytes = received, r.send_rank = from, r.send_bytes = received;
  }
  // Each direction's proxy serves from that direction's next exchange: kept blocks keep their
  // counters across plans, new blocks start them again at 1. A plan that keeps the blocks and
  // whose proxied links are the last ones', each face in its staging (the usual neighbour
  // search), keeps the proxies, on every rank or none; a kept proxy's counter runs on, so new
  // blocks need new proxies.
  const std::uint64_t next_fwd = m_halo->epoch(true) + 1, next_rev = m_halo->epoch(false) + 1;
  const bool fits = blocks_kept && m_fwd_proxy && m_fwd_proxy->fits(fwd) && m_rev_proxy->fits(rev);
  if (bounded_max(m_comm, fits ? 0 : 1, WaitContext{m_rank, m_name.c_str(), m_timeout},
                  "the agreement on keeping the host proxies") == 0) {
    m_fwd_proxy->resize(std::move(fwd), next_fwd);
    m_rev_proxy->resize(std::move(rev), next_rev);
  } else {
    m_fwd_proxy.reset();
    m_rev_proxy.reset();
    // The blocks' headroom (particles move between searches).
    for (auto* links : {&fwd, &rev}) {
      for (ProxyLinkPlan& l : *links) {
        l.send_capacity = with_plan_headroom(l.send_bytes);
        l.recv_capacity = with_plan_headroom(l.recv_bytes);
      }
    }
    m_fwd_proxy = std::make_unique<HostProxy>(m_comm, m_rank, m_name, m_timeout, std::move(fwd),
                                              HostProxy::Memory::gpu_mapped, next_fwd);
    m_rev_proxy = std::make_unique<HostProxy>(m_comm, m_rank, m_name, m_timeout, std::move(rev),
                                              HostProxy::Memory::gpu_mapped, next_rev);
  }
  std::vector<const ProxyEnds*> fwd_ends(plan.pulses.size(), nullptr),
      rev_ends(plan.pulses.size(), nullptr);
  for (std::size_t p = 0; p < plan.pulses.size(); ++p) {
    if (link_of[p] < 0) continue;
    fwd_ends[p] = &m_fwd_proxy->ends(static_cast<std::size_t>(link_of[p]));
    rev_ends[p] = &m_rev_proxy->ends(static_cast<std::size_t>(link_of[p]));
  }
  m_halo->set_proxy(proxied, std::move(fwd_ends), std::move(rev_ends));
}

void PeerHalo::forward(void* x, GpuStream stream) {
  m_halo->forward({x}, stream);
  if (m_fwd_proxy && m_fwd_proxy->any()) m_fwd_proxy->launched(m_halo->epoch(true));
}

void PeerHalo::reverse(void* f, GpuStream stream) {
  m_halo->reverse({f}, stream);
  if (m_rev_proxy && m_rev_proxy->any()) m_rev_proxy->launched(m_halo->epoch(false));
}

void PeerHalo::check() const {
  m_halo->check();
  if (m_fwd_proxy) {
    m_fwd_proxy->throw_if_failed();
    m_rev_proxy->throw_if_failed();
  }
}

namespace {

// The fused particle kernels as a transport: connected to a plan (collectively at the first
// run after it: blocks, peer mapping, self-test), then one launch per pulse or one for all.
class ParticleFusedTransport final : public Transport {
 public:
  ParticleFusedTransport(MPI_Comm comm, int rank, TransportKind kind, BasicKind real,
                         const ExchangeOptions& options)
      : m_rank(rank),
        m_kind(kind),
        m_name(to_string(kind)),
        m_halo(comm, rank, peer_mapping(kind, options), real, options),
        m_item(3 * (real == BasicKind::float32 ? 4 : 8)) {}
  std::string name() const override { return m_name; }
  Capabilities capabilities() const override { return {true, true, false, 1}; }
  void connect(const Connection& connection) override {
    Transport::connect(connection);
    m_ready = false;
  }
  void run_async(Direction direction, std::span<void* const> fields,
                 std::span<const GpuStream> streams, ExchangeStats& stats) override {
    const GpuStream stream = streams.front();  // one GPU
    if (fields.size() != 1 || m_connection->particles.size() != 1) {
      throw Error("halox: internal: " + m_name + " moves one particle array per run");
    }
    const ParticlePlan& plan = m_connection->particles.front();
    if (!m_ready) {  // collective: every rank runs its first exchange after a new plan together
      m_halo.set_plan(plan);
      m_ready = true;
    }
    const bool forward = direction == Direction::forward;
    if (forward)
      m_halo.forward(fields[0], stream);
    else
      m_halo.reverse(fields[0], stream);
    stats.exchanges += 1;
    for (const auto& p : plan.pulses) {
      const int peer = forward ? p.header.send_rank : p.header.recv_rank;
      if (peer >= 0 && peer != m_rank) {
        stats.messages += 1;
        stats.bytes_sent += (forward ? p.header.send_size : p.header.recv_size) * m_item;
      }
    }
  }
  void check() const override { m_halo.check(); }
  int launches_per_run() const override { return m_ready ? m_halo.launches_per_exchange() : 0; }
  // nccl-device's windows run the same kernels, but no graph test covers them (two GPUs).
  bool capturable() const override {
    return m_kind != TransportKind::nccl_device && m_halo.capturable();
  }
  bool set_up_for(Direction direction, std::span<void* const> fields) const override {
    return m_ready && fields.size() == 1 &&
           m_halo.set_up_for(direction == Direction::forward, fields[0]);
  }

 private:
  int m_rank;
  TransportKind m_kind;
  std::string m_name;
  PeerHalo m_halo;
  std::int64_t m_item;
  bool m_ready = false;
};

}  // namespace

std::unique_ptr<Transport> make_particle_fused_transport(MPI_Comm comm, int rank,
                                                         TransportKind kind, BasicKind real,
                                                         const ExchangeOptions& options) {
  ExchangeOptions o = options;
  o.transport = kind;  // the kernels follow the kind: one per pulse or one for all
  return std::make_unique<ParticleFusedTransport>(comm, rank, kind, real, o);
}

}  // namespace halox::detail
