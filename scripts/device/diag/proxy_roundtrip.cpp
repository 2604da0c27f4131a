// The host proxy's round trip without a GPU (issue 27: why a proxied halox-lbm step waits 96%
// of its time for data): two ranks, the main thread in the kernel's place on plain host memory
// (as tests/mpi/test_host_proxy.cpp), against MPI_Sendrecv of the same faces from the main
// thread, measured in the same run. Per face size: one proxy with the two faces of one axis
// (as halox-lbm on 1x1x2), and two proxies used in turn (its g and f+phi exchanges).
//   mpirun -n 2 proxy_roundtrip [exchanges]
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../../../src/transport/host_proxy.hpp"
#include "../../../tests/mpi/host_proxy_driver.hpp"

using halox::detail::HostProxy;
using halox::detail::ProxyEnds;
using namespace halox::testing::proxy;  // the kernel's side, as the test plays it

namespace {

// The kernel's waits; a wait that runs out ends the run.
void wait_for(u64* p, u64 target) {
  if (!wait_until(p, target, 10)) {
    std::fprintf(stderr, "proxy_roundtrip: a wait ran out\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

// One exchange in the kernel's place: free my staging, pack when the send staging is free,
// wait for the faces and read them.
void exchange(HostProxy& proxy, std::size_t links, std::int64_t bytes, u64 e) {
  proxy.launched(e);
  for (std::size_t k = 0; k < links; ++k) store(proxy.host_ends(k).released, e);
  for (std::size_t k = 0; k < links; ++k) {
    const ProxyEnds& h = proxy.host_ends(k);
    wait_for(h.ready, e);
    std::memset(h.send_staging, static_cast<int>(e), static_cast<std::size_t>(bytes));
    store(h.packed, e << 32);
  }
  for (std::size_t k = 0; k < links; ++k) {
    const ProxyEnds& h = proxy.host_ends(k);
    wait_for(h.data, e << 32);
    if (h.recv_staging[bytes - 1] != static_cast<char>(e)) {
      std::fprintf(stderr, "proxy_roundtrip: exchange %llu delivered a wrong face\n", e);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
  }
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2 || provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0) std::fprintf(stderr, "proxy_roundtrip: 2 ranks with MPI_THREAD_MULTIPLE\n");
    MPI_Finalize();
    return 1;
  }
  const int exchanges = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int peer = 1 - rank;
  if (rank == 0) {
    std::printf("# host proxy round trip, %d exchanges (two faces each way), us per exchange\n",
                exchanges);
    std::printf("%10s %14s %14s %8s %16s\n", "bytes", "MPI_Sendrecv", "1 proxy", "ratio",
                "2 proxies, turns");
  }
  for (const std::int64_t bytes : {16384LL, 98304LL, 1048576LL}) {
    // The reference: the main thread's MPI_Sendrecv of both faces.
    std::vector<char> out(2 * bytes, 1), in(2 * bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    auto t = std::chrono::steady_clock::now();
    for (int e = 0; e < exchanges; ++e) {
      for (int op = 0; op < 2; ++op) {
        MPI_Sendrecv(out.data() + op * bytes, static_cast<int>(bytes), MPI_BYTE, peer, op,
                     in.data() + op * bytes, static_cast<int>(bytes), MPI_BYTE, peer, op,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
    }
    const double mpi = seconds_since(t) / exchanges * 1e6;
    std::vector<std::unique_ptr<HostProxy>> proxies;
    for (int p = 0; p < 2; ++p) {  // each proxy sends on a duplicate of its own
      proxies.push_back(std::make_unique<HostProxy>(MPI_COMM_WORLD, rank, "proxy_roundtrip", 10.0,
                                                    two_rank_links({bytes, bytes}, peer),
                                                    HostProxy::Memory::host));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t = std::chrono::steady_clock::now();
    for (u64 e = 1; e <= static_cast<u64>(exchanges); ++e) exchange(*proxies[0], 2, bytes, e);
    const double one = seconds_since(t) / exchanges * 1e6;
    MPI_Barrier(MPI_COMM_WORLD);
    t = std::chrono::steady_clock::now();
    for (u64 e = 1; e <= static_cast<u64>(exchanges); ++e) {
      exchange(*proxies[1], 2, bytes, e);
      exchange(*proxies[0], 2, bytes, exchanges + e);
    }
    const double two = seconds_since(t) / (2.0 * exchanges) * 1e6;
    for (auto& p : proxies) p->throw_if_failed();
    if (rank == 0) {
      std::printf("%10lld %14.2f %14.2f %8.2f %16.2f\n", static_cast<long long>(bytes), mpi, one,
                  one / mpi, two);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    proxies.clear();
  }
  MPI_Finalize();
  return 0;
}
