// GPU pack/unpack equal the CPU reference byte for byte, for thousands of random datatypes
// (the generator of the MPI property test), with outputs poisoned before every run.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "../common/random_datatype.hpp"
#include "../common/seed.hpp"
#include "halox/pack.hpp"
#include "halox/pack_gpu.hpp"

using namespace halox;
using namespace halox::testing;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

namespace {

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { cudaMalloc(&ptr, bytes == 0 ? 1 : bytes); }
  ~DeviceBuffer() { cudaFree(ptr); }
  char* get() { return static_cast<char*>(ptr); }
};

}  // namespace

TEST(GpuPack, RandomTypesMatchCpuByteForByte) {
  RecipeGenerator gen(test_seed("GpuPack.RandomTypesMatchCpuByteForByte"));
  const long n_types = env_count("HALOX_GPU_PROPERTY_COUNT", 3000);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  long tested = 0, unpacked = 0, accumulated = 0;
  for (long i = 0; i < n_types; ++i) {
    const Recipe recipe = gen.random(4, i % 4 == 0);
    const std::string what = "type #" + std::to_string(i) + ": " + recipe.describe();
    Datatype t = to_halox(recipe);
    t.commit();
    if (t.size() == 0 || t.true_extent() > (1 << 22)) continue;
    const std::int64_t count = gen.uniform(1, 3);
    const std::int64_t span = (count - 1) * t.extent();
    const std::int64_t lo = t.true_lb() + std::min<std::int64_t>(0, span);
    const std::int64_t hi = t.true_lb() + t.true_extent() + std::max<std::int64_t>(0, span);
    // Keep the origin 16-byte aligned so all word widths get exercised.
    const std::int64_t pad = (lo % 16 + 16) % 16;
    const std::size_t n_bytes = static_cast<std::size_t>(hi - lo + pad + 16);
    const std::int64_t origin = -lo + pad;
    std::vector<unsigned char> host(n_bytes);
    for (auto& c : host) c = static_cast<unsigned char>(gen.rng()());
    const std::int64_t packed = packed_size(t, count);

    std::vector<unsigned char> expected(static_cast<std::size_t>(packed));
    pack(host.data() + origin, count, t, expected.data());

    DeviceBuffer d_in(n_bytes), d_out(static_cast<std::size_t>(packed) + 16);
    CUDA_OK(cudaMemcpy(d_in.get(), host.data(), n_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_out.get(), 0xA5, static_cast<std::size_t>(packed) + 16));  // poison
    pack_async(d_in.get() + origin, count, t, d_out.get(), stream);
    std::vector<unsigned char> got(static_cast<std::size_t>(packed) + 16);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(got.data(), d_out.get(), got.size(), cudaMemcpyDeviceToHost));
    ASSERT_EQ(std::memcmp(got.data(), expected.data(), expected.size()), 0)
        << what << "\n"
        << t.canonical().describe();
    for (std::size_t k = expected.size(); k < got.size(); ++k)
      ASSERT_EQ(got[k], 0xA5) << "wrote past the end: " << what;
    ++tested;

    if (t.overlaps(count)) continue;
    // Unpack into a poisoned buffer; the CPU does the same on identical poison.
    std::vector<unsigned char> poison(n_bytes);
    for (auto& c : poison) c = static_cast<unsigned char>(gen.rng()());
    std::vector<unsigned char> cpu = poison;
    unpack(expected.data(), cpu.data() + origin, count, t);
    CUDA_OK(cudaMemcpy(d_in.get(), poison.data(), n_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_out.get(), expected.data(), expected.size(), cudaMemcpyHostToDevice));
    unpack_async(d_out.get(), d_in.get() + origin, count, t, stream);
    std::vector<unsigned char> gpu(n_bytes);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(gpu.data(), d_in.get(), n_bytes, cudaMemcpyDeviceToHost));
    ASSERT_EQ(gpu, cpu) << "unpack: " << what;
    ++unpacked;

    BasicKind kind{};
    if (t.homogeneous(&kind) && (kind == BasicKind::float32 || kind == BasicKind::float64) &&
        gpu_pack_shape(d_in.get() + origin, count, t, d_out.get()).word_bytes >= basic_size(kind)) {
      // Accumulate: finite values on both sides, compared with the CPU's sums exactly.
      const std::size_t elem = kind == BasicKind::float32 ? 4 : 8;
      std::vector<unsigned char> base(n_bytes), addend(static_cast<std::size_t>(packed));
      auto fill = [&](std::vector<unsigned char>& v) {
        for (std::size_t k = 0; k + elem <= v.size(); k += elem) {
          const double x = static_cast<double>(gen.uniform(-1000, 1000)) / 8.0;
          if (elem == 4) {
            const float f = static_cast<float>(x);
            std::memcpy(&v[k], &f, 4);
          } else
            std::memcpy(&v[k], &x, 8);
        }
      };
      fill(base);
      fill(addend);
      // Keep the origin aligned to the element for the fill to land on element boundaries.
      std::vector<unsigned char> cpu_acc = base;
      unpack_accumulate(addend.data(), cpu_acc.data() + origin, count, t);
      CUDA_OK(cudaMemcpy(d_in.get(), base.data(), n_bytes, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(d_out.get(), addend.data(), addend.size(), cudaMemcpyHostToDevice));
      unpack_accumulate_async(d_out.get(), d_in.get() + origin, count, t, stream);
      std::vector<unsigned char> gpu_acc(n_bytes);
      CUDA_OK(cudaStreamSynchronize(stream));
      CUDA_OK(cudaMemcpy(gpu_acc.data(), d_in.get(), n_bytes, cudaMemcpyDeviceToHost));
      ASSERT_EQ(gpu_acc, cpu_acc) << "accumulate: " << what;
      ++accumulated;
    }
  }
  std::printf("GPU: %ld random types packed, %ld unpacked, %ld accumulated, all equal to the CPU\n",
              tested, unpacked, accumulated);
  CUDA_OK(cudaStreamDestroy(stream));
  EXPECT_GT(tested, n_types / 2);
}

