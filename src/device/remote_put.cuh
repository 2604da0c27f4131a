// The fused kernels' channel to a peer that is not load/store reachable (nvshmem_ptr gives
// no pointer: another node, or a peer forced onto this path): the pack goes into a local
// staging area of this rank's symmetric block, and the last block to finish sends it with
// one put-with-signal; ready signals and self-test probes go by NVSHMEM too. Addresses of the
// peer are symmetric (this rank's address of the same allocation names the peer's). Include
// only from CUDA sources. Real only in the relocatable-code sources that define
// HALOX_DEVICE_PUTS (the *_puts.cu files, NVSHMEM builds); elsewhere the kernels that could
// call them are never launched with a put peer, and they trap.
#pragma once

#include <cstddef>

#include "signals.cuh"

#ifdef HALOX_DEVICE_PUTS
#include <nvshmem.h>
#include <nvshmemx.h>
#endif

namespace halox::detail {

/// Sets `slot` (symmetric, on PE `pe`) to `value`: the remote form of signal_release. NVSHMEM
/// orders it after this thread's earlier puts to that PE.
__device__ __forceinline__ void remote_signal(u64* slot, u64 value, int pe) {
#ifdef HALOX_DEVICE_PUTS
  nvshmemx_signal_op(reinterpret_cast<uint64_t*>(slot), value, NVSHMEM_SIGNAL_SET, pe);
#else
  (void)slot, (void)value, (void)pe;
  __trap();
#endif
}

/// Called by every block of a pack once its stores to `local` are done: the last block of
/// `blocks` (counted in `packed`, a local counter that is never reset) puts the whole area to
/// `remote` on PE `pe` and then sets `signal` there to `value`, all of its threads taking
/// part. Data is delivered before the signal (NVSHMEM's put-with-signal).
__device__ __forceinline__ void put_when_packed(u64* packed, int blocks, void* remote,
                                                const void* local, std::size_t bytes, u64* signal,
                                                u64 value, int pe) {
  // System scope: the other blocks' stores must be visible to whatever reads `local` for the
  // put (this block's threads through NVLink, or a NIC).
  if (!last_block(packed, blocks, true)) return;
#ifdef HALOX_DEVICE_PUTS
  nvshmemx_putmem_signal_block(remote, local, bytes, reinterpret_cast<uint64_t*>(signal), value,
                               NVSHMEM_SIGNAL_SET, pe);
#else
  (void)remote, (void)local, (void)bytes, (void)signal, (void)value, (void)pe;
  __trap();
#endif
}

/// The self-test's probe to a peer reached by puts: its words one by one, then (ordered
/// after them by nvshmem_fence) the signal. One thread.
__device__ __forceinline__ void put_probe(u64* payload, const u64 (&words)[kProbeWords],
                                          u64* signal, u64 value, int pe) {
#ifdef HALOX_DEVICE_PUTS
  for (int w = 0; w < kProbeWords; ++w) {
    nvshmem_uint64_p(reinterpret_cast<uint64_t*>(payload) + w, words[w], pe);
  }
  nvshmem_fence();
  remote_signal(signal, value, pe);
#else
  (void)payload, (void)words, (void)signal, (void)value, (void)pe;
  __trap();
#endif
}

/// The channel's two ways in one place, for the kernels' PUTS instantiations (false: never a
/// put; pe < 0: the peer is stored to directly). Sets a peer's signal slot to `value`.
template <bool PUTS>
__device__ __forceinline__ void signal_peer(u64* slot, u64 value, int pe, bool sys) {
  if (PUTS && pe >= 0)
    remote_signal(slot, value, pe);
  else
    signal_release(slot, value, sys);
}

}  // namespace halox::detail
