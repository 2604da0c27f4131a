// GPU-initiated particle halo: the host side of the fused kernels (device_halo_kernels.cuh),
// used by the local and the IPC/NVSHMEM transports.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>

#include "../common/cuda_check.hpp"
#include "../common/growing_buffer.hpp"
#include "../runtime/nvshmem_runtime_stub.hpp"
#include "../trace/device_trace.hpp"
#include "device_halo.hpp"
#include "proxy_ends.hpp"
#include "forwarding_graph.hpp"
#include "device_halo_kernels.cuh"
#include "signals.cuh"
#include "halox/config.hpp"
#include "halox/trace.hpp"

namespace halox::detail {

#if !HALOX_HAS_NVSHMEM
// No NVSHMEM, no peer reached by puts (PeerBlocks never makes one): never called.
namespace fused_particle {
template <class Real>
void launch_with_puts(bool, dim3, const LaunchArgs&, Real* const*, cudaStream_t) {
  no_nvshmem();
}
int resident_blocks_with_puts(bool) {
  no_nvshmem();
}
}  // namespace fused_particle
#endif

using namespace fused_particle;

namespace {

const char* kind_name(int kind) {
  switch (kind) {
    case fwd_ready: return "forward: the destination's buffer to become free";
    case fwd_data: return "forward: the halo data";
    case rev_ready: return "reverse: the destination's buffer to become free";
    case rev_data: return "reverse: the returned forces";
    case probe_fwd: return "the forward link";
    case probe_rev: return "the reverse link";
  }
  return "?";
}

// What connect() uploads besides the views and tables: every pulse's index lists in one
// array, the shift vectors of the hops of every view's forwarded items (ForwardingGraph gives
// them as launch rank << 5 | pulse) in another; each view's places in them (pointers once
// uploaded).
struct PlanArrays {
  struct Places {
    std::size_t send_index, rev_order, fwd_source, rev_extra_start, rev_extra, hop_shifts;
  };
  std::vector<int> ints;
  std::vector<double> hop_shifts;
  std::vector<Places> places;
  template <class It>
  std::size_t append(It first, It last) {
    const std::size_t at = ints.size();
    ints.insert(ints.end(), first, last);
    return at;
  }
};

}  // namespace

struct DeviceHalo::Impl {
  BasicKind real;
  ExchangeOptions options;
  bool all_pulses = true;  // one kernel for every pulse
  double share;
  int item = 0;
  std::vector<int> ranks;
  std::vector<const ParticlePlan*> plans;
  int npulses = 0;
  std::vector<char*> blocks;        // per local rank: Slots + staging
  std::vector<long long> capacity;  // bytes of each block
  std::vector<PeerBlock> published;
  // The views, the rank tables and every pulse's index lists, one upload per plan.
  GrowingBuffer<Memory::device, Growth::with_headroom> plan_data;
  const PulseView* views = nullptr;
  const RankTable* tables = nullptr;
  ErrorChannel errors;
  std::vector<ProbeLink> probes;  // the self-test's, two per pulse of each rank
  ProbeRun probe_run;
  u64 fwd_epoch = 0, rev_epoch = 0, probe_epoch = 0;
  // The kernels' own exchange counters (LaunchArgs::counters): the host's above follow them
  // while every launch is the host's; after replays of a CUDA graph the device's run ahead,
  // and a new plan reads them back (allocate).
  u64* counters = nullptr;
  // CUDA graphs: a launch captured in a graph may replay after any launch, so the staging
  // is known free (peers_known_free) only after a launch of the other direction in the same
  // capture; and once any was captured, never outside one.
  unsigned long long capture_id = 0;  // the capture of the last launch (0: none)
  u64 plan = 0;                       // plans installed (allocate), LaunchArgs::plan
  bool captured = false;
  // The direction of the last launch on these blocks: 0 forward, 1 reverse, -1 none since
  // they were (re)allocated (LaunchArgs::peers_known_free).
  int last_direction = -1;
  int grid_blocks = 1;
  bool system_scope = true;
  bool put_staging = false;
  // The links through the host proxy (set_proxy).
  std::function<bool(int)> proxied = [](int) { return false; };
  std::vector<const ProxyEnds*> proxy_fwd, proxy_rev;
  bool any_proxied = false;  // some link goes through the host proxy (connect)
  bool puts = false;         // some view reaches its peer by puts: the kernels that make them
  void* x_table = nullptr;   // device array of per-rank pointers
  int trace_object = -1;     // this exchange in traces
  std::vector<void*> last_x, last_f;
  std::vector<char> last_direct;  // per view: fwd (1) / rev (2) arrives direct, last plan
  // Recorded after each launch: a new plan waits for these kernels, not for the
  // whole GPU (the caller's other work, as a neighbour search's list build, runs on).
  cudaEvent_t launched = nullptr;

