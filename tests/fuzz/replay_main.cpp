// Without libFuzzer (GCC builds), feed the fuzz target seeded random inputs: not coverage
// guided, but it keeps the target compiled and its invariants checked in every CI run.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  const long runs = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 20000;
  const char* env = std::getenv("HALOX_TEST_SEED");
  const std::uint64_t seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
  std::printf("[seed] fuzz replay: HALOX_TEST_SEED=%llu, %ld inputs\n",
              static_cast<unsigned long long>(seed), runs);
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> input;
  for (long r = 0; r < runs; ++r) {
    input.resize(rng() % 96);
    for (auto& b : input) b = static_cast<std::uint8_t>(rng());
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::printf("fuzz replay: %ld inputs, no crash\n", runs);
  return 0;
}
