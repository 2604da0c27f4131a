// Device-side signalling shared by the GPU-initiated transports (particles and grids): release
// stores and acquire loads at GPU or system scope, waits with a time-out that records who
// waited for whom in mapped host memory, and the last-block-done counter.
#pragma once

#include <cuda_runtime.h>

#include <cstring>

#include "../common/cuda_check.hpp"
#include "errors.hpp"

namespace halox::detail {

// Written by the first failing wait into mapped host memory (ErrorRecord, errors.hpp), so
// the host reads it without synchronising. The claim word lives in device memory (device
// atomics on host memory are not guaranteed); the report's flag is written last.
struct ErrorSink {
  int* claim;           // device memory
  ErrorRecord* report;  // mapped pinned host memory
};

// The host side of an ErrorSink, owned by a transport: the report in mapped pinned memory and
// the claim word, both cleared. Its owner waits for its kernels before this is destroyed.
class ErrorChannel {
 public:
  ErrorChannel() {
    HALOX_CUDA_CHECK(cudaHostAlloc(&m_report, sizeof(ErrorRecord), cudaHostAllocMapped));
    HALOX_CUDA_CHECK(cudaHostGetDevicePointer(&m_report_device, m_report, 0));
    HALOX_CUDA_CHECK(cudaMalloc(&m_claim, sizeof(int)));
    clear();
  }
  ~ErrorChannel() {
    cudaFree(m_claim);
    cudaFreeHost(m_report);
  }
  ErrorChannel(const ErrorChannel&) = delete;
  ErrorChannel& operator=(const ErrorChannel&) = delete;

  ErrorSink sink() const { return ErrorSink{m_claim, m_report_device}; }
  /// What the first failing wait recorded (flag 0: nothing); read without synchronising.
  const volatile ErrorRecord& record() const { return *m_report; }
  /// Forgets a recorded error (a new plan starts afresh).
  void clear() {
    std::memset(m_report, 0, sizeof(ErrorRecord));
    fill_device_now(m_claim, 0, sizeof(int));
  }

 private:
  ErrorRecord* m_report = nullptr;  // mapped pinned host memory
  ErrorRecord* m_report_device = nullptr;
  int* m_claim = nullptr;
};

__device__ inline void report_error(ErrorSink sink, int flag, int rank, int peer, int pulse,
                                    int kind, u64 seen, u64 expected) {
  if (atomicCAS(sink.claim, 0, 1) != 0) return;
  volatile ErrorRecord* r = sink.report;
  r->rank = rank;
  r->peer = peer;
  r->pulse = pulse;
  r->kind = kind;
  r->seen = seen;
  r->expected = expected;
  __threadfence_system();
  r->flag = flag;
  __threadfence_system();
}

// Programmatic dependent launch (launch_dependent, cuda_check.hpp): the first thing a kernel
// launched so does is wait for the kernel before it in the stream to finish (its memory
// then visible); it then lets the next one be scheduled, to wait likewise. Both are no-ops
// for a kernel launched the usual way.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

namespace {

__device__ __forceinline__ u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Scope: gpu when every peer shares this GPU (ranks in one process, or processes under MPS
// on one device), system otherwise (peers on other GPUs); system-scope fences cost more.
__device__ __forceinline__ void signal_release(u64* slot, u64 value, bool sys) {
  if (sys) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(slot), "l"(value) : "memory");
  } else {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(slot), "l"(value) : "memory");
  }
}
__device__ __forceinline__ u64 load_acquire(const u64* slot, bool sys) {
  u64 v;
  if (sys) {
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(slot) : "memory");
  } else {
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(slot) : "memory");
  }
  return v;
}
// Waits until *slot >= target; on time-out records (rank, peer, pulse, kind, seen) once.
// A wait gives up at once when an earlier one failed (in this kernel or one queued before
// it): the host queues steps ahead without waiting, and each queued kernel would otherwise
// spend its own time-out, so a stalled peer would hold this rank for the time-out times the
// number of queued kernels before the host sees the report.
__device__ bool wait_for(const u64* slot, u64 target, u64 timeout_ns, ErrorSink error, int rank,
                         int peer, int pulse, int kind, bool sys) {
  u64 seen = load_acquire(slot, sys);
  if (seen >= target) return true;
  const u64 start = now_ns();
  const volatile int* failed = error.claim;
  while ((seen = load_acquire(slot, sys)) < target) {
    if (*failed != 0 || now_ns() - start > timeout_ns) {
      report_error(error, 1, rank, peer, pulse, kind, seen, target);
      return false;
    }
    __nanosleep(32);
  }
  return true;
}

