// GPU pack/unpack equal the CPU reference byte for byte, for thousands of random datatypes
// (the generator of the MPI property test), with outputs poisoned before every run.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
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

// Packs t (elements of `elem` bytes, finite random values) on the GPU in whole and in 11
// random ranges on element boundaries, unpacks and accumulates, each against the CPU byte for
// byte with the outputs poisoned; counts the ranges packed.
void expect_like_cpu(const Datatype& t, std::int64_t elem, std::mt19937_64& rng,
                     cudaStream_t stream, const std::string& what, long& ranges) {
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
  // The whole stream, then ranges on element boundaries that cut runs.
  for (int r = 0; r < 12; ++r) {
    std::int64_t from = 0, bytes = packed;
    if (r > 0) {
      const std::int64_t elems = packed / elem;
      from = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(elems)) * elem;
      bytes =
          (1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(elems - from / elem))) *
          elem;
    }
    CUDA_OK(cudaMemset(d_out.get(), 0xA5, static_cast<std::size_t>(packed) + 16));
    pack_range_async(d_in.get(), 1, t, d_out.get(), from, bytes, stream);
    std::vector<unsigned char> got(static_cast<std::size_t>(bytes) + 16);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(got.data(), d_out.get(), got.size(), cudaMemcpyDeviceToHost));
    ASSERT_EQ(std::memcmp(got.data(), expected.data() + from, static_cast<std::size_t>(bytes)), 0)
        << what << ", range [" << from << ", " << from + bytes << ")";
    for (std::size_t k = static_cast<std::size_t>(bytes); k < got.size(); ++k)
      ASSERT_EQ(got[k], 0xA5) << "wrote past the range: " << what;
    ++ranges;
  }
  if (t.overlaps(1)) return;
  std::vector<unsigned char> cpu(n_bytes), poison(n_bytes);
  for (auto& c : poison) c = static_cast<unsigned char>(rng());
  cpu = poison;
  unpack(expected.data(), cpu.data(), 1, t);
  CUDA_OK(cudaMemcpy(d_in.get(), poison.data(), n_bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_out.get(), expected.data(), expected.size(), cudaMemcpyHostToDevice));
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
        const std::string what = std::string(elem == 4 ? "float" : "double") + " runs of " +
                                 std::to_string(block) + ", " + std::to_string(entries) +
                                 " entries";
        expect_like_cpu(t, elem, rng, stream, what, ranges);
        if (::testing::Test::HasFatalFailure()) return;
        ++cases;
      }
    }
  }
  // Gathers whose first two entries touch (and the last two): the canonical form merges the
  // first two into a run of its own, and the GPU plan must take it back into one index of
  // equal runs (the kernel of one thread per run), in sorted and in shuffled order.
  for (const bool sorted : {true, false}) {
    for (const std::int64_t block : {1L, 3L}) {
      const std::int64_t elem = 4, entries = 5000;
      std::vector<std::int64_t> disps;
      std::int64_t at = elem;
      for (std::int64_t k = 0; k < entries; ++k) {
        const bool touch = k == 0 || k == entries - 2;
        disps.push_back(at);
        at += block * elem + (touch ? 0 : elem * (1 + rng() % 8));
      }
      if (!sorted) std::shuffle(disps.begin() + 2, disps.end() - 2, rng);
      Datatype t = Datatype::hindexed_block(block, disps, Datatype::of<float>()).commit();
      const std::string what = std::string(sorted ? "sorted" : "shuffled") + " runs of " +
                               std::to_string(block) + " floats, the first two touching";
      ASSERT_GT(t.canonical().pieces.size(), 1u) << what << ": " << t.canonical().describe();
      DeviceBuffer probe(16);
      EXPECT_EQ(gpu_pack_shape(probe.get(), 1, t, probe.get()).pieces, 1) << what;
      expect_like_cpu(t, elem, rng, stream, what, ranges);
      if (::testing::Test::HasFatalFailure()) return;
      ++cases;
    }
  }
  std::printf("GPU: %ld ascending gathers, %ld packed ranges, all equal to the CPU\n", cases,
              ranges);
  CUDA_OK(cudaStreamDestroy(stream));
}