  std::function<char*(std::int64_t)> allocate_block = [](std::int64_t n) {
    char* p = nullptr;
    HALOX_CUDA_CHECK(cudaMalloc(&p, static_cast<std::size_t>(n)));
    return p;
  };
  std::function<void(char*)> free_block = [](char* p) { cudaFree(p); };

  // connect()'s parts.
  struct PulseProbes {
    ProbeLink forward, reverse;
  };
  PulseView view_of(std::size_t k, int p, const ForwardingGraph& graph, PlanArrays& arrays) const;
  void link_proxied(PulseView& v, std::size_t k, int p, int peer, bool destination);
  void link_mapped(PulseView& v, std::size_t k, int p, int peer, const PeerBlock& b,
                   bool destination, PulseProbes& probes);
  void upload(std::vector<PulseView>& views, const std::vector<RankTable>& rank_tables,
              const PlanArrays& arrays);
  void size_grid(int most_items);

  void release() {
    for (char* b : blocks) free_block(b);
    blocks.clear();
    capacity.clear();
  }

  LaunchArgs args(int first_pulse, u64 epoch, bool captured_launch) const {
    LaunchArgs a{};
    a.views = views;
    a.tables = tables;
    a.npulses = npulses;
    a.first_pulse = first_pulse;
    a.blocks = grid_blocks;
    a.epoch = epoch;  // a captured launch reads it on the device
    a.plan = captured_launch ? plan : 0;
    a.counters = counters;
    a.timeout_ns = static_cast<u64>(options.timeout_seconds * 1e9);
    a.error = errors.sink();
    a.stall_rank = options.testing.stall_rank;
    a.system_scope = system_scope ? 1 : 0;
    return a;
  }

  // The per-rank array pointers live in device memory; forward (coordinates) and reverse
  // (forces) keep their own table, so alternating them never re-uploads (nor waits).
  void* pointer_table(bool forward, const std::vector<void*>& p, GpuStream stream) {
    if (p.size() != ranks.size()) {
      throw Error("halox: " + std::to_string(p.size()) + " arrays given for " +
                  std::to_string(ranks.size()) + " local ranks");
    }
    std::vector<void*>& last = forward ? last_x : last_f;
    void** table = static_cast<void**>(x_table) + (forward ? 0 : 4096);
    if (p != last) {
      if (capturing(stream)) {  // set_up_for refuses this before: a capture cannot wait
        throw Error("halox: new arrays inside a CUDA graph capture: exchange them once outside");
      }
      HALOX_CUDA_CHECK(cudaStreamSynchronize(stream));  // new arrays: once per buffer set
      detail::copy_to_device_now(table, p.data(), p.size() * sizeof(void*));
      last = p;
    }
    return table;
  }

  // Which pulses go direct (PulseView::fwd_direct_to): the peer is a rank of this launch,
  // and no forwarded item of the receiving rank reads that pulse's staging (a pulse's
  // staging is read exactly where some pulse of its rank waits for it: fwd_deps, rev_deps).
  // Where `rank` is among this launch's ranks; -1 if outside (or no rank).
  int launch_index(int rank) const {
    const auto it = std::find(ranks.begin(), ranks.end(), rank);
    return rank < 0 || it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
  }