// Ascending index types of short runs (a sorted particle gather, which takes the kernel of one
// thread per run): pack in whole and in ranges that cut runs, unpack and accumulate, against
// the CPU byte for byte, outputs poisoned. Runs of 1-4 words of 4 and 8 bytes, gaps between
// them (so the runs stay separate index entries) and, in one size, repeats of an offset.
TEST(GpuPack, AscendingGathersMatchCpuInEveryRange) {
  std::mt19937_64 rng(test_seed("GpuPack.AscendingGathersMatchCpuInEveryRange"));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  long cases = 0, ranges = 0;
  for (const BasicKind kind : {BasicKind::float32, BasicKind::float64}) {
    const std::int64_t elem = basic_size(kind);
    for (std::int64_t block = 1; block <= 5; ++block) {
      for (const std::int64_t entries : {1L, 7L, 1000L, 40000L}) {
        // Repeated offsets in one size only: a type that reads a byte twice is not unpacked.
        const bool repeats = entries == 1000;
        std::vector<std::int64_t> disps;
        std::int64_t at = 0;
        for (std::int64_t k = 0; k < entries; ++k) {
          const std::int64_t pick = static_cast<std::int64_t>(rng() % 8);
          if (repeats && k > 0 && pick == 0) {
            disps.push_back(disps.back());  // the same entry again
            continue;
          }
          at += (k > 0 ? block * elem : 0) + elem * (1 + pick);
          disps.push_back(at);
        }
        Datatype t = Datatype::hindexed_block(block, disps, Datatype::basic(kind));
        t.commit();
        const std::size_t n_bytes = static_cast<std::size_t>(t.true_lb() + t.true_extent() + 64);
        const std::int64_t packed = packed_size(t, 1);
        std::vector<unsigned char> host(n_bytes);
        for (std::size_t k = 0; k + elem <= n_bytes; k += static_cast<std::size_t>(elem)) {
          const double x = static_cast<double>(static_cast<int>(rng() % 2001) - 1000) / 8.0;
          if (elem == 4) {
            const float f = static_cast<float>(x);
            std::memcpy(&host[k], &f, 4);
          } else {
            std::memcpy(&host[k], &x, 8);
          }
        }
        std::vector<unsigned char> expected(static_cast<std::size_t>(packed));
        pack(host.data(), 1, t, expected.data());
        DeviceBuffer d_in(n_bytes), d_out(static_cast<std::size_t>(packed) + 16);
        CUDA_OK(cudaMemcpy(d_in.get(), host.data(), n_bytes, cudaMemcpyHostToDevice));
        const std::string what = std::string(elem == 4 ? "float" : "double") + " runs of " +
                                 std::to_string(block) + ", " + std::to_string(entries) +
                                 " entries";
        // The whole stream, then ranges on element boundaries that cut runs.
        for (int r = 0; r < 12; ++r) {
          std::int64_t from = 0, bytes = packed;
          if (r > 0) {
            const std::int64_t elems = packed / elem;
            from = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(elems)) * elem;
            bytes = (1 + static_cast<std::int64_t>(
                             rng() % static_cast<std::uint64_t>(elems - from / elem))) *
                    elem;
          }
          CUDA_OK(cudaMemset(d_out.get(), 0xA5, static_cast<std::size_t>(packed) + 16));
          pack_range_async(d_in.get(), 1, t, d_out.get(), from, bytes, stream);
          std::vector<unsigned char> got(static_cast<std::size_t>(bytes) + 16);
          CUDA_OK(cudaStreamSynchronize(stream));
          CUDA_OK(cudaMemcpy(got.data(), d_out.get(), got.size(), cudaMemcpyDeviceToHost));
          ASSERT_EQ(
              std::memcmp(got.data(), expected.data() + from, static_cast<std::size_t>(bytes)), 0)
              << what << ", range [" << from << ", " << from + bytes << ")";
          for (std::size_t k = static_cast<std::size_t>(bytes); k < got.size(); ++k)
            ASSERT_EQ(got[k], 0xA5) << "wrote past the range: " << what;
          ++ranges;
        }
        if (!t.overlaps(1)) {
          std::vector<unsigned char> cpu(n_bytes), poison(n_bytes);
          for (auto& c : poison) c = static_cast<unsigned char>(rng());
          cpu = poison;
          unpack(expected.data(), cpu.data(), 1, t);
          CUDA_OK(cudaMemcpy(d_in.get(), poison.data(), n_bytes, cudaMemcpyHostToDevice));
          CUDA_OK(
              cudaMemcpy(d_out.get(), expected.data(), expected.size(), cudaMemcpyHostToDevice));
          unpack_async(d_out.get(), d_in.get(), 1, t, stream);
          std::vector<unsigned char> gpu(n_bytes);
          CUDA_OK(cudaStreamSynchronize(stream));
          CUDA_OK(cudaMemcpy(gpu.data(), d_in.get(), n_bytes, cudaMemcpyDeviceToHost));
          ASSERT_EQ(gpu, cpu) << "unpack: " << what;
          // Accumulate the packed values onto the original array.
          std::vector<unsigned char> cpu_acc = host;
          unpack_accumulate(expected.data(), cpu_acc.data(), 1, t);
          CUDA_OK(cudaMemcpy(d_in.get(), host.data(), n_bytes, cudaMemcpyHostToDevice));
          unpack_accumulate_async(d_out.get(), d_in.get(), 1, t, stream);
          CUDA_OK(cudaStreamSynchronize(stream));
          CUDA_OK(cudaMemcpy(gpu.data(), d_in.get(), n_bytes, cudaMemcpyDeviceToHost));
          ASSERT_EQ(gpu, cpu_acc) << "accumulate: " << what;
        }
        ++cases;
      }
    }
  }
  std::printf("GPU: %ld ascending gathers, %ld packed ranges, all equal to the CPU\n", cases,
              ranges);
  CUDA_OK(cudaStreamDestroy(stream));
}

