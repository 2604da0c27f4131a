#include "mpi_wait.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>

#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "mpi_tags.hpp"

namespace halox::detail {

namespace {

std::string describe(const PendingMessage& m) {
  std::ostringstream s;
  s << (m.pulse ? *m.pulse : std::string("a pulse")) << " waiting for rank " << m.peer;
  if (m.expected_bytes >= 0) {
    s << " (its " << m.expected_bytes << "-byte message to this rank did not arrive)";
  } else {
    s << " (to take this rank's message)";
  }
  return s.str();
}

}  // namespace

void raise_if_any(MPI_Comm comm, const std::string& error, const CollectiveWait& wait) {
  int rank = 0, size = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  struct Buffers {
    int mine = 0, first = 0, length = 0;
    std::string message;
  };
  auto buffers = std::make_unique<Buffers>();
  Buffers& b = *buffers;
  auto finish = [&](MPI_Request& request) {
    if (!wait) {
      HALOX_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
      return;
    }
    wait_leaving_buffers(buffers, [&] { wait(request); });
  };
  MPI_Request request;
  b.mine = error.empty() ? size : rank;
  b.first = size;
  HALOX_MPI_CHECK(MPI_Iallreduce(&b.mine, &b.first, 1, MPI_INT, MPI_MIN, comm, &request));
  finish(request);
  const int first = b.first;
  if (first == size) return;
  b.length = static_cast<int>(error.size());
  HALOX_MPI_CHECK(MPI_Ibcast(&b.length, 1, MPI_INT, first, comm, &request));
  finish(request);
  b.message = error;
  b.message.resize(static_cast<std::size_t>(b.length));
  HALOX_MPI_CHECK(MPI_Ibcast(b.message.data(), b.length, MPI_CHAR, first, comm, &request));
  finish(request);
  throw Error(rank == first ? b.message : "rank " + std::to_string(first) + ": " + b.message);
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// A wait that has spun for a millisecond yields the core between tests: on a node with more
// ranks than cores, waits that never yield starve the peer they wait for and the launcher
// that forwards their messages (a time-out seen 8 s late on 2 cores). An exchange's own
// waits end well within the millisecond and never yield.
class Spin {
 public:
  void again() {
    if (++m_turns > 64 && Clock::now() > m_yield_from) std::this_thread::yield();
  }

 private:
  long m_turns = 0;
  Clock::time_point m_yield_from = Clock::now() + std::chrono::milliseconds(1);
};

std::string ranks_phrase(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  }
  return text;
}

// Buffers of a roll call's messages: left to MPI when they may still be in flight (the job
// ends in the time-out's error anyway).
struct RollCallBuffers {
  int me = 0;
  std::vector<int> verdict;  // count, then the absent ranks
};

}  // namespace

