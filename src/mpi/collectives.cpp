// The MPI interposer's collectives on device memory: the blocking ones that codes call on
// device buffers go through host staging (each device buffer's span copied to the host,
// the MPI library's collective on the copies, the outputs copied back); the calls it does
// not cover return an MPI error naming them when given device memory, instead of handing
// the library a pointer it cannot read.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "calls.hpp"
#include "memory.hpp"
#include "state.hpp"

namespace halox::mpi {

namespace {

// Elements [first, last) of `type` at MPI buffer address `buffer`: on device memory, the
// bytes they span copied to the host (gaps included, so that writing the span back leaves
// the bytes between elements as they were).
class Span {
 public:
  Span(const void* buffer, std::int64_t first, std::int64_t last, MPI_Datatype type)
      : m_buffer(const_cast<void*>(buffer)) {
    if (buffer == MPI_IN_PLACE || buffer == nullptr || last <= first) return;
    MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
    PMPI_Type_get_extent(type, &lb, &extent);
    PMPI_Type_get_true_extent(type, &true_lb, &true_extent);
    if (true_extent == 0) return;
    const std::int64_t a = first * extent, b = (last - 1) * extent;
    m_lo = std::min(a, b) + true_lb;
    const std::int64_t hi = std::max(a, b) + true_lb + true_extent;
    m_memory = memory_of(mpi::address(m_buffer, m_lo));
    if (m_memory == Memory::host) return;
    m_staging = Staging(static_cast<std::size_t>(hi - m_lo));
    copy_to_host(m_staging.data(), mpi::address(m_buffer, m_lo), m_staging.size(), m_memory);
  }
  bool on_device() const { return m_memory != Memory::host; }
  /// The address to give the MPI library in place of the user's.
  void* address() const {
    if (!on_device()) return m_buffer;
    return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(m_staging.data()) - m_lo);
  }
  void write_back() const {
    if (!on_device()) return;
    copy_from_host(mpi::address(m_buffer, m_lo), m_staging.data(), m_staging.size(), m_memory);
    tally(Path::staged_collective, static_cast<std::int64_t>(m_staging.size()));
  }

 private:
  void* m_buffer;
  std::int64_t m_lo = 0;
  Memory m_memory = Memory::host;
  Staging m_staging;
};

// The elements [min displs, max displs + counts) a v-collective touches.
Span span_of(const void* buffer, const int* counts, const int* displs, int n, MPI_Datatype type) {
  std::int64_t first = 0, last = 0;
  bool any = false;
  for (int i = 0; i < n; ++i) {
    if (counts[i] <= 0) continue;
    first = any ? std::min<std::int64_t>(first, displs[i]) : displs[i];
    last = any ? std::max<std::int64_t>(last, std::int64_t(displs[i]) + counts[i])
               : std::int64_t(displs[i]) + counts[i];
    any = true;
  }
  return Span(buffer, first, any ? last : first, type);
}

int rank_of(MPI_Comm comm) {
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  return rank;
}
int size_of(MPI_Comm comm) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  return size;
}

// The staged collective: `run` calls the MPI library on the spans' addresses; the outputs
// are written back when it succeeded.
template <class Run>
int staged(const char* call, MPI_Comm comm, std::initializer_list<const Span*> outputs, Run&& run) {
  try {
    const int rc = run();
    if (rc == MPI_SUCCESS) {
      for (const Span* out : outputs) out->write_back();
    }
    return rc;
  } catch (const std::exception& e) {
    return failed(call, comm, e);
  }
}

bool any_on_device(std::initializer_list<const void*> buffers) {
  for (const void* b : buffers) {
    if (b != nullptr && b != MPI_IN_PLACE && memory_of(b) != Memory::host) return true;
  }
  return false;
}

