// The host side's one wait for MPI messages of an exchange: bounded by the exchange's
// time-out (a test loop with a deadline, as the device waits have), and checked against the
// plan (a message of another size than the plan gives is an error on the rank that gets it);
// the collectives that tell every rank of an error, and those bounded by a time-out. Below
// the plans and the transports, which both use them.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace halox::detail {

/// A time-out in seconds as every time-out message writes it ("0.3", "5", "1e-05").
inline std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

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
  const char* call = nullptr;  ///< a plan call's name ("migrate_particles") instead of a transport

  /// "(host transport)", or "(in halox::migrate_particles)" for a plan call.
  std::string where() const {
    return call ? std::string("(in halox::") + call + ")"
                : std::string("(") + transport + " transport)";
  }
};

/// Runs `wait` for requests whose buffers `buffers` owns. A wait that throws (a time-out)
/// leaves its requests in flight, and a late peer still moves data through their buffers:
/// `buffers` is then left allocated, in MPI's hands (the exchange is unusable anyway).
template <class Buffers, class Wait>
void wait_leaving_buffers(std::unique_ptr<Buffers>& buffers, Wait&& wait) {
  try {
    wait();
  } catch (...) {
    buffers.release();
    throw;
  }
}

/// How a nonblocking collective's request is waited for: MPI_Wait when empty; an exchange's
/// set-up passes a wait bounded by its time-out (bounded_wait).
using CollectiveWait = std::function<void(MPI_Request&)>;

/// Collective over `comm`: when any rank passes a non-empty `error`, every rank throws
/// halox::Error with the message of the lowest such rank (prefixed by that rank). With a
/// bounded `wait`, a rank that never arrives ends the others' call in that wait's error.
void raise_if_any(MPI_Comm comm, const std::string& error, const CollectiveWait& wait = {});

/// MPI's text for an error code.
std::string mpi_error_text(int code);

/// Waits for a nonblocking collective (MPI_Ibarrier, MPI_Iallreduce, ...) on `comm` until the
/// time-out, then throws HaloTimeoutError naming this rank, `what` ("nvshmem-stream set-up")
/// and the ranks that did not arrive (roll_call): a rank stalled or dead before a collective
/// ends the wait, named, instead of holding it. halox enters a collective that it cannot
/// bound (NVSHMEM's allocation barriers, MPI_Comm_split_type) only after one of these.
/// `comm` MPI_COMM_NULL: no roll call (a collective on a communicator that is not halox's).
void wait_collective(MPI_Comm comm, MPI_Request& request, const WaitContext& context,
                     const char* what);
/// wait_collective as a CollectiveWait, for raise_if_any in a set-up.
CollectiveWait bounded_wait(MPI_Comm comm, const WaitContext& context, const char* what);
/// MPI_Ibarrier + wait_collective.
void bounded_barrier(MPI_Comm comm, const WaitContext& context, const char* what);
/// The largest `value` of all ranks, MPI_Iallreduce + wait_collective.
long long bounded_max(MPI_Comm comm, long long value, const WaitContext& context, const char* what);
/// MPI_Allreduce of `count` elements, MPI_Iallreduce + wait_collective (`in` may be
/// MPI_IN_PLACE, as MPI's).
void bounded_allreduce(MPI_Comm comm, const void* in, void* out, int count, MPI_Datatype type,
                       MPI_Op op, const WaitContext& context, const char* what);
/// MPI_Allgather of `count` elements per rank, MPI_Iallgather + wait_collective.
void bounded_allgather(MPI_Comm comm, const void* in, void* out, int count, MPI_Datatype type,
                       const WaitContext& context, const char* what);

/// Which ranks did not reach a collective that timed out on this rank, as a phrase ("rank 2",
/// "ranks 2 and 5", "rank 0, which did not answer the roll call"). Every rank that timed out
/// reports to rank 0 of `comm`; rank 0 waits a grace period (0.2 x the time-out, 0.2 to 1 s)
/// for the others, then answers every rank that reported with the ranks that did not. A rank
/// that never reported is stalled, dead or waiting elsewhere (in an exchange whose own
/// time-out then names its peer).
std::string roll_call(MPI_Comm comm, const WaitContext& context);

/// The messages of one stage in flight, and the one wait for them. A transport keeps one and
/// reuses it, so waiting allocates nothing on the exchange path after the first exchange.
class MessageWait {
 public:
  void clear() { m_pending.clear(); }
  bool empty() const { return m_pending.empty(); }
  void add(const PendingMessage& message) { m_pending.push_back(message); }
  /// Waits for every message added since clear(), then clears. Throws HaloTimeoutError
  /// naming this rank, the first peer still missing, its pulse and the transport when the
  /// time-out passes first, and halox::Error when a received message's size differs from the
  /// plan's (after the stage's other messages have landed: their buffers must outlive MPI's
  /// writes).
  void wait(const WaitContext& context);

 private:
  std::vector<PendingMessage> m_pending;
  std::vector<MPI_Request> m_requests;
  std::vector<int> m_done;
  std::vector<MPI_Status> m_statuses;
};

/// The process's MPI allows calls from several threads (the host proxy's thread needs it).
bool mpi_thread_multiple();

}  // namespace halox::detail
