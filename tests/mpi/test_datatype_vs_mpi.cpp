// Property test: for thousands of random nested datatypes, halox's attributes, pack and
// unpack equal Open MPI's (MPI_Type_get_extent, MPI_Pack, MPI_Unpack) byte for byte, and the
// import of the real MPI type gives the same result.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <vector>

#include "../common/mpi_recipe.hpp"
#include "../common/seed.hpp"
#include "halox/mpi.hpp"
#include "halox/pack.hpp"

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

    std::vector<unsigned char> ref(static_cast<std::size_t>(packed) + 1, 0x5A);
    int position = 0;
    ASSERT_EQ(MPI_Pack(in.base(), static_cast<int>(count), m, ref.data(),
                       static_cast<int>(ref.size()), &position, MPI_COMM_SELF),
              MPI_SUCCESS);
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