  void mark_direct_pulses(std::vector<PulseView>& views) {
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      unsigned fwd_read = 0, rev_read = 0;
      for (int p = 0; p < npulses; ++p) {
        fwd_read |= views[k * npulses + p].fwd_deps;
        rev_read |= views[k * npulses + p].rev_deps;
      }
      for (int p = 0; p < npulses; ++p) {
        PulseView& v = views[k * npulses + p];
        v.fwd_arrives_direct = launch_index(v.recv_rank) >= 0 && !(fwd_read >> p & 1u);
        v.rev_arrives_direct = launch_index(v.send_rank) >= 0 && !(rev_read >> p & 1u);
      }
    }
    for (PulseView& v : views) {
      const int dest = launch_index(v.send_rank), source = launch_index(v.recv_rank);
      if (dest >= 0 && views[dest * npulses + v.pulse].fwd_arrives_direct) {
        const PulseView& d = views[dest * npulses + v.pulse];
        agree(v.rank, d.rank, v.pulse, v.n_send, d.recv_rank, d.n_recv);
        v.fwd_direct_to = dest;
        v.fwd_direct_offset = d.recv_offset;
      }
      if (source >= 0 && views[source * npulses + v.pulse].rev_arrives_direct) {
        const PulseView& s = views[source * npulses + v.pulse];
        agree(s.rank, v.rank, v.pulse, s.n_send, v.recv_rank, v.n_recv);
        v.rev_direct_to = source;
        v.rev_direct_homes = s.first_forwarded;
      }
    }
    // A pulse that changed between direct and staged since the last plan: its data signal,
    // which direct pulses leave alone, is set to where the exchange counters stand, so that
    // waits for it match again (no kernel runs: allocate waited). In new blocks that is the
    // 0 they were zeroed to, so kept or not makes no difference.
    std::vector<char> now;
    for (const PulseView& v : views) {
      now.push_back(static_cast<char>(v.fwd_arrives_direct | v.rev_arrives_direct << 1));
    }
    const u64 fwd = fwd_epoch << 32, rev = rev_epoch << 32;
    for (std::size_t i = 0; i < views.size() && i < last_direct.size(); ++i) {
      const int changed = now[i] ^ last_direct[i];
      if (changed & 1)
        detail::copy_to_device_now(const_cast<u64*>(views[i].fwd_in.signal), &fwd, sizeof fwd);
      if (changed & 2)
        detail::copy_to_device_now(const_cast<u64*>(views[i].rev_in.signal), &rev, sizeof rev);
    }
    last_direct = std::move(now);
  }
  // Both ends of a direct pulse must agree on it: a mismatch would write past the halo.
  static void agree(int sender, int receiver, int pulse, int sent, int receiver_source,
                    int received) {
    if (receiver_source != sender || sent != received) {
      throw Error("halox: the plans of ranks " + std::to_string(sender) + " and " +
                  std::to_string(receiver) + " disagree on pulse " + std::to_string(pulse) +
                  ": rank " + std::to_string(sender) + " sends " + std::to_string(sent) +
                  " items, rank " + std::to_string(receiver) + " expects " +
                  std::to_string(received) + " from rank " + std::to_string(receiver_source));
    }
  }

  template <class Real>
  void launch(bool forward, const std::vector<void*>& arrays, GpuStream stream) {
    Real* const* table = static_cast<Real* const*>(pointer_table(forward, arrays, stream));
    const u64 epoch = ++(forward ? fwd_epoch : rev_epoch);  // replays count on the device
    const unsigned nranks = static_cast<unsigned>(ranks.size());
    if (npulses == 0) return;
    const int direction = forward ? 0 : 1;
    const unsigned long long capture = capture_of(stream);
    captured = captured || capture != 0;
    // A proxied link's staging is the proxy's until its message has gone, so it always waits;
    // deciding that here keeps the proxy's test out of every kernel's path.
    const bool peers_known_free = last_direction == 1 - direction && !any_proxied &&
                                  (capture != 0 ? capture == capture_id : !captured);
    last_direction = direction;
    capture_id = capture;
    const bool all = all_pulses;  // a member, read once for the loop below
    const dim3 grid(grid_blocks, all ? npulses : 1, nranks);
    for (int k = 0; k < (all ? 1 : npulses); ++k) {
      const int p = all ? 0 : forward ? k : npulses - 1 - k;
      // Once any launch was captured, replays move the counters on the device, where every
      // later launch reads them (the host's count falls behind).
      LaunchArgs a = args(p, epoch, captured);
      a.peers_known_free = peers_known_free ? 1 : 0;
      a.advance = k == (all ? 0 : npulses - 1) ? 1 : 0;
      // Not traced in a CUDA graph: a replay would write the one launch's records again.
      a.trace = capture != 0
                    ? DeviceTrace{}
                    : device_trace(static_cast<unsigned long long>(grid.x) * grid.y * grid.z,
                                   trace_object);
      if (puts)
        launch_with_puts<Real>(forward, grid, a, table, stream);
      else
        launch_dependent(
            forward
                ? (any_proxied ? forward_kernel<Real, false, true> : forward_kernel<Real, false>)
                : (any_proxied ? reverse_kernel<Real, false, true> : reverse_kernel<Real, false>),
            grid, 256, stream, a, table);
    }
    if (capture != 0) return;  // a new plan after replays waits for the whole GPU
    if (!launched) HALOX_CUDA_CHECK(cudaEventCreateWithFlags(&launched, cudaEventDisableTiming));
    HALOX_CUDA_CHECK(cudaEventRecord(launched, stream));
  }

  // The capture `stream` is in (its id), or 0.
  static unsigned long long capture_of(GpuStream stream) {
    if (!capturing(stream)) return 0;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    HALOX_CUDA_CHECK(cudaStreamGetCaptureInfo(static_cast<cudaStream_t>(stream), &status, &id));
    return id;
  }
};

bool all_pulses_in_one_kernel(TransportKind kind) {
  return kind == TransportKind::ipc_fused || kind == TransportKind::nvshmem_fused ||
         kind == TransportKind::nccl_device || kind == TransportKind::local_fused;
}

