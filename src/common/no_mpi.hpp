// The one error of a call over Ranks::mpi in a build without MPI.
#pragma once

#include <string>

#include "halox/error.hpp"

namespace halox::detail {

[[noreturn]] inline void no_mpi(const char* function) {
  throw Error(std::string("halox::") + function +
              ": halox was built without MPI; one rank per process (Ranks::mpi) needs it "
              "(ranks in this process: Ranks::local)");
}

}  // namespace halox::detail
