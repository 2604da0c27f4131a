// ForwardingGraph (src/device/forwarding_graph.hpp): where the fused particle kernels read
// each forwarded item from. Checked on the CPU against a plain simulation of the host
// transport's pulses: every forward source, with its shifts added in the order given, is
// exactly the coordinate the pulse sends; and the reverse as the kernels do it (each
// received item's own force plus its terms sent back, added into home items, or at the
// origin where the item came back from outside the launch) ends with exactly the host
// transport's home forces (integer-valued forces, so any order of addition is exact). With
// every rank in the launch (the local engine on one GPU: no waits at all, so every pulse
// can go direct), with each rank alone (the ipc and nvshmem engines: pulses from other
// ranks waited for, pulses to itself never read from staging, so direct), and with half
// the ranks (the local engine over two GPUs).
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../../src/device/forwarding_graph.hpp"
#include "../common/particle_world.hpp"
#include "../common/seed.hpp"

using namespace halox;
using namespace halox::testing;
using halox::detail::ForwardingGraph;
using halox::detail::kPulseBits;
using halox::detail::kPulseMask;

namespace {

struct Case {
  std::vector<ParticlePlan> plans;
  std::vector<std::vector<double>> xyz;    // home and halo coordinates (the plans' view)
  std::vector<std::vector<double>> f;      // forces before the reverse, integer-valued
  std::vector<std::vector<double>> final;  // after the host transport's reverse
  // sent[r][p][j]: the force rank r sends back for its received item j of pulse p, as the
  // host transport computes it (reverse pulses last to first, adding into the senders).
  std::vector<std::vector<std::vector<std::array<double, 3>>>> sent;
};

Case make_case(std::array<int, 3> dims, double cutoff, std::uint64_t seed) {
  const Topology topology(dims, {true, true, true}, 0);
  const World w = make_world(seed, 1500);
  const int n = topology.size();
  Case c;
  c.xyz.resize(n);
  std::vector<std::vector<int>> ids(n);
  for (int r = 0; r < n; ++r) home_of(w, topology, r, ids[r], c.xyz[r]);
  c.plans = build_local_particle_plans(topology, w.box, cutoff, c.xyz);
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int> value(-1000, 1000);
  c.f.resize(n);
  for (int r = 0; r < n; ++r) {
    c.f[r].resize(3 * static_cast<std::size_t>(c.plans[r].total_count));
    for (double& v : c.f[r]) v = value(random);
  }
  // The host transport's reverse, pulse by pulse from the last.
  std::vector<std::vector<double>> f = c.f;
  const int npulses = static_cast<int>(c.plans[0].pulses.size());
  c.sent.assign(n, std::vector<std::vector<std::array<double, 3>>>(npulses));
  for (int p = npulses - 1; p >= 0; --p) {
    for (int r = 0; r < n; ++r) {
      const ParticlePulse& pulse = c.plans[r].pulses[p];
      for (std::int64_t j = 0; j < pulse.recv_count; ++j) {
        const double* v = &f[r][3 * (pulse.recv_offset + j)];
        c.sent[r][p].push_back({v[0], v[1], v[2]});
      }
    }
    for (int r = 0; r < n; ++r) {
      const ParticlePulse& pulse = c.plans[r].pulses[p];
      if (pulse.header.recv_rank < 0) continue;
      // What r received in pulse p came from recv_rank's send list of pulse p, in order.
      const int from = pulse.header.recv_rank;
      const ParticlePulse& theirs = c.plans[from].pulses[p];
      for (std::size_t j = 0; j < theirs.send_index.size(); ++j) {
        for (int a = 0; a < 3; ++a) {
          f[from][3 * static_cast<std::size_t>(theirs.send_index[j]) + a] += c.sent[r][p][j][a];
        }
      }
    }
  }
  c.final = std::move(f);
  return c;
}

// Every pulse of every rank of `launch` (indices into the case's ranks).
void check_graph(const Case& c, const std::vector<int>& launch, const std::string& where) {
  std::vector<const ParticlePlan*> plans;
  for (int r : launch) plans.push_back(&c.plans[r]);
  const ForwardingGraph graph(launch, plans);
  const int npulses = static_cast<int>(c.plans[0].pulses.size());
  for (std::size_t k = 0; k < launch.size(); ++k) {
    const int rank = launch[k];
    const ParticlePlan& plan = c.plans[rank];
    for (int p = 0; p < npulses; ++p) {
      const ParticlePulse& pulse = plan.pulses[p];
      const std::string at =
          where + " rank " + std::to_string(rank) + " pulse " + std::to_string(p);
      // Forward: the source, with the shifts it still needs, is the item the pulse sends.
      std::vector<int> source, shifts;
      unsigned deps = 0;
      for (std::int64_t j = pulse.first_forwarded;
           j < static_cast<std::int64_t>(pulse.send_index.size()); ++j) {
        graph.forward_source(static_cast<int>(k), p, static_cast<std::size_t>(j), source, shifts,
                             deps);
      }
      for (std::size_t e = 0; 3 * e < source.size(); ++e) {
        const int from = source[3 * e], index = source[3 * e + 1], hops = source[3 * e + 2];
        std::array<double, 3> v{};
        if (from >= 0) {
          const int owner = launch[from];
          ASSERT_LT(index, c.plans[owner].home_count) << at << ": a source that is no home item";
          for (int a = 0; a < 3; ++a) v[a] = c.xyz[owner][3 * static_cast<std::size_t>(index) + a];
        } else {
          const int q = index & kPulseMask;
          ASSERT_TRUE(deps >> q & 1u) << at << ": staging of pulse " << q << " read unwaited";
          ASSERT_LT(q, p);
          // A rank alone reads only the staging of pulses from other ranks: its pulses to
          // itself are never read from staging, so they can all go direct.
          if (launch.size() == 1) {
            ASSERT_NE(plan.pulses[q].header.recv_rank, rank) << at << ": staging of a self pulse";
          }
          const std::int64_t i = plan.pulses[q].recv_offset + (index >> kPulseBits);
          for (int a = 0; a < 3; ++a) v[a] = c.xyz[rank][3 * static_cast<std::size_t>(i) + a];
        }
        for (int s = hops >> kPulseBits; s < (hops >> kPulseBits) + (hops & kPulseMask); ++s) {
          const int hop = shifts[s];
          const ParticlePulse& through =
              c.plans[launch[hop >> kPulseBits]].pulses[hop & kPulseMask];
          for (int a = 0; a < 3; ++a) v[a] += through.shift[a];
        }
        const std::size_t item = pulse.send_index[pulse.first_forwarded + e];
        for (int a = 0; a < 3; ++a) {
          ASSERT_EQ(v[a], c.xyz[rank][3 * item + a]) << at << " forwarded item " << e;
        }
      }
      if (launch.size() == c.plans.size()) {
        EXPECT_EQ(deps, 0u) << at << ": every rank in the launch, yet a wait";
      }
      // Reverse: the terms are other launch ranks' halo items, or staging that is waited for.
      unsigned rev_deps = 0;
      for (std::int64_t j = 0; j < pulse.recv_count; ++j) {
        std::vector<int> terms;
        ASSERT_TRUE(graph.returned_terms(static_cast<int>(k), static_cast<int>(k),
                                         pulse.recv_offset + j, terms, rev_deps));
        for (std::size_t t = 0; t < terms.size(); t += 2) {
          if (terms[t] >= 0) {
            ASSERT_GE(terms[t + 1], c.plans[launch[terms[t]]].home_count)
                << at << ": a term that is a home item";
            continue;
          }
          const int q = terms[t + 1] & kPulseMask;
          ASSERT_GT(q, p) << at << ": a term from an earlier pulse";
          ASSERT_TRUE(rev_deps >> q & 1u) << at << ": staging of pulse " << q << " unwaited";
          if (launch.size() == 1) {
            ASSERT_NE(plan.pulses[q].header.send_rank, rank) << at << ": staging of a self pulse";
          }
        }
      }
      if (launch.size() == c.plans.size()) {
        EXPECT_EQ(rev_deps, 0u) << at << ": every rank in the launch, yet a wait";
      }
    }
  }
}

// The reverse as the kernels do it, every rank in one of `launches`: rank r returns, for its
// received item j of pulse p, its own force plus the terms (other launch ranks' own forces;
// what a rank outside returned, read from staging). The sender adds that into its home item;
// a forwarded item's force, from outside the launch, goes to the item's origin if that is
// in the launch, else the pulse that received it sums it as a staging term (from inside,
// the terms already hold it). The home forces must end as the host transport's.
void check_reverse(const Case& c, const std::vector<std::vector<int>>& launches,
                   const std::string& where) {
  const int n = static_cast<int>(c.plans.size());
  std::vector<int> launch_of(n), index_in(n);
  std::vector<std::vector<const ParticlePlan*>> plans(launches.size());
  for (std::size_t l = 0; l < launches.size(); ++l) {
    for (std::size_t k = 0; k < launches[l].size(); ++k) {
      launch_of[launches[l][k]] = static_cast<int>(l);
      index_in[launches[l][k]] = static_cast<int>(k);
      plans[l].push_back(&c.plans[launches[l][k]]);
    }
  }
  std::vector<std::unique_ptr<ForwardingGraph>> graphs;
  for (std::size_t l = 0; l < launches.size(); ++l)
    graphs.push_back(std::make_unique<ForwardingGraph>(launches[l], plans[l]));
  const int npulses = static_cast<int>(c.plans[0].pulses.size());
  std::vector<std::vector<std::vector<std::array<double, 3>>>> out(
      n, std::vector<std::vector<std::array<double, 3>>>(npulses));
  for (int p = npulses - 1; p >= 0; --p) {
    for (int r = 0; r < n; ++r) {
      const ParticlePulse& pulse = c.plans[r].pulses[p];
      const std::vector<int>& launch = launches[launch_of[r]];
      for (std::int64_t j = 0; j < pulse.recv_count; ++j) {
        const std::int64_t slot = pulse.recv_offset + j;
        std::vector<int> terms;
        unsigned deps = 0;
        graphs[launch_of[r]]->returned_terms(index_in[r], index_in[r], slot, terms, deps);
        std::array<double, 3> v{};
        for (int a = 0; a < 3; ++a) v[a] = c.f[r][3 * static_cast<std::size_t>(slot) + a];
        for (std::size_t t = 0; t < terms.size(); t += 2) {
          if (terms[t] >= 0) {
            const int owner = launch[terms[t]];
            for (int a = 0; a < 3; ++a)
              v[a] += c.f[owner][3 * static_cast<std::size_t>(terms[t + 1]) + a];
          } else {
            const int q = terms[t + 1] & kPulseMask, i = terms[t + 1] >> kPulseBits;
            const int to = c.plans[r].pulses[q].header.send_rank;
            for (int a = 0; a < 3; ++a) v[a] += out[to][q][i][a];
          }
        }
        out[r][p].push_back(v);
      }
    }
  }
  std::vector<std::vector<double>> home(n);
  for (int r = 0; r < n; ++r)
    home[r].assign(c.f[r].begin(), c.f[r].begin() + 3 * c.plans[r].home_count);
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < npulses; ++p) {
      const int from = c.plans[r].pulses[p].header.recv_rank;
      if (from < 0) continue;
      const ParticlePulse& theirs = c.plans[from].pulses[p];
      for (std::size_t j = 0; j < theirs.send_index.size(); ++j) {
        const std::int64_t item = theirs.send_index[j];
        std::int64_t at = item;
        int owner = from;
        if (item >= c.plans[from].home_count) {
          if (launch_of[r] == launch_of[from]) continue;  // in the terms
          std::vector<int> source, shifts;
          unsigned deps = 0;
          graphs[launch_of[from]]->forward_source(index_in[from], p, j, source, shifts, deps);
          if (source[0] < 0) continue;  // a staging term of the pulse that received it
          owner = launches[launch_of[from]][source[0]];
          at = source[1];
        }
        for (int a = 0; a < 3; ++a)
          home[owner][3 * static_cast<std::size_t>(at) + a] += out[r][p][j][a];
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < home[r].size(); ++i) {
      ASSERT_EQ(home[r][i], c.final[r][i]) << where << ": rank " << r << " home force " << i / 3;
    }
  }
}

}  // namespace

