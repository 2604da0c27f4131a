// The fused particle kernels and their device views, written once and instantiated twice:
// PUTS = false in device_halo.cu (direct stores only, whole-program device code) and PUTS =
// true in device_halo_puts.cu (relocatable device code linked with NVSHMEM's device
// library, for peers reached by put-with-signal). The calls into that library cost
// registers, and relocatable code costs more (about 32 -> 50 per thread: fewer resident
// blocks), so the direct-store kernels never pay for them. Include only from CUDA sources.
//
// GPU-initiated particle halo: the fused kernels, written once against a small device view
// of each pulse's channel (direct pointers into the peers' blocks, or symmetric addresses
// and a PE for puts; signal slots), used by the local, IPC and NVSHMEM transports. A peer
// reached by puts gets steps 3-4 as: pack into my send staging, then one put-with-signal.
//
// Protocol per pulse and direction, with e = the exchange's counter (never reset):
//   1. tell my source that my staging area is free    (release store e into its slot)
//   2. wait until my destination's staging area is free (acquire load >= e, time-out)
//      (1 and 2 only with peers outside this launch: stream order covers the others)
//   3. pack my items straight into the destination's staging area (items received by an
//      earlier pulse from a rank outside this launch are read from that pulse's staging
//      once its data has arrived; items that only ranks of this launch passed on are read
//      at their origin, so they wait for nothing: see ForwardingGraph)
//   4. every block adds its share to the destination's data signal once its stores are
//      done (release add; the shares make 2^32 per exchange)
//   5. wait for my own data, then unpack it (forward: copy into the coordinates; reverse:
//      add into the forces of the home items I sent).
// Reverse, items a later pulse forwarded: their force is mine plus what the later pulses'
// reverses returned for them, read from those pulses' staging once their data signals
// arrive (the same one-hop wait as the forward's), never waiting for an unpack; what ranks
// of this launch return is summed from their own forces directly, and what a rank outside
// returns for an item whose origin is in this launch is added at that origin by the unpack
// (no wait for it on the way back). The reverse adds into home items only: halo items keep
// the forces they had.
// Direct pulses (a peer in this launch whose staging of the pulse no forwarded item reads):
// steps 3-5 become one: pack straight into the peer's halo (forward) or add straight into
// its home items (reverse), with no staging, signal or wait. On one GPU Ranks::local's
// pulses are all direct, and so is every pulse of a rank to itself.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "../trace/device_trace.cuh"
#include "device_halo.hpp"
#include "forwarding_graph.hpp"
#include "channel.cuh"
#include "halox/config.hpp"
#include "halox/trace.hpp"