int not_covered(const char* call, MPI_Comm comm) {
  return raise(comm, std::string("halox_mpi: ") + call +
                         " on device memory is not covered by halox (it stages MPI_Bcast, "
                         "MPI_Reduce, MPI_Allreduce, MPI_Gather(v), MPI_Scatter(v), "
                         "MPI_Allgather(v), MPI_Alltoall(v) and the point-to-point calls); copy "
                         "the buffer to host memory first");
}

}  // namespace

}  // namespace halox::mpi

using namespace halox::mpi;

extern "C" {

int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  const Span data(buf, 0, count, type);
  if (!data.on_device()) return PMPI_Bcast(buf, count, type, root, comm);
  const bool receives = rank_of(comm) != root;
  return staged("MPI_Bcast", comm, {}, [&] {
    const int rc = PMPI_Bcast(data.address(), count, type, root, comm);
    if (rc == MPI_SUCCESS && receives) data.write_back();
    return rc;
  });
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
               int root, MPI_Comm comm) {
  const bool at_root = rank_of(comm) == root;
  const Span in(sendbuf, 0, count, type);
  const Span out(at_root ? recvbuf : nullptr, 0, count, type);
  if (!in.on_device() && !out.on_device())
    return PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm);
  return staged("MPI_Reduce", comm, {&out}, [&] {
    return PMPI_Reduce(in.address(), at_root ? out.address() : recvbuf, count, type, op, root,
                       comm);
  });
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  const Span in(sendbuf, 0, count, type), out(recvbuf, 0, count, type);
  if (!in.on_device() && !out.on_device())
    return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
  return staged("MPI_Allreduce", comm, {&out},
                [&] { return PMPI_Allreduce(in.address(), out.address(), count, type, op, comm); });
}

int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const bool at_root = rank_of(comm) == root;
  const Span in(sendbuf, 0, sendcount, sendtype);
  const Span out(at_root ? recvbuf : nullptr, 0,
                 static_cast<std::int64_t>(recvcount) * size_of(comm), recvtype);
  if (!in.on_device() && !out.on_device())
    return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  return staged("MPI_Gather", comm, {&out}, [&] {
    return PMPI_Gather(in.address(), sendcount, sendtype, at_root ? out.address() : recvbuf,
                       recvcount, recvtype, root, comm);
  });
}

int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm) {
  const bool at_root = rank_of(comm) == root;
  const Span in(sendbuf, 0, sendcount, sendtype);
  const Span out = at_root ? span_of(recvbuf, recvcounts, displs, size_of(comm), recvtype)
                           : Span(nullptr, 0, 0, recvtype);
  if (!in.on_device() && !out.on_device())
    return PMPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root,
                        comm);
  return staged("MPI_Gatherv", comm, {&out}, [&] {
    return PMPI_Gatherv(in.address(), sendcount, sendtype, at_root ? out.address() : recvbuf,
                        recvcounts, displs, recvtype, root, comm);
  });
}

int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const bool at_root = rank_of(comm) == root;
  const Span in(at_root ? sendbuf : nullptr, 0,
                static_cast<std::int64_t>(sendcount) * size_of(comm), sendtype);
  const Span out(recvbuf, 0, recvcount, recvtype);
  if (!in.on_device() && !out.on_device())
    return PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  return staged("MPI_Scatter", comm, {&out}, [&] {
    return PMPI_Scatter(at_root ? in.address() : sendbuf, sendcount, sendtype, out.address(),
                        recvcount, recvtype, root, comm);
  });
}

