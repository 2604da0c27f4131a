// halox: error types thrown at the API boundary.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace halox {

/// Base class of every exception halox throws. The message names what failed and where
/// (constructor and argument, rank and peer, pulse).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Invalid datatype construction or use: negative counts, overflow, bounds outside the
/// array, use before commit, unpack into overlapping positions.
class DatatypeError : public Error {
 public:
  using Error::Error;
};

/// A wait of a halo exchange (on the host or in a kernel) ran past its time-out, or the
/// self-test found a broken link. The message names this rank, the peer, the pulse, the
/// transport and what did not arrive; rank(), peer() and pulse() give the first three apart
/// (-1 and "" where the wait had none: a collective whose absent ranks the message lists).
class HaloTimeoutError : public Error {
 public:
  using Error::Error;
  HaloTimeoutError(const std::string& what, int rank, int peer, std::string pulse)
      : Error(what), m_rank(rank), m_peer(peer), m_pulse(std::move(pulse)) {}
  /// The rank that waited, the rank it waited for, and the pulse's name ("pulse 2 (z- #0)").
  int rank() const { return m_rank; }
  int peer() const { return m_peer; }
  const std::string& pulse() const { return m_pulse; }

 private:
  int m_rank = -1, m_peer = -1;
  std::string m_pulse;
};

/// A CUDA, MPI, NCCL or NVSHMEM call returned an error.
class BackendError : public Error {
 public:
  using Error::Error;
};

}  // namespace halox
