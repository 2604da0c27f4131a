// What `auto` picks for an exchange, from what this rank and its neighbours are and what
// halox-tune measured: the rule of TransportChooser, apart from the MPI queries that feed
// it, so that every branch is tested on one machine (the cross-node ones included).
#pragma once

#include <cstdint>
#include <string>

#include "halox/exchange.hpp"

namespace halox::detail {

struct AutoChoice {
  TransportKind kind;
  std::string why;  // printed with the choice
};

/// all_local: every neighbour of every rank is on its node. largest_message: the largest
/// message of any rank's plan, in bytes. direct_until: the measured size from which
/// NVSHMEM's copy-engine puts beat direct stores (<= 0: not measured). pipelined_from: the
/// measured size from which pipelining beats staging. particle: a particle halo (else a
/// grid's), for the text.
AutoChoice choose_transport(bool all_local, bool have_nvshmem, std::int64_t largest_message,
                            std::int64_t direct_until, std::int64_t pipelined_from, bool particle);

}  // namespace halox::detail
