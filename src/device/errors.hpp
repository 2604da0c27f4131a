// The device channel's error record and its one wording. A wait in a kernel that times out,
// or a self-test probe that arrives wrong, records who waited for whom (ErrorRecord, in
// mapped host memory: the host reads it without synchronising); every transport turns it into
// the same kind of message, with its own names for its pulses and its waits.
#pragma once

#include <functional>
#include <string>

namespace halox::detail {

using u64 = unsigned long long;

/// The value of a link's data signal once exchange `exchange`'s data is in (2^32 per
/// exchange: signals.cuh says why). Kernels wait for it and raise it; so does the host proxy
/// (transport/host_proxy.cpp) for the links it carries.
#ifdef __CUDACC__
#define HALOX_HOST_DEVICE __host__ __device__
#else
#define HALOX_HOST_DEVICE
#endif
HALOX_HOST_DEVICE constexpr u64 data_signal(u64 exchange) {
  return exchange << 32;
}

/// flag: 0 nothing, 1 a wait timed out (`seen` is where the signal stood, `expected` what it
/// waited for), 2 a self-test probe arrived with a wrong word (`seen` against `expected`),
/// 3 a launch captured in a CUDA graph on plan `seen` ran on plan `expected`.
struct ErrorRecord {
  int flag, rank, peer, pulse, kind;
  u64 seen, expected;
};

/// A transport's words for its recorded errors.
struct ErrorWording {
  std::string transport;  ///< "ipc-fused", "local-fused", ...
  double timeout_seconds = 0;
  /// "pulse 2 (x- #0)": the pulse (op, face) of `rank` the record names.
  std::function<std::string(int rank, int pulse)> pulse;
  /// What a wait of `kind` waited for ("the halo data it sends", "the face's link").
  std::function<std::string(int kind)> waited_for;
  /// Whether a wait of `kind` is a self-test's (its probe did not come).
  std::function<bool(int kind)> is_probe;
  /// How far the signal of a timed-out wait got; empty: "signal S, expected E".
  std::function<std::string(const ErrorRecord&)> progress;
};

/// How far a data signal got (device/channel.cuh: 2^32 per exchange, added in shares of the
/// sender's blocks): "exchange 5's data expected, the signal is at exchange 4 + 50% of its
/// blocks".
std::string data_signal_progress(const ErrorRecord& e);

/// Nothing when e.flag is 0; else throws HaloTimeoutError, naming the transport, both ranks,
/// the pulse, what was waited for and how far it got.
void check_device_error(const ErrorRecord& e, const ErrorWording& wording);
/// The same for the record in mapped memory, read once.
void check_device_error(const volatile ErrorRecord& e, const ErrorWording& wording);

}  // namespace halox::detail
