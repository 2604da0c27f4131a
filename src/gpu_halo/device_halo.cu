// GPU-initiated particle halo: the fused kernels, written once against a small device view
// of each pulse's channel (direct pointers into the peers' blocks, signal slots), used by
// the local and the IPC transports.
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
// of this launch return is summed from their own forces directly. The reverse adds into
// home items only: halo items keep the forces they had.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "../common/cuda_check.hpp"
#include "../trace/device_trace.hpp"
#include "device_halo.hpp"
#include "forwarding_graph.hpp"
#include "signals.cuh"
#include "halox/config.hpp"
#include "halox/trace.hpp"

namespace halox::detail {

namespace {

// Signal slots of one rank, at the start of its shared block. One writing rank per slot.
struct Slots {
  u64 fwd_ready[kMaxPulses];  // written by the rank I send to in forward: its staging is free
  u64 fwd_data[kMaxPulses];   // written by the rank I receive from: my data has arrived
  u64 rev_ready[kMaxPulses];
  u64 rev_data[kMaxPulses];
  u64 probe_fwd_signal[kMaxPulses];
  u64 probe_rev_signal[kMaxPulses];
  u64 probe_fwd[kMaxPulses][4];
  u64 probe_rev[kMaxPulses][4];
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
  // << 5 | count of the shifts it still needs in fwd_shifts, as launch rank << 5 | pulse).
  const int* fwd_source = nullptr;
  const int* fwd_shifts = nullptr;
  // Forwarded received item e (rev_order[rev_first_forwarded + e]) gets the returned forces
  // of the pairs rev_extra[2c], rev_extra[2c + 1] for c in rev_extra_start[e] .. [e + 1]:
  // (launch rank, its force item) or (-1, my staging code), later pulses first.
  const int* rev_extra_start = nullptr;
  const int* rev_extra = nullptr;
  char* fwd_out = nullptr;
  u64* fwd_out_data = nullptr;
  u64* fwd_src_ready = nullptr;
  const char* fwd_in = nullptr;
  u64* fwd_in_data = nullptr;
  u64* fwd_in_ready = nullptr;
  char* rev_out = nullptr;
  u64* rev_out_data = nullptr;
  u64* rev_src_ready = nullptr;
  const char* rev_in = nullptr;
  u64* rev_in_data = nullptr;
  u64* rev_in_ready = nullptr;
  Slots* mine = nullptr;    // my slots (probes)
  Slots* dest = nullptr;    // send_rank's slots
  Slots* source = nullptr;  // recv_rank's slots
};

// Per launch rank: its pulses' staging areas (forward: received coordinates; reverse:
// returned forces) and shifts, read by the pulses that forward what they deliver.
struct RankTable {
  const char* fwd_in[kMaxPulses] = {};
  const char* rev_in[kMaxPulses] = {};
  double shift[kMaxPulses][3] = {};
};

struct LaunchArgs {
  const PulseView* views;
  const RankTable* tables;
  int npulses;      // pulses per rank
  int first_pulse;  // per-pulse launches: the pulse (grid.y == 1); all: 0
  int blocks;       // blocks per (rank, pulse)
  u64 epoch;        // signal value of this exchange
  u64 timeout_ns;
  ErrorSink error;
  int stall_rank;
  int system_scope;
  DeviceTrace trace;  // null when tracing is off
};

// One record per block (thread 0): the event log of halox/trace.hpp.
__device__ __forceinline__ void record(const LaunchArgs& a, int rank, int pulse, int event,
                                       int direction) {
#if HALOX_HAS_TRACING
  if (a.trace.records == nullptr || threadIdx.x != 0) return;
  const u64 i = atomicAdd(a.trace.count, 1ull) % a.trace.capacity;
  DeviceRecord& r = a.trace.records[i];
  r.t = now_ns();
  r.rank = rank;
  r.pulse = static_cast<short>(pulse);
  r.event = static_cast<unsigned char>(event);
  r.direction = static_cast<unsigned char>(direction);
  r.block = static_cast<int>(blockIdx.x);
#else
  (void)a, (void)rank, (void)pulse, (void)event, (void)direction;
#endif
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

template <class Real>
__device__ __forceinline__ void copy_item(Real* dst, const Real* src, const double* shift) {
  dst[0] = src[0] + static_cast<Real>(shift[0]);
  dst[1] = src[1] + static_cast<Real>(shift[1]);
  dst[2] = src[2] + static_cast<Real>(shift[2]);
}

// Protocol step 2 (every thread of the block calls it): wait until the destination's
// staging area is free, traced; a peer in this launch needs no wait (stream order). False
// when the wait timed out.
__device__ bool wait_until_free(const LaunchArgs& a, const PulseView& v, int p, int direction,
                                bool peer_in_launch, const u64* slot, int peer, int kind,
                                bool sys) {
  if (peer_in_launch) return true;
  record(a, v.rank, p, trace_ready_begin, direction);
  if (!block_wait(slot, a.epoch, a.timeout_ns, a.error, v.rank, peer, p, kind, sys)) return false;
  record(a, v.rank, p, trace_ready_end, direction);
  return true;
}

template <class Real>
__global__ void __launch_bounds__(256) forward_kernel(LaunchArgs a, Real* const* xs) {
  const int r = blockIdx.z, p = a.first_pulse + blockIdx.y, b = blockIdx.x;
  const PulseView& v = a.views[r * a.npulses + p];
  if (v.rank == a.stall_rank) return;
  const RankTable& table = a.tables[r];
  Real* x = xs[r];  // home items: read; halo items: written by the unpacks only
  const int stride = a.blocks * blockDim.x, first = b * blockDim.x + threadIdx.x;
  const bool sys = a.system_scope != 0;
  if (v.recv_rank >= 0 && !v.source_in_launch && b == 0 && threadIdx.x == 0) {
    signal_release(v.fwd_src_ready, a.epoch, sys);
  }
  if (v.send_rank >= 0) {
    if (!wait_until_free(a, v, p, 0, v.dest_in_launch, v.fwd_in_ready, v.send_rank, fwd_ready,
                         sys)) {
      return;
    }
    record(a, v.rank, p, trace_pack_begin, 0);
    Real* out = reinterpret_cast<Real*>(v.fwd_out);
    for (int k = first; k < v.first_forwarded; k += stride) {
      copy_item(out + 3 * k, x + 3 * static_cast<long long>(v.send_index[k]), v.shift);
    }
    if (v.first_forwarded < v.n_send) {
      // Forwarded items: wait only for the pulses from other ranks that deliver them.
      if (v.fwd_deps != 0) {
        record(a, v.rank, p, trace_deps_begin, 0);
        for (int q = 0; q < a.npulses; ++q) {
          const PulseView& from = a.views[r * a.npulses + q];
          if ((v.fwd_deps >> q & 1u) &&
              !block_wait(from.fwd_in_data, data_signal(a.epoch), a.timeout_ns, a.error, v.rank,
                          from.recv_rank, q, fwd_data, sys)) {
            return;
          }
        }
        record(a, v.rank, p, trace_deps_end, 0);
      }
      for (int k = v.first_forwarded + first; k < v.n_send; k += stride) {
        const int* source = v.fwd_source + 3 * (k - v.first_forwarded);
        const int shifts = source[2];
        const Real* src = item_at(xs, table.fwd_in, source[0], source[1]);
        Real item[3] = {src[0], src[1], src[2]};
        // The shifts of the pulses it went through, added as the copies would have.
        for (int c = shifts >> kPulseBits, end = c + (shifts & kPulseMask); c < end; ++c) {
          const int hop = v.fwd_shifts[c];
          const double* shift = a.tables[hop >> kPulseBits].shift[hop & kPulseMask];
          for (int d = 0; d < 3; ++d) item[d] += static_cast<Real>(shift[d]);
        }
        copy_item(out + 3 * k, item, v.shift);
      }
    }
    record(a, v.rank, p, trace_pack_end, 0);
    add_data_share(v.fwd_out_data, b, a.blocks, sys);
    record(a, v.rank, p, trace_signal, 0);
  }
  if (v.recv_rank >= 0) {
    record(a, v.rank, p, trace_data_begin, 0);
    if (!block_wait(v.fwd_in_data, data_signal(a.epoch), a.timeout_ns, a.error, v.rank, v.recv_rank,
                    p, fwd_data, sys)) {
      return;
    }
    record(a, v.rank, p, trace_data_end, 0);
    record(a, v.rank, p, trace_unpack_begin, 0);
    const Real* in = reinterpret_cast<const Real*>(v.fwd_in);
    const double zero[3] = {0, 0, 0};
    for (int k = first; k < v.n_recv; k += stride) {
      copy_item(x + 3 * (v.recv_offset + k), in + 3 * k, zero);
    }
    record(a, v.rank, p, trace_unpack_end, 0);
  }
}

template <class Real>
__global__ void __launch_bounds__(256) reverse_kernel(LaunchArgs a, Real* const* fs) {
  const int r = blockIdx.z, p = a.first_pulse + blockIdx.y, b = blockIdx.x;
  const PulseView& v = a.views[r * a.npulses + p];
  if (v.rank == a.stall_rank) return;
  Real* f = fs[r];
  const int stride = a.blocks * blockDim.x, first = b * blockDim.x + threadIdx.x;
  const double zero[3] = {0, 0, 0};
  const bool sys = a.system_scope != 0;
  // Reverse of pulse p: my received items' forces go back to recv_rank; the forces of the
  // items I sent come from send_rank.
  if (v.send_rank >= 0 && !v.dest_in_launch && b == 0 && threadIdx.x == 0) {
    signal_release(v.rev_src_ready, a.epoch, sys);
  }
  if (v.recv_rank >= 0) {
    if (!wait_until_free(a, v, p, 1, v.source_in_launch, v.rev_in_ready, v.recv_rank, rev_ready,
                         sys)) {
      return;
    }
    record(a, v.rank, p, trace_pack_begin, 1);
    Real* out = reinterpret_cast<Real*>(v.rev_out);
    for (int j = first; j < v.rev_first_forwarded; j += stride) {
      const int k = v.rev_order[j];
      copy_item(out + 3 * k, f + 3 * (v.recv_offset + k), zero);
    }
    if (v.rev_first_forwarded < v.n_recv) {
      // Items later pulses forwarded: my force plus the forces those pulses' reverses
      // returned, read from their staging as soon as it has arrived (pulses from other
      // ranks), or summed here from my own forces (pulses to myself).
      const RankTable& table = a.tables[r];
      if (v.rev_deps != 0) {
        const PulseView* pulses = a.views + r * a.npulses;
        record(a, v.rank, p, trace_deps_begin, 1);
        for (int q = p + 1; q < a.npulses; ++q) {
          if ((v.rev_deps >> q & 1u) &&
              !block_wait(pulses[q].rev_in_data, data_signal(a.epoch), a.timeout_ns, a.error,
                          v.rank, pulses[q].send_rank, q, rev_data, sys)) {
            return;
          }
        }
        record(a, v.rank, p, trace_deps_end, 1);
      }
      for (int j = v.rev_first_forwarded + first; j < v.n_recv; j += stride) {
        const int k = v.rev_order[j], e = j - v.rev_first_forwarded;
        const Real* mine = f + 3 * (v.recv_offset + k);
        Real sum[3] = {mine[0], mine[1], mine[2]};
        for (int c = v.rev_extra_start[e]; c < v.rev_extra_start[e + 1]; ++c) {
          const Real* in = item_at(fs, table.rev_in, v.rev_extra[2 * c], v.rev_extra[2 * c + 1]);
          for (int d = 0; d < 3; ++d) sum[d] += in[d];
        }
        for (int d = 0; d < 3; ++d) out[3 * k + d] = sum[d];
      }
    }
    record(a, v.rank, p, trace_pack_end, 1);
    add_data_share(v.rev_out_data, b, a.blocks, sys);
    record(a, v.rank, p, trace_signal, 1);
  }
  if (v.send_rank >= 0) {
    record(a, v.rank, p, trace_data_begin, 1);
    if (!block_wait(v.rev_in_data, data_signal(a.epoch), a.timeout_ns, a.error, v.rank, v.send_rank,
                    p, rev_data, sys)) {
      return;
    }
    record(a, v.rank, p, trace_data_end, 1);
    record(a, v.rank, p, trace_unpack_begin, 1);
    const Real* in = reinterpret_cast<const Real*>(v.rev_in);
    // Home items only: the forwarded ones' forces are summed by the pulse that received them.
    for (int k = first; k < v.first_forwarded; k += stride) {
      Real* dst = f + 3 * static_cast<long long>(v.send_index[k]);
      // Atomic: one home atom may get forces from several pulses at once.
      atomicAdd(dst + 0, in[3 * k + 0]);
      atomicAdd(dst + 1, in[3 * k + 1]);
      atomicAdd(dst + 2, in[3 * k + 2]);
    }
    record(a, v.rank, p, trace_unpack_end, 1);
  }
}

// A small message over every link: (magic, sender, pulse, epoch) both directions.
constexpr u64 kProbeMagic = 0x68616c6f78ull;  // "halox"
__global__ void probe_kernel(LaunchArgs a) {
  const int r = blockIdx.z, p = blockIdx.y;
  const PulseView& v = a.views[r * a.npulses + p];
  if (threadIdx.x != 0 || v.rank == a.stall_rank) return;
  auto send = [&](u64* payload, u64* signal) {
    const u64 words[kProbeWords] = {kProbeMagic, static_cast<u64>(v.rank), static_cast<u64>(p),
                                    a.epoch};
    send_probe(payload, words, signal, a.epoch, true);
  };
  auto receive = [&](const u64* payload, const u64* signal, int from, int kind) {
    const u64 want[kProbeWords] = {kProbeMagic, static_cast<u64>(from), static_cast<u64>(p),
                                   a.epoch};
    receive_probe(payload, want, signal, a.epoch, a.timeout_ns, a.error, v.rank, from, p, kind,
                  true);
  };
  if (v.send_rank >= 0) send(v.dest->probe_fwd[p], &v.dest->probe_fwd_signal[p]);
  if (v.recv_rank >= 0) send(v.source->probe_rev[p], &v.source->probe_rev_signal[p]);
  if (v.recv_rank >= 0)
    receive(v.mine->probe_fwd[p], &v.mine->probe_fwd_signal[p], v.recv_rank, probe_fwd);
  if (v.send_rank >= 0)
    receive(v.mine->probe_rev[p], &v.mine->probe_rev_signal[p], v.send_rank, probe_rev);
}

const char* kind_name(int kind) {
  switch (kind) {
    case fwd_ready: return "forward: the destination's buffer to become free";
    case fwd_data: return "forward: the halo data";
    case rev_ready: return "reverse: the destination's buffer to become free";
    case rev_data: return "reverse: the returned forces";
    case probe_fwd: return "self-test, forward link";
    case probe_rev: return "self-test, reverse link";
  }
  return "?";
}

template <class T>
class DeviceArray {
 public:
  ~DeviceArray() { cudaFree(m_ptr); }
  T* get() const { return m_ptr; }
  // Keeps its allocation when the new contents fit (a new plan after every neighbour
  // search: cudaFree would wait for the whole device each time).
  void assign(const std::vector<T>& host) {
    if (host.size() > m_capacity) {
      cudaFree(m_ptr);
      m_ptr = nullptr;
      m_capacity = 0;
      HALOX_CUDA_CHECK(cudaMalloc(&m_ptr, host.size() * sizeof(T)));
      m_capacity = host.size();
    }
    if (!host.empty()) detail::copy_to_device_now(m_ptr, host.data(), host.size() * sizeof(T));
  }

 private:
  T* m_ptr = nullptr;
  std::size_t m_capacity = 0;
};

}  // namespace

struct DeviceHalo::Impl {
  BasicKind real;
  GpuHaloOptions options;
  double share;
  int item = 0;
  std::vector<int> ranks;
  std::vector<const ParticlePlan*> plans;
  int npulses = 0;
  std::vector<char*> blocks;        // per local rank: Slots + staging
  std::vector<long long> capacity;  // bytes of each block
  std::vector<PeerBlock> published;
  DeviceArray<int> indices;  // every pulse's index lists, one upload per plan
  DeviceArray<PulseView> views;
  DeviceArray<RankTable> tables;
  ErrorChannel errors;
  u64 fwd_epoch = 0, rev_epoch = 0, probe_epoch = 0;
  int grid_blocks = 1;
  bool system_scope = true;
  void* x_table = nullptr;  // device array of per-rank pointers
  std::vector<void*> last_x, last_f;