namespace halox::detail::fused_particle {

// Signal slots of one rank, at the start of its shared block. One writing rank per slot.
struct Slots {
  u64 fwd_ready[kMaxPulses];  // written by the rank I send to in forward: its staging is free
  u64 fwd_data[kMaxPulses];   // written by the rank I receive from: my data has arrived
  u64 rev_ready[kMaxPulses];
  u64 rev_data[kMaxPulses];
  ProbeSlot probe_fwd[kMaxPulses];  // the self-test's
  ProbeSlot probe_rev[kMaxPulses];
  u64 fwd_packed[kMaxPulses];  // local: blocks that finished packing (put-with-signal peers,
  u64 rev_packed[kMaxPulses];  // and the host proxy's)
  // Local: a link through the host proxy, its signals in host memory relayed by the pulse's
  // block 0 to the pulse's other blocks (channel.cuh).
  u64 fwd_ready_relay[kMaxPulses];
  u64 fwd_data_relay[kMaxPulses];
  u64 rev_ready_relay[kMaxPulses];
  u64 rev_data_relay[kMaxPulses];
};
constexpr long long kSlotsBytes = (sizeof(Slots) + 255) / 256 * 256;

enum WaitKind : int { fwd_ready, fwd_data, rev_ready, rev_data, probe_fwd, probe_rev };

struct PulseView {
  int rank = -1, pulse = 0, send_rank = -1, recv_rank = -1;
  int n_send = 0, first_forwarded = 0, n_recv = 0, rev_first_forwarded = 0;
  long long recv_offset = 0;
  double shift[3] = {0, 0, 0};
  unsigned fwd_deps = 0, rev_deps = 0;
  // The peer is a rank of this launch (same stream): the previous exchange's kernels, which
  // emptied its staging area, have finished before this one starts, so the ready handshake
  // with it is skipped (a GPU-side round trip at the start of every kernel).
  bool dest_in_launch = false, source_in_launch = false;
  const int* send_index = nullptr;
  const int* rev_order = nullptr;
  // Forwarded item e (send_index[first_forwarded + e]): fwd_source[3e .. 3e + 2] = (launch
  // rank whose coordinates hold it, or -1 for my staging; its item or staging code; start
  // << 5 | count of the shifts it still needs, the shift vectors of the pulses it went
  // through, in pulse order, at fwd_hop_shifts[3 start ..]).
  const int* fwd_source = nullptr;
  const double* fwd_hop_shifts = nullptr;
  // Forwarded received item e (rev_order[rev_first_forwarded + e]) gets the returned forces
  // of the pairs rev_extra[2c], rev_extra[2c + 1] for c in rev_extra_start[e] .. [e + 1]:
  // (launch rank, its force item) or (-1, my staging code), later pulses first.
  const int* rev_extra_start = nullptr;
  const int* rev_extra = nullptr;
  // The pulse's four link ends (channel.cuh). Forward: my items to send_rank, its items from
  // recv_rank; reverse: forces back to recv_rank, and from send_rank. A peer reached by puts
  // has its channel's pe set: what goes to it is packed into my send staging and put.
  SendChannel fwd_out;
  RecvChannel fwd_in;
  SendChannel rev_out;
  RecvChannel rev_in;
  // Direct (ExchangeOptions::testing.direct_in_launch): the peer is a rank of this launch and no
  // forwarded item reads this pulse's staging at its end, so the forward writes straight into
  // its halo (launch rank fwd_direct_to, items from fwd_direct_offset) and the reverse adds
  // straight into its home items (launch rank rev_direct_to; its send list rev_direct_index,
  // of which the first rev_direct_homes are home items). No staging, no signal, no wait;
  // the receiving side knows it by fwd/rev_arrives_direct. -1 / false: through staging.
  int fwd_direct_to = -1, rev_direct_to = -1, rev_direct_homes = 0;
  long long fwd_direct_offset = 0;
  const int* rev_direct_index = nullptr;
  bool fwd_arrives_direct = false, rev_arrives_direct = false;
};

// Per launch rank: its pulses' staging areas (forward: received coordinates; reverse:
// returned forces), read by the pulses that forward what they deliver.
struct RankTable {
  const char* fwd_in[kMaxPulses] = {};
  const char* rev_in[kMaxPulses] = {};
};

struct LaunchArgs {
  const PulseView* views;
  const RankTable* tables;
  int npulses;      // pulses per rank
  int first_pulse;  // per-pulse launches: the pulse (grid.y == 1); all: 0
  int blocks;       // blocks per (rank, pulse)
  // The exchange counters (device memory: [0] forward, [1] reverse, the last exchange's
  // epoch; [2] blocks of the launch finished; [3] the plan in force), so that a launch
  // captured in a CUDA graph (`plan` not 0) moves a new exchange at every replay: each block
  // reads its direction's after wait_for_previous_kernel into `epoch`, and the launch's last
  // block to finish advances it where `advance` says this launch is the exchange's last
  // (one per pulse: the last pulse's). A launch of the host's (`plan` 0) takes `epoch` from
  // the host and block 0 stores it there, which costs its critical path nothing.
  u64* counters;
  u64 plan;  // captured launches: the plan they were made for (a replay after a new plan stops)
  int advance;
  u64 epoch;  // the signal value of this exchange
  u64 timeout_ns;
  ErrorSink error;
  int stall_rank;
  int system_scope;
  // 1: the launch before this one on the exchange was the other direction, so every
  // destination's staging is known to be free and the ready waits are skipped. Why: the
  // ranks launch the same sequence of exchanges, and that launch waited, on every pulse
  // with a peer outside the launch, for the data the peer sent from its own launch of it,
  // which stream order starts only after the peer's launch before it (this direction's
  // previous one, the reader of that staging) has finished. So in a run's alternating
  // forward / reverse no kernel waits for its peer's next kernel to start; queued
  // exchanges of one direction still do.
  int peers_known_free;
  DeviceTrace trace;  // null when tracing is off
};

// One record per block (thread 0): the event log of halox/trace.hpp.
__device__ __forceinline__ void record(const LaunchArgs& a, int rank, int pulse, int event,
                                       int direction) {
  trace_record(a.trace, rank, pulse, event, direction, a.epoch);
}

// Where ForwardingGraph says an item is: item `index` of launch rank `from`'s array, or
// (from < 0) a staging code of this rank, into `staging` (its pulses' staging areas).
template <class Real>
__device__ __forceinline__ const Real* item_at(Real* const* arrays, const char* const* staging,
                                               int from, int index) {
  return from >= 0 ? arrays[from] + 3 * static_cast<long long>(index)
                   : reinterpret_cast<const Real*>(staging[index & kPulseMask]) +
                         3 * static_cast<long long>(index >> kPulseBits);
}

// The first item at or after `start` of those thread `first` takes (every stride-th from
// `first` on). The forwarded items keep the threads they would have in one loop over all
// items, so with a thread per item (the usual grid) no thread packs a home item and then a
// forwarded one: their chains of dependent loads would add up (measured: the pulses that
// forward took twice as long per block as the one that does not).
__device__ __forceinline__ int first_at_or_after(int start, int first, int stride) {
  return first >= start ? first : first + (start - first + stride - 1) / stride * stride;
}

// A thread's first forwarded item of a send list (k, from first_at_or_after) and its
// fwd_source entry, read before the previous kernel ends (plan data: see BlockStart); k ==
// n_send when it has none.
struct FirstForwarded {
  int k, from, index, shifts;
};
__device__ __forceinline__ FirstForwarded first_forwarded_item(const PulseView& v, int first,
                                                               int stride, bool sends) {
  FirstForwarded f{first_at_or_after(v.first_forwarded, first, stride), 0, 0, 0};
  if (!sends || f.k >= v.n_send) {
    f.k = v.n_send;
    return f;
  }
  const int* source = v.fwd_source + 3 * (f.k - v.first_forwarded);
  f.from = source[0];
  f.index = source[1];
  f.shifts = source[2];
  return f;
}

// Every load before the first store: the compiler cannot tell that dst and src do not
// overlap, so a store between two loads holds the second until the first has arrived (three
// round trips to memory per item instead of one; the PTX had them in that order).
template <class Real>
__device__ __forceinline__ void copy_item(Real* dst, const Real* src, const double* shift) {
  const Real a = src[0], b = src[1], c = src[2];
  const double sa = shift[0], sb = shift[1], sc = shift[2];
  dst[0] = a + static_cast<Real>(sa);
  dst[1] = b + static_cast<Real>(sb);
  dst[2] = c + static_cast<Real>(sc);
}

// The same copy without a shift (the received staging into the halo, a force into the
// staging).
template <class Real>
__device__ __forceinline__ void copy_item(Real* dst, const Real* src) {
  const Real a = src[0], b = src[1], c = src[2];
  dst[0] = a;
  dst[1] = b;
  dst[2] = c;
}

// Atomic: one home item may get forces from several pulses at once. The force is loaded
// whole first, as in copy_item.
template <class Real>
__device__ __forceinline__ void add_item(Real* dst, const Real* force) {
  const Real a = force[0], b = force[1], c = force[2];
  atomicAdd(dst + 0, a);
  atomicAdd(dst + 1, b);
  atomicAdd(dst + 2, c);
}

// Where a block works: its rank (launch index r), pulse and place among the pulse's items.
// Nothing here is the previous kernel's work: the views, like the index lists and the array
// tables, are uploaded before any launch that reads them and never written by a kernel, so
// they may be read before wait_for_previous_kernel(), their latency hidden behind that
// kernel's end.
struct BlockStart {
  int r, p, stride, first;
  bool sys;
  const PulseView* v;  // null: this rank is the one stalled on purpose (tests)
};
// False when this launch was captured in a CUDA graph on an earlier plan: its views and
// staging may be gone, so nothing of them is read; recorded for the host (flag 3).
__device__ __forceinline__ bool plan_in_force(const LaunchArgs& a) {
  if (a.plan == 0) return true;  // the host's launch: of the plan in force
  const u64 now = reinterpret_cast<const volatile u64*>(a.counters)[3];
  if (now == a.plan) return true;
  if (threadIdx.x == 0) report_error(a.error, 3, -1, -1, -1, 0, a.plan, now);
  return false;
}

__device__ __forceinline__ BlockStart locate_block(const LaunchArgs& a) {
  BlockStart s;
  s.r = static_cast<int>(blockIdx.z);
  s.p = a.first_pulse + static_cast<int>(blockIdx.y);
  s.stride = a.blocks * static_cast<int>(blockDim.x);
  s.first = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  s.sys = a.system_scope != 0;
  const PulseView& v = a.views[s.r * a.npulses + s.p];
  s.v = v.rank == a.stall_rank ? nullptr : &v;
  return s;
}

// Protocol step 1 (direction 0: forward, 1: reverse): block 0 tells the rank that fills my
// staging in this direction (forward: my source; reverse: my destination) that it is free,
// unless that rank is of this launch (stream order tells it).
template <bool PUTS>
__device__ __forceinline__ void release_incoming(const LaunchArgs& a, const PulseView& v,
                                                 int direction, bool sys) {
  const bool fwd = direction == 0;
  if ((fwd ? v.recv_rank : v.send_rank) >= 0 && !(fwd ? v.source_in_launch : v.dest_in_launch) &&
      blockIdx.x == 0 && threadIdx.x == 0) {
    if (fwd)
      v.fwd_in.release<PUTS>(a.epoch, sys);
    else
      v.rev_in.release<PUTS>(a.epoch, sys);
  }
}

// A captured launch takes its epoch from the device, one load after the previous kernel's
// end; where no ready wait needs it before the pack (peers_known_free), step 1 waits until
// after the pack, so that the pack does not wait for that load. Peers skip their ready waits
// then too; only a peer whose own launch has a proxied link waits, and learns a pack later.
__device__ __forceinline__ bool release_after_pack(const LaunchArgs& a) {
  return a.plan != 0 && a.peers_known_free != 0;
}

// Once the previous kernel has finished (nothing of its work may be read before): the epoch,
// and step 1 unless release_after_pack.
// False (the block returns) where an expired wait of an earlier launch left the exchange
// unusable: its recorded error says why, and a replayed graph moves nothing after it. The
// error claim is read before the previous kernel ends, so that the pack need not wait for it
// either: a claim that kernel makes later makes this launch's waits give up at once
// (wait_for), as they do in a launch of the host's.
template <bool PUTS>
__device__ __forceinline__ bool start_exchange(LaunchArgs& a, const BlockStart& s, int direction) {
  const int failed = a.plan != 0 ? *reinterpret_cast<const volatile int*>(a.error.claim) : 0;
  wait_for_previous_kernel();
  if (a.plan != 0) {
    a.epoch = reinterpret_cast<const volatile u64*>(a.counters)[direction] + 1;
    if (failed != 0) return false;
  } else if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0 &&
             a.advance != 0) {
    a.counters[direction] = a.epoch;  // where a later captured launch starts from
  }
  if (s.v == nullptr) return true;  // the rank stalled on purpose (tests) only counts below
  if (!release_after_pack(a)) release_incoming<PUTS>(a, *s.v, direction, s.sys);
  return true;
}

