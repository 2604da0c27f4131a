// A fault injector for tests, preloaded under Open MPI (LD_PRELOAD, through `mpirun -x`):
// the rank HALOX_STOP_RANK stops itself (SIGSTOP, or SIGKILL with HALOX_STOP_SIGNAL=kill)
// at its HALOX_STOP_AT-th call of the MPI function HALOX_STOP_CALL, before the call; other
// ranks and other functions pass straight to the MPI library (PMPI). It reaches each wait of
// a program deterministically, where a signal at a random moment lands in one by chance.
// It prints one line when it stops ("halox-stop-at: rank 2 stops at call 40 of
// MPI_Iallreduce"), which the tests time the others' reaction from.
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

struct Target {
  const char* call = nullptr;
  long at = 0;
  bool here = false;
  int signal = SIGSTOP;
};

const Target& target() {
  static const Target t = [] {
    Target t;
    const char* rank = std::getenv("HALOX_STOP_RANK");
    const char* mine = std::getenv("OMPI_COMM_WORLD_RANK");
    t.call = std::getenv("HALOX_STOP_CALL");
    const char* at = std::getenv("HALOX_STOP_AT");
    t.at = at ? std::atol(at) : 1;
    t.here = rank && mine && t.call && std::atoi(rank) == std::atoi(mine);
    const char* sig = std::getenv("HALOX_STOP_SIGNAL");
    if (sig && std::strcmp(sig, "kill") == 0) t.signal = SIGKILL;
    return t;
  }();
  return t;
}

// Counts this rank's calls of `name`; stops at the chosen one.
void maybe_stop(const char* name, std::atomic<long>& calls) {
  const Target& t = target();
  if (!t.here || std::strcmp(name, t.call) != 0) return;
  if (calls.fetch_add(1) + 1 != t.at) return;
  char line[160];
  const int n = std::snprintf(line, sizeof line, "halox-stop-at: rank %s stops at call %ld of %s\n",
                              std::getenv("OMPI_COMM_WORLD_RANK"), t.at, name);
  if (write(STDERR_FILENO, line, static_cast<std::size_t>(n)) < 0) {
    // Nothing to do: the stop is what matters.
  }
  raise(t.signal);
}

}  // namespace

#define HALOX_STOP_BEFORE(name)       \
  static std::atomic<long> calls_{0}; \
  maybe_stop(#name, calls_)

extern "C" {

int MPI_Init(int* argc, char*** argv) {
  HALOX_STOP_BEFORE(MPI_Init);
  return PMPI_Init(argc, argv);
}
int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  HALOX_STOP_BEFORE(MPI_Init_thread);
  return PMPI_Init_thread(argc, argv, required, provided);
}
int MPI_Finalize() {
  HALOX_STOP_BEFORE(MPI_Finalize);
  return PMPI_Finalize();
}
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* out) {
  HALOX_STOP_BEFORE(MPI_Comm_dup);
  return PMPI_Comm_dup(comm, out);
}
int MPI_Comm_idup(MPI_Comm comm, MPI_Comm* out, MPI_Request* request) {
  HALOX_STOP_BEFORE(MPI_Comm_idup);
  return PMPI_Comm_idup(comm, out, request);
}
int MPI_Iallreduce(const void* in, void* out, int count, MPI_Datatype type, MPI_Op op,
                   MPI_Comm comm, MPI_Request* request) {
  HALOX_STOP_BEFORE(MPI_Iallreduce);
  return PMPI_Iallreduce(in, out, count, type, op, comm, request);
}
int MPI_Allreduce(const void* in, void* out, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  HALOX_STOP_BEFORE(MPI_Allreduce);
  return PMPI_Allreduce(in, out, count, type, op, comm);
}
int MPI_Ireduce(const void* in, void* out, int count, MPI_Datatype type, MPI_Op op, int root,
                MPI_Comm comm, MPI_Request* request) {
  HALOX_STOP_BEFORE(MPI_Ireduce);
  return PMPI_Ireduce(in, out, count, type, op, root, comm, request);
}
int MPI_Iallgather(const void* in, int in_count, MPI_Datatype in_type, void* out, int out_count,
                   MPI_Datatype out_type, MPI_Comm comm, MPI_Request* request) {
  HALOX_STOP_BEFORE(MPI_Iallgather);
  return PMPI_Iallgather(in, in_count, in_type, out, out_count, out_type, comm, request);
}
int MPI_Iallgatherv(const void* in, int in_count, MPI_Datatype in_type, void* out,
                    const int out_counts[], const int displs[], MPI_Datatype out_type,
                    MPI_Comm comm, MPI_Request* request) {
  HALOX_STOP_BEFORE(MPI_Iallgatherv);
  return PMPI_Iallgatherv(in, in_count, in_type, out, out_counts, displs, out_type, comm, request);
}
int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  HALOX_STOP_BEFORE(MPI_Ibarrier);
  return PMPI_Ibarrier(comm, request);
}
int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm,
               MPI_Request* request) {
  HALOX_STOP_BEFORE(MPI_Ibcast);
  return PMPI_Ibcast(buffer, count, type, root, comm, request);
}
int MPI_Isend(const void* buffer, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm,
              MPI_Request* request) {
  HALOX_STOP_BEFORE(MPI_Isend);
  return PMPI_Isend(buffer, count, type, peer, tag, comm, request);
}
int MPI_Irecv(void* buffer, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm,
              MPI_Request* request) {
  HALOX_STOP_BEFORE(MPI_Irecv);
  return PMPI_Irecv(buffer, count, type, peer, tag, comm, request);
}
int MPI_Sendrecv(const void* out, int out_count, MPI_Datatype out_type, int to, int out_tag,
                 void* in, int in_count, MPI_Datatype in_type, int from, int in_tag, MPI_Comm comm,
                 MPI_Status* status) {
  HALOX_STOP_BEFORE(MPI_Sendrecv);
  return PMPI_Sendrecv(out, out_count, out_type, to, out_tag, in, in_count, in_type, from, in_tag,
                       comm, status);
}

}  // extern "C"