int MPI_Scatterv(const void* sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm) {
  const bool at_root = rank_of(comm) == root;
  const Span in = at_root ? span_of(sendbuf, sendcounts, displs, size_of(comm), sendtype)
                          : Span(nullptr, 0, 0, sendtype);
  const Span out(recvbuf, 0, recvcount, recvtype);
  if (!in.on_device() && !out.on_device())
    return PMPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root,
                         comm);
  return staged("MPI_Scatterv", comm, {&out}, [&] {
    return PMPI_Scatterv(at_root ? in.address() : sendbuf, sendcounts, displs, sendtype,
                         out.address(), recvcount, recvtype, root, comm);
  });
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  const Span in(sendbuf, 0, sendcount, sendtype);
  const Span out(recvbuf, 0, static_cast<std::int64_t>(recvcount) * size_of(comm), recvtype);
  if (!in.on_device() && !out.on_device())
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return staged("MPI_Allgather", comm, {&out}, [&] {
    return PMPI_Allgather(in.address(), sendcount, sendtype, out.address(), recvcount, recvtype,
                          comm);
  });
}

int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm) {
  const Span in(sendbuf, 0, sendcount, sendtype);
  const Span out = span_of(recvbuf, recvcounts, displs, size_of(comm), recvtype);
  if (!in.on_device() && !out.on_device())
    return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                           comm);
  return staged("MPI_Allgatherv", comm, {&out}, [&] {
    return PMPI_Allgatherv(in.address(), sendcount, sendtype, out.address(), recvcounts, displs,
                           recvtype, comm);
  });
}

int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  const int n = size_of(comm);
  const Span in(sendbuf, 0, static_cast<std::int64_t>(sendcount) * n, sendtype);
  const Span out(recvbuf, 0, static_cast<std::int64_t>(recvcount) * n, recvtype);
  if (!in.on_device() && !out.on_device())
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return staged("MPI_Alltoall", comm, {&out}, [&] {
    return PMPI_Alltoall(in.address(), sendcount, sendtype, out.address(), recvcount, recvtype,
                         comm);
  });
}

int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                  MPI_Datatype recvtype, MPI_Comm comm) {
  const int n = size_of(comm);
  const Span in = span_of(sendbuf, sendcounts, sdispls, n, sendtype);
  const Span out = span_of(recvbuf, recvcounts, rdispls, n, recvtype);
  if (!in.on_device() && !out.on_device())
    return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                          recvtype, comm);
  return staged("MPI_Alltoallv", comm, {&out}, [&] {
    return PMPI_Alltoallv(in.address(), sendcounts, sdispls, sendtype, out.address(), recvcounts,
                          rdispls, recvtype, comm);
  });
}

// Not covered on device memory: an MPI error naming the call (through the communicator's
// handler; MPI_COMM_WORLD's for the one-sided calls). On host memory: the library's call.
#define HALOX_LIST(...) __VA_ARGS__
#define HALOX_NOT_COVERED(name, comm, buffers, params, args)                         \
  int MPI_##name params {                                                            \
    if (any_on_device({HALOX_LIST buffers})) return not_covered("MPI_" #name, comm); \
    return PMPI_##name args;                                                         \
  }

using Counts = const int*;
using Types = const MPI_Datatype*;
using Displs = const MPI_Aint*;

HALOX_NOT_COVERED(Ibcast, comm, (buf),
                  (void* buf, int n, MPI_Datatype t, int root, MPI_Comm comm, MPI_Request* r),
                  (buf, n, t, root, comm, r))
HALOX_NOT_COVERED(Ireduce, comm, (sb, rb),
                  (const void* sb, void* rb, int n, MPI_Datatype t, MPI_Op op, int root,
                   MPI_Comm comm, MPI_Request* r),
                  (sb, rb, n, t, op, root, comm, r))
HALOX_NOT_COVERED(Iallreduce, comm, (sb, rb),
                  (const void* sb, void* rb, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                   MPI_Request* r),
                  (sb, rb, n, t, op, comm, r))
HALOX_NOT_COVERED(Igather, comm, (sb, rb),
                  (const void* sb, int sn, MPI_Datatype st, void* rb, int rn, MPI_Datatype rt,
                   int root, MPI_Comm comm, MPI_Request* r),
                  (sb, sn, st, rb, rn, rt, root, comm, r))
