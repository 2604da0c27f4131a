// The device side of the event log: a ring of records in device memory. Each launch reserves
// kTraceSlots slots per block on the host, one per event kind, so a kernel writes its records
// with plain stores: no atomic round trip on the path it times. Null when tracing is off.
#pragma once

#include <cstdint>
#include <string>

namespace halox::detail {

struct DeviceRecord {
  unsigned long long t;  // %globaltimer, ns
  int rank;
  short pulse;
  unsigned char event;      // TraceEvent
  unsigned char direction;  // 0 forward, 1 reverse
  int block;
  int exchange;  // the kernel's exchange counter (low 31 bits): which launch it came from
};

enum TraceEvent : unsigned char {
  trace_pack_begin,
  trace_pack_end,
  trace_ready_begin,
  trace_ready_end,
  trace_deps_begin,
  trace_deps_end,
  trace_data_begin,
  trace_data_end,
  trace_unpack_begin,
  trace_unpack_end,
  trace_span_begin,  // trace::stream_span_begin/end: an application's work on a stream
  trace_span_end,
  trace_signal,
};

/// Slots per block and launch: each event kind is recorded at most once by a block.
constexpr int kTraceSlots = trace_signal + 1;

struct DeviceTrace {
  DeviceRecord* records = nullptr;
  unsigned long long capacity = 0;
  unsigned long long base = 0;  // this launch's first slot (modulo capacity)
};

/// The ring, with kTraceSlots slots per block reserved for a launch of `blocks` blocks by
/// the exchange object `object` (trace_object; -1: none), so that its records are told
/// apart from another object's whose exchange counter has the same value (all null when
/// tracing is off or the build has no CUDA; blocks = 0: whether it is on).
DeviceTrace device_trace(unsigned long long blocks = 0, int object = -1);

/// The slot (counted since the last clear) that index `index` of a ring of `capacity`
/// records holds once `reserved` slots have been handed out: the one of the last `capacity`
/// slots that is `index` modulo `capacity` (index itself before the ring wraps).
unsigned long long ring_slot(unsigned long long index, unsigned long long reserved,
                             unsigned long long capacity);

/// A record's direction: 0 particles forward, 1 particles reverse, 2 a grid exchange, and
/// this: a stream span of trace::stream_span_begin/end (its name is the launch's object).
constexpr int kStreamSpanDirection = 3;

/// Records the device clock on `stream` once the work queued before it is done: `event`
/// (trace_span_begin or _end) of `rank`'s `count`th span of the object `trace` was reserved
/// for (args.exchange in the trace). A one-thread kernel (CUDA builds only).
void record_on_stream(const DeviceTrace& trace, int rank, int event, int count, void* stream);

/// Registers an exchange object whose kernels record device events; returns its id. In
/// traces its events carry `name` (args.object), or "#id" when the name is empty: ids
/// count a process's objects in the order they register, the same on every rank when
/// they are set up collectively.
int trace_object(const std::string& name);

}  // namespace halox::detail
