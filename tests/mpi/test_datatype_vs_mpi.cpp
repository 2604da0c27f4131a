// Property test: for thousands of random nested datatypes, halox's attributes, pack and
// unpack equal Open MPI's (MPI_Type_get_extent, MPI_Pack, MPI_Unpack) byte for byte, and the
// import of the real MPI type gives the same result.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../common/mpi_recipe.hpp"
#include "../common/seed.hpp"
#include "halox/mpi.hpp"
#include "halox/pack.hpp"
#if HALOX_TEST_DEVICE_MEMORY
#include <cuda_runtime.h>

#include "halox/pack_gpu.hpp"
#endif

using namespace halox;
using namespace halox::testing;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

struct Buffer {
  std::vector<unsigned char> bytes;
  std::int64_t origin = 0;  // bytes[origin] is MPI's buffer address
  unsigned char* base() { return bytes.data() + origin; }
};

// A buffer covering the true extent of `count` instances, filled with random bytes.
Buffer make_buffer(const Datatype& t, std::int64_t count, std::mt19937_64& rng) {
  const std::int64_t span = (count - 1) * t.extent();
  const std::int64_t lo = t.true_lb() + std::min<std::int64_t>(0, span);
  const std::int64_t hi = t.true_lb() + t.true_extent() + std::max<std::int64_t>(0, span);
  Buffer b;
  b.bytes.resize(static_cast<std::size_t>(hi - lo + 1));
  for (auto& c : b.bytes) c = static_cast<unsigned char>(rng());
  b.origin = -lo;
  return b;
}

void free_type(MPI_Datatype& t) {
  int ni, na, nt, c;
  MPI_Type_get_envelope(t, &ni, &na, &nt, &c);
  if (c != MPI_COMBINER_NAMED) MPI_Type_free(&t);
}

// The library's MPI_Pack of `count` instances at `base` into `ref` (packed bytes plus one
// sentinel byte, 0x5A): its position, or -1 when MPI_Pack fails.
int mpi_pack_reference(const void* base, std::int64_t count, MPI_Datatype m, std::int64_t packed,
                       std::vector<unsigned char>& ref) {
  ref.assign(static_cast<std::size_t>(packed) + 1, 0x5A);
  int position = 0;
  if (MPI_Pack(base, static_cast<int>(count), m, ref.data(), static_cast<int>(ref.size()),
               &position, MPI_COMM_SELF) != MPI_SUCCESS) {
    return -1;
  }
  return position;
}

void expect_attributes(const Datatype& h, MPI_Datatype m, const std::string& what) {
  int size = 0;
  MPI_Aint lb, extent, tlb, textent;
  MPI_Type_size(m, &size);
  MPI_Type_get_extent(m, &lb, &extent);
  MPI_Type_get_true_extent(m, &tlb, &textent);
  EXPECT_EQ(h.size(), size) << what;
  // MPI implementations disagree on the bounds of types without data (Open MPI reports a
  // true lb of INT64_MAX); halox reports 0 for them.
  if (size == 0) return;
  EXPECT_EQ(h.lb(), lb) << what;
  EXPECT_EQ(h.extent(), extent) << what;
  EXPECT_EQ(h.true_lb(), tlb) << what;
  EXPECT_EQ(h.true_extent(), textent) << what;
}

}  // namespace