DeviceHalo::DeviceHalo(BasicKind real, const ExchangeOptions& options, double gpu_share)
    : m_impl(std::make_unique<Impl>()) {
  if (real != BasicKind::float32 && real != BasicKind::float64) {
    throw Error("halox: GPU halo coordinates must be float32 or float64");
  }
  m_impl->real = real;
  m_impl->options = options;
  m_impl->all_pulses = all_pulses_in_one_kernel(options.transport);
  m_impl->share = gpu_share;
  m_impl->trace_object = trace_object(options.name);
  m_impl->item = 3 * (real == BasicKind::float32 ? 4 : 8);
}

DeviceHalo::~DeviceHalo() {
  cudaDeviceSynchronize();
  m_impl->release();
  cudaFree(m_impl->x_table);
  cudaFree(m_impl->counters);
  if (m_impl->launched) cudaEventDestroy(m_impl->launched);
}

namespace {

// A rank's block: Slots, then the forward staging of every pulse, then the reverse staging;
// with send staging (put-with-signal peers), what each pulse sends forward and returns.
PeerBlock layout(const ParticlePlan& plan, int npulses, int item, bool send_staging,
                 long long& bytes) {
  PeerBlock pb;
  long long at = kSlotsBytes;
  auto area = [&](long long items) {
    const long long start = at;
    at += (items * item + 255) / 256 * 256;
    return start;
  };
  for (int p = 0; p < npulses; ++p) pb.fwd_offset[p] = area(plan.pulses[p].recv_count);
  for (int p = 0; p < npulses; ++p) {
    pb.rev_offset[p] = area(static_cast<long long>(plan.pulses[p].send_index.size()));
  }
  for (int p = 0; p < npulses && send_staging; ++p) {
    pb.fwd_send_offset[p] = area(static_cast<long long>(plan.pulses[p].send_index.size()));
    pb.rev_send_offset[p] = area(plan.pulses[p].recv_count);
  }
  bytes = at;
  return pb;
}

}  // namespace

std::int64_t DeviceHalo::block_bytes(const ParticlePlan& plan) const {
  long long bytes = 0;
  layout(plan, static_cast<int>(plan.pulses.size()), m_impl->item, m_impl->put_staging, bytes);
  return with_plan_headroom(bytes);
}

bool DeviceHalo::fits(const std::vector<const ParticlePlan*>& plans) const {
  const Impl& m = *m_impl;
  if (m.blocks.size() != plans.size()) return false;
  // After a time-out the signals are out of step: only new (zeroed) blocks recover.
  if (m.errors.record().flag != 0) return false;
  for (std::size_t k = 0; k < plans.size(); ++k) {
    const int npulses = static_cast<int>(plans[k]->pulses.size());
    if (npulses != m.npulses) return false;
    long long bytes = 0;
    layout(*plans[k], npulses, m.item, m.put_staging, bytes);
    if (bytes > m.capacity[k]) return false;
  }
  return true;
}

