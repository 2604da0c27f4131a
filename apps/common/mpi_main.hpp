// The main() of the MPI mini-apps: MPI_Init, run, MPI_Finalize, and one error policy.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "halox/error.hpp"

namespace halox::apps {

/// Bad input, found identically on every rank before any work (check_input_collectively
/// throws it on every rank alike): rank 0 prints it and every rank exits with 2.
class InputError : public Error {
 public:
  using Error::Error;
};

namespace detail {
inline const char*& program_name() {
  static const char* name = "halox";
  return name;
}
}  // namespace detail

/// Runs `run` between MPI_Init and MPI_Finalize. InputError: rank 0 prints it, every rank
/// exits with 2. Any other error may be on one rank only (the others would wait forever) and
/// is deliberately not caught: with no handler, the exception leaves main without unwinding
/// the stack, so no destructor runs that could wait on a stalled peer (an NVSHMEM exchange's
/// collective free would), and the terminate handler prints "program: rank r: message" and
/// aborts the job with 3.
inline int mpi_main(const char* name, int argc, char** argv, int (*run)(int, char**)) {
  detail::program_name() = name;
  MPI_Init(&argc, &argv);
  std::set_terminate([] {
    int rank = -1, initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char* what = "an unknown error";
    try {
      if (const std::exception_ptr e = std::current_exception()) std::rethrow_exception(e);
    } catch (const std::exception& e) {
      what = e.what();
      std::fprintf(stderr, "%s: rank %d: %s\n", detail::program_name(), rank, what);
    } catch (...) {
      std::fprintf(stderr, "%s: rank %d: %s\n", detail::program_name(), rank, what);
    }
    std::fflush(stderr);
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 3);
    std::_Exit(3);
  });
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const InputError& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::fprintf(stderr, "%s\n", e.what());
    rc = 2;
  }
  MPI_Finalize();
  return rc;
}

}  // namespace halox::apps
