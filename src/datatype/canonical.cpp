// The canonical form: the type tree lowered to strided blocks (seed 002's "vectorisation",
// generalised to nested strides) with an index-list fallback for irregular parts.
// It is built bottom-up from the tree, never by enumerating every byte, so that a face of
// a 512^3 array costs a few descriptors at commit time.
#include <algorithm>
#include <sstream>

#include "node.hpp"
#include "runs.hpp"

namespace halox {

namespace {

using Pieces = std::vector<CanonicalPiece>;

constexpr std::int64_t kMaxIrregularRuns = std::int64_t{1} << 24;
constexpr std::int64_t kMaxStridedPieces = std::int64_t{1} << 20;
// The pieces one commit may store on its way, kept or not (a strided piece is ~200 bytes,
// so an index entry, or a run merged into the piece before it, counts 1/16): bounds its
// time to about a second.
// Uncommitted children are lowered again wherever they are used, so nested structs can
// produce far more than they keep (the fuzzer found one that took a minute and 1.6 GB).
// Twice the largest repeat allowed (kMaxStridedPieces, or kMaxIrregularRuns entries), with
// the final fold's copy.
constexpr std::int64_t kMaxLoweringWork = std::int64_t{1} << 22;
thread_local std::int64_t t_lowering_work = 0;  // in sixteenths of a piece

// Counts `sixteenths` of a piece of lowering work; throws past the bound.
void spend(std::int64_t sixteenths) {
  t_lowering_work += sixteenths;
  if (t_lowering_work > 16 * kMaxLoweringWork) {
    throw DatatypeError("halox::Datatype::commit: lowering the type stores more than " +
                        std::to_string(kMaxLoweringWork) +
                        " pieces; describe it more regularly (e.g. as a vector or subarray), "
                        "or commit its repeated parts first");
  }
}

// Resets the work count for one lowering (build_canonical, repeat_canonical).
struct LoweringBudget {
  LoweringBudget() { t_lowering_work = 0; }
};

CanonicalPiece contiguous_piece(std::int64_t offset, std::int64_t bytes) {
  CanonicalPiece piece;
  piece.strided.offset = offset;
  piece.strided.block_bytes = bytes;
  return piece;
}

void shift(CanonicalPiece& piece, std::int64_t delta) {
  if (piece.is_index) {
    for (auto& offset : piece.index.offsets) offset += delta;
  } else {
    piece.strided.offset += delta;
  }
}

bool is_single_run(const CanonicalPiece& p) {
  return !p.is_index && p.strided.ndims == 0;
}

// Appends a piece, merging it into the previous one where the bytes allow: adjacent runs
// become one run, equal-sized runs an index list.
void append(Pieces& out, CanonicalPiece piece) {
  if (piece.bytes() == 0) return;
  const std::int64_t entries =
      piece.is_index ? static_cast<std::int64_t>(piece.index.offsets.size()) : 0;
  if (out.empty()) {
    spend(16 + entries);
    out.push_back(std::move(piece));
    return;
  }
  CanonicalPiece& last = out.back();
  if (is_single_run(piece)) {
    const std::int64_t offset = piece.strided.offset;
    const std::int64_t bytes = piece.strided.block_bytes;
    if (is_single_run(last)) {
      if (last.strided.offset + last.strided.block_bytes == offset) {
        spend(1);
        last.strided.block_bytes += bytes;
        return;
      }
      if (last.strided.block_bytes == bytes) {
        spend(2);
        last.is_index = true;
        last.index.block_bytes = bytes;
        last.index.offsets = {last.strided.offset, offset};
        return;
      }
    } else if (last.is_index && last.index.block_bytes == bytes) {
      spend(1);
      last.index.offsets.push_back(offset);
      return;
    }
  } else if (piece.is_index) {
    if (last.is_index && last.index.block_bytes == piece.index.block_bytes) {
      spend(entries);
      last.index.offsets.insert(last.index.offsets.end(), piece.index.offsets.begin(),
                                piece.index.offsets.end());
      return;
    }
    if (is_single_run(last) && last.strided.block_bytes == piece.index.block_bytes) {
      spend(1 + entries);
      std::vector<std::int64_t> offsets{last.strided.offset};
      offsets.insert(offsets.end(), piece.index.offsets.begin(), piece.index.offsets.end());
      last.is_index = true;
      last.index.block_bytes = piece.index.block_bytes;
      last.index.offsets = std::move(offsets);
      return;
    }
  }
  spend(16 + entries);
  out.push_back(std::move(piece));
}

// Drops dimension d (the outer ones move in), leaving the unused slot zero.
void erase_dimension(StridedBlock& s, int d) {
  for (int k = d; k + 1 < s.ndims; ++k) {
    s.count[k] = s.count[k + 1];
    s.stride[k] = s.stride[k + 1];
  }
  --s.ndims;
  s.count[s.ndims] = 0;
  s.stride[s.ndims] = 0;
}

// Removes unit dimensions and folds dimensions that continue the one inside them.
void simplify(StridedBlock& s) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (int d = 0; d < s.ndims; ++d) {
      const bool unit = s.count[d] == 1;
      const bool into_block = d == 0 && s.stride[0] == s.block_bytes;
      if (unit || into_block) {
        if (into_block && !unit) s.block_bytes *= s.count[0];
        erase_dimension(s, d);
        changed = true;
        break;
      }
      if (d + 1 < s.ndims && s.stride[d + 1] == s.count[d] * s.stride[d]) {
        s.count[d] *= s.count[d + 1];
        erase_dimension(s, d + 1);
        changed = true;
        break;
      }
    }
  }
}

