// halox: the event log. Seed 003 (section 5.3): printf is useless inside these kernels and
// profilers miss the polling; a timestamp log in device memory is what works. Kernels of the
// GPU-initiated exchange record (rank, pulse, phase, block, globaltimer) into a ring buffer in
// device memory; host phases (launches, MPI calls, stream waits) go into the same log, on the
// same clock. Exported as Chrome trace JSON (Perfetto, chrome://tracing), all ranks merged;
// host phases are NVTX ranges too (Nsight Systems).
//
// Off by default: enable() or HALOX_TRACE=1 in the environment. Off costs one predictable
// branch per kernel; a build with HALOX_ENABLE_TRACING=OFF removes even that.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "halox/config.hpp"
#include "halox/device.hpp"
#if HALOX_HAS_MPI
#include <mpi.h>
#endif

namespace halox::trace {

/// Starts recording (device ring of `device_events` entries, host log unbounded).
void enable(std::size_t device_events = 1 << 20);
void disable();
/// Whether recording is on (enable() called, or HALOX_TRACE=1 at the first query).
bool enabled();
/// Drops everything recorded so far.
void clear();

/// One exported event: a span [begin_ns, end_ns) (or an instant when equal) on a track.
struct Event {
  std::string name;
  int rank = 0;
  std::string track;                      // e.g. "host", "gpu pulse 2 (z-) block 0"
  std::int64_t begin_ns = 0, end_ns = 0;  // CLOCK_REALTIME nanoseconds
  std::int64_t exchange = -1;             // device events: the kernel's exchange counter
  std::string object{};                   // ... and the exchange object's name (or "#id")
};

/// Records a host span for `rank` (also an NVTX range while it lives).
class Scope {
 public:
  Scope(const char* name, int rank);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* m_name;
  int m_rank;
  std::int64_t m_begin;
  bool m_on;
};

/// Marks the work queued on `stream` between stream_span_begin and stream_span_end as a
/// span named `name` on `rank`'s track "gpu <name>", timed on the device clock of the
/// exchange kernels' records (a one-thread kernel at each end, only while recording is on).
/// For an application's own kernels: whether an exchange runs hidden behind them. Spans of
/// one name and rank must not overlap; a null stream is the legacy default stream.
void stream_span_begin(const char* name, int rank, GpuStream stream);
void stream_span_end(const char* name, int rank, GpuStream stream);

/// Everything this process recorded (device events fetched, converted to host time and
/// paired into spans).
std::vector<Event> collect();

/// Chrome trace JSON of `events` (one process per rank, one thread per track).
std::string to_chrome_json(const std::vector<Event>& events);

/// Writes this process's events to `path` (the format is checked by tests/apps/check_trace.py).
void write(const std::string& path);
#if HALOX_HAS_MPI
/// Collective: every rank's events, clocks aligned to rank 0's, merged into one file written
/// by rank 0.
void write(MPI_Comm comm, const std::string& path);
#endif

}  // namespace halox::trace