TEST(ForwardingGraph, SourcesAndReturnedForcesEqualTheHostTransport) {
  const std::uint64_t seed = test_seed("ForwardingGraph", 0);
  for (std::array<int, 3> dims : {std::array<int, 3>{1, 1, 1},
                                  {2, 1, 1},
                                  {1, 1, 2},
                                  {1, 2, 1},
                                  {2, 2, 2},
                                  {3, 2, 1},
                                  {4, 2, 1},
                                  {1, 3, 3},
                                  {3, 3, 3}}) {
    for (double cutoff : {2.4, 3.5}) {  // 3.5: two pulses along axes split 3 or 4 ways
      const Case c = make_case(dims, cutoff, seed);
      const int n = static_cast<int>(c.plans.size());
      const std::string where = std::to_string(dims[0]) + "x" + std::to_string(dims[1]) + "x" +
                                std::to_string(dims[2]) + " cutoff " + std::to_string(cutoff);
      std::vector<int> all(n);
      for (int r = 0; r < n; ++r) all[r] = r;
      check_graph(c, all, where + ", every rank in the launch");
      for (int r = 0; r < n; ++r) check_graph(c, {r}, where + ", rank alone");
      check_reverse(c, {all}, where + ", one launch");
      std::vector<std::vector<int>> alone;
      for (int r = 0; r < n; ++r) alone.push_back({r});
      check_reverse(c, alone, where + ", each rank alone");
      // The first half of the ranks (the local engine over two GPUs): items that reach a
      // rank outside through another launch rank fall back to their first hop's staging.
      if (n >= 2) {
        check_graph(c, std::vector<int>(all.begin(), all.begin() + n / 2),
                    where + ", half the ranks");
        check_reverse(c,
                      {std::vector<int>(all.begin(), all.begin() + n / 2),
                       std::vector<int>(all.begin() + n / 2, all.end())},
                      where + ", two halves");
      }
    }
  }
}