// The block's end (every thread calls it, after start_exchange): the launch's last block to
// finish advances the exchange counter, every block having read it by then.
__device__ __forceinline__ void finish_launch(const LaunchArgs& a, int direction) {
  if (a.advance == 0 || a.plan == 0) return;
  __syncthreads();
  if (threadIdx.x != 0) return;
  const u64 blocks = static_cast<u64>(gridDim.x) * gridDim.y * gridDim.z;
  if (atomicAdd(&a.counters[2], 1ull) == blocks - 1) {  // no fence: the next launch reads
    a.counters[2] = 0;                                  // them after this grid's end
    a.counters[direction] = a.epoch;
  }
}

// Who waits in rank v's blocks, for the device channel's waits.
__device__ __forceinline__ ChannelWait wait_context(const LaunchArgs& a, const PulseView& v,
                                                    bool sys) {
  return ChannelWait{a.timeout_ns, a.error, v.rank, sys};
}

// Protocol step 2 (every thread of the block calls it): wait until the staging I fill in
// this direction (forward: my destination's; reverse: my source's) is free, traced; a peer in
// this launch needs no wait (stream order), nor does any after a launch of the other direction
// (LaunchArgs::peers_known_free, never set where a link goes through the host proxy). False
// when the wait timed out. PROXIED: some link of the launch goes through the host proxy, whose
// signals the pulse's block 0 polls for the others. A kernel of its own: the proxy's branches in
// every kernel made the direct links' queued pair 7% slower on the H200.
template <bool PROXIED>
__device__ inline bool wait_until_free(const LaunchArgs& a, const PulseView& v, int p,
                                       int direction, bool sys) {
  const bool fwd = direction == 0;
  if ((fwd ? v.dest_in_launch : v.source_in_launch) || a.peers_known_free != 0) return true;
  const SendChannel& out = fwd ? v.fwd_out : v.rev_out;
  record(a, v.rank, p, trace_ready_begin, direction);
  const ChannelWait c = wait_context(a, v, sys);
  const bool relayer = !PROXIED || blockIdx.x == 0;
  if (!out.wait_free(a.epoch, c, fwd ? v.send_rank : v.recv_rank, p, fwd ? fwd_ready : rev_ready,
                     relayer)) {
    return false;
  }
  record(a, v.rank, p, trace_ready_end, direction);
  return true;
}