std::string roll_call(MPI_Comm comm, const WaitContext& context) {
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  // Long enough for the other ranks' time-outs to fire (they entered at about the same
  // time), short enough that a stalled rank is named within the time-out + 3 s.
  const double grace = std::clamp(0.2 * context.timeout_seconds, 0.2, 1.0);
  auto* buffers = new RollCallBuffers;  // released to MPI: see RollCallBuffers
  buffers->me = rank;
  buffers->verdict.assign(static_cast<std::size_t>(size) + 1, -1);
  if (rank != 0) {
    MPI_Request requests[2];
    HALOX_MPI_CHECK(MPI_Isend(&buffers->me, 1, MPI_INT, 0, tags::kRollCall, comm, &requests[0]));
    HALOX_MPI_CHECK(MPI_Irecv(buffers->verdict.data(), size + 1, MPI_INT, 0, tags::kRollCall + 1,
                              comm, &requests[1]));
    const auto deadline = after(2 * grace + 0.5);
    int done = 0;
    while (!done && Clock::now() < deadline) {
      HALOX_MPI_CHECK(MPI_Test(&requests[1], &done, MPI_STATUS_IGNORE));
      if (!done) std::this_thread::yield();
    }
    if (!done) return "rank 0, which did not answer the roll call";
    const int absent = buffers->verdict[0];
    std::vector<int> ranks(buffers->verdict.begin() + 1, buffers->verdict.begin() + 1 + absent);
    // The verdict answers this rank's report, so the report was received: its send ends now.
    HALOX_MPI_CHECK(MPI_Wait(&requests[0], MPI_STATUS_IGNORE));
    delete buffers;
    return absent == 0 ? "a rank that arrived late" : ranks_phrase(ranks);
  }
  std::vector<bool> present(static_cast<std::size_t>(size), false);
  present[0] = true;
  int reported = 1;
  const auto deadline = after(grace);
  while (reported < size && Clock::now() < deadline) {
    int flag = 0;
    MPI_Status status;
    HALOX_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, tags::kRollCall, comm, &flag, &status));
    if (!flag) {
      std::this_thread::yield();
      continue;
    }
    int who = 0;
    HALOX_MPI_CHECK(
        MPI_Recv(&who, 1, MPI_INT, status.MPI_SOURCE, tags::kRollCall, comm, MPI_STATUS_IGNORE));
    if (!present[static_cast<std::size_t>(status.MPI_SOURCE)]) ++reported;
    present[static_cast<std::size_t>(status.MPI_SOURCE)] = true;
  }
  std::vector<int> absent;
  for (int r = 0; r < size; ++r) {
    if (!present[static_cast<std::size_t>(r)]) absent.push_back(r);
  }
  buffers->verdict[0] = static_cast<int>(absent.size());
  std::copy(absent.begin(), absent.end(), buffers->verdict.begin() + 1);
  for (int r = 1; r < size; ++r) {
    if (!present[static_cast<std::size_t>(r)]) continue;
    MPI_Request request;
    HALOX_MPI_CHECK(MPI_Isend(buffers->verdict.data(), static_cast<int>(absent.size()) + 1, MPI_INT,
                              r, tags::kRollCall + 1, comm, &request));
    HALOX_MPI_CHECK(MPI_Request_free(&request));  // its buffer stays with MPI
  }
  return absent.empty() ? "a rank that arrived late" : ranks_phrase(absent);
}

void wait_collective(MPI_Comm comm, MPI_Request& request, const WaitContext& context,
                     const char* what) {
  const auto deadline = after(context.timeout_seconds);
  Spin spin;
  for (;;) {
    int done = 0;
    HALOX_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    spin.again();
    if (Clock::now() > deadline) {
      const std::string absent =
          comm == MPI_COMM_NULL ? "every rank to arrive" : roll_call(comm, context);
      std::ostringstream s;
      s << "rank " << context.rank << " timed out after " << context.timeout_seconds << " s in "
        << what << " waiting for " << absent << " " << context.where()
        << "; that rank is stalled, dead or not taking part";
      throw HaloTimeoutError(s.str(), context.rank, -1, std::string());
    }
  }
}

CollectiveWait bounded_wait(MPI_Comm comm, const WaitContext& context, const char* what) {
  return [comm, context, what](MPI_Request& request) {
    wait_collective(comm, request, context, what);
  };
}

void bounded_barrier(MPI_Comm comm, const WaitContext& context, const char* what) {
  MPI_Request request;
  HALOX_MPI_CHECK(MPI_Ibarrier(comm, &request));
  wait_collective(comm, request, context, what);
}

long long bounded_max(MPI_Comm comm, long long value, const WaitContext& context,
                      const char* what) {
  long long most = value;
  bounded_allreduce(comm, &value, &most, 1, MPI_LONG_LONG, MPI_MAX, context, what);
  return most;
}

void bounded_allreduce(MPI_Comm comm, const void* in, void* out, int count, MPI_Datatype type,
                       MPI_Op op, const WaitContext& context, const char* what) {
  int bytes = 0;
  HALOX_MPI_CHECK(MPI_Type_size(type, &bytes));
  const std::size_t n = static_cast<std::size_t>(bytes) * static_cast<std::size_t>(count);
  // Heap copies that a timed-out request may keep writing.
  auto buffers = std::make_unique<std::vector<char>>(2 * n);
  char* send = buffers->data();
  char* receive = send + n;
  std::memcpy(send, in == MPI_IN_PLACE ? out : in, n);
  MPI_Request request;
  HALOX_MPI_CHECK(MPI_Iallreduce(send, receive, count, type, op, comm, &request));
  wait_leaving_buffers(buffers, [&] { wait_collective(comm, request, context, what); });
  std::memcpy(out, receive, n);
}

