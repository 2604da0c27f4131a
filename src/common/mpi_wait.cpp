#include "mpi_wait.hpp"

#include <array>
#include <chrono>
#include <memory>
#include <sstream>

#include "halox/error.hpp"
#include "halox/mpi.hpp"

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

void wait_collective(MPI_Request& request, const WaitContext& context, const char* what) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(context.timeout_seconds));
  for (;;) {
    int done = 0;
    HALOX_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (Clock::now() > deadline) {
      std::ostringstream s;
      s << "rank " << context.rank << " timed out after " << context.timeout_seconds << " s in "
        << what << " waiting for every rank to arrive (" << context.transport
        << " transport); a rank is stalled, dead or not exchanging";
      throw HaloTimeoutError(s.str());
    }
  }
}

CollectiveWait bounded_wait(const WaitContext& context, const char* what) {
  return [context, what](MPI_Request& request) { wait_collective(request, context, what); };
}

void bounded_barrier(MPI_Comm comm, const WaitContext& context, const char* what) {
  MPI_Request request;
  HALOX_MPI_CHECK(MPI_Ibarrier(comm, &request));
  wait_collective(request, context, what);
}

long long bounded_max(MPI_Comm comm, long long value, const WaitContext& context,
                      const char* what) {
  auto buffers = std::make_unique<std::array<long long, 2>>();
  (*buffers)[0] = value;
  MPI_Request request;
  HALOX_MPI_CHECK(
      MPI_Iallreduce(&(*buffers)[0], &(*buffers)[1], 1, MPI_LONG_LONG, MPI_MAX, comm, &request));
  wait_leaving_buffers(buffers, [&] { wait_collective(request, context, what); });
  return (*buffers)[1];
}

void MessageWait::wait(const WaitContext& context) {
  std::vector<PendingMessage>& pending = m_pending;
  using Clock = std::chrono::steady_clock;
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
  while (left > 0) {
    int count = 0;
    const int rc = MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &count,
                                done.data(), statuses.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      throw BackendError("halox: rank " + std::to_string(context.rank) + " (" + context.transport +
                         " transport): MPI_Testsome failed: " + mpi_error_text(rc));
    }
    for (int k = 0; k < (count == MPI_UNDEFINED ? 0 : count); ++k) {
      const PendingMessage& m = pending[static_cast<std::size_t>(done[k])];
      const MPI_Status& status = statuses[static_cast<std::size_t>(k)];
      --left;
      if (m.expected_bytes < 0) continue;
      if (!wrong_size.empty()) continue;
      auto where = [&] {
        return "halox: rank " + std::to_string(context.rank) + " on " +
               (m.pulse ? *m.pulse : std::string("a pulse")) + " (" + context.transport +
               " transport): the message from rank " + std::to_string(m.peer);
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
          << describe(pending[i]) << " (" << context.transport
          << " transport); that rank is stalled, dead or not exchanging";
        throw HaloTimeoutError(s.str());
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
