// The fused grid kernel's host proxy (src/transport/host_proxy.hpp): its protocol between
// real MPI ranks, with this test's thread in the kernel's place on the same signals (the
// proxy's memory as plain host memory, so it runs on machines without a GPU). Faces of random
// sizes, eager and rendezvous, over many exchanges arrive whole and in order; a proxy rebuilt
// mid-run serves from its first exchange, and one kept takes new face sizes from the exchange
// it is told of; a rank that
// stops exchanging becomes a time-out naming it; a face of another size than the plan says is
// an error; two exchanges' proxies on one communicator, serving at once, keep their faces
// apart. The kernel's side runs on the GPU in gpu.test_halo.ipc-fused-proxy.np2 and
// gpu.halox_lbm.decomposition.ipc-fused-proxy.np2.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../src/transport/host_proxy.hpp"
#include "../common/seed.hpp"
#include "host_proxy_driver.hpp"
#include "halox/error.hpp"

using halox::detail::HostProxy;
using halox::detail::ProxyEnds;
using halox::detail::ProxyLinkPlan;
using u64 = unsigned long long;
using halox::testing::proxy::store;
using halox::testing::proxy::two_rank_links;
using halox::testing::proxy::wait_until;

namespace {

int world(int* size = nullptr) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (size) MPI_Comm_size(MPI_COMM_WORLD, size);
  return rank;
}

// The test's seed, rank 0's on both ranks (random sizes must agree).
u64 shared_seed(const char* name) {
  u64 seed = halox::testing::test_seed(name, 0);
  MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  return seed;
}

// A communicator of the test's own, whose errors return (a stale message of a stalled
// exchange stays in it).
struct Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  Comm() {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  }
  ~Comm() { MPI_Comm_free(&comm); }
};

unsigned char pattern(u64 seed, int sender, int op, u64 exchange, std::int64_t j) {
  return static_cast<unsigned char>(seed + 131 * sender + 31 * op + 7 * exchange + j);
}

// One exchange in the kernel's place: free my receive staging, pack when my send staging is
// free, then wait for and check every face. False (with a failure) on a wait that ran out.
bool exchange(HostProxy& proxy, const std::vector<ProxyLinkPlan>& links, u64 e, u64 seed, int rank,
              int peer, double data_seconds = 10) {
  proxy.launched(e);
  for (std::size_t k = 0; k < links.size(); ++k) store(proxy.host_ends(k).released, e);
  for (std::size_t k = 0; k < links.size(); ++k) {
    const ProxyEnds& h = proxy.host_ends(k);
    if (!wait_until(h.ready, e, 10)) {
      ADD_FAILURE() << "rank " << rank << ": send staging of op " << k << " not freed for " << e;
      return false;
    }
    for (std::int64_t j = 0; j < links[k].send_bytes; ++j)
      h.send_staging[j] = static_cast<char>(pattern(seed, rank, links[k].op, e, j));
    store(h.packed, e << 32);
  }
  for (std::size_t k = 0; k < links.size(); ++k) {
    const ProxyEnds& h = proxy.host_ends(k);
    if (!wait_until(h.data, e << 32, data_seconds)) return false;
    for (std::int64_t j = 0; j < links[k].recv_bytes; ++j) {
      const auto want = pattern(seed, peer, links[k].op, e, j);
      if (static_cast<unsigned char>(h.recv_staging[j]) != want) {
        ADD_FAILURE() << "rank " << rank << ", exchange " << e << ", op " << k << ", byte " << j
                      << ": " << int(static_cast<unsigned char>(h.recv_staging[j])) << ", expected "
                      << int(want);
        return false;
      }
    }
  }
  return true;
}

}  // namespace

TEST(HostProxy, FacesOfRandomSizesArriveWholeAndInOrderOverManyExchanges) {
  int size = 0;
  const int rank = world(&size);
  if (size != 2) GTEST_SKIP() << "two ranks";
  Comm c;
  const u64 seed = shared_seed("HostProxy.Faces");
  if (rank == 0) std::printf("HostProxy seed %llu\n", seed);
  std::mt19937_64 random(seed);
  // Sizes alike on both ranks (one seed): small (eager) and large (rendezvous) faces.
  std::vector<std::int64_t> bytes;
  for (int op = 0; op < 4; ++op)
    bytes.push_back(op % 2 ? 1 + random() % 256 : 100000 + random() % 400000);
  const auto links = two_rank_links(bytes, 1 - rank);
  HostProxy proxy(c.comm, rank, "ipc-fused", 5.0, links, HostProxy::Memory::host);
  proxy.self_test();
  constexpr u64 kExchanges = 200;
  for (u64 e = 1; e <= kExchanges; ++e) {
    if (!exchange(proxy, links, e, seed, rank, 1 - rank)) {
      proxy.throw_if_failed();
      FAIL() << "rank " << rank << ": exchange " << e << " did not complete";
    }
  }
  EXPECT_NO_THROW(proxy.throw_if_failed());
  MPI_Barrier(MPI_COMM_WORLD);
}

