// Builds the real MPI datatype a Recipe describes (the independent reference).
#pragma once

#include <mpi.h>

#include "random_datatype.hpp"

namespace halox::testing {

inline MPI_Datatype mpi_basic(BasicKind k) {
  switch (k) {
    case BasicKind::char_: return MPI_CHAR;
    case BasicKind::short_: return MPI_SHORT;
    case BasicKind::int_: return MPI_INT;
    case BasicKind::float32: return MPI_FLOAT;
    case BasicKind::float64: return MPI_DOUBLE;
    case BasicKind::int64: return MPI_INT64_T;
    default: return MPI_BYTE;
  }
}

/// The caller frees the result with MPI_Type_free (unless it is a named type).
inline MPI_Datatype to_mpi(const Recipe& r) {
  using K = Recipe::Kind;
  if (r.kind == K::basic) return mpi_basic(r.basic);
  std::vector<MPI_Datatype> kids;
  for (const auto& c : r.children) kids.push_back(to_mpi(c));
  std::vector<int> lengths(r.lengths.begin(), r.lengths.end());
  std::vector<int> idisps(r.disps.begin(), r.disps.end());
  std::vector<MPI_Aint> adisps(r.disps.begin(), r.disps.end());
  std::vector<int> sizes(r.sizes.begin(), r.sizes.end()),
      subsizes(r.subsizes.begin(), r.subsizes.end()), starts(r.starts.begin(), r.starts.end()),
      dargs, psizes(r.psizes.begin(), r.psizes.end()), distribs;
  for (auto d : r.dargs)
    dargs.push_back(d == kDefaultDarg ? MPI_DISTRIBUTE_DFLT_DARG : static_cast<int>(d));
  for (auto d : r.distribs) {
    distribs.push_back(d == Distribution::block    ? MPI_DISTRIBUTE_BLOCK
                       : d == Distribution::cyclic ? MPI_DISTRIBUTE_CYCLIC
                                                   : MPI_DISTRIBUTE_NONE);
  }
  const int order = r.order == Order::c ? MPI_ORDER_C : MPI_ORDER_FORTRAN;
  const int n = static_cast<int>(r.disps.size());
  MPI_Datatype t = MPI_DATATYPE_NULL;
  switch (r.kind) {
    case K::contiguous: MPI_Type_contiguous(static_cast<int>(r.count), kids[0], &t); break;
    case K::vector:
      MPI_Type_vector(static_cast<int>(r.count), static_cast<int>(r.blocklength),
                      static_cast<int>(r.stride), kids[0], &t);
      break;
    case K::hvector:
      MPI_Type_create_hvector(static_cast<int>(r.count), static_cast<int>(r.blocklength), r.stride,
                              kids[0], &t);
      break;
    case K::indexed: MPI_Type_indexed(n, lengths.data(), idisps.data(), kids[0], &t); break;
    case K::hindexed:
      MPI_Type_create_hindexed(n, lengths.data(), adisps.data(), kids[0], &t);
      break;
    case K::indexed_block:
      MPI_Type_create_indexed_block(n, static_cast<int>(r.blocklength), idisps.data(), kids[0], &t);
      break;
    case K::hindexed_block:
      MPI_Type_create_hindexed_block(n, static_cast<int>(r.blocklength), adisps.data(), kids[0],
                                     &t);
      break;
    case K::struct_:
      MPI_Type_create_struct(n, lengths.data(), adisps.data(), kids.data(), &t);
      break;
    case K::subarray:
      MPI_Type_create_subarray(static_cast<int>(sizes.size()), sizes.data(), subsizes.data(),
                               starts.data(), order, kids[0], &t);
      break;
    case K::darray:
      MPI_Type_create_darray(r.size, r.rank, static_cast<int>(sizes.size()), sizes.data(),
                             distribs.data(), dargs.data(), psizes.data(), order, kids[0], &t);
      break;
    case K::resized: MPI_Type_create_resized(kids[0], r.lb, r.extent, &t); break;
    case K::dup: MPI_Type_dup(kids[0], &t); break;
    default: break;
  }
  for (auto& k : kids) {
    int ni, na, nt, c;
    MPI_Type_get_envelope(k, &ni, &na, &nt, &c);
    if (c != MPI_COMBINER_NAMED) MPI_Type_free(&k);
  }
  return t;
}

}  // namespace halox::testing