// Protocol step 4, once this block's part of the pack is in place (forward: for my
// destination; reverse: for my source): that rank learns it, by a share of its data signal per
// block, or (a peer reached by puts) by one put-with-signal of my whole send staging from the
// last block to finish; then traced.
template <class Real, bool PUTS, bool PROXIED>
__device__ __forceinline__ void send_packed(const LaunchArgs& a, const PulseView& v, int p,
                                            int direction, bool sys) {
  const bool fwd = direction == 0;
  const SendChannel& out = fwd ? v.fwd_out : v.rev_out;
  const int items = fwd ? v.n_send : v.n_recv;
  const std::size_t bytes = 3 * sizeof(Real) * static_cast<std::size_t>(items);
  if (PROXIED && out.ready_relay != nullptr)  // a signal in host memory: one store
    out.deliver<PUTS, true>(a.epoch, static_cast<int>(blockIdx.x), a.blocks, bytes, sys);
  else
    out.deliver<PUTS>(a.epoch, static_cast<int>(blockIdx.x), a.blocks, bytes, sys);
  record(a, v.rank, p, trace_signal, direction);
}

// Protocol step 5's wait (every thread of the block calls it) for what fills my staging in
// this direction (forward: from my source; reverse: from my destination), traced: false when
// it timed out.
template <bool PROXIED>
__device__ inline bool wait_for_data(const LaunchArgs& a, const PulseView& v, int p, int direction,
                                     bool sys) {
  const bool fwd = direction == 0;
  record(a, v.rank, p, trace_data_begin, direction);
  const ChannelWait c = wait_context(a, v, sys);
  const bool relayer = !PROXIED || blockIdx.x == 0;
  if (!(fwd ? v.fwd_in.wait_data(a.epoch, c, v.recv_rank, p, fwd_data, relayer)
            : v.rev_in.wait_data(a.epoch, c, v.send_rank, p, rev_data, relayer)))
    return false;
  record(a, v.rank, p, trace_data_end, direction);
  record(a, v.rank, p, trace_unpack_begin, direction);
  return true;
}