void bounded_allgather(MPI_Comm comm, const void* in, void* out, int count, MPI_Datatype type,
                       const WaitContext& context, const char* what) {
  int bytes = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Type_size(type, &bytes));
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  const std::size_t n = static_cast<std::size_t>(bytes) * static_cast<std::size_t>(count);
  auto buffers = std::make_unique<std::vector<char>>(n * (1 + static_cast<std::size_t>(size)));
  char* send = buffers->data();
  std::memcpy(send, in, n);
  MPI_Request request;
  HALOX_MPI_CHECK(MPI_Iallgather(send, count, type, send + n, count, type, comm, &request));
  wait_leaving_buffers(buffers, [&] { wait_collective(comm, request, context, what); });
  std::memcpy(out, send + n, n * static_cast<std::size_t>(size));
}

void MessageWait::wait(const WaitContext& context) {
  std::vector<PendingMessage>& pending = m_pending;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(context.timeout_seconds));
  std::vector<MPI_Request>& requests = m_requests;
  requests.resize(pending.size());
  for (std::size_t i = 0; i < pending.size(); ++i) requests[i] = pending[i].request;
  std::vector<int>& done = m_done;
  done.resize(pending.size());
  std::vector<MPI_Status>& statuses = m_statuses;
  statuses.resize(pending.size());
  std::size_t left = pending.size();
  std::string wrong_size;
  Spin spin;
  while (left > 0) {
    spin.again();
    int count = 0;
    const int rc = MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &count,
                                done.data(), statuses.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      throw BackendError("halox: rank " + std::to_string(context.rank) + " " + context.where() +
                         ": MPI_Testsome failed: " + mpi_error_text(rc));
    }
    for (int k = 0; k < (count == MPI_UNDEFINED ? 0 : count); ++k) {
      const PendingMessage& m = pending[static_cast<std::size_t>(done[k])];
      const MPI_Status& status = statuses[static_cast<std::size_t>(k)];
      --left;
      if (m.expected_bytes < 0) continue;
      if (!wrong_size.empty()) continue;
      auto where = [&] {
        return "halox: rank " + std::to_string(context.rank) + " on " +
               (m.pulse ? *m.pulse : std::string("a pulse")) + " " + context.where() +
               ": the message from rank " + std::to_string(m.peer);
      };
      if (rc == MPI_ERR_IN_STATUS && status.MPI_ERROR != MPI_SUCCESS) {
        wrong_size = where() + " is larger than the " + std::to_string(m.expected_bytes) +
                     " bytes of this rank's plan (" + mpi_error_text(status.MPI_ERROR) +
                     "): the ranks' plans differ";
        continue;
      }
      int bytes = 0;
      HALOX_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &bytes));
      if (bytes != m.expected_bytes) {
        wrong_size = where() + " has " + std::to_string(bytes) + " bytes, this rank's plan " +
                     std::to_string(m.expected_bytes) + ": the ranks' plans differ";
      }
    }
    if (count == MPI_UNDEFINED) break;  // every request done
    if (left > 0 && Clock::now() > deadline) {
      if (!wrong_size.empty()) throw Error(wrong_size);
      for (std::size_t i = 0; i < requests.size(); ++i) {
        if (requests[i] == MPI_REQUEST_NULL) continue;
        std::ostringstream s;
        s << "rank " << context.rank << " timed out after " << context.timeout_seconds << " s on "
          << describe(pending[i]) << " " << context.where()
          << "; that rank is stalled, dead or not exchanging";
        throw HaloTimeoutError(s.str(), context.rank, pending[i].peer,
                               pending[i].pulse ? *pending[i].pulse : std::string());
      }
    }
  }
  pending.clear();
  if (!wrong_size.empty()) throw Error(wrong_size);
}

bool mpi_thread_multiple() {
  int provided = MPI_THREAD_SINGLE;
  HALOX_MPI_CHECK(MPI_Query_thread(&provided));
  return provided >= MPI_THREAD_MULTIPLE;
}

}  // namespace halox::detail

namespace halox {

void wait_collective(MPI_Comm comm, MPI_Request& request, double timeout_seconds,
                     const char* what) {
  if (!(timeout_seconds > 0 && timeout_seconds <= 1e6)) {
    throw Error("halox::wait_collective: a time-out of " + detail::seconds_text(timeout_seconds) +
                " s; it must be finite, above 0 and at most 1e6 s");
  }
  int rank = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  detail::wait_collective(comm, request, {rank, "", timeout_seconds, "wait_collective"}, what);
}

}  // namespace halox
