// halox: error types thrown at the API boundary.
#pragma once

#include <stdexcept>
#include <string>

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
/// transport and what did not arrive.
class HaloTimeoutError : public Error {
 public:
  using Error::Error;
};

/// A CUDA, MPI, NCCL or NVSHMEM call returned an error.
class BackendError : public Error {
 public:
  using Error::Error;
};

}  // namespace halox