bool DeviceHalo::allocate(const std::vector<int>& ranks,
                          const std::vector<const ParticlePlan*>& plans, bool keep_if_fits) {
  Impl& m = *m_impl;
  // No kernel of this halo may still use the old blocks or plan data (after CUDA graphs:
  // their replays, on streams this halo does not know).
  if (m.captured) {
    HALOX_CUDA_CHECK(cudaDeviceSynchronize());
  } else if (m.launched) {
    HALOX_CUDA_CHECK(cudaEventSynchronize(m.launched));
  }
  if (!m.counters) {
    HALOX_CUDA_CHECK(cudaMalloc(&m.counters, 4 * sizeof(u64)));
    detail::fill_device_now(m.counters, 0, 4 * sizeof(u64));
  }
  // Launches captured on the last plan stop at their start from now on (flag 3).
  ++m.plan;
  detail::copy_to_device_now(m.counters + 3, &m.plan, sizeof m.plan);
  if (m.captured) {  // replays counted on the device only
    u64 device_epochs[2] = {};
    HALOX_CUDA_CHECK(
        cudaMemcpy(device_epochs, m.counters, sizeof device_epochs, cudaMemcpyDeviceToHost));
    m.fwd_epoch = device_epochs[0];
    m.rev_epoch = device_epochs[1];
  }
  // A new plan after a neighbour search usually fits the blocks of the last one: keeping
  // them keeps their addresses, so peers need not map them again (CUDA IPC: milliseconds).
  const bool keep = keep_if_fits && ranks == m.ranks && fits(plans);
  if (!keep) m.release();
  m.ranks = ranks;
  m.plans = plans;
  m.npulses = plans.empty() ? 0 : static_cast<int>(plans[0]->pulses.size());
  m.published.resize(plans.size());
  for (std::size_t k = 0; k < plans.size(); ++k) {
    const ParticlePlan& plan = *plans[k];
    if (static_cast<int>(plan.pulses.size()) != m.npulses || m.npulses > kMaxPulses) {
      throw Error("halox: GPU halo plans need the same number of pulses on every rank, at most " +
                  std::to_string(kMaxPulses));
    }
    long long bytes = 0;
    PeerBlock pb = layout(plan, m.npulses, m.item, m.put_staging, bytes);
    if (!keep) {
      const long long capacity = with_plan_headroom(bytes);
      char* block = m.allocate_block(capacity);
      m.blocks.push_back(block);
      m.capacity.push_back(capacity);
    }
    // New blocks: signals restart from epoch 0 (every rank re-plans together). Kept
    // blocks: the signals run on, with no reset to wait for.
    if (!keep) detail::fill_device_now(m.blocks[k], 0, kSlotsBytes);
    pb.base = m.blocks[k];
    m.published[k] = pb;
  }
  if (!keep) {
    m.fwd_epoch = m.rev_epoch = m.probe_epoch = 0;
    detail::fill_device_now(m.counters, 0, 3 * sizeof(u64));
  }
  // Kept or not, the first exchange on the new plan waits for its peers' staging (a new
  // neighbour's was not read by anything this rank received).
  m.last_direction = -1;
  // A recorded time-out is forgotten (its blocks were just replaced: fits() refuses them).
  // Without one there is nothing to reset, and no synchronous memset per neighbour search.
  if (m.errors.record().flag != 0) m.errors.clear();
  if (!m.x_table) HALOX_CUDA_CHECK(cudaMalloc(&m.x_table, 2 * 4096 * sizeof(void*)));
  if (ranks.size() > 4096) throw Error("halox: at most 4096 ranks per process");
  // The array tables stay valid: they hold the callers' arrays, which pointer_table()
  // compares at every exchange (a re-upload waits for the stream).
  if (!keep) HALOX_CUDA_CHECK(cudaDeviceSynchronize());  // zeroed before any peer may signal
  return keep;
}

PeerBlock DeviceHalo::block(int k) const {
  return m_impl->published[k];
}

void DeviceHalo::set_put_staging(bool on) {
  m_impl->put_staging = on;
}

void DeviceHalo::set_system_scope(bool system) {
  m_impl->system_scope = system;
}

void DeviceHalo::set_proxy(std::function<bool(int)> proxied, std::vector<const ProxyEnds*> fwd,
                           std::vector<const ProxyEnds*> rev) {
  m_impl->proxied = std::move(proxied);
  m_impl->proxy_fwd = std::move(fwd);
  m_impl->proxy_rev = std::move(rev);
}

std::uint64_t DeviceHalo::epoch(bool forward) const {
  return forward ? m_impl->fwd_epoch : m_impl->rev_epoch;
}

void DeviceHalo::set_allocator(std::function<char*(std::int64_t)> allocate,
                               std::function<void(char*)> free) {
  m_impl->allocate_block = std::move(allocate);
  m_impl->free_block = std::move(free);
}