// A lattice's subset of distributions on one face (the D3Q19 5-of-19 x face and its kind):
// pieces of one strided shape at several offsets, which the canonical form merges where they
// are evenly spaced. Random lattices, subsets, axes, widths and element sizes, two instances
// of the whole lattice, and a second shape beside the face, against the CPU in whole and in
// ranges.
TEST(GpuPack, LatticeSubsetsMatchCpuInEveryRange) {
  std::mt19937_64 rng(test_seed("GpuPack.LatticeSubsetsMatchCpuInEveryRange"));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  long types = 0, ranges = 0;
  for (int i = 0; i < 60; ++i) {
    const bool dbl = i % 2 == 1;
    const std::int64_t elem = dbl ? 8 : 4;
    const std::int64_t q = i % 3 == 0 ? 7 : (i % 3 == 1 ? 19 : 27);
    const std::int64_t n[3] = {static_cast<std::int64_t>(3 + rng() % 20),
                               static_cast<std::int64_t>(3 + rng() % 20),
                               static_cast<std::int64_t>(3 + rng() % 40)};
    const int axis = static_cast<int>(rng() % 3);  // 0: x (the last, fastest index)
    const std::int64_t width = 1 + static_cast<std::int64_t>(rng() % 2);
    std::vector<std::int64_t> sub{n[0], n[1], n[2]}, start{0, 0, 0};
    sub[2 - axis] = width;
    start[2 - axis] = static_cast<std::int64_t>(rng() % 2) * (n[2 - axis] - width);
    const Datatype e = dbl ? Datatype::of<double>() : Datatype::of<float>();
    const Datatype face =
        Datatype::subarray(std::vector<std::int64_t>{n[0], n[1], n[2]}, sub, start, Order::c, e);
    // A random subset in random order; every tenth type takes all of Q in two instances, and
    // another tenth has a second shape.
    std::vector<std::int64_t> all(static_cast<std::size_t>(q));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    const std::size_t pick = i % 10 == 9 ? all.size() : 2 + rng() % 8;
    std::vector<std::int64_t> disps, lengths;
    const std::int64_t plane = n[0] * n[1] * n[2] * elem;
    for (std::size_t k = 0; k < std::min(pick, all.size()); ++k) {
      disps.push_back(all[k] * plane);
      lengths.push_back(1);
    }
    Datatype t = Datatype::hindexed(lengths, disps, face);
    if (i % 10 == 4) {  // two shapes: this face and a row after the lattice
      const std::vector<std::int64_t> one{1, 1}, at{0, q * plane};
      const std::vector<Datatype> parts{t, Datatype::contiguous(n[2], e)};
      t = Datatype::struct_(one, at, parts);
    }
    const std::int64_t instances = i % 10 == 9 ? 2 : 1;
    if (instances > 1) t = Datatype::contiguous(instances, Datatype::resized(t, 0, q * plane));
    t.commit();
    const std::string what =
        "Q" + std::to_string(q) + " " + std::to_string(pick) + " of " + std::to_string(q) + " x" +
        std::to_string(instances) + ", " + "xyz"[axis] + " face w" + std::to_string(width) +
        " of " + std::to_string(n[0]) + "x" + std::to_string(n[1]) + "x" + std::to_string(n[2]) +
        (dbl ? " double" : " float") + (i % 10 == 4 ? " and a row" : "") + ": " +
        t.canonical().describe().substr(0, 300);
    expect_like_cpu(t, elem, rng, stream, what, ranges);
    if (::testing::Test::HasFatalFailure()) return;
    ++types;
  }
  std::printf("GPU: %ld lattice subsets, %ld packed ranges, all equal to the CPU\n", types, ranges);
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

// pack_async and unpack_async captured into a CUDA graph (stream capture in global mode, as a
// simulation captures its step), on a blocking and on a non-blocking stream, for random types
// whose first use is inside the capture (their plan is made then) and again for the same types
// once planned: each replay, after new input was copied in, packs and unpacks the new data,
// against the CPU byte for byte, outputs poisoned before every replay.
TEST(GpuPack, CapturedInAGraphEachReplayMovesItsData) {
  RecipeGenerator gen(test_seed("GpuPack.CapturedInAGraphEachReplayMovesItsData"));
  const long n_types = std::min<long>(env_count("HALOX_GPU_PROPERTY_COUNT", 3000) / 10, 300);
  long graphs = 0, replays = 0;
  for (const bool blocking : {true, false}) {
    cudaStream_t stream;
    CUDA_OK(blocking ? cudaStreamCreate(&stream)
                     : cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (long i = 0; i < n_types; ++i) {
      const Recipe recipe = gen.random(4, i % 4 == 0);
      Datatype t = to_halox(recipe);
      t.commit();
      if (t.size() == 0 || t.true_extent() > (1 << 20)) continue;
      const std::int64_t pad = (t.true_lb() % 16 + 16) % 16;  // origin 16-byte aligned
      const std::int64_t origin = -t.true_lb() + pad;
      const std::size_t n_bytes = static_cast<std::size_t>(t.true_extent() + pad + 16);
      const std::int64_t packed = packed_size(t, 1);
      const bool unpacks = !t.overlaps(1);
      DeviceBuffer d_in(n_bytes), d_out(static_cast<std::size_t>(packed)), d_back(n_bytes);
      for (const bool planned : {false, true}) {
        const std::string what = std::string(blocking ? "blocking" : "non-blocking") + " stream, " +
                                 (planned ? "planned type #" : "new type #") + std::to_string(i) +
                                 ": " + recipe.describe();
        cudaGraph_t graph = nullptr;
        CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        pack_async(d_in.get() + origin, 1, t, d_out.get(), stream);
        if (unpacks) unpack_async(d_out.get(), d_back.get() + origin, 1, t, stream);
        ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess) << what;
        cudaGraphExec_t exec = nullptr;
        ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess) << what;
        for (int replay = 0; replay < 2; ++replay) {
          std::vector<unsigned char> host(n_bytes), poison(n_bytes);
          for (auto& c : host) c = static_cast<unsigned char>(gen.rng()());
          for (auto& c : poison) c = static_cast<unsigned char>(gen.rng()());
          std::vector<unsigned char> expected(static_cast<std::size_t>(packed));
          pack(host.data() + origin, 1, t, expected.data());
          std::vector<unsigned char> back = poison;
          if (unpacks) unpack(expected.data(), back.data() + origin, 1, t);
          CUDA_OK(cudaMemcpy(d_in.get(), host.data(), n_bytes, cudaMemcpyHostToDevice));
          CUDA_OK(cudaMemcpy(d_back.get(), poison.data(), n_bytes, cudaMemcpyHostToDevice));
          CUDA_OK(cudaMemset(d_out.get(), 0xA5, static_cast<std::size_t>(packed)));
          // cudaMemset runs on the legacy stream, which a non-blocking stream does not wait
          // for: without this the poison could land after the replay (seen on the H200).
          CUDA_OK(cudaDeviceSynchronize());
          CUDA_OK(cudaGraphLaunch(exec, stream));
          CUDA_OK(cudaStreamSynchronize(stream));
          std::vector<unsigned char> got(static_cast<std::size_t>(packed)), got_back(n_bytes);
          CUDA_OK(cudaMemcpy(got.data(), d_out.get(), got.size(), cudaMemcpyDeviceToHost));
          CUDA_OK(cudaMemcpy(got_back.data(), d_back.get(), n_bytes, cudaMemcpyDeviceToHost));
          ASSERT_EQ(got, expected) << what << ", replay " << replay;
          ASSERT_EQ(got_back, back) << what << ", replay " << replay << " (unpack)";
          ++replays;
        }
        CUDA_OK(cudaGraphExecDestroy(exec));
        CUDA_OK(cudaGraphDestroy(graph));
        ++graphs;
      }
    }
    CUDA_OK(cudaStreamDestroy(stream));
  }
  std::printf(
      "GPU: %ld captured graphs of random types, %ld replays on new data, all equal to "
      "the CPU\n",
      graphs, replays);
}
