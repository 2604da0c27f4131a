// Serial unit tests: attributes per constructor (values worked out from MPI's type-map
// definitions), the canonical form of the shapes halos use, and the errors bad input gets.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "../common/random_datatype.hpp"
#include "../common/seed.hpp"
#include "halox/pack.hpp"

using namespace halox;

namespace {
const Datatype kInt = Datatype::of<int>();
const Datatype kDouble = Datatype::of<double>();
const Datatype kFloat = Datatype::of<float>();
const Datatype kChar = Datatype::of<char>();

void expect_bounds(const Datatype& t, std::int64_t size, std::int64_t lb, std::int64_t extent,
                   std::int64_t true_lb, std::int64_t true_extent) {
  EXPECT_EQ(t.size(), size);
  EXPECT_EQ(t.lb(), lb);
  EXPECT_EQ(t.extent(), extent);
  EXPECT_EQ(t.true_lb(), true_lb);
  EXPECT_EQ(t.true_extent(), true_extent);
}
}  // namespace

TEST(Attributes, Named) {
  expect_bounds(kDouble, 8, 0, 8, 0, 8);
  expect_bounds(Datatype(), 1, 0, 1, 0, 1);
  EXPECT_EQ(Datatype::basic(BasicKind::complex_double).size(), 16);
}

TEST(Attributes, ContiguousAndVector) {
  expect_bounds(Datatype::contiguous(5, kInt), 20, 0, 20, 0, 20);
  expect_bounds(Datatype::vector(3, 2, 4, kInt), 24, 0, 40, 0, 40);
  // Negative stride: blocks at 0 and -12 bytes.
  expect_bounds(Datatype::vector(2, 1, -3, kInt), 8, -12, 16, -12, 16);
  expect_bounds(Datatype::hvector(2, 1, 3, kDouble), 16, 0, 16, 0, 11);  // padded to 8
}

TEST(Attributes, IndexedStructResized) {
  const std::vector<std::int64_t> lengths{2, 1}, disps{4, 0};
  expect_bounds(Datatype::indexed(lengths, disps, kInt), 12, 0, 24, 0, 24);
  expect_bounds(Datatype::hindexed(lengths, std::vector<std::int64_t>{16, 0}, kInt), 12, 0, 24, 0,
                24);
  expect_bounds(Datatype::indexed_block(2, disps, kInt), 16, 0, 24, 0, 24);
  const std::vector<Datatype> types{kDouble, kChar};
  const std::vector<std::int64_t> ones{1, 1}, offsets{0, 8};
  expect_bounds(Datatype::struct_(ones, offsets, types), 9, 0, 16, 0, 9);  // epsilon padding
  const Datatype r = Datatype::resized(kInt, -4, 12);
  expect_bounds(r, 4, -4, 12, 0, 4);
  // Sticky bounds: the char at 20 does not extend a struct whose other member is resized.
  const std::vector<Datatype> mixed{Datatype::resized(kDouble, 0, 12), kChar};
  expect_bounds(Datatype::struct_(ones, std::vector<std::int64_t>{0, 20}, mixed), 9, 0, 12, 0, 21);
  expect_bounds(r.dup(), 4, -4, 12, 0, 4);
}

TEST(Attributes, SubarrayAndDarray) {
  const std::vector<std::int64_t> sizes{4, 5}, subsizes{2, 2}, starts{1, 1};
  const Datatype sub =
      Datatype::subarray(sizes, subsizes, starts, Order::c, Datatype::resized(kInt, -4, 12));
  expect_bounds(sub, 16, 0, 240, 72, 76);  // Open MPI 4.1 reports the same
  const std::vector<std::int64_t> g{8}, d{kDefaultDarg}, p{2};
  const std::vector<Distribution> block{Distribution::block};
  const Datatype da = Datatype::darray(2, 1, g, block, d, p, Order::c, kInt);
  expect_bounds(da, 16, 0, 32, 16, 16);
}

TEST(Canonical, FacesOfA3DArrayAreOneStridedBlock) {
  const std::int64_t n = 64;
  const std::vector<std::int64_t> sizes{n, n, n};
  for (int axis = 0; axis < 3; ++axis) {
    std::vector<std::int64_t> sub{n, n, n}, start{0, 0, 0};
    sub[static_cast<std::size_t>(axis)] = 2;
    start[static_cast<std::size_t>(axis)] = 5;
    Datatype face = Datatype::subarray(sizes, sub, start, Order::c, kDouble);
    face.commit();
    const CanonicalForm& form = face.canonical();
    ASSERT_TRUE(form.is_single_strided()) << form.describe();
    const StridedBlock& s = form.pieces[0].strided;
    EXPECT_LE(s.ndims, 2) << form.describe();
    if (axis == 0) EXPECT_TRUE(form.is_contiguous()) << form.describe();
    if (axis == 2) EXPECT_EQ(s.block_bytes, 16);
  }
}