// Forwarded items (every thread of the block calls it), traced: waits for the data of the
// pulses from other ranks that deliver them (direction 0: forward, the pulses in `deps`
// before p; 1: reverse, after p). False when a wait timed out.
template <bool PROXIED>
__device__ inline bool wait_for_deps(const LaunchArgs& a, const PulseView& v, int r, int p,
                                     int direction, unsigned deps, bool sys) {
  if (deps == 0) return true;
  record(a, v.rank, p, trace_deps_begin, direction);
  const PulseView* pulses = a.views + r * a.npulses;
  const ChannelWait c = wait_context(a, v, sys);
  for (; deps != 0; deps &= deps - 1) {
    const int q = __ffs(static_cast<int>(deps)) - 1;
    const PulseView& from = pulses[q];
    // Block 0 of pulse p relays too (the same value as pulse q's block 0 writes).
    const bool relayer = !PROXIED || blockIdx.x == 0;
    const bool ok = direction == 0
                        ? from.fwd_in.wait_data(a.epoch, c, from.recv_rank, q, fwd_data, relayer)
                        : from.rev_in.wait_data(a.epoch, c, from.send_rank, q, rev_data, relayer);
    if (!ok) return false;
  }
  record(a, v.rank, p, trace_deps_end, direction);
  return true;
}

