// The device channel: what a GPU-initiated kernel sees of one link, written once for the
// particle and the grid kernels and for every way a peer is reached: a store into memory this
// GPU maps (a rank of this process, CUDA IPC, nvshmem_ptr) or an NVSHMEM put-with-signal
// (remote_put.cuh). Include only from CUDA sources.
//
// A link carries one message per exchange e (the transport's counter, never reset) from a sender
// into the receiver's staging area:
//   receiver  RecvChannel::release(e)      its staging is free: e into the sender's ready slot
//   sender    SendChannel::wait_free(e)    acquire >= e on that slot, with a time-out
//   sender    pack into pack_target()      the receiver's staging, or (a put peer) my own
//   sender    SendChannel::deliver(e)      every block adds its share of the receiver's data
//                                          signal once its stores are done (or the last block
//                                          sets it); to a put peer the last block puts the
//                                          whole staging with the signal
//   receiver  RecvChannel::wait_data(e)    acquire >= data_signal(e), with a time-out
// The self-test sends a probe over every link (ProbeLink, one kernel for every transport).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>

#include "remote_put.cuh"
#include "signals.cuh"

namespace halox::detail {

/// Who waits on a device channel, for the time-out's record: the waiting rank, and the sink and
/// scope of the launch.
struct ChannelWait {
  u64 timeout_ns;
  ErrorSink error;
  int rank;
  bool sys;  // system scope (a peer on another GPU), else GPU scope
};

/// A wait on a signal in host memory (a link through the host proxy) by one block of the face
/// alone (`relayer`: its first tile, which a block takes before any other of the face's), which
/// relays it into `relay` (device memory) for the face's other blocks: with every block polling
/// host memory (a PCIe read per 32 ns sleep each), the proxied LBM on the H200 ran 12x slower.
/// false on a time-out.
__device__ inline bool relayed_wait(const u64* slot, u64* relay, u64 target, const ChannelWait& c,
                                    int peer, int pulse, int kind, bool relayer) {
  if (!relayer) {
    return block_wait(relay, target, c.timeout_ns, c.error, c.rank, peer, pulse, kind, false);
  }
  if (!block_wait(slot, target, c.timeout_ns, c.error, c.rank, peer, pulse, kind, true)) {
    return false;
  }
  if (threadIdx.x == 0) signal_release(relay, target, false);
  return true;
}

/// The sending end of a link.
struct SendChannel {
  char* remote = nullptr;        // the receiver's staging (a symmetric address when pe >= 0)
  u64* remote_signal = nullptr;  // the receiver's data signal
  const u64* ready = nullptr;    // mine: the receiver says here that its staging is free
  char* staging = nullptr;       // pe >= 0: what goes by put is packed here first
  u64* packed = nullptr;         // blocks done packing (a local counter): puts, by last block
  int pe = -1;                   // >= 0: the receiver is reached by put-with-signal
  u64* ready_relay = nullptr;    // a link through the host proxy: `ready` relayed (relayed_wait)

  /// Where the pack writes: the receiver's staging, or my own for a put.
  template <bool PUTS>
  __device__ __forceinline__ char* pack_target() const {
    return PUTS && pe >= 0 ? staging : remote;
  }
  /// Every thread of the block: waits until the receiver's staging is free; false when the
  /// wait timed out (recorded with `peer`, `pulse` and `kind`).
  /// `relayer`: this block polls a proxied link's host slot for the others (relayed_wait).
  __device__ __forceinline__ bool wait_free(u64 epoch, const ChannelWait& c, int peer, int pulse,
                                            int kind, bool relayer = true) const {
    if (ready_relay != nullptr)
      return relayed_wait(ready, ready_relay, epoch, c, peer, pulse, kind, relayer);
    return block_wait(ready, epoch, c.timeout_ns, c.error, c.rank, peer, pulse, kind, c.sys);
  }
  /// Every block of the pack calls it once its own stores are done (`bytes`: the whole
  /// message, for a put). BY_LAST_BLOCK: the last block to finish (counted in `packed`) sets
  /// the signal for all, instead of a share per block; the receiver waits alike. The grid
  /// kernel delivers so: the shares' arithmetic costs it 6 registers (59 -> 65 with ptxas
  /// for sm_90), one resident block fewer per SM. A link through the host proxy is always
  /// delivered so: its signal is in host memory, where the GPU's atomics over PCIe are not
  /// guaranteed (every block adding its share hung the proxied grid test after 85 exchanges).
  template <bool PUTS, bool BY_LAST_BLOCK = false>
  __device__ __forceinline__ void deliver(u64 epoch, int block, int blocks, std::size_t bytes,
                                          bool sys) const {
    if (PUTS && pe >= 0) {
      put_when_packed(packed, blocks, remote, staging, bytes, remote_signal, data_signal(epoch),
                      pe);
    } else if (BY_LAST_BLOCK) {
      if (last_block(packed, blocks, sys) && threadIdx.x == 0)
        signal_release(remote_signal, data_signal(epoch), sys);
    } else {
      add_data_share(remote_signal, block, blocks, sys);
    }
  }
};

/// The receiving end of a link.
struct RecvChannel {
  const char* staging = nullptr;  // mine
  const u64* signal = nullptr;    // my data signal
  u64* remote_ready = nullptr;    // the sender's ready slot
  int pe = -1;                    // >= 0: the sender is reached by puts
  u64* data_relay = nullptr;      // a link through the host proxy: `signal` relayed