// Adds an outer dimension (count, stride) to a strided block; false if it has no room.
bool add_outer_dim(StridedBlock& s, std::int64_t count, std::int64_t stride) {
  if (s.ndims == 0 && s.block_bytes == stride) {
    s.block_bytes *= count;
    return true;
  }
  if (s.ndims > 0 && stride == s.count[s.ndims - 1] * s.stride[s.ndims - 1]) {
    s.count[s.ndims - 1] *= count;
    return true;
  }
  if (s.ndims == kMaxStridedDims) return false;
  s.count[s.ndims] = count;
  s.stride[s.ndims] = stride;
  ++s.ndims;
  return true;
}

bool same_shape(const StridedBlock& a, const StridedBlock& b) {
  return a.block_bytes == b.block_bytes && a.ndims == b.ndims && a.count == b.count &&
         a.stride == b.stride;
}

// Turns regular index lists into strided blocks and runs of equally spaced, equally shaped
// strided blocks into one block with an extra dimension; numbers the packed offsets.
void finalize(Pieces& pieces) {
  for (auto& piece : pieces) {
    if (!piece.is_index) {
      simplify(piece.strided);
      continue;
    }
    const auto& offsets = piece.index.offsets;
    bool regular = offsets.size() >= 1;
    const std::int64_t delta = offsets.size() >= 2 ? offsets[1] - offsets[0] : 0;
    for (std::size_t i = 2; regular && i < offsets.size(); ++i) {
      regular = offsets[i] - offsets[i - 1] == delta;
    }
    if (regular) {
      StridedBlock s;
      s.offset = offsets[0];
      s.block_bytes = piece.index.block_bytes;
      if (offsets.size() > 1) add_outer_dim(s, static_cast<std::int64_t>(offsets.size()), delta);
      simplify(s);
      piece = CanonicalPiece{};
      piece.strided = s;
    }
  }
  Pieces folded;
  for (std::size_t i = 0; i < pieces.size();) {
    std::size_t j = i + 1;
    if (!pieces[i].is_index && pieces[i].strided.ndims < kMaxStridedDims && j < pieces.size() &&
        !pieces[j].is_index && same_shape(pieces[i].strided, pieces[j].strided)) {
      const std::int64_t delta = pieces[j].strided.offset - pieces[i].strided.offset;
      while (j < pieces.size() && !pieces[j].is_index &&
             same_shape(pieces[i].strided, pieces[j].strided) &&
             pieces[j].strided.offset - pieces[j - 1].strided.offset == delta) {
        ++j;
      }
      CanonicalPiece merged = pieces[i];
      add_outer_dim(merged.strided, static_cast<std::int64_t>(j - i), delta);
      simplify(merged.strided);
      append(folded, std::move(merged));
    } else {
      append(folded, std::move(pieces[i]));
    }
    i = j;
  }
  pieces = std::move(folded);
  std::int64_t packed = 0;
  for (auto& piece : pieces) {
    piece.packed_offset = packed;
    packed += piece.bytes();
  }
}

Pieces repeat(const Pieces& pieces, std::int64_t count, std::int64_t stride) {
  if (count == 0 || pieces.empty()) return {};
  if (count == 1) return pieces;
  if (pieces.size() == 1 && !pieces[0].is_index) {
    CanonicalPiece piece = pieces[0];
    if (add_outer_dim(piece.strided, count, stride)) {
      simplify(piece.strided);
      return {piece};
    }
  }
  // Irregular repetition is expanded; refuse types that would expand without bound rather
  // than exhausting memory at commit.
  std::int64_t runs = 0, strided = 0;
  for (const auto& piece : pieces) {
    if (piece.is_index) {
      runs += static_cast<std::int64_t>(piece.index.offsets.size());
    } else {
      ++strided;
    }
  }
  // A strided piece costs ~200 bytes, an index entry 8: bound both.
  if (runs > kMaxIrregularRuns / count || strided > kMaxStridedPieces / count) {
    throw DatatypeError(
        "halox::Datatype::commit: the type expands to more than " +
        std::to_string(kMaxIrregularRuns) +
        " irregular runs; describe it more regularly (e.g. as a vector or subarray)");
  }
  Pieces out;
  for (std::int64_t i = 0; i < count; ++i) {
    for (const auto& piece : pieces) {
      CanonicalPiece copy = piece;
      shift(copy, i * stride);
      append(out, std::move(copy));
    }
  }
  finalize(out);
  return out;
}

