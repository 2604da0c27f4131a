// The seed of a property test: HALOX_TEST_SEED if set, else random; always printed so a
// failure can be replayed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace halox::testing {

inline std::uint64_t test_seed(const char* test_name, int rank = 0) {
  static std::uint64_t base = []() -> std::uint64_t {
    if (const char* env = std::getenv("HALOX_TEST_SEED")) return std::strtoull(env, nullptr, 10);
    return (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }();
  const std::uint64_t seed = base + static_cast<std::uint64_t>(rank);
  std::printf("[seed] %s rank %d: HALOX_TEST_SEED=%llu (rank seed %llu)\n", test_name, rank,
              static_cast<unsigned long long>(base), static_cast<unsigned long long>(seed));
  return seed;
}

inline long env_count(const char* name, long fallback) {
  const char* env = std::getenv(name);
  return env ? std::strtol(env, nullptr, 10) : fallback;
}

}  // namespace halox::testing