  std::function<char*(std::int64_t)> allocate_block = [](std::int64_t n) {
    char* p = nullptr;
    HALOX_CUDA_CHECK(cudaMalloc(&p, static_cast<std::size_t>(n)));
    return p;
  };
  std::function<void(char*)> free_block = [](char* p) { cudaFree(p); };

  void release() {
    for (char* b : blocks) free_block(b);
    blocks.clear();
    capacity.clear();
  }

  LaunchArgs args(int first_pulse, u64 epoch) const {
    LaunchArgs a{};
    a.views = views.get();
    a.tables = tables.get();
    a.npulses = npulses;
    a.first_pulse = first_pulse;
    a.blocks = grid_blocks;
    a.epoch = epoch;
    a.timeout_ns = static_cast<u64>(options.timeout_seconds * 1e9);
    a.error = errors.sink();
    a.stall_rank = options.stall_rank;
    a.system_scope = system_scope ? 1 : 0;
    a.trace = device_trace();
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
      HALOX_CUDA_CHECK(cudaStreamSynchronize(stream));  // new arrays: once per buffer set
      detail::copy_to_device_now(table, p.data(), p.size() * sizeof(void*));
      last = p;
    }
    return table;
  }

  template <class Real>
  void launch(bool forward, const std::vector<void*>& arrays, GpuStream stream) {
    Real* const* table = static_cast<Real* const*>(pointer_table(forward, arrays, stream));
    const u64 epoch = forward ? ++fwd_epoch : ++rev_epoch;
    const unsigned nranks = static_cast<unsigned>(ranks.size());
    if (npulses == 0) return;
    if (options.kernels == FusedKernels::all_pulses) {
      dim3 grid(grid_blocks, npulses, nranks);
      if (forward)
        forward_kernel<Real><<<grid, 256, 0, stream>>>(args(0, epoch), table);
      else
        reverse_kernel<Real><<<grid, 256, 0, stream>>>(args(0, epoch), table);
      HALOX_CUDA_CHECK(cudaGetLastError());
      return;
    }
    dim3 grid(grid_blocks, 1, nranks);
    for (int k = 0; k < npulses; ++k) {
      const int p = forward ? k : npulses - 1 - k;
      if (forward)
        forward_kernel<Real><<<grid, 256, 0, stream>>>(args(p, epoch), table);
      else
        reverse_kernel<Real><<<grid, 256, 0, stream>>>(args(p, epoch), table);
      HALOX_CUDA_CHECK(cudaGetLastError());
    }
  }
};

DeviceHalo::DeviceHalo(BasicKind real, GpuHaloOptions options, double gpu_share)
    : m_impl(std::make_unique<Impl>()) {
  if (real != BasicKind::float32 && real != BasicKind::float64) {
    throw Error("halox: GPU halo coordinates must be float32 or float64");
  }
  m_impl->real = real;
  m_impl->options = options;
  m_impl->share = gpu_share;
  m_impl->item = 3 * (real == BasicKind::float32 ? 4 : 8);
}

DeviceHalo::~DeviceHalo() {
  cudaDeviceSynchronize();
  m_impl->release();
  cudaFree(m_impl->x_table);
}

namespace {

// A rank's block: Slots, then the forward staging of every pulse, then the reverse staging.
PeerBlock layout(const ParticlePlan& plan, int npulses, int item, long long& bytes) {
  PeerBlock pb;
  long long at = kSlotsBytes;
  for (int p = 0; p < npulses; ++p) {
    pb.fwd_offset[p] = at;
    at += (plan.pulses[p].recv_count * item + 255) / 256 * 256;
  }
  for (int p = 0; p < npulses; ++p) {
    pb.rev_offset[p] = at;
    at += (static_cast<long long>(plan.pulses[p].send_index.size()) * item + 255) / 256 * 256;
  }
  bytes = at;
  return pb;
}

}  // namespace

bool DeviceHalo::fits(const std::vector<const ParticlePlan*>& plans) const {
  const Impl& m = *m_impl;
  if (m.blocks.size() != plans.size()) return false;
  // After a time-out the signals are out of step: only new (zeroed) blocks recover.
  if (m.errors.record().flag != 0) return false;
  for (std::size_t k = 0; k < plans.size(); ++k) {
    const int npulses = static_cast<int>(plans[k]->pulses.size());
    if (npulses != m.npulses) return false;
    long long bytes = 0;
    layout(*plans[k], npulses, m.item, bytes);
    if (bytes > m.capacity[k]) return false;
  }
  return true;
}

bool DeviceHalo::allocate(const std::vector<int>& ranks,
                          const std::vector<const ParticlePlan*>& plans, bool keep_if_fits) {
  Impl& m = *m_impl;
  HALOX_CUDA_CHECK(cudaDeviceSynchronize());  // no kernel may still use the old blocks
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
    PeerBlock pb = layout(plan, m.npulses, m.item, bytes);
    if (!keep) {
      // A quarter of headroom: the halo of a later plan may grow a little.
      const long long capacity = bytes + bytes / 4;
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
  if (!keep) m.fwd_epoch = m.rev_epoch = m.probe_epoch = 0;
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

void DeviceHalo::set_system_scope(bool system) {
  m_impl->system_scope = system;
}

void DeviceHalo::set_allocator(std::function<char*(std::int64_t)> allocate,
                               std::function<void(char*)> free) {
  m_impl->allocate_block = std::move(allocate);
  m_impl->free_block = std::move(free);
}

void DeviceHalo::connect(const std::function<PeerBlock(int)>& block_of) {
  Impl& m = *m_impl;
  std::vector<PulseView> views;
  std::vector<RankTable> tables;
  // Every pulse's index lists go into one array, uploaded at once (one host wait per plan,
  // not four per pulse); the views get their places in it now and pointers after.
  std::vector<int> ints;
  struct Places {
    std::size_t send_index, rev_order, fwd_source, fwd_shifts, rev_extra_start, rev_extra;
  };
  std::vector<Places> places;
  auto append = [&](auto first, auto last) {
    const std::size_t at = ints.size();
    ints.insert(ints.end(), first, last);
    return at;
  };
  int most_items = 1;
  const ForwardingGraph graph(m.ranks, m.plans);
  auto in_launch = [&](int rank) {
    return rank >= 0 && std::find(m.ranks.begin(), m.ranks.end(), rank) != m.ranks.end();
  };
  for (std::size_t k = 0; k < m.ranks.size(); ++k) {
    const ParticlePlan& plan = *m.plans[k];
    const PeerBlock& me = m.published[k];
    const int rank = m.ranks[k];
    RankTable table;
    for (int p = 0; p < m.npulses; ++p) {
      table.fwd_in[p] = me.base + me.fwd_offset[p];
      table.rev_in[p] = me.base + me.rev_offset[p];
      for (int a = 0; a < 3; ++a) table.shift[p][a] = plan.pulses[p].shift[a];
    }
    tables.push_back(table);
    for (int p = 0; p < m.npulses; ++p) {
      const ParticlePulse& pulse = plan.pulses[p];
      PulseView v;
      v.rank = rank;
      v.pulse = p;
      v.send_rank = pulse.header.send_rank;
      v.recv_rank = pulse.header.recv_rank;
      v.n_send = static_cast<int>(pulse.send_index.size());
      v.first_forwarded = static_cast<int>(pulse.first_forwarded);
      v.n_recv = static_cast<int>(pulse.recv_count);
      v.recv_offset = pulse.recv_offset;
      for (int a = 0; a < 3; ++a) v.shift[a] = pulse.shift[a];
      most_items = std::max({most_items, v.n_send, v.n_recv});
      // Forward: each forwarded item's source (see ForwardingGraph).
      std::vector<int> fwd_source, fwd_shifts;
      for (std::int64_t j = pulse.first_forwarded; j < v.n_send; ++j) {
        graph.forward_source(static_cast<int>(k), p, static_cast<std::size_t>(j), fwd_source,
                             fwd_shifts, v.fwd_deps);
      }
      // Reverse: my received items of p that later pulses forwarded get the forces those
      // pulses return (later pulses first, the order in which the host transport adds
      // them); the other items go at once.
      std::vector<int> order, extra_start(1, 0), extra;
      for (int i = 0; i < v.n_recv; ++i)
        if (!graph.forwarded(static_cast<int>(k), pulse.recv_offset + i)) order.push_back(i);
      v.rev_first_forwarded = static_cast<int>(order.size());
      for (int i = 0; i < v.n_recv; ++i) {
        if (!graph.forwarded(static_cast<int>(k), pulse.recv_offset + i)) continue;
        order.push_back(i);
        graph.returned_terms(static_cast<int>(k), static_cast<int>(k), pulse.recv_offset + i, extra,
                             v.rev_deps);
        extra_start.push_back(static_cast<int>(extra.size() / 2));
      }
      places.push_back(
          {append(pulse.send_index.begin(), pulse.send_index.end()),
           append(order.begin(), order.end()), append(fwd_source.begin(), fwd_source.end()),
           append(fwd_shifts.begin(), fwd_shifts.end()),
           append(extra_start.begin(), extra_start.end()), append(extra.begin(), extra.end())});
      v.mine = reinterpret_cast<Slots*>(me.base);
      v.fwd_in = me.base + me.fwd_offset[p];
      v.rev_in = me.base + me.rev_offset[p];
      v.fwd_in_data = &v.mine->fwd_data[p];
      v.fwd_in_ready = &v.mine->fwd_ready[p];
      v.rev_in_data = &v.mine->rev_data[p];
      v.rev_in_ready = &v.mine->rev_ready[p];
      v.dest_in_launch = in_launch(v.send_rank);
      v.source_in_launch = in_launch(v.recv_rank);
      if (v.send_rank >= 0) {
        const PeerBlock dest = block_of(v.send_rank);
        v.dest = reinterpret_cast<Slots*>(dest.base);
        v.fwd_out = dest.base + dest.fwd_offset[p];
        v.fwd_out_data = &v.dest->fwd_data[p];
        v.rev_src_ready = &v.dest->rev_ready[p];
      }
      if (v.recv_rank >= 0) {
        const PeerBlock source = block_of(v.recv_rank);
        v.source = reinterpret_cast<Slots*>(source.base);
        v.rev_out = source.base + source.rev_offset[p];
        v.rev_out_data = &v.source->rev_data[p];
        v.fwd_src_ready = &v.source->fwd_ready[p];
      }
      views.push_back(v);
    }
  }
  m.indices.assign(ints);
  for (std::size_t i = 0; i < views.size(); ++i) {
    const int* base = m.indices.get();
    views[i].send_index = base + places[i].send_index;
    views[i].rev_order = base + places[i].rev_order;
    views[i].fwd_source = base + places[i].fwd_source;
    views[i].fwd_shifts = base + places[i].fwd_shifts;
    views[i].rev_extra_start = base + places[i].rev_extra_start;
    views[i].rev_extra = base + places[i].rev_extra;
  }
  m.views.assign(views);
  m.tables.assign(tables);
  // Blocks per (rank, pulse): every spinning block of every rank sharing the GPU must be
  // resident at once, so the grid is sized from the occupancy calculator.
  int device = 0, sms = 0, per_sm = 0;
  HALOX_CUDA_CHECK(cudaGetDevice(&device));
  HALOX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (m.real == BasicKind::float32) {
    HALOX_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reverse_kernel<float>, 256, 0));
  } else {
    HALOX_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reverse_kernel<double>, 256, 0));
  }
  const int concurrent = m.options.kernels == FusedKernels::all_pulses ? std::max(1, m.npulses) : 1;
  const double resident = m.share * sms * per_sm;
  const int fit = static_cast<int>(resident / (static_cast<double>(m.ranks.size()) * concurrent));
  if (fit < 1) {
    throw Error("halox: " + std::to_string(m.ranks.size()) + " ranks x " +
                std::to_string(concurrent) + " pulses do not fit on the GPU at once (" +
                std::to_string(static_cast<int>(resident)) +
                " resident blocks); use per_pulse kernels or fewer ranks per GPU");
  }
  // Up to 128 blocks per pulse: large halos to a GPU across NVLink need many stores in
  // flight. Measured between two H200s (3 MB pingpong): 32 blocks 59 GB/s, 128 blocks
  // 75 GB/s, 1024 blocks 57-74 GB/s (no better), so 128.
  m.grid_blocks = std::max(1, std::min({fit, 128, (most_items + 255) / 256}));
}

