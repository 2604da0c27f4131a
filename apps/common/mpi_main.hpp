// The main() of the MPI mini-apps: MPI_Init, run, MPI_Finalize, and one error policy.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "watchdog.hpp"

namespace halox::apps {

/// The programs' exit codes (docs/reliability.md): 0 done; 1 a result check asked for
/// failed (--check-mass, an example's comparison); 2 bad input (an option, an input file, an
/// output path that cannot be written), found before the run; 3 the run failed (a time-out
/// naming the rank waited for, an MPI or CUDA error, a simulation that diverged, a write that
/// failed); 4 the watchdog ended a run that made no progress.
enum ExitCode : int {
  kExitDone = 0,
  kExitCheckFailed = 1,
  kExitBadInput = 2,
  kExitRunFailed = 3,
  kExitNoProgress = 4
};

/// An error every rank finds alike (the same check on the same values): rank 0 prints it,
/// every rank finalises MPI and exits with `exit_code`.
class CollectiveError : public Error {
 public:
  CollectiveError(const std::string& what, int exit_code) : Error(what), m_exit_code(exit_code) {}
  int exit_code() const { return m_exit_code; }

 private:
  int m_exit_code;
};

/// Bad input, found identically on every rank before any work (check_input_collectively
/// throws it on every rank alike): rank 0 prints it and every rank exits with 2.
class InputError : public CollectiveError {
 public:
  explicit InputError(const std::string& what) : CollectiveError(what, kExitBadInput) {}
};

namespace detail {
inline const char*& program_name() {
  static const char* name = "halox";
  return name;
}
// Where the ranks' last words go: a communicator of its own, so that no message of the run
// can match them.
inline MPI_Comm& report_comm() {
  static MPI_Comm comm = MPI_COMM_NULL;
  return comm;
}
constexpr int kReportTag = 77;
constexpr double kReportSeconds = 2.0;  // rank 0 collects the others' reports this long
constexpr double kGraceSeconds = 7.0;   // the others wait this long for rank 0 to print

inline double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A rank that ends in an error tells rank 0 (without blocking), which prints one table of
// every rank's state: the job's output then names the stalled rank even when the ranks that
// waited for it are not rank 0. Every wait here is bounded: a stalled rank 0 or a stalled
// peer cannot hold the job.
inline void report_and_abort(const std::string& what) {
  int rank = 0, size = 1;
  MPI_Comm comm = report_comm();
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) {  // nobody else to tell, nor to stop: the message once, no MPI_Abort banner
    std::fprintf(stderr, "%s: %s\n", program_name(), what.c_str());
    std::fflush(stderr);
    std::_Exit(kExitRunFailed);
  }
  std::fprintf(stderr, "%s: rank %d: %s\n", program_name(), rank, what.c_str());
  std::fflush(stderr);
  if (comm != MPI_COMM_NULL && rank != 0) {
    MPI_Request request;
    if (MPI_Isend(what.data(), static_cast<int>(what.size()), MPI_CHAR, 0, kReportTag, comm,
                  &request) == MPI_SUCCESS) {
      const double until = seconds_now() + kGraceSeconds;
      while (seconds_now() < until) {  // rank 0 prints and aborts the job meanwhile
        int done = 0;
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  } else if (comm != MPI_COMM_NULL) {
    std::vector<std::string> state(static_cast<std::size_t>(size));
    state[0] = what;
    const double until = seconds_now() + kReportSeconds;
    while (seconds_now() < until) {
      int flag = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, kReportTag, comm, &flag, &status);
      if (!flag) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      int length = 0;
      MPI_Get_count(&status, MPI_CHAR, &length);
      std::string text(static_cast<std::size_t>(length), '\0');
      MPI_Recv(text.data(), length, MPI_CHAR, status.MPI_SOURCE, kReportTag, comm,
               MPI_STATUS_IGNORE);
      state[static_cast<std::size_t>(status.MPI_SOURCE)] = text;
    }
    std::fprintf(stderr, "%s: the ranks' states (rank 0's view, after %.0f s):\n", program_name(),
                 kReportSeconds);
    for (int r = 0; r < size; ++r) {
      const std::string& s = state[static_cast<std::size_t>(r)];
      std::fprintf(stderr, "  rank %4d  %s\n", r,
                   s.empty() ? "no error reported (stalled, dead, or still waiting)" : s.c_str());
    }
    std::fflush(stderr);
  }
  MPI_Abort(MPI_COMM_WORLD, kExitRunFailed);
  std::_Exit(kExitRunFailed);
}
}  // namespace detail

/// How long the programs' own collectives wait (the input check, the reductions of results,
/// the barriers around timed phases) before every waiting rank names the ranks that did not
/// arrive: the start-up's collectives get kStartSeconds (processes start at their own pace),
/// the others kCollectiveSeconds. MPI_Init gets kInitSeconds and MPI_Finalize
/// kFinalizeSeconds (watched: they cannot be bounded from outside).
constexpr double kStartSeconds = 60;
constexpr double kCollectiveSeconds = 20;  // inside the watchdog's default step limit (30 s)
constexpr double kInitSeconds = 120;
constexpr double kFinalizeSeconds = 30;

/// The programs' collective communicator: a duplicate of MPI_COMM_WORLD, so that the roll
/// call of a timed-out collective (halox::wait_collective) meets no other message.
inline MPI_Comm programs_comm() {
  return detail::report_comm();
}

/// Waits for a nonblocking collective of the programs' on programs_comm(), bounded, the
/// ranks that do not arrive named (HaloTimeoutError).
inline void wait_bounded(MPI_Request& request, const char* what,
                         double seconds = kCollectiveSeconds) {
  halox::wait_collective(programs_comm(), request, seconds, what);
}

/// MPI_Barrier and MPI_Allreduce over every rank, bounded (wait_bounded).
inline void barrier(const char* what) {
  MPI_Request request;
  HALOX_MPI_CHECK(MPI_Ibarrier(programs_comm(), &request));
  wait_bounded(request, what);
}
inline void allreduce(const void* in, void* out, int count, MPI_Datatype type, MPI_Op op,
                      const char* what) {
  MPI_Request request;
  HALOX_MPI_CHECK(MPI_Iallreduce(in, out, count, type, op, programs_comm(), &request));
  wait_bounded(request, what);
}
/// MPI_Reduce to rank 0, bounded.
inline void reduce(const void* in, void* out, int count, MPI_Datatype type, MPI_Op op,
                   const char* what) {
  MPI_Request request;
  HALOX_MPI_CHECK(MPI_Ireduce(in, out, count, type, op, 0, programs_comm(), &request));
  wait_bounded(request, what);
}

/// MPI_Init, asking for calls from several threads where the MPI library allows them: the fused
/// kernels' host proxy (halox's host_proxy.hpp) needs them for neighbours it cannot store into.
inline void init_mpi(int& argc, char**& argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
}

/// Runs `run` between init_mpi and MPI_Finalize. CollectiveError (InputError): rank 0 prints
/// it, every rank exits with its code. Any other error may be on one rank only (the others would
/// wait forever) and is deliberately not caught: with no handler, the exception leaves main without
/// unwinding the stack, so no destructor runs that could wait on a stalled peer (an NVSHMEM
/// exchange's collective free would), and the terminate handler prints "program: rank r: message",
/// sends it to rank 0, which prints one table of every rank's state (each wait bounded), and
/// aborts the job with 3.
inline int mpi_main(const char* name, int argc, char** argv, int (*run)(int, char**)) {
  detail::program_name() = name;
  {  // a rank stopped before or inside MPI_Init holds the others' MPI_Init: watched
    Watchdog init_watch(name, job_rank(), "MPI_Init and the first duplicate", kInitSeconds);
    init_mpi(argc, argv);
    MPI_Comm_dup(MPI_COMM_WORLD, &detail::report_comm());
  }
  std::set_terminate([] {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    std::string what = "an unknown error";
    try {
      if (const std::exception_ptr e = std::current_exception()) std::rethrow_exception(e);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    if (initialized && !finalized) detail::report_and_abort(what);
    std::fprintf(stderr, "%s: %s\n", detail::program_name(), what.c_str());
    std::_Exit(kExitRunFailed);
  });
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const CollectiveError& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::fprintf(stderr, "%s\n", e.what());
    rc = e.exit_code();
  }
  // A rank stalled at the end holds the others' MPI_Finalize (after every result was
  // printed): watched, and the job then ends with kExitNoProgress.
  Watchdog finalize_watch(name, job_rank(), "MPI_Finalize", kFinalizeSeconds);
  MPI_Comm_free(&detail::report_comm());
  MPI_Finalize();
  return rc;
}

}  // namespace halox::apps