// One thread waits, the block follows; false when the wait failed.
__device__ bool block_wait(const u64* slot, u64 target, u64 timeout_ns, ErrorSink error, int rank,
                           int peer, int pulse, int kind, bool sys) {
  __shared__ int ok;
  __syncthreads();
  if (threadIdx.x == 0)
    ok = wait_for(slot, target, timeout_ns, error, rank, peer, pulse, kind, sys);
  __syncthreads();
  return ok != 0;
}

// Adds to a counter with acquire-release semantics at GPU or system scope; returns the old
// value. Release is cumulative: after a __syncthreads, thread 0's add publishes the stores of
// its whole block, and the acquire takes in those of every block that added before it. No
// separate fence: fence.sc (__threadfence) costs more and orders more than is needed here.
__device__ __forceinline__ u64 add_acq_rel(u64* counter, u64 value, bool sys) {
  u64 old;
  if (sys) {
    asm volatile("atom.acq_rel.sys.global.add.u64 %0, [%1], %2;"
                 : "=l"(old)
                 : "l"(counter), "l"(value)
                 : "memory");
  } else {
    asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;"
                 : "=l"(old)
                 : "l"(counter), "l"(value)
                 : "memory");
  }
  return old;
}

// A data signal that every block of the sender adds its share to as soon as its own stores
// are done (a release add after __syncthreads: no last-block count, no second hop): the
// shares of `blocks` blocks sum to 2^32 per exchange whatever `blocks` is, so a receiver
// waits for exchange e's data with data_signal(e) without knowing the sender's grid.
// Acquiring the sum synchronises with every add (RMWs continue a release sequence).
// data_signal itself is in errors.hpp, for the host proxy too.
__device__ __forceinline__ void add_data_share(u64* signal, int block, int blocks, bool sys) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  const u64 b = static_cast<u64>(block), n = static_cast<u64>(blocks);
  const u64 share = ((b + 1) << 32) / n - (b << 32) / n;
  if (sys) {
    asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(signal), "l"(share) : "memory");
  } else {
    asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(signal), "l"(share) : "memory");
  }
}

// The last of `blocks` blocks to arrive (per launch) returns true, with every block's prior
// stores visible at the scope before it proceeds (its release signal then carries them).
__device__ bool last_block(u64* counter, int blocks, bool sys) {
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    last = (add_acq_rel(counter, 1ull, sys) + 1) % static_cast<u64>(blocks) == 0;
  }
  __syncthreads();
  return last != 0;
}

// The self-tests' probe over one link: four words (what the receiver expects: the transports'
// magic, the sender, the link and the exchange or direction), then a release signal.
constexpr int kProbeWords = 4;
__device__ __forceinline__ void send_probe(u64* payload, const u64 (&words)[kProbeWords],
                                           u64* signal, u64 value, bool sys) {
  for (int w = 0; w < kProbeWords; ++w) payload[w] = words[w];
  if (sys) __threadfence_system();
  signal_release(signal, value, sys);
}
// Waits for a probe's signal, then checks its words: a time-out is recorded as flag 1, the
// first wrong word as flag 2, with rank, peer, pulse and kind.
__device__ __forceinline__ bool receive_probe(const u64* payload, const u64 (&want)[kProbeWords],
                                              const u64* signal, u64 value, u64 timeout_ns,
                                              ErrorSink error, int rank, int peer, int pulse,
                                              int kind, bool sys) {
  if (!wait_for(signal, value, timeout_ns, error, rank, peer, pulse, kind, sys)) return false;
  for (int w = 0; w < kProbeWords; ++w) {
    const u64 got = reinterpret_cast<const volatile u64*>(payload)[w];
    if (got != want[w]) {
      report_error(error, 2, rank, peer, pulse, kind, got, want[w]);
      return false;
    }
  }
  return true;
}

}  // namespace

}  // namespace halox::detail
