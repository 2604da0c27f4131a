// A random particle set in a periodic box, the same on every rank, and the brute-force
// references the particle halo tests check against.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "halox/plan.hpp"

namespace halox::testing {

struct World {
  Box box{{10.0, 9.0, 8.0}};
  std::vector<double> xyz;  // every particle
  int size() const { return static_cast<int>(xyz.size() / 3); }
};

inline World make_world(std::uint64_t seed, int n, Box box = Box{{10.0, 9.0, 8.0}}) {
  World w;
  w.box = box;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < n; ++i) {
    for (int a = 0; a < 3; ++a) {
      w.xyz.push_back(std::uniform_real_distribution<double>(0, w.box.length[a])(rng));
    }
  }
  return w;
}

/// Images of particle i (shifts 0 or +L per axis) inside [lo, hi + cutoff).
inline int images_in(const World& w, const Domain& d, double cutoff, int i,
                     std::vector<std::array<double, 3>>* out = nullptr) {
  int found = 0;
  for (int s = 0; s < 8; ++s) {
    std::array<double, 3> p{};
    bool inside = true;
    for (int a = 0; a < 3; ++a) {
      p[a] = w.xyz[3 * i + a] + ((s >> a) & 1) * w.box.length[a];
      inside &= p[a] >= d.lo[a] && p[a] < d.hi[a] + cutoff;
    }
    if (inside) {
      ++found;
      if (out) out->push_back(p);
    }
  }
  return found;
}

/// The home particles (ids and coordinates) of `rank`.
inline void home_of(const World& w, const Topology& t, int rank, std::vector<int>& ids,
                    std::vector<double>& xyz) {
  const Domain d = domain_of(t, w.box, rank);
  for (int i = 0; i < w.size(); ++i) {
    bool in = true;
    for (int a = 0; a < 3; ++a) in &= w.xyz[3 * i + a] >= d.lo[a] && w.xyz[3 * i + a] < d.hi[a];
    if (in) {
      ids.push_back(i);
      xyz.insert(xyz.end(), &w.xyz[3 * i], &w.xyz[3 * i + 3]);
    }
  }
}

/// Particle id of every image position (to label halo items).
inline std::map<std::array<double, 3>, int> image_ids(const World& w) {
  std::map<std::array<double, 3>, int> ids;
  const Domain everything{{0, 0, 0}, w.box.length};
  for (int i = 0; i < w.size(); ++i) {
    std::vector<std::array<double, 3>> images;
    images_in(w, everything, w.box.length[0] + w.box.length[1] + w.box.length[2], i, &images);
    for (auto& p : images) ids[p] = i;
  }
  return ids;
}

}  // namespace halox::testing
