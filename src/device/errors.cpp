// The one wording of the device channel's errors (errors.hpp).
#include "errors.hpp"

#include <sstream>

#include "halox/error.hpp"

namespace halox::detail {

void check_device_error(const volatile ErrorRecord& record, const ErrorWording& w) {
  if (record.flag == 0) return;
  check_device_error(ErrorRecord{record.flag, record.rank, record.peer, record.pulse, record.kind,
                                 record.seen, record.expected},
                     w);
}

void check_device_error(const ErrorRecord& e, const ErrorWording& w) {
  if (e.flag == 0) return;
  if (e.flag == 3) {
    throw Error("halox: " + w.transport + ": a CUDA graph captured on plan " +
                std::to_string(e.seen) + " was replayed after the exchange moved to plan " +
                std::to_string(e.expected) +
                ": its launches moved nothing (their plan is gone). Capture the exchange again "
                "after each new plan; this exchange is unusable until its next set_plan");
  }
  const std::string pulse = w.pulse ? w.pulse(e.rank, e.pulse) : "pulse " + std::to_string(e.pulse);
  const std::string what = w.waited_for ? w.waited_for(e.kind) : "its signal";
  std::ostringstream s;
  s << "halox: " << w.transport << ": ";
  if (e.flag == 2) {
    s << "self-test: rank " << e.rank << " got rank " << e.peer << "'s probe on " << pulse << " ("
      << what << ") wrong: word " << e.seen << ", expected " << e.expected << ". Is rank " << e.peer
      << "'s plan or memory wrong?";
  } else if (w.is_probe && w.is_probe(e.kind)) {
    s << "self-test: rank " << e.rank << " did not get rank " << e.peer << "'s probe on " << pulse
      << " (" << what << "): its signal did not come within " << w.timeout_seconds << " s (saw "
      << e.seen << "). Is rank " << e.peer << " stalled, or its plan or memory wrong?";
  } else {
    s << "rank " << e.rank << " timed out after " << w.timeout_seconds << " s on " << pulse
      << " waiting for rank " << e.peer << " (" << what << "): "
      << (w.progress
              ? w.progress(e)
              : "signal " + std::to_string(e.seen) + ", expected " + std::to_string(e.expected))
      << ". The exchange is unusable; is rank " << e.peer << " stalled or its plan different?";
  }
  throw HaloTimeoutError(s.str(), e.rank, e.peer, pulse);
}

}  // namespace halox::detail

namespace halox::detail {

std::string data_signal_progress(const ErrorRecord& e) {
  return "exchange " + std::to_string(e.expected >> 32) +
         "'s data expected, the signal is at exchange " + std::to_string(e.seen >> 32) + " + " +
         std::to_string(
             static_cast<int>(100.0 * static_cast<double>(e.seen & 0xffffffffull) / 4294967296.0)) +
         "% of its blocks";
}

}  // namespace halox::detail