// connect()'s parts: one view per (rank, pulse) with its index lists, its links to the two
// neighbours (mapped or through the host proxy) and its probes, then one upload of it all and
// the grid's size.
PulseView DeviceHalo::Impl::view_of(std::size_t k, int p, const ForwardingGraph& graph,
                                    PlanArrays& arrays) const {
  const ParticlePulse& pulse = plans[k]->pulses[p];
  const PeerBlock& me = published[k];
  PulseView v;
  v.rank = ranks[k];
  v.pulse = p;
  v.send_rank = pulse.header.send_rank;
  v.recv_rank = pulse.header.recv_rank;
  v.n_send = static_cast<int>(pulse.send_index.size());
  v.first_forwarded = static_cast<int>(pulse.first_forwarded);
  v.n_recv = static_cast<int>(pulse.recv_count);
  v.recv_offset = pulse.recv_offset;
  for (int a = 0; a < 3; ++a) v.shift[a] = pulse.shift[a];
  // Forward: each forwarded item's source (see ForwardingGraph).
  std::vector<int> fwd_source, fwd_shifts;
  for (std::int64_t j = pulse.first_forwarded; j < v.n_send; ++j) {
    graph.forward_source(static_cast<int>(k), p, static_cast<std::size_t>(j), fwd_source,
                         fwd_shifts, v.fwd_deps);
  }
  // Reverse: my received items of p that later pulses forwarded get the forces those pulses
  // return (later pulses first, the order in which the host transport adds them); the other
  // items go at once.
  std::vector<int> order, extra_start(1, 0), extra;
  const int own = static_cast<int>(k);
  for (int i = 0; i < v.n_recv; ++i)
    if (!graph.forwarded(own, pulse.recv_offset + i)) order.push_back(i);
  v.rev_first_forwarded = static_cast<int>(order.size());
  for (int i = 0; i < v.n_recv; ++i) {
    if (!graph.forwarded(own, pulse.recv_offset + i)) continue;
    order.push_back(i);
    graph.returned_terms(own, own, pulse.recv_offset + i, extra, v.rev_deps);
    extra_start.push_back(static_cast<int>(extra.size() / 2));
  }
  PlanArrays::Places& at = arrays.places.emplace_back();
  at.send_index = arrays.append(pulse.send_index.begin(), pulse.send_index.end());
  at.rev_order = arrays.append(order.begin(), order.end());
  at.fwd_source = arrays.append(fwd_source.begin(), fwd_source.end());
  at.rev_extra_start = arrays.append(extra_start.begin(), extra_start.end());
  at.rev_extra = arrays.append(extra.begin(), extra.end());
  at.hop_shifts = arrays.hop_shifts.size();
  for (int hop : fwd_shifts) {
    const auto& shift = plans[hop >> kPulseBits]->pulses[hop & kPulseMask].shift;
    arrays.hop_shifts.insert(arrays.hop_shifts.end(), shift.begin(), shift.end());
  }
  Slots* mine = reinterpret_cast<Slots*>(me.base);
  v.fwd_in.staging = me.base + me.fwd_offset[p];
  v.fwd_in.signal = &mine->fwd_data[p];
  v.rev_in.staging = me.base + me.rev_offset[p];
  v.rev_in.signal = &mine->rev_data[p];
  v.fwd_out.ready = &mine->fwd_ready[p];
  v.fwd_out.packed = &mine->fwd_packed[p];
  v.rev_out.ready = &mine->rev_ready[p];
  v.rev_out.packed = &mine->rev_packed[p];
  v.dest_in_launch = launch_index(v.send_rank) >= 0;
  v.source_in_launch = launch_index(v.recv_rank) >= 0;
  return v;
}

// The channels to one neighbour through the host proxy: the link's ends are in mapped host
// memory, its waits relayed by the pulse's block 0; the proxy's own self-test probes it.
// To my destination (forward) my items go out and its returned forces come back; to my
// source the other way round.
void DeviceHalo::Impl::link_proxied(PulseView& v, std::size_t k, int p, int peer,
                                    bool destination) {
  any_proxied = true;
  const auto p_index = static_cast<std::size_t>(p);
  const ProxyEnds* f = p_index < proxy_fwd.size() ? proxy_fwd[p_index] : nullptr;
  const ProxyEnds* r = p_index < proxy_rev.size() ? proxy_rev[p_index] : nullptr;
  if (f == nullptr || r == nullptr) {
    throw Error("halox: internal: rank " + std::to_string(peer) +
                " is proxied without the proxy's ends of pulse " + std::to_string(p));
  }
  Slots* mine = reinterpret_cast<Slots*>(published[k].base);
  SendChannel& out = destination ? v.fwd_out : v.rev_out;
  RecvChannel& in = destination ? v.rev_in : v.fwd_in;
  const ProxyEnds& to = destination ? *f : *r;    // what I send it
  const ProxyEnds& from = destination ? *r : *f;  // what it sends me
  out.pe = in.pe = -1;
  out.remote = to.send_staging;
  out.remote_signal = to.packed;
  out.ready = to.ready;
  out.ready_relay = destination ? &mine->fwd_ready_relay[p] : &mine->rev_ready_relay[p];
  in.staging = from.recv_staging;
  in.signal = from.data;
  in.remote_ready = from.released;
  in.data_relay = destination ? &mine->rev_data_relay[p] : &mine->fwd_data_relay[p];
}

// The channels to one neighbour whose block `b` this process maps (or puts to), and the
// probes over them (forward to my destination and from my source, reverse the other way).
void DeviceHalo::Impl::link_mapped(PulseView& v, std::size_t k, int p, int peer, const PeerBlock& b,
                                   bool destination, PulseProbes& probes) {
  if (b.put_pe >= 0 && !put_staging) {
    throw Error("halox: rank " + std::to_string(peer) +
                " is reached by puts, but the blocks have no send staging");
  }
  const PeerBlock& me = published[k];
  Slots* mine = reinterpret_cast<Slots*>(me.base);
  Slots* slots = reinterpret_cast<Slots*>(b.base);
  SendChannel& out = destination ? v.fwd_out : v.rev_out;
  RecvChannel& in = destination ? v.rev_in : v.fwd_in;
  out.pe = in.pe = b.put_pe;
  if (b.put_pe >= 0)
    out.staging = me.base + (destination ? me.fwd_send_offset[p] : me.rev_send_offset[p]);
  out.remote = b.base + (destination ? b.fwd_offset[p] : b.rev_offset[p]);
  out.remote_signal = destination ? &slots->fwd_data[p] : &slots->rev_data[p];
  in.remote_ready = destination ? &slots->rev_ready[p] : &slots->fwd_ready[p];
  ProbeLink& sent = destination ? probes.forward : probes.reverse;  // what I send it
  ProbeLink& back = destination ? probes.reverse : probes.forward;  // what it sends me
  sent.out = destination ? &slots->probe_fwd[p] : &slots->probe_rev[p];
  sent.out_pe = b.put_pe;
  back.in = destination ? &mine->probe_rev[p] : &mine->probe_fwd[p];
  back.peer = peer;
}

