// The tuning file halox-tune writes, read back as the transports and `auto` read it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "halox/tuning.hpp"

TEST(Tuning, MembersReadFromTheFileItNames) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("halox-tuning-" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(path);
    out << "{\n  \"chunk_bytes\": 524288,\n  \"pipelined_from_bytes\": 4194304,\n"
           "  \"direct_until_bytes\": 16777216,\n  \"message_bytes\": 4194304\n}\n";
  }
  ::setenv("HALOX_TUNING_FILE", path.c_str(), 1);
  EXPECT_EQ(halox::tuning_file_path(), path.string());
  // Each value is read once per process, at its first use: here.
  EXPECT_EQ(halox::tuned_chunk_bytes(), 524288);
  EXPECT_EQ(halox::tuned_pipelined_from_bytes(), 4194304);
  EXPECT_EQ(halox::tuned_direct_until_bytes(), 16777216);
  std::filesystem::remove(path);
}