// Two exchanges over one communicator whose kernels run at once (two streams): their proxy
// threads post messages with the same tags; on the communicator itself they matched each
// other's, so each proxy works on a duplicate of its own.
TEST(HostProxy, TwoProxiesOnOneCommunicatorKeepTheirFacesApart) {
  int size = 0;
  const int rank = world(&size);
  if (size != 2) GTEST_SKIP() << "two ranks";
  Comm c;
  const u64 seed = shared_seed("HostProxy.Two");
  // Sizes differ between the two exchanges, so a face taken by the other proxy is an error.
  const auto links_a = two_rank_links({96, 48000}, 1 - rank);
  const auto links_b = two_rank_links({160, 64000}, 1 - rank);
  HostProxy a(c.comm, rank, "ipc-fused", 5.0, links_a, HostProxy::Memory::host);
  HostProxy b(c.comm, rank, "ipc-fused", 5.0, links_b, HostProxy::Memory::host);
  constexpr u64 kExchanges = 300;
  auto drive = [&](HostProxy& proxy, const std::vector<ProxyLinkPlan>& links, u64 own_seed) {
    for (u64 e = 1; e <= kExchanges; ++e) {
      if (!exchange(proxy, links, e, own_seed, rank, 1 - rank)) {
        ADD_FAILURE() << "rank " << rank << ": exchange " << e << " did not complete";
        return;
      }
    }
  };
  std::thread second([&] { drive(b, links_b, seed + 1); });
  drive(a, links_a, seed);
  second.join();
  EXPECT_NO_THROW(a.throw_if_failed());
  EXPECT_NO_THROW(b.throw_if_failed());
  MPI_Barrier(MPI_COMM_WORLD);
}

// The particle engine rebuilds its proxies at every new plan while its exchange counters run
// on: a proxy built at exchange 37 with faces of other sizes serves from there (its send
// staging free for 37 at once); one that started at exchange 1 fails this test.
TEST(HostProxy, AProxyRebuiltMidRunServesFromItsFirstExchange) {
  int size = 0;
  const int rank = world(&size);
  if (size != 2) GTEST_SKIP() << "two ranks";
  Comm c;
  const u64 seed = shared_seed("HostProxy.Rebuilt");
  u64 e = 1;
  {
    const auto links = two_rank_links({64, 120000}, 1 - rank);
    HostProxy proxy(c.comm, rank, "ipc-fused", 5.0, links, HostProxy::Memory::host);
    for (; e < 37; ++e) ASSERT_TRUE(exchange(proxy, links, e, seed, rank, 1 - rank)) << e;
    EXPECT_NO_THROW(proxy.throw_if_failed());
  }
  const auto links = two_rank_links({200, 36, 90000}, 1 - rank);
  HostProxy proxy(c.comm, rank, "ipc-fused", 5.0, links, HostProxy::Memory::host, e);
  proxy.self_test();
  for (const u64 last = e + 50; e < last; ++e)
    ASSERT_TRUE(exchange(proxy, links, e, seed + 1, rank, 1 - rank)) << e;
  EXPECT_NO_THROW(proxy.throw_if_failed());
  MPI_Barrier(MPI_COMM_WORLD);
}