TEST(DatatypeVsMpi, RandomTypesPackLikeMpiPack) {
  const std::uint64_t seed = test_seed("DatatypeVsMpi.RandomTypesPackLikeMpiPack", world_rank());
  RecipeGenerator gen(seed);
  const long n_types = env_count("HALOX_PROPERTY_COUNT", 2000);
  long tested = 0, unpacked = 0;
  for (long i = 0; i < n_types; ++i) {
    const Recipe recipe = gen.random(4);
    const std::string what = "type #" + std::to_string(i) + ": " + recipe.describe();
    Datatype h = to_halox(recipe);
    h.commit();
    MPI_Datatype m = to_mpi(recipe);
    MPI_Type_commit(&m);
    expect_attributes(h, m, what);
    if (h.size() == 0 || h.true_extent() > (1 << 22)) {
      free_type(m);
      continue;
    }
    const std::int64_t count = gen.uniform(1, 3);
    Buffer in = make_buffer(h, count, gen.rng());
    const std::int64_t packed = packed_size(h, count);

    std::vector<unsigned char> ref;
    int position = mpi_pack_reference(in.base(), count, m, packed, ref);
    ASSERT_EQ(position, packed) << what;

    std::vector<unsigned char> out(ref.size(), 0xC3);  // poison
    ASSERT_EQ(pack(in.base(), count, h, out.data()), packed);
    ASSERT_EQ(std::memcmp(out.data(), ref.data(), static_cast<std::size_t>(packed)), 0)
        << what << "\n"
        << h.canonical().describe();
    ASSERT_EQ(out[static_cast<std::size_t>(packed)], 0xC3) << "pack wrote past the end: " << what;

    // Chunked pack, as a pipeline does it, reassembles the same stream.
    std::vector<unsigned char> chunks(static_cast<std::size_t>(packed), 0x11);
    for (std::int64_t at = 0; at < packed;) {
      const std::int64_t n = gen.uniform(1, 64);
      at += pack(in.base(), count, h, chunks.data() + at, at, n);
    }
    ASSERT_EQ(std::memcmp(chunks.data(), ref.data(), chunks.size()), 0) << "chunked: " << what;

    // The import of the real MPI type behaves the same.
    const Datatype imported = from_mpi(m);
    expect_attributes(imported, m, "imported " + what);
    std::vector<unsigned char> out2(static_cast<std::size_t>(packed), 0x3C);
    pack(in.base(), count, imported, out2.data());
    ASSERT_EQ(std::memcmp(out2.data(), ref.data(), out2.size()), 0) << "imported: " << what;

    // Unpack equals MPI_Unpack on identically poisoned buffers, and restores the data.
    if (!h.overlaps(count)) {
      Buffer mine = in, theirs = in;
      for (auto& c : mine.bytes) c = static_cast<unsigned char>(c ^ 0xFF);
      theirs.bytes = mine.bytes;
      unpack(ref.data(), mine.base(), count, h);
      position = 0;
      MPI_Unpack(ref.data(), static_cast<int>(packed), &position, theirs.base(),
                 static_cast<int>(count), m, MPI_COMM_SELF);
      ASSERT_EQ(mine.bytes, theirs.bytes) << "unpack: " << what;
      std::vector<unsigned char> again(static_cast<std::size_t>(packed));
      pack(mine.base(), count, h, again.data());
      ASSERT_EQ(std::memcmp(again.data(), ref.data(), again.size()), 0) << "roundtrip: " << what;
      ++unpacked;
    }
    free_type(m);
    ++tested;
  }
  std::printf("rank %d: %ld random types packed like MPI_Pack, %ld also unpacked\n", world_rank(),
              tested, unpacked);
  EXPECT_GT(tested, n_types / 2);
}

// A buffer laid out by the MPI library's bounds for `count` instances of `m`, with `guard`
// poisoned bytes on each side: what the library's footprint allows and nothing more.
struct Footprint {
  std::vector<unsigned char> bytes;
  std::int64_t origin = 0, lo = 0, hi = 0;  // [lo, hi) relative to origin is the footprint
  unsigned char* base() { return bytes.data() + origin; }
};

Footprint library_footprint(MPI_Datatype m, std::int64_t count, std::int64_t guard,
                            std::mt19937_64& rng) {
  MPI_Aint lb, extent, tlb, textent;
  MPI_Type_get_extent(m, &lb, &extent);
  MPI_Type_get_true_extent(m, &tlb, &textent);
  const std::int64_t span = (count - 1) * extent;
  Footprint f;
  f.lo = tlb + std::min<std::int64_t>(0, span);
  f.hi = tlb + textent + std::max<std::int64_t>(0, span);
  f.bytes.resize(static_cast<std::size_t>(f.hi - f.lo + 2 * guard));
  for (auto& c : f.bytes) c = static_cast<unsigned char>(rng());
  f.origin = guard - f.lo;
  return f;
}