  /// One thread: tells the sender that my staging is free for exchange `epoch`.
  template <bool PUTS>
  __device__ __forceinline__ void release(u64 epoch, bool sys) const {
    signal_peer<PUTS>(remote_ready, epoch, pe, sys);
  }
  /// Every thread of the block: waits for exchange `epoch`'s data; false on a time-out.
  __device__ __forceinline__ bool wait_data(u64 epoch, const ChannelWait& c, int peer, int pulse,
                                            int kind, bool relayer = true) const {
    if (data_relay != nullptr) {
      return relayed_wait(signal, data_relay, data_signal(epoch), c, peer, pulse, kind, relayer);
    }
    return block_wait(signal, data_signal(epoch), c.timeout_ns, c.error, c.rank, peer, pulse, kind,
                      c.sys);
  }
};

/// Blocks each of `groups` groups of spinning blocks (a rank's pulse, an op) may have when
/// they share `share` of the `on_gpu` blocks the GPU holds at once (resident_blocks): every
/// block that may wait must be resident with every block it waits for, or a waiting block
/// could keep its producer from being scheduled. 0: they do not fit.
inline int spinning_blocks_per_group(int on_gpu, double share, int groups) {
  return static_cast<int>(share * on_gpu / static_cast<double>(groups > 1 ? groups : 1));
}

/// A self-test probe's landing place in the receiver's memory: its words, then its signal.
struct ProbeSlot {
  u64 words[kProbeWords];
  u64 signal;
};

/// One thread of the self-test: it sends the probe `out` (if any), then waits for and checks
/// the probe `in` (if any). A probe is (magic, sender, link, epoch); the transport numbers its
/// links so that both ends name the same one.
struct ProbeLink {
  ProbeSlot* out = nullptr;  // the receiver's slot (a symmetric address when out_pe >= 0)
  int out_pe = -1;
  int out_link = 0;
  const ProbeSlot* in = nullptr;  // my slot
  int in_link = 0;
  // For the check and its record: who receives, from whom, which pulse, the transport's kind.
  int rank = 0, peer = 0, pulse = 0, kind = 0;
};

/// Launches the probes of `links` in one kernel on a stream of its own; the device is the
/// current one. finish() waits for it; the caller then reads its error record.
class ProbeRun {
 public:
  ProbeRun() = default;
  ~ProbeRun();
  ProbeRun(const ProbeRun&) = delete;
  ProbeRun& operator=(const ProbeRun&) = delete;
  /// `sys`: system-scope signals (peers in other processes); `puts`: some out_pe >= 0.
  void launch(std::span<const ProbeLink> links, u64 epoch, double timeout_seconds, ErrorSink error,
              bool sys, bool puts);
  void finish();

 private:
  ProbeLink* m_links = nullptr;
  cudaStream_t m_stream = nullptr;
};

/// The kernel with puts (channel_puts.cu, NVSHMEM builds only).
void launch_probes_with_puts(const ProbeLink* links, int count, u64 epoch, u64 timeout_ns,
                             ErrorSink error, bool sys, cudaStream_t stream);

constexpr u64 kProbeMagic = 0x68616c6f78ull;  // "halox"

template <bool PUTS>
__global__ void probe_kernel(const ProbeLink* links, int count, u64 epoch, u64 timeout_ns,
                             ErrorSink error, bool sys) {
  const int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= count) return;
  const ProbeLink link = links[j];
  if (link.out != nullptr) {
    const u64 words[kProbeWords] = {kProbeMagic, static_cast<u64>(link.rank),
                                    static_cast<u64>(link.out_link), epoch};
    if (PUTS && link.out_pe >= 0) {
      put_probe(link.out->words, words, &link.out->signal, epoch, link.out_pe);
    } else {
      send_probe(link.out->words, words, &link.out->signal, epoch, sys);
    }
  }
  if (link.in != nullptr) {
    const u64 want[kProbeWords] = {kProbeMagic, static_cast<u64>(link.peer),
                                   static_cast<u64>(link.in_link), epoch};
    receive_probe(link.in->words, want, &link.in->signal, epoch, timeout_ns, error, link.rank,
                  link.peer, link.pulse, link.kind, sys);
  }
}

}  // namespace halox::detail