// copy_async (a message to oneself, typed memory to typed memory in one kernel) equals the
// CPU's pack with the source type then unpack with the destination type, byte for byte, with
// the destination poisoned: a random type to itself at another address, and a random type to
// and from a strided layout of the same size.
TEST(GpuPack, CopyBetweenTypesMatchesPackThenUnpack) {
  RecipeGenerator gen(test_seed("GpuPack.CopyBetweenTypesMatchesPackThenUnpack"));
  const long n_types = env_count("HALOX_GPU_PROPERTY_COUNT", 3000) / 3;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  // A buffer laid out for one instance of t, its origin 16-byte aligned, random bytes.
  struct Layout {
    std::int64_t origin;
    std::vector<unsigned char> bytes;
  };
  auto layout_of = [&](const Datatype& t) {
    const std::int64_t lo = t.true_lb(), pad = (lo % 16 + 16) % 16;
    Layout l{-lo + pad,
             std::vector<unsigned char>(static_cast<std::size_t>(t.true_extent() + pad + 16))};
    for (auto& c : l.bytes) c = static_cast<unsigned char>(gen.rng()());
    return l;
  };
  // GPU copy from (a, src) to (b, dst) against the CPU's pack + unpack; dst keeps its poison
  // wherever b does not write.
  auto check = [&](const Datatype& a, const Datatype& b, const std::string& what) {
    Layout src = layout_of(a), dst = layout_of(b);
    std::vector<unsigned char> packed(static_cast<std::size_t>(packed_size(a, 1)));
    pack(src.bytes.data() + src.origin, 1, a, packed.data());
    std::vector<unsigned char> expected = dst.bytes;
    unpack(packed.data(), expected.data() + dst.origin, 1, b);
    DeviceBuffer d_src(src.bytes.size()), d_dst(dst.bytes.size());
    CUDA_OK(cudaMemcpy(d_src.get(), src.bytes.data(), src.bytes.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_dst.get(), dst.bytes.data(), dst.bytes.size(), cudaMemcpyHostToDevice));
    copy_async(d_src.get() + src.origin, a, d_dst.get() + dst.origin, b, stream);
    std::vector<unsigned char> got(dst.bytes.size());
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(got.data(), d_dst.get(), got.size(), cudaMemcpyDeviceToHost));
    ASSERT_EQ(got, expected) << what;
  };
  long copied = 0;
  for (long i = 0; i < n_types; ++i) {
    const Recipe recipe = gen.random(4, i % 4 == 0);
    const std::string what = "type #" + std::to_string(i) + ": " + recipe.describe();
    Datatype t = to_halox(recipe);
    t.commit();
    if (t.size() == 0 || t.true_extent() > (1 << 22) || t.overlaps(1)) continue;
    std::int64_t element = 8;
    while (t.size() % element != 0) element /= 2;
    // Every other element of the same size: runs that differ from t's in place and width.
    Datatype strided = Datatype::vector(t.size() / element, 1, 2,
                                        Datatype::contiguous(element, Datatype::of<char>()))
                           .commit();
    check(t, t, "to itself elsewhere, " + what);
    check(t, strided, "to a strided layout, " + what);
    check(strided, t, "from a strided layout, " + what);
    if (::testing::Test::HasFatalFailure()) return;
    ++copied;
  }
  std::printf(
      "GPU: %ld random types copied to themselves and to and from strided layouts, all "
      "equal to the CPU's pack + unpack\n",
      copied);
  CUDA_OK(cudaStreamDestroy(stream));
  EXPECT_GT(copied, n_types / 3);
  // Mismatched sizes are refused.
  DeviceBuffer a(64), b(64);
  EXPECT_THROW(copy_async(a.get(), Datatype::contiguous(3, Datatype::of<int>()).commit(), b.get(),
                          Datatype::contiguous(2, Datatype::of<int>()).commit(), nullptr),
               DatatypeError);
}

TEST(GpuPack, UnpackIntoOverlappingTypeIsRefused) {
  Datatype overlapping = Datatype::vector(2, 2, 1, Datatype::of<int>());
  overlapping.commit();
  DeviceBuffer a(64), b(64);
  EXPECT_THROW(unpack_async(a.get(), b.get(), 1, overlapping, nullptr), DatatypeError);
}