Pieces canonical_pieces(const Datatype::Node& node) {
  if (node.is_committed.load(std::memory_order_acquire)) return node.canonical->pieces;
  Pieces out;
  switch (node.shape) {
    case Datatype::Node::Shape::basic: append(out, contiguous_piece(0, node.size)); break;
    case Datatype::Node::Shape::resized: out = canonical_pieces(*node.children[0].node()); break;
    case Datatype::Node::Shape::strided: {
      const Datatype& child = node.children[0];
      const Pieces block =
          repeat(canonical_pieces(*child.node()), node.blocklength, child.extent());
      out = repeat(block, node.count, node.stride_bytes);
      break;
    }
    case Datatype::Node::Shape::blocks:
      for (std::size_t b = 0; b < node.blocklens.size(); ++b) {
        const Datatype& child = node.children[node.child_of[b]];
        Pieces block = repeat(canonical_pieces(*child.node()), node.blocklens[b], child.extent());
        for (auto& piece : block) {
          shift(piece, node.disps[b]);
          append(out, std::move(piece));
        }
      }
      break;
  }
  finalize(out);
  return out;
}

}  // namespace

std::int64_t StridedBlock::runs() const {
  std::int64_t n = 1;
  for (int d = 0; d < ndims; ++d) n *= count[d];
  return n;
}

std::int64_t CanonicalForm::runs() const {
  std::int64_t n = 0;
  for (const auto& piece : pieces) {
    n += piece.is_index ? static_cast<std::int64_t>(piece.index.offsets.size())
                        : piece.strided.runs();
  }
  return n;
}

std::string CanonicalForm::describe() const {
  std::ostringstream out;
  out << "canonical{size=" << size << " pieces=[";
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const auto& p = pieces[i];
    if (i > 0) out << ", ";
    if (p.is_index) {
      out << "index{bytes=" << p.index.block_bytes << " n=" << p.index.offsets.size() << "}";
      continue;
    }
    out << "strided{off=" << p.strided.offset << " bytes=" << p.strided.block_bytes << " dims=[";
    for (int d = 0; d < p.strided.ndims; ++d) {
      out << (d ? "," : "") << "(" << p.strided.count[d] << "," << p.strided.stride[d] << ")";
    }
    out << "]}";
  }
  out << "]}";
  return out.str();
}

CanonicalForm build_canonical(const Datatype::Node& node) {
  const LoweringBudget budget;
  CanonicalForm form;
  form.pieces = canonical_pieces(node);
  form.size = node.size;
  return form;
}

CanonicalForm repeat_canonical(const CanonicalForm& form, std::int64_t count, std::int64_t stride) {
  const LoweringBudget budget;
  CanonicalForm out;
  out.pieces = repeat(form.pieces, count, stride);
  finalize(out.pieces);
  out.size = form.size * count;
  return out;
}

bool form_overlaps(const CanonicalForm& form) {
  // Fast path: one strided block whose dimensions, sorted by stride, each step past the
  // span of the ones inside them cannot address a byte twice.
  if (form.is_single_strided()) {
    const StridedBlock& s = form.pieces[0].strided;
    std::vector<std::pair<std::int64_t, std::int64_t>> dims;
    for (int d = 0; d < s.ndims; ++d)
      dims.emplace_back(s.stride[d] < 0 ? -s.stride[d] : s.stride[d], s.count[d]);
    std::sort(dims.begin(), dims.end());
    std::int64_t span = s.block_bytes;
    bool disjoint = true;
    for (const auto& [stride, count] : dims) {
      if (stride < span) {
        disjoint = false;
        break;
      }
      span = (count - 1) * stride + span;
    }
    if (disjoint) return false;
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  runs.reserve(static_cast<std::size_t>(form.runs()));
  for (const auto& piece : form.pieces) {
    const std::int64_t bytes = piece.is_index ? piece.index.block_bytes : piece.strided.block_bytes;
    detail::for_each_run(piece, 0, [&](std::int64_t offset) {
      runs.emplace_back(offset, bytes);
      return true;
    });
  }
  std::sort(runs.begin(), runs.end());
  for (std::size_t i = 1; i < runs.size(); ++i) {
    if (runs[i - 1].first + runs[i - 1].second > runs[i].first) return true;
  }
  return false;
}

}  // namespace halox