HALOX_NOT_COVERED(Igatherv, comm, (sb, rb),
                  (const void* sb, int sn, MPI_Datatype st, void* rb, Counts rn, Counts d,
                   MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request* r),
                  (sb, sn, st, rb, rn, d, rt, root, comm, r))
HALOX_NOT_COVERED(Iscatter, comm, (sb, rb),
                  (const void* sb, int sn, MPI_Datatype st, void* rb, int rn, MPI_Datatype rt,
                   int root, MPI_Comm comm, MPI_Request* r),
                  (sb, sn, st, rb, rn, rt, root, comm, r))
HALOX_NOT_COVERED(Iscatterv, comm, (sb, rb),
                  (const void* sb, Counts sn, Counts d, MPI_Datatype st, void* rb, int rn,
                   MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request* r),
                  (sb, sn, d, st, rb, rn, rt, root, comm, r))
HALOX_NOT_COVERED(Iallgather, comm, (sb, rb),
                  (const void* sb, int sn, MPI_Datatype st, void* rb, int rn, MPI_Datatype rt,
                   MPI_Comm comm, MPI_Request* r),
                  (sb, sn, st, rb, rn, rt, comm, r))
HALOX_NOT_COVERED(Iallgatherv, comm, (sb, rb),
                  (const void* sb, int sn, MPI_Datatype st, void* rb, Counts rn, Counts d,
                   MPI_Datatype rt, MPI_Comm comm, MPI_Request* r),
                  (sb, sn, st, rb, rn, d, rt, comm, r))
HALOX_NOT_COVERED(Ialltoall, comm, (sb, rb),
                  (const void* sb, int sn, MPI_Datatype st, void* rb, int rn, MPI_Datatype rt,
                   MPI_Comm comm, MPI_Request* r),
                  (sb, sn, st, rb, rn, rt, comm, r))
HALOX_NOT_COVERED(Ialltoallv, comm, (sb, rb),
                  (const void* sb, Counts sn, Counts sd, MPI_Datatype st, void* rb, Counts rn,
                   Counts rd, MPI_Datatype rt, MPI_Comm comm, MPI_Request* r),
                  (sb, sn, sd, st, rb, rn, rd, rt, comm, r))
HALOX_NOT_COVERED(Alltoallw, comm, (sb, rb),
                  (const void* sb, Counts sn, Counts sd, Types st, void* rb, Counts rn, Counts rd,
                   Types rt, MPI_Comm comm),
                  (sb, sn, sd, st, rb, rn, rd, rt, comm))
HALOX_NOT_COVERED(Ialltoallw, comm, (sb, rb),
                  (const void* sb, Counts sn, Counts sd, Types st, void* rb, Counts rn, Counts rd,
                   Types rt, MPI_Comm comm, MPI_Request* r),
                  (sb, sn, sd, st, rb, rn, rd, rt, comm, r))
HALOX_NOT_COVERED(Reduce_scatter_block, comm, (sb, rb),
                  (const void* sb, void* rb, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm),
                  (sb, rb, n, t, op, comm))
HALOX_NOT_COVERED(Ireduce_scatter_block, comm, (sb, rb),
                  (const void* sb, void* rb, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                   MPI_Request* r),
                  (sb, rb, n, t, op, comm, r))
HALOX_NOT_COVERED(Reduce_scatter, comm, (sb, rb),
                  (const void* sb, void* rb, Counts n, MPI_Datatype t, MPI_Op op, MPI_Comm comm),
                  (sb, rb, n, t, op, comm))
HALOX_NOT_COVERED(Ireduce_scatter, comm, (sb, rb),
                  (const void* sb, void* rb, Counts n, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                   MPI_Request* r),
                  (sb, rb, n, t, op, comm, r))
HALOX_NOT_COVERED(Scan, comm, (sb, rb),
                  (const void* sb, void* rb, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm),
                  (sb, rb, n, t, op, comm))