// A new plan with the same proxied links keeps the proxy (the particle engine's neighbour
// searches): faces resized within their staging from a later exchange on, the exchanges
// before it served with the old sizes although the resize came first; links that are not
// the proxy's, or a face larger than its staging, do not fit.
TEST(HostProxy, AKeptProxyTakesNewFaceSizesFromTheExchangeItIsToldOf) {
  int size = 0;
  const int rank = world(&size);
  if (size != 2) GTEST_SKIP() << "two ranks";
  Comm c;
  const u64 seed = shared_seed("HostProxy.Kept");
  auto old_links = two_rank_links({64, 120000}, 1 - rank);
  old_links[0].send_capacity = old_links[0].recv_capacity = 200;
  old_links[1].send_capacity = old_links[1].recv_capacity = 150000;
  HostProxy proxy(c.comm, rank, "ipc-fused", 5.0, old_links, HostProxy::Memory::host);
  proxy.self_test();
  EXPECT_TRUE(proxy.fits(two_rank_links({200, 150000}, 1 - rank)));
  // Smaller faces: an exchange before the resize's served with them loses bytes the test checks.
  const auto new_links = two_rank_links({32, 90000}, 1 - rank);
  EXPECT_TRUE(proxy.fits(new_links));
  EXPECT_FALSE(proxy.fits(two_rank_links({201, 64}, 1 - rank)));     // over its staging
  EXPECT_FALSE(proxy.fits(two_rank_links({64, 64, 64}, 1 - rank)));  // another link
  auto other_peer = two_rank_links({64, 64}, 1 - rank);
  other_peer[1].send_rank = -1;  // sends nothing on op 1 now
  EXPECT_FALSE(proxy.fits(other_peer));
  u64 e = 1;
  for (; e < 30; ++e) ASSERT_TRUE(exchange(proxy, old_links, e, seed, rank, 1 - rank)) << e;
  proxy.resize(new_links, 37);
  for (; e < 37; ++e) ASSERT_TRUE(exchange(proxy, old_links, e, seed, rank, 1 - rank)) << e;
  for (; e < 87; ++e) ASSERT_TRUE(exchange(proxy, new_links, e, seed, rank, 1 - rank)) << e;
  EXPECT_NO_THROW(proxy.throw_if_failed());
  EXPECT_THROW(proxy.resize(two_rank_links({201, 64}, 1 - rank), e), halox::Error);
  // A counter that went back (new blocks restart theirs at 1) is an error, not a wait.
  EXPECT_THROW(proxy.resize(new_links, 1), halox::Error);
  EXPECT_THROW(proxy.resize(new_links, e - 1), halox::Error);
  EXPECT_NO_THROW(proxy.resize(new_links, e));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(HostProxy, ARankThatStopsExchangingBecomesATimeOutNamingIt) {
  int size = 0;
  const int rank = world(&size);
  if (size != 2) GTEST_SKIP() << "two ranks";
  Comm c;
  const u64 seed = halox::testing::test_seed("HostProxy.Stall", 0);
  const auto links = two_rank_links({64, 64}, 1 - rank);
  HostProxy proxy(c.comm, rank, "ipc-fused", 0.3, links, HostProxy::Memory::host);
  EXPECT_TRUE(exchange(proxy, links, 1, seed, rank, 1 - rank));  // both ranks
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {  // rank 1 stops: its face of exchange 2 never comes
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(exchange(proxy, links, 2, seed, rank, 1, 1.5));
    std::string message;
    try {
      proxy.throw_if_failed();
    } catch (const halox::HaloTimeoutError& e) {
      message = e.what();
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("host proxy, stalled peer: %s (%.2f s)\n", message.c_str(), waited);
    EXPECT_NE(message.find("rank 0 timed out after 0.3 s"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
    EXPECT_NE(message.find("host proxy"), std::string::npos) << message;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(HostProxy, AFaceOfAnotherSizeThanThePlanIsAnError) {
  int size = 0;
  const int rank = world(&size);
  if (size != 2) GTEST_SKIP() << "two ranks";
  Comm c;
  const u64 seed = halox::testing::test_seed("HostProxy.Size", 0);
  // Rank 0 expects 100 bytes on op 0; rank 1 sends 64.
  auto links = two_rank_links({64}, 1 - rank);
  if (rank == 0) links[0].recv_bytes = 100;
  HostProxy proxy(c.comm, rank, "ipc-fused", 2.0, links, HostProxy::Memory::host);
  const bool done = exchange(proxy, links, 1, seed, rank, 1 - rank, 1.5);
  if (rank == 0) {
    EXPECT_FALSE(done);
    std::string message;
    try {
      proxy.throw_if_failed();
    } catch (const halox::Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("received 64 bytes from rank 1 on pulse 0"), std::string::npos)
        << message;
    EXPECT_NE(message.find("plan says 100"), std::string::npos) << message;
  } else {
    EXPECT_TRUE(done);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