// The constructs where MPI libraries and the standard part ways, imported with from_mpi:
// the import must follow the library (bounds at every level, MPI_Pack's bytes, MPI_Unpack's
// writes) and never touch a byte outside the library's footprint, or refuse with a
// DatatypeError.
// halox::to_mpi: the exported type has the bounds of the halox type, and the MPI library's
// MPI_Pack of it gives halox's pack, byte for byte.
TEST(DatatypeVsMpi, ExportedTypesPackAsHaloxDoes) {
  const std::uint64_t seed = test_seed("DatatypeVsMpi.ExportedTypesPackAsHaloxDoes", world_rank());
  RecipeGenerator gen(seed);
  const long n_types = env_count("HALOX_PROPERTY_COUNT", 2000) / 2;
  long tested = 0;
  for (long i = 0; i < n_types; ++i) {
    const Recipe recipe = gen.random(4);
    const std::string what = "type #" + std::to_string(i) + ": " + recipe.describe();
    Datatype h = to_halox(recipe);
    h.commit();
    if (h.true_extent() > (1 << 22)) continue;
    MPI_Datatype m = halox::to_mpi(h);
    expect_attributes(h, m, what);
    if (h.size() == 0) {
      MPI_Type_free(&m);
      continue;
    }
    const std::int64_t count = gen.uniform(1, 3);
    Buffer in = make_buffer(h, count, gen.rng());
    const std::int64_t packed = packed_size(h, count);
    std::vector<unsigned char> ref;
    ASSERT_EQ(mpi_pack_reference(in.base(), count, m, packed, ref), packed) << what;
    std::vector<unsigned char> out(static_cast<std::size_t>(packed) + 1, 0x5A);
    ASSERT_EQ(pack(in.base(), count, h, out.data()), packed) << what;
    ASSERT_TRUE(out == ref) << what;
    MPI_Type_free(&m);
    ++tested;
  }
  EXPECT_GT(tested, n_types / 3);
  if (world_rank() == 0)
    std::printf("to_mpi: %ld random types exported, each packs as halox\n", tested);
}

