// ParticleExchange over Ranks::local with host arrays: every rank of a grid in this process,
// the pulses moved by the CPU. Checked against brute force: after the forward each
// rank holds exactly the plan's view of its halo; after the reverse each home atom holds the
// force of every copy of it over all ranks. No MPI, no GPU.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "../common/particle_world.hpp"
#include "../common/seed.hpp"
#include "halox/config.hpp"
#include "halox/exchange.hpp"

using namespace halox;
using namespace halox::testing;

namespace {

template <class Real>
void check_host(std::array<int, 3> dims, double cutoff, std::uint64_t seed) {
  const Topology topology(dims, {true, true, true}, 0);
  const World w = make_world(seed, 1200);
  const int n = topology.size();
  std::vector<std::vector<int>> ids(n);
  std::vector<std::vector<double>> xyz(n);
  for (int r = 0; r < n; ++r) home_of(w, topology, r, ids[r], xyz[r]);
  const std::vector<ParticlePlan> plans = build_local_particle_plans(topology, w.box, cutoff, xyz);
  const std::string where = topology.describe() + " cutoff " + std::to_string(cutoff) +
                            (sizeof(Real) == 4 ? " float" : " double");
  ParticleExchange exchange(Ranks::local(topology), plans,
                            sizeof(Real) == 4 ? BasicKind::float32 : BasicKind::float64);

  // Forward: home coordinates in, halo poisoned; after it every value equals the plan's view.
  std::vector<std::vector<Real>> x(n);
  std::vector<void*> xp(n);
  for (int r = 0; r < n; ++r) {
    x[r].assign(xyz[r].size(), Real(-777));
    for (std::size_t k = 0; k < 3 * static_cast<std::size_t>(plans[r].home_count); ++k) {
      x[r][k] = static_cast<Real>(xyz[r][k]);
    }
    xp[r] = x[r].data();
  }
  exchange.forward_async(xp, nullptr);
  EXPECT_TRUE(exchange.devices().empty());  // host arrays: no GPU used
  EXPECT_EQ(exchange.launches_per_exchange(), 0);
  EXPECT_EQ(exchange.stats().exchanges, 1);
  for (int r = 0; r < n; ++r) {
    for (std::size_t k = 0; k < x[r].size(); ++k) {
      ASSERT_NEAR(x[r][k], xyz[r][k], sizeof(Real) == 4 ? 2e-5 * (1 + std::abs(xyz[r][k])) : 0.0)
          << where << " rank " << r << " value " << k;
    }
  }
  // Reverse: every copy of particle i carries (1, 2, 3) * (i + 1); each home atom ends with
  // that times its number of copies over all ranks.
  const auto id_of = image_ids(w);
  std::vector<std::vector<Real>> f(n);
  std::vector<void*> fp(n);
  for (int r = 0; r < n; ++r) {
    for (std::size_t k = 0; k < xyz[r].size() / 3; ++k) {
      const int id = id_of.at({xyz[r][3 * k], xyz[r][3 * k + 1], xyz[r][3 * k + 2]});
      for (int a = 0; a < 3; ++a) f[r].push_back(static_cast<Real>((a + 1) * (id + 1.0)));
    }
    fp[r] = f[r].data();
  }
  exchange.reverse_async(fp, nullptr);
  for (int r = 0; r < n; ++r) {
    for (std::size_t h = 0; h < ids[r].size(); ++h) {
      int copies = 0;
      for (int q = 0; q < n; ++q)
        copies += images_in(w, domain_of(topology, w.box, q), cutoff, ids[r][h]);
      for (int a = 0; a < 3; ++a) {
        const double want = copies * (a + 1) * (ids[r][h] + 1.0);
        ASSERT_NEAR(f[r][3 * h + a], want, sizeof(Real) == 4 ? 1e-6 * want : 0.0)
            << where << " rank " << r << " atom " << ids[r][h];
      }
    }
  }
}

}  // namespace

TEST(LocalParticles, HostMemoryEveryGridOneAndTwoPulses) {
  const std::uint64_t seed = test_seed("LocalParticles.Host", 0);
  for (std::array<int, 3> dims :
       {std::array<int, 3>{1, 1, 1}, {2, 1, 1}, {2, 2, 2}, {3, 2, 1}, {4, 2, 1}, {3, 3, 3}}) {
    check_host<double>(dims, 2.4, seed);
    check_host<double>(dims, 3.5, seed + 1);  // two pulses along axes split 3 or 4 ways
    check_host<float>(dims, 2.4, seed + 2);
  }
}