void DeviceHalo::self_test() {
  launch_self_test();
  finish_self_test();
}

void DeviceHalo::launch_self_test() {
  Impl& m = *m_impl;
  if (!m.options.self_test || m.npulses == 0) return;
  const u64 epoch = ++m.probe_epoch;
  probe_kernel<<<dim3(1, m.npulses, static_cast<unsigned>(m.ranks.size())), 32>>>(m.args(0, epoch));
  HALOX_CUDA_CHECK(cudaGetLastError());
}

void DeviceHalo::finish_self_test() {
  if (!m_impl->options.self_test || m_impl->npulses == 0) return;
  HALOX_CUDA_CHECK(cudaDeviceSynchronize());
  check();
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
  const volatile ErrorRecord* e = &m_impl->errors.record();
  if (e->flag == 0) return;
  std::ostringstream s;
  if (e->flag == 2) {
    s << "halox: self-test: rank " << e->rank << " got a wrong probe from rank " << e->peer
      << " on pulse " << e->pulse << " (" << kind_name(e->kind) << "): word " << e->seen
      << ", expected " << e->expected;
  } else {
    s << "halox: rank " << e->rank << " timed out after " << m_impl->options.timeout_seconds
      << " s on pulse " << e->pulse << " waiting for rank " << e->peer << " (" << kind_name(e->kind)
      << "): ";
    if (e->kind == fwd_data || e->kind == rev_data) {
      // Data signals count 2^32 per exchange, in shares of the sender's blocks.
      const u64 seen = e->seen;
      s << "exchange " << (e->expected >> 32) << "'s data expected, the signal is at exchange "
        << (seen >> 32) << " + "
        << static_cast<int>(100.0 * static_cast<double>(seen & 0xffffffffull) / 4294967296.0)
        << "% of its blocks";
    } else {
      s << "signal " << e->seen << ", expected " << e->expected;
    }
    s << ". The exchange is unusable; is rank " << e->peer << " stalled or its plan different?";
  }
  throw HaloTimeoutError(s.str());
}

int DeviceHalo::launches_per_exchange() const {
  return m_impl->options.kernels == FusedKernels::all_pulses ? 1 : m_impl->npulses;
}

}  // namespace halox::detail
