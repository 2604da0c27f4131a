// A stream-ordered wait for a 64-bit signal with a deadline, for transports whose own stream
// waits have none (NVSHMEM's signal_wait_until_on_stream is a stream memory operation that
// waits forever for a stalled peer). A wait that times out records who waited for whom;
// every later wait of the same StreamWaits returns at once (the exchange is unusable), so
// the stream drains and the host learns of it at its next exchange.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "halox/pack_gpu.hpp"

namespace halox::detail {

class StreamWaits {
 public:
  struct Failure {
    int rank, peer, pulse, kind;
    std::uint64_t seen, expected;
  };

  StreamWaits();
  ~StreamWaits();
  StreamWaits(const StreamWaits&) = delete;
  StreamWaits& operator=(const StreamWaits&) = delete;

  /// On `stream`: waits until *signal >= target (device memory written by a peer, read
  /// with system-scope acquire loads) for at most `timeout_seconds`.
  void wait_async(const std::uint64_t* signal, std::uint64_t target, double timeout_seconds,
                  int rank, int peer, int pulse, int kind, GpuStream stream);
  /// The first wait that timed out, read without synchronising (mapped host memory).
  std::optional<Failure> failure() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace halox::detail
