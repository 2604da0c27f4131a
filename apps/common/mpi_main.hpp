// The main() of the MPI mini-apps: MPI_Init, run, MPI_Finalize, and one error policy.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <exception>

namespace halox::apps {

/// Runs `run` between MPI_Init and MPI_Finalize. Errors thrown while `input_checked` is
/// false are input errors, found identically on every rank: rank 0 prints them and every
/// rank exits with 2. Later errors may be on one rank only (the others would wait forever):
/// that rank prints its own and aborts the job with 3.
inline int mpi_main(const char* name, int argc, char** argv, int (*run)(int, char**),
                    const bool& input_checked) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (!input_checked) {
      if (rank == 0) std::fprintf(stderr, "%s\n", e.what());
      rc = 2;
    } else {
      std::fprintf(stderr, "%s: rank %d: %s\n", name, rank, e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
  }
  MPI_Finalize();
  return rc;
}

}  // namespace halox::apps