// One copy (one host wait) for the views, the tables, the hop shifts and the index lists:
// [views][tables][doubles][ints], the views pointing into the last two.
void DeviceHalo::Impl::upload(std::vector<PulseView>& views,
                              const std::vector<RankTable>& rank_tables, const PlanArrays& arrays) {
  auto round_up = [](std::size_t n) { return (n + 255) / 256 * 256; };
  const std::size_t views_bytes = round_up(views.size() * sizeof(PulseView));
  const std::size_t tables_bytes = round_up(rank_tables.size() * sizeof(RankTable));
  const std::size_t doubles_bytes = round_up(arrays.hop_shifts.size() * sizeof(double));
  const std::size_t total =
      views_bytes + tables_bytes + doubles_bytes + arrays.ints.size() * sizeof(int);
  char* uploaded = plan_data.at_least(static_cast<std::int64_t>(total));
  const double* doubles = reinterpret_cast<const double*>(uploaded + views_bytes + tables_bytes);
  const int* base =
      reinterpret_cast<const int*>(uploaded + views_bytes + tables_bytes + doubles_bytes);
  for (std::size_t i = 0; i < views.size(); ++i) {
    const PlanArrays::Places& at = arrays.places[i];
    views[i].send_index = base + at.send_index;
    views[i].rev_order = base + at.rev_order;
    views[i].fwd_source = base + at.fwd_source;
    views[i].fwd_hop_shifts = doubles + at.hop_shifts;
    views[i].rev_extra_start = base + at.rev_extra_start;
    views[i].rev_extra = base + at.rev_extra;
  }
  for (PulseView& v : views) {
    if (v.rev_direct_to >= 0)
      v.rev_direct_index = views[v.rev_direct_to * npulses + v.pulse].send_index;
  }
  static_assert(std::is_trivially_copyable_v<PulseView> && std::is_trivially_copyable_v<RankTable>);
  std::vector<char> host(total);
  std::memcpy(host.data(), views.data(), views.size() * sizeof(PulseView));
  std::memcpy(host.data() + views_bytes, rank_tables.data(),
              rank_tables.size() * sizeof(RankTable));
  std::memcpy(host.data() + views_bytes + tables_bytes, arrays.hop_shifts.data(),
              arrays.hop_shifts.size() * sizeof(double));
  std::memcpy(host.data() + views_bytes + tables_bytes + doubles_bytes, arrays.ints.data(),
              arrays.ints.size() * sizeof(int));
  if (total > 0) detail::copy_to_device_now(uploaded, host.data(), total);
  this->views = reinterpret_cast<const PulseView*>(uploaded);
  this->tables = reinterpret_cast<const RankTable*>(uploaded + views_bytes);
}

// Blocks per (rank, pulse): every spinning block of every rank sharing the GPU must be
// resident at once, so the grid is sized from the occupancy calculator.
void DeviceHalo::Impl::size_grid(int most_items) {
  const bool float32 = real == BasicKind::float32;
  const int on_gpu = puts      ? resident_blocks_with_puts(float32)
                     : float32 ? resident_blocks_both_directions<float, false>()
                               : resident_blocks_both_directions<double, false>();
  const int concurrent = all_pulses ? std::max(1, npulses) : 1;
  const int fit =
      spinning_blocks_per_group(on_gpu, share, static_cast<int>(ranks.size()) * concurrent);
  if (fit < 1) {
    throw Error("halox: " + std::to_string(ranks.size()) + " ranks x " +
                std::to_string(concurrent) + " pulses do not fit on the GPU at once (" +
                std::to_string(static_cast<int>(share * on_gpu)) +
                " resident blocks); use per_pulse kernels or fewer ranks per GPU");
  }
  // Up to 128 blocks per pulse: large halos to a GPU across NVLink need many stores in
  // flight. Measured between two H200s (3 MB pingpong): 32 blocks 59 GB/s, 128 blocks
  // 75 GB/s, 1024 blocks 57-74 GB/s (no better), so 128.
  grid_blocks = std::max(1, std::min({fit, 128, (most_items + 255) / 256}));
}

