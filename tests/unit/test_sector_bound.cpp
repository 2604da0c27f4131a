// The pack benchmark's sector bound (bench/sector_bound.hpp): the 32-byte sectors a pack
// reads, counted against hand-counted cases; and its TEMPI reference (bench/tempi_reference.hpp).
#include <gtest/gtest.h>

#include <vector>

#include "../../bench/sector_bound.hpp"
#include "../../bench/tempi_reference.hpp"

namespace {

using halox::Datatype;
using halox::bench::sector_bytes_moved;
using halox::bench::sector_bytes_read;

TEST(SectorBound, XFaceReadsOneSectorPerElement) {
  // The x = 1 face of a 64^3 C-order float array: one 4-byte element per 256-byte row.
  const std::vector<std::int64_t> sizes = {64, 64, 64}, sub = {64, 64, 1}, start = {0, 0, 1};
  Datatype face = Datatype::subarray(sizes, sub, start, halox::Order::c, Datatype::of<float>());
  face.commit();
  const std::int64_t array = 64 * 64 * 64 * 4;
  EXPECT_EQ(sector_bytes_read(face.canonical(), array), 64 * 64 * 32);
  // read 32 per element + write 4 per element: 36 bytes moved for 8 counted (4 + 4).
  EXPECT_EQ(sector_bytes_moved(face.canonical(), array), 64 * 64 * 32 + 64 * 64 * 4);
}

TEST(SectorBound, TwoWideXFaceSharesItsSectors) {
  const std::vector<std::int64_t> sizes = {16, 16, 64}, sub = {16, 16, 2}, start = {0, 0, 1};
  Datatype face = Datatype::subarray(sizes, sub, start, halox::Order::c, Datatype::of<float>());
  face.commit();
  EXPECT_EQ(sector_bytes_read(face.canonical(), 16 * 16 * 64 * 4), 16 * 16 * 32);
}

TEST(SectorBound, ContiguousAndMisalignedRuns) {
  Datatype block = Datatype::contiguous(1024, Datatype::of<double>());
  block.commit();
  EXPECT_EQ(sector_bytes_read(block.canonical(), 8192), 8192);
  // 8 doubles from byte 24: bytes 24..87 touch sectors 0, 1 and 2.
  const std::vector<std::int64_t> lengths = {8}, displacements = {3};
  Datatype shifted = Datatype::indexed(lengths, displacements, Datatype::of<double>());
  shifted.commit();
  EXPECT_EQ(sector_bytes_read(shifted.canonical(), 8192), 3 * 32);
}

TEST(SectorBound, GatheredIndicesCountEachSectorOnce) {
  // Two floats in one sector, a third in another: 2 sectors.
  const std::vector<std::int64_t> displacements = {0, 1, 100};
  Datatype gather = Datatype::indexed_block(1, displacements, Datatype::of<float>());
  gather.commit();
  EXPECT_EQ(sector_bytes_read(gather.canonical(), 4096), 2 * 32);
}

TEST(SectorBound, AGatherMovesItsIndexBesidesItsData) {
  // 100 floats in 100 sectors, irregularly (no stride to fold them into): 100 data sectors,
  // an index of 800 bytes (25 sectors), 400 packed bytes written (13 sectors).
  std::vector<std::int64_t> displacements;
  for (std::int64_t i = 0; i < 100; ++i) displacements.push_back(16 * i + i * i % 7);
  Datatype gather = Datatype::indexed_block(1, displacements, Datatype::of<float>());
  gather.commit();
  ASSERT_EQ(gather.canonical().pieces.size(), 1u);
  EXPECT_EQ(halox::bench::index_bytes_read(gather.canonical()), 800);
  EXPECT_EQ(sector_bytes_moved(gather.canonical(), 16 * 100 * 4), 100 * 32 + 800 + 13 * 32);
}

TEST(TempiReference, RecordedEndsAndBetween) {
  using halox::bench::tempi_pack_us;
  const std::int64_t mib = 1 << 20;
  EXPECT_DOUBLE_EQ(*tempi_pack_us(3 * mib / 4), 25.0);
  EXPECT_DOUBLE_EQ(*tempi_pack_us(3 * mib), 95.0);
  // Halfway in bytes (1.875 MiB): halfway in time.
  EXPECT_DOUBLE_EQ(*tempi_pack_us(15 * mib / 8), 60.0);
  // 1 MiB: 25 + (0.25 / 2.25) * 70.
  EXPECT_NEAR(*tempi_pack_us(mib), 25.0 + 70.0 / 9.0, 1e-12);
  EXPECT_FALSE(tempi_pack_us(3 * mib / 4 - 1).has_value());
  EXPECT_FALSE(tempi_pack_us(3 * mib + 1).has_value());
  EXPECT_FALSE(tempi_pack_us(4 * mib).has_value());  // the 512^3 w2 double face: not recorded
}

}  // namespace
