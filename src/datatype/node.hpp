// Internal representation of a datatype's tree. Every MPI constructor lowers onto four node
// shapes: a basic type, a strided repetition (contiguous/vector/hvector), a list of placed
// blocks (indexed family, struct, darray rows) and a resize (resized, subarray, darray).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "halox/datatype.hpp"

namespace halox {

struct Datatype::Node {
  enum class Shape { basic, strided, blocks, resized };
  Shape shape = Shape::basic;
  std::string combiner;  // MPI_COMBINER_* of the constructor the user called

  BasicKind basic_kind = BasicKind::byte_;
  // strided: count placements at i * stride_bytes, each `blocklength` copies of children[0]
  std::int64_t count = 0, blocklength = 0, stride_bytes = 0;
  // blocks: block b is blocklens[b] copies of children[child_of[b]] at disps[b] bytes
  std::vector<std::int64_t> blocklens, disps;
  std::vector<std::size_t> child_of;
  std::vector<Datatype> children;

  // attributes, as MPI defines them
  std::int64_t size = 0, lb = 0, ub = 0, true_lb = 0, true_ub = 0, align = 1;
  bool explicit_bounds = false;  // carries resized's sticky lb/ub markers
  int depth = 1;                 // levels of nodes down to the deepest basic type
  bool homogeneous = true;
  BasicKind homogeneous_kind = BasicKind::byte_;

  mutable std::once_flag commit_once;
  mutable std::unique_ptr<CanonicalForm> canonical;
  mutable std::atomic<bool> is_committed{false};
  mutable std::once_flag overlap_once;
  mutable bool instance_overlaps = false;
};

/// Builds the canonical form of one instance of `node` (see canonical.cpp).
CanonicalForm build_canonical(const Datatype::Node& node);
/// True when some byte of one instance of the form is addressed twice.
bool form_overlaps(const CanonicalForm& form);

// Checked arithmetic: sizes and extents must not overflow int64.
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* where);
std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* where);
std::int64_t checked_sub(std::int64_t a, std::int64_t b, const char* where);

}  // namespace halox