HALOX_NOT_COVERED(Iscan, comm, (sb, rb),
                  (const void* sb, void* rb, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                   MPI_Request* r),
                  (sb, rb, n, t, op, comm, r))
HALOX_NOT_COVERED(Exscan, comm, (sb, rb),
                  (const void* sb, void* rb, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm),
                  (sb, rb, n, t, op, comm))
HALOX_NOT_COVERED(Iexscan, comm, (sb, rb),
                  (const void* sb, void* rb, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                   MPI_Request* r),
                  (sb, rb, n, t, op, comm, r))
HALOX_NOT_COVERED(Reduce_local, MPI_COMM_WORLD, (in, inout),
                  (const void* in, void* inout, int n, MPI_Datatype t, MPI_Op op),
                  (in, inout, n, t, op))
HALOX_NOT_COVERED(Win_create, comm, (base),
                  (void* base, MPI_Aint size, int unit, MPI_Info info, MPI_Comm comm, MPI_Win* w),
                  (base, size, unit, info, comm, w))
HALOX_NOT_COVERED(Put, MPI_COMM_WORLD, (o),
                  (const void* o, int on, MPI_Datatype ot, int target, MPI_Aint td, int tn,
                   MPI_Datatype tt, MPI_Win w),
                  (o, on, ot, target, td, tn, tt, w))
HALOX_NOT_COVERED(Rput, MPI_COMM_WORLD, (o),
                  (const void* o, int on, MPI_Datatype ot, int target, MPI_Aint td, int tn,
                   MPI_Datatype tt, MPI_Win w, MPI_Request* r),
                  (o, on, ot, target, td, tn, tt, w, r))
HALOX_NOT_COVERED(Get, MPI_COMM_WORLD, (o),
                  (void* o, int on, MPI_Datatype ot, int target, MPI_Aint td, int tn,
                   MPI_Datatype tt, MPI_Win w),
                  (o, on, ot, target, td, tn, tt, w))
HALOX_NOT_COVERED(Rget, MPI_COMM_WORLD, (o),
                  (void* o, int on, MPI_Datatype ot, int target, MPI_Aint td, int tn,
                   MPI_Datatype tt, MPI_Win w, MPI_Request* r),
                  (o, on, ot, target, td, tn, tt, w, r))
HALOX_NOT_COVERED(Accumulate, MPI_COMM_WORLD, (o),
                  (const void* o, int on, MPI_Datatype ot, int target, MPI_Aint td, int tn,
                   MPI_Datatype tt, MPI_Op op, MPI_Win w),
                  (o, on, ot, target, td, tn, tt, op, w))
HALOX_NOT_COVERED(Raccumulate, MPI_COMM_WORLD, (o),
                  (const void* o, int on, MPI_Datatype ot, int target, MPI_Aint td, int tn,
                   MPI_Datatype tt, MPI_Op op, MPI_Win w, MPI_Request* r),
                  (o, on, ot, target, td, tn, tt, op, w, r))
HALOX_NOT_COVERED(Get_accumulate, MPI_COMM_WORLD, (o, res),
                  (const void* o, int on, MPI_Datatype ot, void* res, int rn, MPI_Datatype rt,
                   int target, MPI_Aint td, int tn, MPI_Datatype tt, MPI_Op op, MPI_Win w),
                  (o, on, ot, res, rn, rt, target, td, tn, tt, op, w))
HALOX_NOT_COVERED(Fetch_and_op, MPI_COMM_WORLD, (o, res),
                  (const void* o, void* res, MPI_Datatype t, int target, MPI_Aint td, MPI_Op op,
                   MPI_Win w),
                  (o, res, t, target, td, op, w))
HALOX_NOT_COVERED(Compare_and_swap, MPI_COMM_WORLD, (o, c, res),
                  (const void* o, const void* c, void* res, MPI_Datatype t, int target, MPI_Aint td,
                   MPI_Win w),
                  (o, c, res, t, target, td, w))

}  // extern "C"