// PUTS: some peer is reached by NVSHMEM puts (see the top of this file).
template <class Real, bool PUTS, bool PROXIED = false>
__global__ void __launch_bounds__(256, 1) forward_kernel(LaunchArgs a, Real* const* xs) {
  if (!plan_in_force(a)) return;
  const BlockStart s = locate_block(a);
  if (s.v == nullptr) {
    if (start_exchange<PUTS>(a, s, 0)) finish_launch(a, 0);
    return;
  }
  const PulseView& v = *s.v;
  const int r = s.r, p = s.p, stride = s.stride, first = s.first;
  const bool sys = s.sys;
  const RankTable& table = a.tables[r];
  Real* x = xs[r];  // home items: read; halo items: written by the unpacks only
  // The index of the thread's first home item to send, before the previous kernel ends
  // (plan data: see BlockStart); its coordinates only after.
  const int first_index = v.send_rank >= 0 && first < v.first_forwarded ? v.send_index[first] : 0;
  const FirstForwarded forwarded = first_forwarded_item(v, first, stride, v.send_rank >= 0);
  if (!start_exchange<PUTS>(a, s, 0)) return;
  if (v.send_rank >= 0) {
    if (!wait_until_free<PROXIED>(a, v, p, 0, sys)) return;
    record(a, v.rank, p, trace_pack_begin, 0);
    const bool direct = v.fwd_direct_to >= 0;
    Real* out = direct ? xs[v.fwd_direct_to] + 3 * v.fwd_direct_offset
                       : reinterpret_cast<Real*>(v.fwd_out.pack_target<PUTS>());
    for (int k = first; k < v.first_forwarded; k += stride) {
      const int index = k == first ? first_index : v.send_index[k];
      copy_item(out + 3 * k, x + 3 * static_cast<long long>(index), v.shift);
    }
    if (v.first_forwarded < v.n_send) {
      // Forwarded items: wait only for the pulses from other ranks that deliver them.
      if (!wait_for_deps<PROXIED>(a, v, r, p, 0, v.fwd_deps, sys)) return;
      for (int k = forwarded.k; k < v.n_send; k += stride) {
        const int* source = v.fwd_source + 3 * (k - v.first_forwarded);
        const bool held = k == forwarded.k;
        const int shifts = held ? forwarded.shifts : source[2];
        // An item of my own (always, with one rank per launch) is at x, in a register: the
        // table load it saves would be one more round trip in the chain.
        const int from = held ? forwarded.from : source[0];
        const int index = held ? forwarded.index : source[1];
        const Real* src = from == r ? x + 3 * static_cast<long long>(index)
                                    : item_at(xs, table.fwd_in, from, index);
        Real item[3] = {src[0], src[1], src[2]};
        // The shifts of the pulses it went through, added in order as the copies would have;
        // two loaded at a time, their loads in flight together with the item's.
        const double* hop = v.fwd_hop_shifts + 3 * (shifts >> kPulseBits);
        const int hops = shifts & kPulseMask;
        for (int c = 0; c < hops; c += 2) {
          double shift[2][3];
#pragma unroll
          for (int i = 0; i < 2; ++i) {
#pragma unroll
            for (int d = 0; d < 3; ++d) shift[i][d] = c + i < hops ? hop[3 * (c + i) + d] : 0.0;
          }
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            if (c + i >= hops) break;
            for (int d = 0; d < 3; ++d) item[d] += static_cast<Real>(shift[i][d]);
          }
        }
        copy_item(out + 3 * k, item, v.shift);
      }
    }
    record(a, v.rank, p, trace_pack_end, 0);
    if (!direct) {
      send_packed<Real, PUTS, PROXIED>(a, v, p, 0, sys);
    }
  }
  if (release_after_pack(a)) release_incoming<PUTS>(a, v, 0, sys);
  if (v.recv_rank >= 0 && !v.fwd_arrives_direct) {
    if (!wait_for_data<PROXIED>(a, v, p, 0, sys)) return;
    const Real* in = reinterpret_cast<const Real*>(v.fwd_in.staging);
    for (int k = first; k < v.n_recv; k += stride) {
      copy_item(x + 3 * (v.recv_offset + k), in + 3 * k);
    }
    record(a, v.rank, p, trace_unpack_end, 0);
  }
  finish_launch(a, 0);
}

