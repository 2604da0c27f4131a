// Every rank's doubles concatenated on rank 0 of `comm` (in rank order; empty elsewhere): the
// mini-apps' field and force dumps, compared with a single-rank run.
#pragma once

#include <mpi.h>

#include <vector>

#include "halox/mpi.hpp"

namespace halox::apps {

inline std::vector<double> gather_on_root(MPI_Comm comm, const std::vector<double>& mine) {
  int size = 0, rank = 0;
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(size), displs(size);
  HALOX_MPI_CHECK(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[r] = total;
    total += counts[r];
  }
  std::vector<double> all(rank == 0 ? total : 0);
  HALOX_MPI_CHECK(MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(),
                              displs.data(), MPI_DOUBLE, 0, comm));
  return all;
}

}  // namespace halox::apps
