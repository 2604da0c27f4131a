// MPI-3's neighbourhood collectives (MPI_Neighbor_alltoall(v,w), allgather(v) and their
// MPI_Ineighbor_* forms) on Cartesian, distributed-graph and graph communicators, through the
// interposer's point-to-point calls: each block is one message on a private duplicate of the
// communicator, so a device block to a peer on this node is read by the peer from this
// process's memory (the protocol's IPC path), others are staged, host blocks go as they are.
// Every rank takes this path, whatever its buffers (ranks must agree on how a collective
// runs). The order is MPI's: on a Cartesian grid the block sent towards the negative
// direction of dimension d lands in the neighbour's block of its positive direction (a tag
// per direction keeps that so when one rank is both neighbours: periodic axes of 1 or 2
// ranks); on graphs, blocks between one pair of ranks match in the order of the neighbour
// lists.
#include <mpi.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "calls.hpp"
#include "memory.hpp"
#include "state.hpp"

namespace halox::mpi {

namespace {

struct Neighbours {
  MPI_Comm comm = MPI_COMM_NULL;  // the private duplicate the blocks travel on
  std::vector<int> sources, destinations;
  std::vector<int> receive_tags, send_tags;
  ~Neighbours() {
    if (comm != MPI_COMM_NULL) PMPI_Comm_free(&comm);
  }
};

std::mutex& neighbours_mutex() {
  static std::mutex m;
  return m;
}
int delete_neighbours(MPI_Comm, int, void* value, void*) {
  delete static_cast<Neighbours*>(value);
  return MPI_SUCCESS;
}

// The communicator's neighbours, learnt at its first neighbourhood collective (collective:
// every rank makes the duplicate there) and cached on it.
const Neighbours& neighbours(MPI_Comm comm) {
  std::lock_guard<std::mutex> lock(neighbours_mutex());
  static int keyval = MPI_KEYVAL_INVALID;
  if (keyval == MPI_KEYVAL_INVALID)
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_neighbours, &keyval, nullptr);
  void* value = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, keyval, &value, &found);
  if (found) return *static_cast<Neighbours*>(value);
  auto n = std::make_unique<Neighbours>();
  int kind = MPI_UNDEFINED;
  PMPI_Topo_test(comm, &kind);
  if (kind == MPI_CART) {
    int dims = 0;
    PMPI_Cartdim_get(comm, &dims);
    for (int d = 0; d < dims; ++d) {
      int below = MPI_PROC_NULL, above = MPI_PROC_NULL;
      PMPI_Cart_shift(comm, d, 1, &below, &above);
      // Block 2d: the neighbour below, block 2d + 1: the one above. What goes down arrives
      // in the receiver's block from above.
      n->sources.insert(n->sources.end(), {below, above});
      n->destinations.insert(n->destinations.end(), {below, above});
      n->receive_tags.insert(n->receive_tags.end(), {2 * d + 1, 2 * d});
      n->send_tags.insert(n->send_tags.end(), {2 * d, 2 * d + 1});
    }
  } else if (kind == MPI_DIST_GRAPH) {
    int in = 0, out = 0, weighted = 0;
    PMPI_Dist_graph_neighbors_count(comm, &in, &out, &weighted);
    n->sources.resize(static_cast<std::size_t>(in));
    n->destinations.resize(static_cast<std::size_t>(out));
    PMPI_Dist_graph_neighbors(comm, in, n->sources.data(), MPI_UNWEIGHTED, out,
                              n->destinations.data(), MPI_UNWEIGHTED);
  } else if (kind == MPI_GRAPH) {
    int rank = 0, count = 0;
    PMPI_Comm_rank(comm, &rank);
    PMPI_Graph_neighbors_count(comm, rank, &count);
    n->sources.resize(static_cast<std::size_t>(count));
    PMPI_Graph_neighbors(comm, rank, count, n->sources.data());
    n->destinations = n->sources;
  } else {
    throw Error(
        "the communicator has no topology (MPI_Cart_create, MPI_Graph_create or "
        "MPI_Dist_graph_create_adjacent make one)");
  }
  if (n->receive_tags.empty()) {
    n->receive_tags.assign(n->sources.size(), 0);
    n->send_tags.assign(n->destinations.size(), 0);
  }
  PMPI_Comm_dup(comm, &n->comm);
  Neighbours* kept = n.release();
  PMPI_Comm_set_attr(comm, keyval, kept);
  return *kept;
}

