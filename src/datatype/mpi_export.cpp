// halox datatypes as MPI datatypes, for programs that move halox's layouts with MPI's own
// calls (halox-lbm --comm mpi-*): the canonical form, which already is the packed order,
// written with MPI's strided and indexed constructors over bytes.
#include <climits>
#include <string>
#include <vector>

#include "halox/mpi.hpp"

namespace halox {

namespace {

int as_int(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) {
    throw DatatypeError("halox::to_mpi: " + std::string(what) + " " + std::to_string(v) +
                        " does not fit MPI's int");
  }
  return static_cast<int>(v);
}

// A strided piece's run offsets, in packed order (dimension 0 fastest).
std::vector<MPI_Aint> run_offsets(const StridedBlock& sb) {
  std::vector<MPI_Aint> offsets{static_cast<MPI_Aint>(sb.offset)};
  for (int k = 0; k < sb.ndims; ++k) {
    std::vector<MPI_Aint> next;
    next.reserve(offsets.size() * static_cast<std::size_t>(sb.count[k]));
    for (std::int64_t i = 0; i < sb.count[k]; ++i) {
      for (const MPI_Aint o : offsets) next.push_back(o + static_cast<MPI_Aint>(i * sb.stride[k]));
    }
    offsets.swap(next);
  }
  return offsets;
}

// One canonical piece: its runs of bytes, in packed order, at displacement `*at`. Negative
// strides are written as a list of offsets: Open MPI 4.1 places an hvector with a negative
// byte stride elsewhere than the standard does (its true lb, seen in this export's test).
MPI_Datatype piece_type(const CanonicalPiece& piece, MPI_Aint* at) {
  MPI_Datatype t = MPI_DATATYPE_NULL;
  bool negative = false;
  for (int k = 0; !piece.is_index && k < piece.strided.ndims; ++k)
    negative = negative || piece.strided.stride[k] < 0;
  if (piece.is_index || negative) {
    const std::int64_t block_bytes =
        piece.is_index ? piece.index.block_bytes : piece.strided.block_bytes;
    std::vector<MPI_Aint> offsets =
        piece.is_index
            ? std::vector<MPI_Aint>(piece.index.offsets.begin(), piece.index.offsets.end())
            : run_offsets(piece.strided);
    HALOX_MPI_CHECK(MPI_Type_create_hindexed_block(
        as_int(static_cast<std::int64_t>(offsets.size()), "a piece's run count"),
        as_int(block_bytes, "a run's bytes"), offsets.data(), MPI_BYTE, &t));
    *at = 0;
    return t;
  }
  const StridedBlock& sb = piece.strided;
  HALOX_MPI_CHECK(MPI_Type_contiguous(as_int(sb.block_bytes, "a run's bytes"), MPI_BYTE, &t));
  for (int k = 0; k < sb.ndims; ++k) {  // dimension 0 innermost: it varies fastest
    MPI_Datatype outer = MPI_DATATYPE_NULL;
    HALOX_MPI_CHECK(MPI_Type_create_hvector(as_int(sb.count[k], "a strided count"), 1,
                                            static_cast<MPI_Aint>(sb.stride[k]), t, &outer));
    HALOX_MPI_CHECK(MPI_Type_free(&t));
    t = outer;
  }
  *at = static_cast<MPI_Aint>(sb.offset);
  return t;
}

}  // namespace

MPI_Datatype to_mpi(const Datatype& type) {
  const CanonicalForm& form = type.canonical();  // throws for an uncommitted type
  std::vector<MPI_Datatype> pieces;
  std::vector<MPI_Aint> displacements;
  for (const CanonicalPiece& piece : form.pieces) {
    if (piece.bytes() == 0) continue;
    MPI_Aint at = 0;
    pieces.push_back(piece_type(piece, &at));
    displacements.push_back(at);
  }
  const std::vector<int> ones(pieces.size(), 1);
  MPI_Datatype joined = MPI_DATATYPE_NULL;
  HALOX_MPI_CHECK(MPI_Type_create_struct(static_cast<int>(pieces.size()), ones.data(),
                                         displacements.data(), pieces.data(), &joined));
  for (MPI_Datatype& p : pieces) HALOX_MPI_CHECK(MPI_Type_free(&p));
  MPI_Datatype resized = MPI_DATATYPE_NULL;
  HALOX_MPI_CHECK(MPI_Type_create_resized(joined, static_cast<MPI_Aint>(type.lb()),
                                          static_cast<MPI_Aint>(type.extent()), &resized));
  HALOX_MPI_CHECK(MPI_Type_free(&joined));
  HALOX_MPI_CHECK(MPI_Type_commit(&resized));
  return resized;
}

}  // namespace halox
