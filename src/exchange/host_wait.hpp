// The host side's one wait for MPI messages of an exchange: bounded by the exchange's
// time-out (a test loop with a deadline, as the device waits have), and checked against the
// plan (a message of another size than the plan gives is an error on the rank that gets it).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace halox::detail {

/// One message in flight: `expected_bytes` >= 0 for a receive (what the plan says arrives),
/// -1 for a send.
struct PendingMessage {
  MPI_Request request = MPI_REQUEST_NULL;
  int peer = -1;
  std::int64_t expected_bytes = -1;
  const std::string* pulse = nullptr;  ///< "pulse 2 (z- #0) forward"
};

/// What a wait reports in its errors.
struct WaitContext {
  int rank = 0;
  const char* transport = "host";
  double timeout_seconds = 5.0;
};

/// MPI's text for an error code.
std::string mpi_error_text(int code);

/// Waits for every message. Throws HaloTimeoutError naming this rank, the first peer still
/// missing, its pulse and the transport when the time-out passes first, and halox::Error
/// when a received message's size differs from the plan's (or MPI reports an error for it).
/// Clears `pending`.
void wait_all(std::vector<PendingMessage>& pending, const WaitContext& context);

}  // namespace halox::detail