void DeviceHalo::connect(const std::function<PeerBlock(int)>& block_of) {
  Impl& m = *m_impl;
  std::vector<PulseView> views;
  std::vector<RankTable> tables;
  PlanArrays arrays;
  m.probes.clear();
  m.any_proxied = false;
  int most_items = 1;
  const ForwardingGraph graph(m.ranks, m.plans);
  for (std::size_t k = 0; k < m.ranks.size(); ++k) {
    const int rank = m.ranks[k];
    tables.emplace_back();  // each pulse's staging, set with its channels below
    for (int p = 0; p < m.npulses; ++p) {
      PulseView v = m.view_of(k, p, graph, arrays);
      most_items = std::max({most_items, v.n_send, v.n_recv});
      // The self-test's probes: forward to my destination and from my source, reverse to
      // my source and from my destination (links 2p and 2p + 1).
      Impl::PulseProbes probes;
      probes.forward.rank = probes.reverse.rank = rank;
      probes.forward.pulse = probes.reverse.pulse = p;
      probes.forward.kind = probe_fwd;
      probes.reverse.kind = probe_rev;
      probes.forward.out_link = probes.forward.in_link = 2 * p;
      probes.reverse.out_link = probes.reverse.in_link = 2 * p + 1;
      for (const bool destination : {true, false}) {
        const int peer = destination ? v.send_rank : v.recv_rank;
        if (peer < 0) continue;
        if (m.proxied(peer))
          m.link_proxied(v, k, p, peer, destination);
        else
          m.link_mapped(v, k, p, peer, block_of(peer), destination, probes);
      }
      // What the kernels read of the staging (forwarded items, returned forces): my block's,
      // or a proxied link's in host memory.
      tables.back().fwd_in[p] = v.fwd_in.staging;
      tables.back().rev_in[p] = v.rev_in.staging;
      // A rank stalled on purpose (tests) neither sends nor receives.
      if (rank != m.options.testing.stall_rank) {
        m.probes.push_back(probes.forward);
        m.probes.push_back(probes.reverse);
      }
      views.push_back(v);
    }
  }
  if (m.options.testing.direct_in_launch) m.mark_direct_pulses(views);
  m.puts = std::any_of(views.begin(), views.end(),
                       [](const PulseView& v) { return v.fwd_out.pe >= 0 || v.rev_out.pe >= 0; });
  m.upload(views, tables, arrays);
  m.size_grid(most_items);
}

void DeviceHalo::self_test() {
  launch_self_test();
  finish_self_test();
}

void DeviceHalo::launch_self_test() {
  Impl& m = *m_impl;
  if (!m.options.self_test || m.npulses == 0) return;
  m.probe_run.launch(m.probes, ++m.probe_epoch, m.options.timeout_seconds, m.errors.sink(), true,
                     m.puts);
}

void DeviceHalo::finish_self_test() {
  if (!m_impl->options.self_test || m_impl->npulses == 0) return;
  m_impl->probe_run.finish();
  check();
}

bool DeviceHalo::capturable() const {
  return !m_impl->any_proxied;
}

bool DeviceHalo::set_up_for(bool forward, const std::vector<void*>& arrays) const {
  return arrays == (forward ? m_impl->last_x : m_impl->last_f);
}

void DeviceHalo::forward(const std::vector<void*>& x, GpuStream stream) {
  check();
  trace::Scope scope("launch forward", m_impl->ranks.empty() ? 0 : m_impl->ranks[0]);
  if (m_impl->real == BasicKind::float32)
    m_impl->launch<float>(true, x, stream);
  else
    m_impl->launch<double>(true, x, stream);
}

void DeviceHalo::reverse(const std::vector<void*>& f, GpuStream stream) {
  check();
  trace::Scope scope("launch reverse", m_impl->ranks.empty() ? 0 : m_impl->ranks[0]);
  if (m_impl->real == BasicKind::float32)
    m_impl->launch<float>(false, f, stream);
  else
    m_impl->launch<double>(false, f, stream);
}

void DeviceHalo::check() const {
  ErrorWording w;
  w.transport = to_string(m_impl->options.transport);
  w.timeout_seconds = m_impl->options.timeout_seconds;
  w.waited_for = [](int kind) { return std::string(kind_name(kind)); };
  w.is_probe = [](int kind) { return kind == probe_fwd || kind == probe_rev; };
  w.progress = [](const ErrorRecord& e) {
    if (e.kind != fwd_data && e.kind != rev_data) {
      return "signal " + std::to_string(e.seen) + ", expected " + std::to_string(e.expected);
    }
    return data_signal_progress(e);
  };
  check_device_error(m_impl->errors.record(), w);
}

int DeviceHalo::launches_per_exchange() const {
  return m_impl->all_pulses ? 1 : m_impl->npulses;
}

}  // namespace halox::detail