TEST(Canonical, IndexedThatIsStridedIsRecognised) {
  std::vector<std::int64_t> lengths(100, 1), disps(100);
  std::iota(disps.begin(), disps.end(), 0);
  for (auto& d : disps) d *= 3;
  Datatype t = Datatype::indexed(lengths, disps, kFloat);
  t.commit();
  ASSERT_TRUE(t.canonical().is_single_strided()) << t.canonical().describe();
  EXPECT_EQ(t.canonical().pieces[0].strided.stride[0], 12);
  // Irregular displacements stay an index list.
  disps[50] = 1000;
  Datatype irregular = Datatype::indexed(lengths, disps, kFloat);
  irregular.commit();
  EXPECT_FALSE(irregular.canonical().is_single_strided());
}

TEST(Pack, ChunkedEqualsWholeAndAccumulateAdds) {
  halox::testing::RecipeGenerator gen(halox::testing::test_seed("Pack.ChunkedEqualsWhole"));
  std::vector<double> grid(10 * 10);
  for (auto& v : grid) v = static_cast<double>(gen.uniform(1, 1000)) / 7.0;
  Datatype column = Datatype::vector(10, 1, 10, kDouble);
  column.commit();
  std::vector<double> whole(10, -1.0), chunked(10, -2.0);
  pack(grid.data() + 3, 1, column, whole.data());
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(whole[static_cast<std::size_t>(i)], grid[static_cast<std::size_t>(i * 10 + 3)]);
  for (std::int64_t at = 0; at < 80; at += 24) {
    pack(grid.data() + 3, 1, column, reinterpret_cast<char*>(chunked.data()) + at, at, 24);
  }
  EXPECT_EQ(whole, chunked);
  std::vector<double> target = grid;
  unpack_accumulate(whole.data(), target.data() + 3, 1, column);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(target[static_cast<std::size_t>(i * 10 + 3)],
              2 * grid[static_cast<std::size_t>(i * 10 + 3)]);
    EXPECT_EQ(target[static_cast<std::size_t>(i * 10 + 4)],
              grid[static_cast<std::size_t>(i * 10 + 4)]);
  }
}

TEST(Errors, BadInputGetsATypedErrorNamingTheArgument) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const DatatypeError& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_NE(message([] { Datatype::vector(-1, 1, 1, kInt); }).find("vector: count = -1"),
            std::string::npos);
  EXPECT_NE(message([] { Datatype::hvector(2, -3, 1, kInt); }).find("blocklength = -3"),
            std::string::npos);
  const std::vector<std::int64_t> lengths{1, -2}, disps{0, 4};
  EXPECT_NE(message([&] { Datatype::indexed(lengths, disps, kInt); }).find("blocklengths[1] = -2"),
            std::string::npos);
  const std::vector<std::int64_t> sizes{4, 4}, sub{2, 3}, start{0, 2};
  EXPECT_NE(message([&] {
              Datatype::subarray(sizes, sub, start, Order::c, kInt);
            }).find("dimension 1: start 2 + subsize 3 exceeds size 4"),
            std::string::npos);
  EXPECT_NE(message([] {
              Datatype::contiguous(std::int64_t{1} << 40,
                                   Datatype::contiguous(std::int64_t{1} << 40, kDouble));
            }).find("overflow"),
            std::string::npos);
  // Every bound fits but their difference does not (the fuzzer's find): the extent of
  // blocks at displacement -2^60 doubles (= -2^63 bytes) and at 0 is 2^63 + 976.
  const std::vector<std::int64_t> far_lengths{122, 43}, far_disps{0, -(std::int64_t{1} << 60)};
  EXPECT_NE(message([&] { Datatype::indexed(far_lengths, far_disps, kDouble); }).find("overflow"),
            std::string::npos);
  EXPECT_NE(message([] {
              Datatype::resized(kInt, 0, std::numeric_limits<std::int64_t>::min());
            }).find("overflow"),
            std::string::npos);
  const Datatype uncommitted = Datatype::contiguous(3, kInt);
  std::vector<int> buf(3), out(3);
  EXPECT_NE(message([&] { pack(buf.data(), 1, uncommitted, out.data()); }).find("before commit"),
            std::string::npos);
  Datatype overlapping = Datatype::vector(2, 2, 1, kInt);
  overlapping.commit();
  std::vector<int> packed(4, 1), target(8);
  EXPECT_NE(message([&] { unpack(packed.data(), target.data(), 1, overlapping); }).find("twice"),
            std::string::npos);
  EXPECT_NO_THROW(pack(target.data(), 1, overlapping, packed.data()));  // sending is fine
  Datatype ints = Datatype::contiguous(2, kInt);
  ints.commit();
  EXPECT_NE(message([&] {
              unpack_accumulate(packed.data(), target.data(), 1, ints);
            }).find("MPI_FLOAT or only MPI_DOUBLE"),
            std::string::npos);
}

