// What `auto` picks for an exchange, from what this rank and its neighbours are and what
// halox-tune measured: the rule of TransportChooser, apart from the MPI queries that feed
// it, so that every branch is tested on one machine (the cross-node ones included).
#pragma once

#include <cstdint>
#include <string>

#include "halox/exchange_options.hpp"

namespace halox::detail {

struct AutoChoice {
  TransportKind kind;
  std::string why;  // printed with the choice
};

/// What the rule reads, gathered collectively by TransportChooser.
struct AutoInputs {
  bool all_local = true;              // every neighbour of every rank is on its node
  bool have_nvshmem = false;          // halox was built with NVSHMEM
  std::int64_t largest_message = 0;   // the largest message of any rank's plan, bytes
  std::int64_t direct_until = -1;     // measured size from which NVSHMEM's copy-engine puts
                                      // beat direct stores (<= 0: not measured)
  std::int64_t pipelined_from = 0;    // measured size from which pipelining beats staging
  bool particle = false;              // a particle halo (else a grid's)
  bool proxy_thread_allowed = false;  // every rank's MPI allows calls from the host proxy's
                                      // thread (MPI_THREAD_MULTIPLE)
};

AutoChoice choose_transport(const AutoInputs& in);

}  // namespace halox::detail
