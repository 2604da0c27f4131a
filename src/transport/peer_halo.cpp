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

PeerHalo::PeerHalo(const Ranks& ranks, Mapping mapping, BasicKind real,
                   const ExchangeOptions& options)
    : m_ranks(ranks),
      m_comm(ranks.processes().comm()),
      m_process(ranks.processes().rank()),
      m_rank(ranks.rank(0)),
      m_mapping(mapping),
      m_name(to_string(options.transport)),
      m_timeout(options.timeout_seconds),
      m_halo(std::make_unique<DeviceHalo>(
          real, options,
          gpu_share(m_comm,
                    {m_rank, to_string(options.transport).c_str(), options.timeout_seconds}))),
      m_proxy_policy(particle_proxy_policy(m_comm, mapping, options)),
      m_item(3 * (real == BasicKind::float32 ? 4 : 8)) {
  for (int i = 0; i < ranks.count(); ++i) {
    m_mine.push_back(ranks.rank(i));
    m_peers.push_back(std::make_unique<PeerBlocks>(m_comm, m_process, mapping));
  }
  if (ranks.count() > 1 && m_proxy_policy != ProxyPolicy::none) {
    throw Error("halox::ParticleExchange: the " + m_name +
                " transport reaches some neighbours only through the host proxy (another node, "
                "or HALOX_HOST_PROXY=1), which serves one rank per process; over Ranks::blocks "
                "(several ranks per MPI process) take staged there");
  }
  if (mapping == Mapping::nccl) {
#if HALOX_HAS_NCCL_DEVICE
    if (ranks.count() > 1) {
      throw Error(
          "halox::ParticleExchange: nccl-device takes one rank per process; over "
          "Ranks::blocks (several ranks per MPI process) take ipc-fused or nvshmem-fused");
    }
    m_windows = std::make_shared<NcclWindows>(m_comm, m_process);
    m_peers[0]->use_windows([windows = m_windows.get()](char* my_base, int peer) -> char* {
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
    // Symmetric blocks: every PE allocates the largest size any PE needs (collective; every
    // process holds as many ranks, so the k-th blocks of all processes are one allocation).
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

void PeerHalo::set_plans(std::span<const ParticlePlan> plans) {
  HALOX_CUDA_CHECK(cudaDeviceSynchronize());
  if (plans.size() != m_mine.size()) {
    throw Error("halox: internal: " + m_name + " got " + std::to_string(plans.size()) +
                " plans for " + std::to_string(m_mine.size()) + " ranks");
  }
  std::vector<const ParticlePlan*> plan_list;
  std::set<int> neighbours;  // grid ranks, this process's own among them
  std::set<int> processes;   // the other processes holding them
  std::int64_t heap = 0;
  for (std::size_t k = 0; k < plans.size(); ++k) {
    plan_list.push_back(&plans[k]);
    heap += 2 * m_halo->block_bytes(plans[k]);
    for (const auto& p : plans[k].pulses) {
      for (int n : {p.header.send_rank, p.header.recv_rank}) {
        if (n < 0 || n == m_mine[k]) continue;
        neighbours.insert(n);
        if (m_ranks.process_of(n) != m_process) processes.insert(m_ranks.process_of(n));
      }
    }
  }
  if (symmetric(m_mapping)) {
    // NVSHMEM up (collective on first use; the heap from these plans, room for send staging)
    // before deciding whether any neighbour is reached by puts: only then do the blocks
    // carry send staging, so that direct stores keep to the halo bytes plus headroom.
    ensure_nvshmem(m_comm, heap);
    bool puts = m_mapping == Mapping::nvshmem_puts;
    for (int n : processes) puts = puts || !symmetric_reachable(n);
    m_halo->set_put_staging(puts);
  }
  // Every rank's new plan fits its current block (the usual case after a neighbour search):
  // the blocks stay where they are, the peers' mappings stay valid and the signals run on.
  // If, besides, no rank has a new neighbour, the links are those the self-test checked
  // and it is not run again. Both decisions collective (the NVSHMEM allocator is, and the
  // peers' exchange counters must stay in step).
  const WaitContext context{m_rank, m_name.c_str(), m_timeout};
  // 2: a plan of this process does not fit its block; 1: it has new neighbours.
  const long long worst =
      bounded_max(m_comm, (m_halo->fits(plan_list) ? 0 : 2) | (neighbours == m_neighbours ? 0 : 1),
                  context, "the agreement on the new plan's blocks");
  const bool all_fit = worst < 2;
  if (!all_fit) {
    // Nobody may still write into a block about to be freed, and nobody may signal into a
    // new block before its owner zeroed it: barriers around the swap.
    for (auto& peers : m_peers) peers->unmap();
    bounded_barrier(m_comm, context, "the swap of the blocks");
  }
  const bool kept = m_halo->allocate(m_mine, plan_list, all_fit);
  const bool links_changed = !kept || worst > 0;
  m_neighbours = neighbours;
  // The k-th blocks of every process, published to the processes that hold neighbours (in
  // the order of k on every process: each publication is collective among them).
  bool same_gpu = true;
  for (std::size_t k = 0; k < m_peers.size(); ++k) {
    const PeerBlock mine = m_halo->block(static_cast<int>(k));
    BlockOffsets offsets{};
    for (int p = 0; p < kMaxPulses; ++p) {
      offsets[p] = mine.fwd_offset[p];
      offsets[kMaxPulses + p] = mine.rev_offset[p];
    }
    m_peers[k]->publish(mine.base, offsets, processes, kept, context, m_proxy_policy);
    same_gpu = same_gpu && m_peers[k]->same_gpu();
  }
  m_halo->set_system_scope(!same_gpu);
  if (m_proxy_policy != ProxyPolicy::none) set_up_proxies(plans.front(), kept);
  m_halo->connect([this](int rank) { return block_of(rank); });
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

PeerBlock PeerHalo::block_of(int rank) const {
  const int process = m_ranks.process_of(rank), index = m_ranks.index_in_process(rank);
  if (process == m_process) return m_halo->block(index);  // a rank of this process
  const PeerBlocks& peers = *m_peers[static_cast<std::size_t>(index)];
  PeerBlock block;
  block.base = peers.base(process);
  block.put_pe = peers.put_pe(process);
  const BlockOffsets& o = peers.offsets(process);
  for (int p = 0; p < kMaxPulses; ++p) {
    block.fwd_offset[p] = o[p];
    block.rev_offset[p] = o[kMaxPulses + p];
  }
  return block;
}

// The links to proxied neighbours, per pulse: forward, my items to my destination and my
// source's to me; reverse, the forces of my received items to my source and those of my sent
// items back from my destination. Collective (every rank, links or not).
void PeerHalo::set_up_proxies(const ParticlePlan& plan, bool blocks_kept) {
  std::vector<ProxyLinkPlan> fwd, rev;
  std::vector<int> link_of(plan.pulses.size(), -1);
  // One rank per process (the constructor refuses the proxy over blocks): grid rank = process.
  auto proxied = [this](int rank) {
    return rank >= 0 && rank != m_rank && m_peers.front()->proxied(rank);
  };
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

void PeerHalo::forward(const std::vector<void*>& x, GpuStream stream) {
  m_halo->forward(x, stream);
  if (m_fwd_proxy && m_fwd_proxy->any()) m_fwd_proxy->launched(m_halo->epoch(true));
}

void PeerHalo::reverse(const std::vector<void*>& f, GpuStream stream) {
  m_halo->reverse(f, stream);
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

// The fused particle kernels as a transport: connected to the plans (collectively at the first
// run after them: blocks, peer mapping, self-test), then one launch per pulse or one for all.
class ParticleFusedTransport final : public Transport {
 public:
  ParticleFusedTransport(const Ranks& ranks, TransportKind kind, BasicKind real,
                         const ExchangeOptions& options)
      : m_kind(kind),
        m_name(to_string(kind)),
        m_halo(ranks, peer_mapping(kind, options), real, options),
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
    const std::vector<int>& mine = m_halo.ranks();
    if (fields.size() != mine.size() || m_connection->particles.size() != mine.size()) {
      throw Error("halox: internal: " + m_name + " moves one particle array per rank per run");
    }
    if (!m_ready) {  // collective: every process runs its first exchange after new plans together
      m_halo.set_plans(m_connection->particles);
      m_ready = true;
    }
    const bool forward = direction == Direction::forward;
    m_arrays.assign(fields.begin(), fields.end());
    if (forward)
      m_halo.forward(m_arrays, stream);
    else
      m_halo.reverse(m_arrays, stream);
    stats.exchanges += 1;
    for (std::size_t k = 0; k < mine.size(); ++k) {
      for (const auto& p : m_connection->particles[k].pulses) {
        const int peer = forward ? p.header.send_rank : p.header.recv_rank;
        if (peer >= 0 && peer != mine[k]) {
          stats.messages += 1;
          stats.bytes_sent += (forward ? p.header.send_size : p.header.recv_size) * m_item;
        }
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
    return m_ready && fields.size() == m_halo.ranks().size() &&
           m_halo.set_up_for(direction == Direction::forward,
                             std::vector<void*>(fields.begin(), fields.end()));
  }

 private:
  TransportKind m_kind;
  std::string m_name;
  PeerHalo m_halo;
  std::vector<void*> m_arrays;  // a run's arrays (kept: no allocation per run)
  std::int64_t m_item;
  bool m_ready = false;
};

}  // namespace

std::unique_ptr<Transport> make_particle_fused_transport(const Ranks& ranks, TransportKind kind,
                                                         BasicKind real,
                                                         const ExchangeOptions& options) {
  ExchangeOptions o = options;
  o.transport = kind;  // the kernels follow the kind: one per pulse or one for all
  return std::make_unique<ParticleFusedTransport>(ranks, kind, real, o);
}

}  // namespace halox::detail