// Nested structs whose uncommitted children are lowered again wherever they are used: the
// commit stops at its work bound with an error instead of taking minutes and gigabytes
// (the fuzzer found such a type).
TEST(Errors, ExplodingLoweringIsRefusedQuickly) {
  const Datatype kDouble = Datatype::of<double>();
  // Single blocks, so no repeat reaches its own bound, of a strided child at irregular
  // displacements, so nothing merges: 3^13 strided pieces kept, and every level lowered
  // again for each of its three uses.
  const std::vector<std::int64_t> lengths{1, 1, 1}, displacements{0, 1001, 100003};
  Datatype t = Datatype::vector(2, 1, 3, kDouble);
  for (int level = 0; level < 13; ++level) {
    const std::vector<Datatype> types{t, t, t};
    t = Datatype::struct_(lengths, displacements, types);
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(t.commit(), DatatypeError);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0) << "the work bound did not stop the commit in time";
}

// What a user writes: braced lists of any integer type and standard containers, for the
// constructors and for the CPU pack (README's snippet).
TEST(UserArguments, BracedListsAndContainersBuildTheSameType) {
  const std::size_t n = 6;
  const int m = 6;
  const std::vector<int> sizes{m, m, m};
  const std::array<std::int64_t, 3> subsizes{m, m, 1};
  const Datatype reference =
      Datatype::subarray(std::vector<std::int64_t>{6, 6, 6}, std::vector<std::int64_t>{6, 6, 1},
                         std::vector<std::int64_t>{0, 0, 1}, Order::c, kDouble)
          .commit();
  const Datatype braced_size_t =
      Datatype::subarray({n, n, n}, {n, n, n - 5}, {n - 6, n - 6, n - 5}, Order::c, kDouble)
          .commit();
  const Datatype mixed =
      Datatype::subarray({m, m, m}, {m, m, 1}, {0, 0, 1}, Order::c, kDouble).commit();
  const Datatype containers =
      Datatype::subarray(sizes, subsizes, std::vector<unsigned>{0, 0, 1}, Order::c, kDouble)
          .commit();
  for (const Datatype* t : {&braced_size_t, &mixed, &containers}) {
    EXPECT_EQ(t->canonical().describe(), reference.canonical().describe());
    expect_bounds(*t, reference.size(), reference.lb(), reference.extent(), reference.true_lb(),
                  reference.true_extent());
  }
  // An unsigned value past int64's range is refused, not wrapped into a plausible size.
  EXPECT_THROW(Datatype::indexed({std::numeric_limits<std::uint64_t>::max()}, {0}, kInt),
               DatatypeError);
}

TEST(UserArguments, PackTakesContainersAndChecksTheirBounds) {
  const std::uint64_t seed = halox::testing::test_seed("PackTakesContainers");
  std::mt19937_64 rng(seed);
  const int n = 5;
  std::vector<double> field(n * n * n);
  for (double& v : field) v = std::uniform_real_distribution<double>(-1, 1)(rng);
  const Datatype face =
      Datatype::subarray({n, n, n}, {n, n, 1}, {0, 0, n - 1}, Order::c, kDouble).commit();
  std::vector<double> by_pointer(n * n, -7.0), by_range(n * n, -9.0);
  pack(field.data(), 1, face, by_pointer.data());
  EXPECT_EQ(pack(field, 1, face, by_range), n * n * 8);
  EXPECT_EQ(by_range, by_pointer);
  for (int j = 0; j < n * n; ++j) EXPECT_EQ(by_range[j], field[j * n + n - 1]);

  // unpack_accumulate into a vector adds, as into a pointer.
  std::vector<double> forces(field.size(), 0.5);
  unpack_accumulate(by_range, forces, 1, face);
  for (int j = 0; j < n * n; ++j) EXPECT_EQ(forces[j * n + n - 1], 0.5 + field[j * n + n - 1]);

  // A range smaller than what the type touches, a packed buffer too small, and a null
  // buffer are refused before any byte is written.
  std::vector<double> short_field(field.begin(), field.end() - 1);
  std::vector<double> short_buffer(n * n - 1, -3.0);
  EXPECT_THROW(pack(short_field, 1, face, by_range), DatatypeError);
  EXPECT_THROW(pack(field, 1, face, short_buffer), DatatypeError);
  EXPECT_TRUE(
      std::all_of(short_buffer.begin(), short_buffer.end(), [](double v) { return v == -3.0; }));
  EXPECT_THROW(pack(field, 2, face, by_range), DatatypeError);  // 2 instances run past the field
  EXPECT_THROW(pack(nullptr, 1, face, by_range.data()), DatatypeError);
  EXPECT_THROW(pack(field, 1, face, nullptr), DatatypeError);
  EXPECT_THROW(unpack(short_buffer, forces, 1, face), DatatypeError);
  EXPECT_THROW(unpack(by_range, short_field, 1, face), DatatypeError);
  EXPECT_EQ(pack(nullptr, 0, face, nullptr), 0);  // nothing to move: no buffer needed
  try {
    pack(short_field, 1, face, by_range);
  } catch (const DatatypeError& e) {
    EXPECT_NE(std::string(e.what()).find("holds 992 bytes"), std::string::npos) << e.what();
  }
}