TEST(DatatypeVsMpi, ImportedAwkwardTypesFollowTheLibrary) {
  const std::uint64_t seed =
      test_seed("DatatypeVsMpi.ImportedAwkwardTypesFollowTheLibrary", world_rank());
  RecipeGenerator gen(seed, /*awkward=*/true);
  const long n_types = env_count("HALOX_AWKWARD_COUNT", 10000);
  const std::int64_t guard = 64;
  long packed_types = 0, refused = 0;
  for (long i = 0; i < n_types; ++i) {
    const Recipe recipe = gen.random(5);
    const std::string what = "awkward type #" + std::to_string(i) + ": " + recipe.describe();
    MPI_Datatype m = to_mpi(recipe);
    MPI_Type_commit(&m);
    Datatype imported;
    try {
      imported = from_mpi(m);
    } catch (const DatatypeError& e) {
      if (refused++ < 5) std::printf("refused (%s): %s\n", e.what(), what.c_str());
      free_type(m);
      continue;
    }
    expect_attributes(imported, m, what);
    if (::testing::Test::HasFailure()) {
      free_type(m);
      return;
    }
    if (imported.size() == 0 || imported.true_extent() > (1 << 20) ||
        std::abs(imported.extent()) > (1 << 20)) {
      free_type(m);
      continue;
    }
    const std::int64_t count = gen.uniform(1, 3);
    Footprint in = library_footprint(m, count, guard, gen.rng());
    const std::int64_t packed = packed_size(imported, count);
    std::vector<unsigned char> ref;
    int position = mpi_pack_reference(in.base(), count, m, packed, ref);
    ASSERT_EQ(position, packed) << what;
    std::vector<unsigned char> out(ref.size(), 0xC3);
    ASSERT_EQ(pack(in.base(), count, imported, out.data()), packed);
    ASSERT_EQ(std::memcmp(out.data(), ref.data(), static_cast<std::size_t>(packed)), 0) << what;
    // Unpack writes what MPI_Unpack writes, inside the footprint only (the guards stay).
    if (!imported.overlaps(count)) {
      Footprint mine = in, theirs = in;
      unpack(ref.data(), mine.base(), count, imported);
      position = 0;
      MPI_Unpack(ref.data(), static_cast<int>(packed), &position, theirs.base(),
                 static_cast<int>(count), m, MPI_COMM_SELF);
      ASSERT_EQ(mine.bytes, theirs.bytes) << "unpack: " << what;
      ASSERT_TRUE(std::equal(in.bytes.begin(), in.bytes.begin() + guard, mine.bytes.begin()) &&
                  std::equal(in.bytes.end() - guard, in.bytes.end(), mine.bytes.end() - guard))
          << "unpack wrote outside the library's footprint: " << what;
#if HALOX_TEST_DEVICE_MEMORY
      // The same on device memory: GPU pack equals MPI_Pack, GPU unpack equals MPI_Unpack.
      void *d_in = nullptr, *d_packed = nullptr;
      ASSERT_EQ(cudaMalloc(&d_in, in.bytes.size()), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_packed, ref.size()), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d_in, in.bytes.data(), in.bytes.size(), cudaMemcpyHostToDevice),
                cudaSuccess);
      ASSERT_EQ(cudaMemset(d_packed, 0xC3, ref.size()), cudaSuccess);
      pack_async(static_cast<unsigned char*>(d_in) + in.origin, count, imported, d_packed, nullptr);
      std::vector<unsigned char> gpu(ref.size());
      ASSERT_EQ(cudaMemcpy(gpu.data(), d_packed, gpu.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(std::memcmp(gpu.data(), ref.data(), static_cast<std::size_t>(packed)), 0)
          << "GPU pack: " << what;
      ASSERT_EQ(gpu.back(), 0xC3) << "GPU pack wrote past the end: " << what;
      ASSERT_EQ(cudaMemcpy(d_packed, ref.data(), ref.size(), cudaMemcpyHostToDevice), cudaSuccess);
      unpack_async(d_packed, static_cast<unsigned char*>(d_in) + in.origin, count, imported,
                   nullptr);
      std::vector<unsigned char> gpu_unpacked(in.bytes.size());
      ASSERT_EQ(cudaMemcpy(gpu_unpacked.data(), d_in, gpu_unpacked.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      ASSERT_EQ(gpu_unpacked, theirs.bytes) << "GPU unpack: " << what;
      cudaFree(d_in);
      cudaFree(d_packed);
#endif
    }
    free_type(m);
    ++packed_types;
  }
  std::printf("rank %d: %ld awkward types imported and packed like MPI_Pack, %ld refused\n",
              world_rank(), packed_types, refused);
  EXPECT_LE(refused, n_types / 100) << "more than 1% of the types refused";
  EXPECT_GT(packed_types, n_types / 3);
}

// The minimal reproducers of the classes the random search found, each checked by itself.
TEST(DatatypeVsMpi, ImportFollowsTheLibraryOnKnownDepartures) {
  auto check = [](MPI_Datatype m, int count, const char* what) {
    MPI_Type_commit(&m);
    const Datatype imported = from_mpi(m);
    expect_attributes(imported, m, what);
    std::mt19937_64 rng(7);
    Footprint in = library_footprint(m, count, 64, rng);
    const std::int64_t packed = packed_size(imported, count);
    std::vector<unsigned char> ref;
    EXPECT_EQ(mpi_pack_reference(in.base(), count, m, packed, ref), packed) << what;
    std::vector<unsigned char> out(ref.size());
    pack(in.base(), count, imported, out.data());
    EXPECT_EQ(std::memcmp(out.data(), ref.data(), static_cast<std::size_t>(packed)), 0) << what;
    MPI_Type_free(&m);
  };
  MPI_Datatype a, b, c, p, v, hv, empty, resized, hib, st;
  const MPI_Aint misaligned[3] = {0, 3, -3};
  MPI_Type_create_hindexed_block(3, 1, misaligned, MPI_SHORT, &a);
  MPI_Type_commit(&a);
  const int far[1] = {2048};
  MPI_Type_create_indexed_block(1, 1, far, a, &b);
  check(b, 1, "indexed_block(1, 1, {2048}, hindexed_block(3, 1, {0, 3, -3}, short))");
  check(a, 2, "hindexed_block(3, 1, {0, 3, -3}, short)");
  const MPI_Aint c_disps[3] = {0, 1, -2}, p_disps[2] = {0, 1};
  MPI_Type_create_hindexed_block(3, 1, c_disps, MPI_INT, &c);
  MPI_Type_commit(&c);
  MPI_Type_create_hindexed_block(2, 1, p_disps, c, &p);
  check(p, 2, "nested padding");
  MPI_Type_free(&c);
  MPI_Type_vector(2, 1, -1, MPI_BYTE, &v);
  check(v, 2, "vector(2, 1, -1, byte)");
  MPI_Type_create_hvector(2, 1, -1, MPI_SHORT, &hv);
  check(hv, 2, "hvector(2, 1, -1, short)");
  MPI_Type_contiguous(0, MPI_INT, &empty);
  MPI_Type_create_resized(empty, 3, 32, &resized);
  const MPI_Aint minus7[1] = {-7};
  MPI_Type_create_hindexed_block(1, 1, minus7, resized, &hib);
  const int lengths[2] = {1, 1};
  const MPI_Aint st_disps[2] = {0, 100};
  MPI_Datatype st_types[2] = {hib, MPI_INT};
  MPI_Type_create_struct(2, lengths, st_disps, st_types, &st);
  check(st, 2, "struct{hindexed_block(1, 1, {-7}, resized(contig(0, int), 3, 32)), int at 100}");
  MPI_Type_free(&hib);
  MPI_Type_free(&resized);
  MPI_Type_free(&empty);
}

// halox's own constructors follow the type map: a (h)indexed_block of a resized type without
// data keeps the child's sticky bounds.
TEST(DatatypeVsMpi, EmptyResizedChildKeepsItsBounds) {
  const Datatype rz = Datatype::resized(Datatype::contiguous(0, Datatype::of<int>()), 3, 32);
  const std::int64_t minus7[1] = {-7}, lengths[2] = {1, 1}, disps[2] = {0, 100};
  const Datatype hib = Datatype::hindexed_block(1, minus7, rz);
  EXPECT_EQ(hib.lb(), -4);
  EXPECT_EQ(hib.extent(), 32);
  const Datatype types[2] = {hib, Datatype::of<int>()};
  const Datatype st = Datatype::struct_(lengths, disps, types);
  EXPECT_EQ(st.lb(), -4);
  EXPECT_EQ(st.extent(), 32);
}

// An awkward type (random seed 12099828032036469767) whose second instance Open MPI 4.1 packs
// from the bytes right after the first, against the extent of 684 it reports: the import's
// probe of MPI_Pack used one byte pattern that repeats 682 bytes on, so it passed, and halox
// packed other bytes than the library. The import must follow MPI_Pack or refuse.
TEST(DatatypeVsMpi, ImportRefusesWhatMpiPackDoesNotFollow) {
  MPI_Datatype empty, rz, block, outer, st;
  MPI_Type_contiguous(0, MPI_INT64_T, &empty);
  MPI_Type_create_resized(empty, -2, 37, &rz);
  const int at[2] = {0, 4};
  MPI_Type_create_indexed_block(2, 2, at, rz, &block);
  MPI_Type_create_resized(block, -7, 228, &outer);
  const int lengths[2] = {2, 3};
  const MPI_Aint disps[2] = {-5, -1};
  MPI_Datatype types[2] = {MPI_BYTE, outer};
  MPI_Type_create_struct(2, lengths, disps, types, &st);
  MPI_Type_commit(&st);
  try {
    const Datatype imported = from_mpi(st);
    std::vector<unsigned char> memory(2048);
    for (std::size_t i = 0; i < memory.size(); ++i) memory[i] = static_cast<unsigned char>(i);
    const unsigned char* base = memory.data() + 1024;
    std::vector<unsigned char> ref(4), out(4, 0xC3);
    int position = 0;
    MPI_Pack(base, 2, st, ref.data(), 4, &position, MPI_COMM_SELF);
    ASSERT_EQ(position, 4);
    ASSERT_EQ(pack(base, 2, imported, out.data()), 4);
    EXPECT_EQ(out, ref);
  } catch (const DatatypeError& e) {
    EXPECT_NE(std::string(e.what()).find("MPI_Pack of two instances"), std::string::npos)
        << e.what();
  }
  for (MPI_Datatype* t : {&empty, &rz, &block, &outer, &st}) MPI_Type_free(t);
}

// Nests deeper than kMaxDatatypeDepth are refused (construction and import), not a crash.
TEST(DatatypeVsMpi, DeepNestsAreRefused) {
  Datatype t = Datatype::of<int>();
  bool refused = false;
  try {
    for (int i = 0; i < 100000; ++i) t = Datatype::contiguous(1, t);
  } catch (const DatatypeError&) {
    refused = true;
  }
  EXPECT_TRUE(refused);
  t.commit();  // the deepest accepted nest commits without exhausting the stack
  EXPECT_EQ(t.size(), 4);
  std::vector<MPI_Datatype> nest = {MPI_INT};
  for (int i = 0; i < 20000; ++i) {
    MPI_Datatype next;
    MPI_Type_contiguous(1, nest.back(), &next);
    nest.push_back(next);
  }
  MPI_Type_commit(&nest.back());
  EXPECT_THROW(from_mpi(nest.back()), DatatypeError);
  for (std::size_t i = 1; i < nest.size(); ++i) MPI_Type_free(&nest[i]);
}

// A wide nest (each level a struct naming its child eight times, seven levels: 2^21 ints)
// is read once per distinct level, as halox's constructors share children: the import read
// each occurrence and grew past 4 GiB before the OOM killer. Checked against MPI_Pack.
TEST(DatatypeVsMpi, WideNestedStructsImportOnce) {
  constexpr int kWidth = 8, kLevels = 7;
  std::vector<MPI_Datatype> levels = {MPI_INT};
  for (int level = 0; level < kLevels; ++level) {
    MPI_Aint lb = 0, extent = 0;
    MPI_Type_get_extent(levels.back(), &lb, &extent);
    std::vector<int> lengths(kWidth, 1);
    std::vector<MPI_Aint> displacements(kWidth);
    for (int k = 0; k < kWidth; ++k) displacements[k] = k * (extent + 8);  // gaps between
    std::vector<MPI_Datatype> children(kWidth, levels.back());
    MPI_Datatype next;
    MPI_Type_create_struct(kWidth, lengths.data(), displacements.data(), children.data(), &next);
    levels.push_back(next);
  }
  MPI_Type_commit(&levels.back());
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const Datatype imported = from_mpi(levels.back());
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
#if !defined(__SANITIZE_ADDRESS__)  // ASan keeps freed memory in quarantine (256 MB)
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024) << "KiB more resident at the peak";
#endif
  int size = 0;
  MPI_Type_size(levels.back(), &size);
  ASSERT_EQ(imported.size(), size);
  MPI_Aint true_lb = 0, true_extent = 0;
  MPI_Type_get_true_extent(levels.back(), &true_lb, &true_extent);
  std::vector<unsigned char> field(static_cast<std::size_t>(true_extent));
  for (std::size_t i = 0; i < field.size(); ++i) field[i] = static_cast<unsigned char>(i * 7 + 3);
  std::vector<unsigned char> theirs(static_cast<std::size_t>(size)), ours(theirs.size(), 0xA5);
  int position = 0;
  MPI_Pack(field.data() - true_lb, 1, levels.back(), theirs.data(), size, &position, MPI_COMM_SELF);
  pack(field.data() - true_lb, 1, imported, ours.data());
  EXPECT_TRUE(theirs == ours);
  for (std::size_t i = 1; i < levels.size(); ++i) MPI_Type_free(&levels[i]);
}

// Types near 2^62 bytes (strides, displacements, resized bounds): the import takes them or
// refuses them with a DatatypeError; never signed overflow (UBSan: scripts/test.sh's
// sanitizer build runs this) or std::length_error from a probe sized by a wrapped bound.
TEST(DatatypeVsMpi, TypesNear2To62AreTakenOrRefusedCleanly) {
  const MPI_Aint far = MPI_Aint{1} << 62;
  std::vector<MPI_Datatype> made;
  auto make = [&](auto&& build) {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    if (build(&t) == MPI_SUCCESS && t != MPI_DATATYPE_NULL && MPI_Type_commit(&t) == MPI_SUCCESS)
      made.push_back(t);
  };
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  make([&](MPI_Datatype* t) { return MPI_Type_create_hvector(2, 1, far, MPI_INT, t); });
  make([&](MPI_Datatype* t) { return MPI_Type_create_hvector(3, 1, -far, MPI_INT, t); });
  make([&](MPI_Datatype* t) { return MPI_Type_vector(2, 1, INT32_MAX, MPI_DOUBLE, t); });
  make([&](MPI_Datatype* t) {
    const int lengths[2] = {1, 1};
    const MPI_Aint displacements[2] = {-far, far};
    const MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE};
    return MPI_Type_create_struct(2, lengths, displacements, types, t);
  });
  make([&](MPI_Datatype* t) { return MPI_Type_create_resized(MPI_INT, far, far, t); });
  make([&](MPI_Datatype* t) {
    MPI_Datatype wide = MPI_DATATYPE_NULL;
    MPI_Type_create_hvector(2, 1, far, MPI_INT, &wide);
    const int rc = MPI_Type_vector(3, 1, 2, wide, t);  // the stride times the extent wraps
    MPI_Type_free(&wide);
    return rc;
  });
  ASSERT_GE(made.size(), 4u);
  for (MPI_Datatype t : made) {
    try {
      const Datatype imported = from_mpi(t);
      int size = 0;
      MPI_Type_size(t, &size);
      EXPECT_EQ(imported.size(), size);
    } catch (const DatatypeError&) {
      // refused, with halox's error type: fine
    } catch (const std::exception& e) {
      ADD_FAILURE() << "from_mpi threw something other than a DatatypeError: " << e.what();
    }
    MPI_Type_free(&t);
  }
}

TEST(DatatypeVsMpi, RegularTypesAreOneStridedBlock) {
  const std::uint64_t seed =
      test_seed("DatatypeVsMpi.RegularTypesAreOneStridedBlock", world_rank());
  RecipeGenerator gen(seed);
  for (int i = 0; i < 500; ++i) {
    const Recipe recipe = gen.random(4, /*regular_only=*/true);
    Datatype h = to_halox(recipe);
    h.commit();
    ASSERT_TRUE(h.canonical().is_single_strided())
        << recipe.describe() << " -> " << h.canonical().describe();
  }
}

TEST(DatatypeVsMpi, ImportsNamedAndRejectsUnknown) {
  EXPECT_EQ(from_mpi(MPI_DOUBLE).size(), 8);
  EXPECT_EQ(from_mpi(MPI_C_DOUBLE_COMPLEX).size(), 16);
  EXPECT_THROW(from_mpi(MPI_2INT), DatatypeError);
}
