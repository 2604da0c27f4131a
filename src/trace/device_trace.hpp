// The device side of the event log: a ring of records in device memory that kernels append
// to with one atomic. Null pointers when tracing is off.
#pragma once

#include <cstdint>

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
  trace_signal,
};

struct DeviceTrace {
  unsigned long long* count = nullptr;
  DeviceRecord* records = nullptr;
  unsigned long long capacity = 0;
};

/// The current ring (all null when tracing is off or the build has no CUDA).
DeviceTrace device_trace();

}  // namespace halox::detail