template <class Real, bool PUTS, bool PROXIED = false>
__global__ void __launch_bounds__(256, 1) reverse_kernel(LaunchArgs a, Real* const* fs) {
  // Reverse of pulse p: my received items' forces go back to recv_rank; the forces of the
  // items I sent come from send_rank.
  if (!plan_in_force(a)) return;
  const BlockStart s = locate_block(a);
  if (s.v == nullptr) {
    if (start_exchange<PUTS>(a, s, 1)) finish_launch(a, 1);
    return;
  }
  const PulseView& v = *s.v;
  const int r = s.r, p = s.p, stride = s.stride, first = s.first;
  const bool sys = s.sys;
  Real* f = fs[r];
  // As in the forward: the thread's first indices (the item whose force it returns, the home
  // item it adds a returned force to) before the previous kernel ends.
  const int first_order =
      v.recv_rank >= 0 && first < v.rev_first_forwarded ? v.rev_order[first] : 0;
  const int first_home = v.send_rank >= 0 && first < v.first_forwarded ? v.send_index[first] : 0;
  if (!start_exchange<PUTS>(a, s, 1)) return;
  if (v.recv_rank >= 0) {
    if (!wait_until_free<PROXIED>(a, v, p, 1, sys)) return;
    record(a, v.rank, p, trace_pack_begin, 1);
    Real* out = reinterpret_cast<Real*>(v.rev_out.pack_target<PUTS>());
    // Item k's force goes to the source: into its staging, or (direct) added into its home
    // item, atomically (other pulses add into the same home items at once); what it
    // forwarded on is summed by its own pulse that received it.
    Real* const homes = v.rev_direct_to >= 0 ? fs[v.rev_direct_to] : nullptr;
    auto give_back = [&](int k, const Real* force) {
      if (homes == nullptr) {
        copy_item(out + 3 * k, force);
      } else if (k < v.rev_direct_homes) {
        add_item(homes + 3 * static_cast<long long>(v.rev_direct_index[k]), force);
      }
    };
    for (int j = first; j < v.rev_first_forwarded; j += stride) {
      const int k = j == first ? first_order : v.rev_order[j];
      give_back(k, f + 3 * (v.recv_offset + k));
    }
    if (v.rev_first_forwarded < v.n_recv) {
      // Items later pulses forwarded: my force plus the forces those pulses' reverses
      // returned, read from their staging as soon as it has arrived (pulses from other
      // ranks), or summed here from my own forces (pulses to myself).
      const RankTable& table = a.tables[r];
      if (!wait_for_deps<PROXIED>(a, v, r, p, 1, v.rev_deps, sys)) return;
      for (int j = first_at_or_after(v.rev_first_forwarded, first, stride); j < v.n_recv;
           j += stride) {
        const int k = v.rev_order[j], e = j - v.rev_first_forwarded;
        const Real* mine = f + 3 * (v.recv_offset + k);
        Real sum[3] = {mine[0], mine[1], mine[2]};
        for (int c = v.rev_extra_start[e]; c < v.rev_extra_start[e + 1]; ++c) {
          // As in the forward: a force of my own is at f, in a register.
          const int from = v.rev_extra[2 * c], index = v.rev_extra[2 * c + 1];
          const Real* in = from == r ? f + 3 * static_cast<long long>(index)
                                     : item_at(fs, table.rev_in, from, index);
          for (int d = 0; d < 3; ++d) sum[d] += in[d];
        }
        give_back(k, sum);
      }
    }
    record(a, v.rank, p, trace_pack_end, 1);
    if (homes == nullptr) {
      send_packed<Real, PUTS, PROXIED>(a, v, p, 1, sys);
    }
  }
  if (release_after_pack(a)) release_incoming<PUTS>(a, v, 1, sys);
  if (v.send_rank >= 0 && !v.rev_arrives_direct) {
    if (!wait_for_data<PROXIED>(a, v, p, 1, sys)) return;
    const Real* in = reinterpret_cast<const Real*>(v.rev_in.staging);
    for (int k = first; k < v.first_forwarded; k += stride) {
      const int home = k == first ? first_home : v.send_index[k];
      add_item(f + 3 * static_cast<long long>(home), in + 3 * k);
    }
    // Forwarded items, from a rank outside this launch: those whose origin is a home atom of
    // this launch get their force there (ForwardingGraph::returned_terms leaves them out);
    // the others, and all that ranks of this launch return, are summed by the pulse that
    // received them.
    // The view's fields in registers: after an atomic the compiler reloads what it cannot
    // prove untouched (the PTX reloaded them each turn, before the entry could be read).
    if (!v.dest_in_launch) {
      const int first_forwarded = v.first_forwarded, n_send = v.n_send;
      const int* const fwd_source = v.fwd_source;
      for (int k = first_at_or_after(first_forwarded, first, stride); k < n_send; k += stride) {
        const int* source = fwd_source + 3 * (k - first_forwarded);
        const int from = source[0], item = source[1];
        if (from < 0) continue;
        add_item(fs[from] + 3 * static_cast<long long>(item), in + 3 * k);
      }
    }
    record(a, v.rank, p, trace_unpack_end, 1);
  }
  finish_launch(a, 1);
}

// The PUTS instantiations (device_halo_puts.cu; NVSHMEM builds only).
template <class Real>
void launch_with_puts(bool forward, dim3 grid, const LaunchArgs& a, Real* const* arrays,
                      cudaStream_t stream);
/// Blocks the forward and the reverse kernel both hold at once on this GPU: one grid size
/// serves both directions and every block may spin, so the kernel with fewer resident blocks
/// decides (which one that is follows ptxas's register choice: with __launch_bounds__(256, 1)
/// the forward takes more registers than the reverse, and in float a block fewer per SM).
/// Without puts, the proxied kernels count too: a transport's grid is sized before its links.
template <class Real, bool PUTS>
int resident_blocks_both_directions() {
  int least = std::min(resident_blocks(forward_kernel<Real, PUTS>),
                       resident_blocks(reverse_kernel<Real, PUTS>));
  if (!PUTS) {
    least = std::min({least, resident_blocks(forward_kernel<Real, false, true>),
                      resident_blocks(reverse_kernel<Real, false, true>)});
  }
  return least;
}
/// resident_blocks_both_directions with puts.
int resident_blocks_with_puts(bool float32);

}  // namespace halox::detail::fused_particle