TEST(LocalParticles, WrongNumberOfArraysIsRefused) {
  const Topology topology({2, 2, 1}, {true, true, true}, 0);
  const World w = make_world(7, 300);
  std::vector<std::vector<double>> xyz(4);
  std::vector<std::vector<int>> ids(4);
  for (int r = 0; r < 4; ++r) home_of(w, topology, r, ids[r], xyz[r]);
  const std::vector<ParticlePlan> plans = build_local_particle_plans(topology, w.box, 2.0, xyz);
  ParticleExchange exchange(Ranks::local(topology), plans, BasicKind::float64);
  std::vector<void*> three(3, xyz[0].data());
  EXPECT_THROW(exchange.forward_async(three, nullptr), Error);
  EXPECT_THROW(exchange.forward(xyz[0].data()), Error);  // one array for 4 ranks
  EXPECT_THROW(ParticleExchange(Ranks::local(topology), {plans[0]}, BasicKind::float64), Error);
  EXPECT_THROW(ParticleExchange(Ranks::local(topology), plans, BasicKind::int_), Error);
  ExchangeOptions staged;
  staged.transport = TransportKind::staged;
  EXPECT_THROW(ParticleExchange(Ranks::local(topology), plans, BasicKind::float64, staged), Error);
}

// CUDA graphs: the local ranks' GPU kernels (local-fused, the default, and local-pulse) can be
// captured, in a CUDA build; a CPU build has no graph to capture into. (The captures and
// replays themselves: gpu.local_engine's LocalEngine.TenThousandReplaysOfACapturedStep.)
TEST(LocalParticles, TheQuerySaysWhetherAGraphCanHoldTheExchange) {
  const Topology topology({2, 1, 1}, {true, true, true}, 0);
  const World w = make_world(11, 200);
  std::vector<std::vector<double>> xyz(2);
  std::vector<std::vector<int>> ids(2);
  for (int r = 0; r < 2; ++r) home_of(w, topology, r, ids[r], xyz[r]);
  const std::vector<ParticlePlan> plans = build_local_particle_plans(topology, w.box, 2.0, xyz);
  for (TransportKind kind : {TransportKind::automatic, TransportKind::local_pulse}) {
    ExchangeOptions options;
    options.transport = kind;
    const ParticleExchange exchange(Ranks::local(topology), plans, BasicKind::float64, options);
    EXPECT_EQ(exchange.capturable(), HALOX_HAS_CUDA != 0) << to_string(kind);
  }
}

// A plan edited so that it reads or writes outside its arrays is refused when an exchange
// takes it, naming the rank and the pulse: never a heap overflow.
TEST(LocalParticles, CorruptedPlansAreRefusedNotFollowed) {
  const Topology topology({2, 2, 1}, {true, true, true}, 0);
  const World w = make_world(11, 300);
  std::vector<std::vector<double>> xyz(4);
  std::vector<std::vector<int>> ids(4);
  for (int r = 0; r < 4; ++r) home_of(w, topology, r, ids[r], xyz[r]);
  const std::vector<ParticlePlan> good = build_local_particle_plans(topology, w.box, 2.0, xyz);
  ASSERT_FALSE(good[1].pulses.empty());
  ASSERT_FALSE(good[1].pulses[0].send_index.empty());
  auto refused = [&](auto&& edit, const std::string& words) {
    std::vector<ParticlePlan> plans = good;
    edit(plans[1].pulses[0], plans[1]);
    try {
      ParticleExchange exchange(Ranks::local(topology), plans, BasicKind::float64);
      ADD_FAILURE() << "accepted a plan that " << words;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("rank 1's plan: pulse 0"), std::string::npos) << m;
      EXPECT_NE(m.find(words), std::string::npos) << m;
    }
  };
  refused([](ParticlePulse& p, ParticlePlan&) { p.send_index[0] = 1000000000; },
          "sends item 1000000000");
  refused([](ParticlePulse& p, ParticlePlan&) { p.send_index[0] = -5; }, "sends item -5");
  refused([](ParticlePulse& p, ParticlePlan&) { p.recv_offset += 1000000; }, "outside the halo");
  refused([](ParticlePulse& p, ParticlePlan&) { p.header.send_size += 1; }, "header's sizes");
  refused([](ParticlePulse& p, ParticlePlan&) { p.first_forwarded = -1; }, "first_forwarded");
}
