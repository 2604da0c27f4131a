// The grid transport of Ranks::local: every rank of the grid in this process, each face
// straight from the sender's array to the receiver's, no staging buffer and no host wait. On
// the GPU one copy kernel per face in stage order (local-pulse; local-fused is the grid
// kernel's transport, grid_fused.hpp); host arrays are packed and unpacked by the CPU.
#pragma once

#include <string>
#include <vector>

#include "halox/datatype.hpp"
#include "transport.hpp"

namespace halox::detail {

/// One face: array `from`'s pulse `pulse` sends to array `to` (arrays are a run's fields,
/// field f's rank r at f * ranks + r).
struct LocalFace {
  int stage = 0, pulse = 0, from = 0, to = 0;
  Datatype send_type, recv_type;
  std::string name;  // the pulse's, for error messages
};

/// Pairs each op that sends with the op of its receiver (same tag: the same field and pulse)
/// into faces, in stage order. Throws halox::Error, naming both ranks and the pulse, for plans
/// that do not match.
std::vector<LocalFace> pair_local_faces(const Connection& connection);

}  // namespace halox::detail