// One block to send or receive: its address, count and type.
struct Block {
  const void* at;
  int count;
  MPI_Datatype type;
};

MPI_Aint extent_of(MPI_Datatype type) {
  MPI_Aint lb = 0, extent = 0;
  PMPI_Type_get_extent(type, &lb, &extent);
  return extent;
}

// Posts every block (receives first, in neighbour order, then sends), into `requests`.
int post(const Neighbours& n, const std::vector<Block>& in, const std::vector<Block>& out,
         std::vector<MPI_Request>& requests) {
  for (std::size_t k = 0; k < n.sources.size(); ++k) {
    requests.emplace_back();
    const int rc = receive(const_cast<void*>(in[k].at), in[k].count, in[k].type, n.sources[k],
                           n.receive_tags[k], n.comm, MPI_STATUS_IGNORE, &requests.back(), false);
    if (rc != MPI_SUCCESS) return rc;
  }
  for (std::size_t k = 0; k < n.destinations.size(); ++k) {
    requests.emplace_back();
    const int rc = send(standard_mode(), out[k].at, out[k].count, out[k].type, n.destinations[k],
                        n.send_tags[k], n.comm, &requests.back());
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

// MPI_Ineighbor_*: the exchange's requests behind one generalized request.
struct Exchange {
  std::vector<MPI_Request> requests;
  int* result = nullptr;  // the generalized request's state: the error its wait returns
};
std::mutex& exchanges_mutex() {
  static std::mutex m;
  return m;
}
std::map<MPI_Request, std::shared_ptr<Exchange>>& exchanges() {
  static std::map<MPI_Request, std::shared_ptr<Exchange>> open;
  return open;
}
std::atomic<bool> any_open{false};  // every wait asks: a lock only when there are some

int query_exchange(void* state, MPI_Status* status) {
  PMPI_Status_set_elements_x(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  status->MPI_ERROR = *static_cast<int*>(state);
  return *static_cast<int*>(state);
}
int free_exchange(void* state) {
  delete static_cast<int*>(state);
  return MPI_SUCCESS;
}
int cancel_exchange(void*, int) {
  return MPI_SUCCESS;
}

// The collective's blocks exchanged: at once, or behind `request` (MPI_Ineighbor_*).
int exchange(const char* call, MPI_Comm comm, const Neighbours& n, const std::vector<Block>& in,
             const std::vector<Block>& out, MPI_Request* request) {
  auto e = std::make_shared<Exchange>();
  int rc = post(n, in, out, e->requests);
  if (rc != MPI_SUCCESS) return rc;
  if (!request) {
    rc = wait_or_test(WaitKind::waitall, static_cast<int>(e->requests.size()), e->requests.data(),
                      nullptr, nullptr, nullptr, nullptr, MPI_STATUSES_IGNORE);
    return rc == MPI_SUCCESS ? rc : raise(comm, std::string("halox_mpi: ") + call + " failed");
  }
  e->result = new int(MPI_SUCCESS);
  PMPI_Grequest_start(query_exchange, free_exchange, cancel_exchange, e->result, request);
  std::lock_guard<std::mutex> lock(exchanges_mutex());
  exchanges()[*request] = std::move(e);
  any_open = true;
  return MPI_SUCCESS;
}

std::vector<Block> blocks(const void* buffer, const int* counts, const int* displs,
                          MPI_Datatype type, std::size_t n) {
  const MPI_Aint extent = extent_of(type);
  std::vector<Block> b(n);
  for (std::size_t k = 0; k < n; ++k)
    b[k] = {address(buffer, static_cast<std::int64_t>(displs[k]) * extent), counts[k], type};
  return b;
}

std::vector<Block> regular(const void* buffer, int count, MPI_Datatype type, std::size_t n) {
  std::vector<int> counts(n, count), displs(n);
  for (std::size_t k = 0; k < n; ++k) displs[k] = static_cast<int>(k) * count;
  return blocks(buffer, counts.data(), displs.data(), type, n);
}

template <class Make>
int run(const char* call, MPI_Comm comm, MPI_Request* request, Make&& make) {
  try {
    const Neighbours& n = neighbours(comm);
    std::vector<Block> in, out;
    make(n, in, out);
    return exchange(call, comm, n, in, out, request);
  } catch (const std::exception& e) {
    return raise(comm, std::string("halox_mpi: ") + call + ": " + e.what());
  }
}

}  // namespace

bool is_neighbor_request(MPI_Request request) {
  if (!any_open.load(std::memory_order_relaxed)) return false;
  std::lock_guard<std::mutex> lock(exchanges_mutex());
  return exchanges().count(request) != 0;
}

void drive_neighbor_request(MPI_Request request, bool wait) {
  std::shared_ptr<Exchange> e;
  {
    std::lock_guard<std::mutex> lock(exchanges_mutex());
    auto it = exchanges().find(request);
    if (it == exchanges().end()) return;
    e = it->second;
  }
  int done = 1;
  const int n = static_cast<int>(e->requests.size());
  const int rc = wait ? wait_or_test(WaitKind::waitall, n, e->requests.data(), nullptr, nullptr,
                                     nullptr, nullptr, MPI_STATUSES_IGNORE)
                      : wait_or_test(WaitKind::testall, n, e->requests.data(), &done, nullptr,
                                     nullptr, nullptr, MPI_STATUSES_IGNORE);
  if (!done) return;
  {
    std::lock_guard<std::mutex> lock(exchanges_mutex());
    if (exchanges().erase(request) == 0) return;  // another thread completed it
    any_open = !exchanges().empty();
  }
  *e->result = rc;  // the generalized request's wait returns it
  PMPI_Grequest_complete(request);
}

}  // namespace halox::mpi

using namespace halox::mpi;

namespace {

int alltoall(const char* call, const void* sb, int sn, MPI_Datatype st, void* rb, int rn,
             MPI_Datatype rt, MPI_Comm comm, MPI_Request* r) {
  return run(call, comm, r, [&](const Neighbours& n, auto& in, auto& out) {
    in = regular(rb, rn, rt, n.sources.size());
    out = regular(sb, sn, st, n.destinations.size());
  });
}

int alltoallv(const char* call, const void* sb, const int sn[], const int sd[], MPI_Datatype st,
              void* rb, const int rn[], const int rd[], MPI_Datatype rt, MPI_Comm comm,
              MPI_Request* r) {
  return run(call, comm, r, [&](const Neighbours& n, auto& in, auto& out) {
    in = blocks(rb, rn, rd, rt, n.sources.size());
    out = blocks(sb, sn, sd, st, n.destinations.size());
  });
}

// Displacements in bytes, a type per neighbour.
int alltoallw(const char* call, const void* sb, const int sn[], const MPI_Aint sd[],
              const MPI_Datatype st[], void* rb, const int rn[], const MPI_Aint rd[],
              const MPI_Datatype rt[], MPI_Comm comm, MPI_Request* r) {
  return run(call, comm, r, [&](const Neighbours& n, auto& in, auto& out) {
    for (std::size_t k = 0; k < n.sources.size(); ++k)
      in.push_back({address(rb, rd[k]), rn[k], rt[k]});
    for (std::size_t k = 0; k < n.destinations.size(); ++k)
      out.push_back({address(sb, sd[k]), sn[k], st[k]});
  });
}

// The same send block to every destination.
int allgatherv(const char* call, const void* sb, int sn, MPI_Datatype st, void* rb, const int rn[],
               const int rd[], MPI_Datatype rt, MPI_Comm comm, MPI_Request* r) {
  return run(call, comm, r, [&](const Neighbours& n, auto& in, auto& out) {
    in = blocks(rb, rn, rd, rt, n.sources.size());
    out.assign(n.destinations.size(), Block{sb, sn, st});
  });
}

int allgather(const char* call, const void* sb, int sn, MPI_Datatype st, void* rb, int rn,
              MPI_Datatype rt, MPI_Comm comm, MPI_Request* r) {
  return run(call, comm, r, [&](const Neighbours& n, auto& in, auto& out) {
    in = regular(rb, rn, rt, n.sources.size());
    out.assign(n.destinations.size(), Block{sb, sn, st});
  });
}

}  // namespace

extern "C" {

int MPI_Neighbor_alltoall(const void* sb, int sn, MPI_Datatype st, void* rb, int rn,
                          MPI_Datatype rt, MPI_Comm comm) {
  return alltoall("MPI_Neighbor_alltoall", sb, sn, st, rb, rn, rt, comm, nullptr);
}
int MPI_Ineighbor_alltoall(const void* sb, int sn, MPI_Datatype st, void* rb, int rn,
                           MPI_Datatype rt, MPI_Comm comm, MPI_Request* r) {
  return alltoall("MPI_Ineighbor_alltoall", sb, sn, st, rb, rn, rt, comm, r);
}
int MPI_Neighbor_alltoallv(const void* sb, const int sn[], const int sd[], MPI_Datatype st,
                           void* rb, const int rn[], const int rd[], MPI_Datatype rt,
                           MPI_Comm comm) {
  return alltoallv("MPI_Neighbor_alltoallv", sb, sn, sd, st, rb, rn, rd, rt, comm, nullptr);
}
int MPI_Ineighbor_alltoallv(const void* sb, const int sn[], const int sd[], MPI_Datatype st,
                            void* rb, const int rn[], const int rd[], MPI_Datatype rt,
                            MPI_Comm comm, MPI_Request* r) {
  return alltoallv("MPI_Ineighbor_alltoallv", sb, sn, sd, st, rb, rn, rd, rt, comm, r);
}
int MPI_Neighbor_alltoallw(const void* sb, const int sn[], const MPI_Aint sd[],
                           const MPI_Datatype st[], void* rb, const int rn[], const MPI_Aint rd[],
                           const MPI_Datatype rt[], MPI_Comm comm) {
  return alltoallw("MPI_Neighbor_alltoallw", sb, sn, sd, st, rb, rn, rd, rt, comm, nullptr);
}
int MPI_Ineighbor_alltoallw(const void* sb, const int sn[], const MPI_Aint sd[],
                            const MPI_Datatype st[], void* rb, const int rn[], const MPI_Aint rd[],
                            const MPI_Datatype rt[], MPI_Comm comm, MPI_Request* r) {
  return alltoallw("MPI_Ineighbor_alltoallw", sb, sn, sd, st, rb, rn, rd, rt, comm, r);
}
int MPI_Neighbor_allgather(const void* sb, int sn, MPI_Datatype st, void* rb, int rn,
                           MPI_Datatype rt, MPI_Comm comm) {
  return allgather("MPI_Neighbor_allgather", sb, sn, st, rb, rn, rt, comm, nullptr);
}
int MPI_Ineighbor_allgather(const void* sb, int sn, MPI_Datatype st, void* rb, int rn,
                            MPI_Datatype rt, MPI_Comm comm, MPI_Request* r) {
  return allgather("MPI_Ineighbor_allgather", sb, sn, st, rb, rn, rt, comm, r);
}
int MPI_Neighbor_allgatherv(const void* sb, int sn, MPI_Datatype st, void* rb, const int rn[],
                            const int rd[], MPI_Datatype rt, MPI_Comm comm) {
  return allgatherv("MPI_Neighbor_allgatherv", sb, sn, st, rb, rn, rd, rt, comm, nullptr);
}
int MPI_Ineighbor_allgatherv(const void* sb, int sn, MPI_Datatype st, void* rb, const int rn[],
                             const int rd[], MPI_Datatype rt, MPI_Comm comm, MPI_Request* r) {
  return allgatherv("MPI_Ineighbor_allgatherv", sb, sn, st, rb, rn, rd, rt, comm, r);
}

}  // extern "C"
