// The device side's one way to append to the event log (device_trace.hpp): thread 0 of a
// block writes one record, plain stores into its reserved slot. Compiled out with
// HALOX_ENABLE_TRACING=OFF; a null ring when tracing is off at run time. Include only from
// CUDA sources.
#pragma once

#include <cuda_runtime.h>

#include "device_trace.hpp"
#include "halox/config.hpp"

namespace halox::detail {

// direction: 0 particles forward, 1 particles reverse, 2 a grid exchange (pulse = its op),
// kStreamSpanDirection a stream span.
// exchange: the kernel's exchange counter, which tells its records from the next launch's.
// The record goes to slot `event` of the launch's reservation for `unit` (a block, or a unit
// of work that a block takes among several: a grid kernel's tile); `block` is what the record
// names (the tracks of a trace).
__device__ __forceinline__ void trace_record_in(const DeviceTrace& trace, unsigned long long unit,
                                                int block, int rank, int pulse, int event,
                                                int direction, unsigned long long exchange) {
#if HALOX_HAS_TRACING
  if (trace.records == nullptr || threadIdx.x != 0) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  DeviceRecord& r = trace.records[(trace.base + unit * kTraceSlots + event) % trace.capacity];
  r.t = t;
  r.rank = rank;
  r.pulse = static_cast<short>(pulse);
  r.event = static_cast<unsigned char>(event);
  r.direction = static_cast<unsigned char>(direction);
  r.block = block;
  r.exchange = static_cast<int>(exchange & 0x7fffffffull);
#else
  (void)trace, (void)unit, (void)block, (void)rank, (void)pulse, (void)event, (void)direction,
      (void)exchange;
#endif
}

// The record of this block (its own slots in the launch's reservation).
__device__ __forceinline__ void trace_record(const DeviceTrace& trace, int rank, int pulse,
                                             int event, int direction,
                                             unsigned long long exchange) {
  const unsigned long long block =
      blockIdx.x + static_cast<unsigned long long>(gridDim.x) *
                       (blockIdx.y + static_cast<unsigned long long>(gridDim.y) * blockIdx.z);
  trace_record_in(trace, block, static_cast<int>(blockIdx.x), rank, pulse, event, direction,
                  exchange);
}

}  // namespace halox::detail
