// The tuning file halox-tune writes, read back as the transports and `auto` read it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "halox/error.hpp"
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

// Every malformed file is an error that names it and says why; nothing blocks or reads
// without bound, nothing is taken silently.
TEST(Tuning, BadFilesAreRefusedWithTheirPathAndReason) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("halox-tuning-bad-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto refused = [&](const std::string& text, const std::string& why) {
    const std::string path = (dir / "t.json").string();
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << text;
    }
    try {
      halox::read_tuning_file(path);
      ADD_FAILURE() << "accepted: " << text.substr(0, 60);
    } catch (const halox::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(path), std::string::npos) << m;
      EXPECT_NE(m.find(why), std::string::npos) << m;
    }
  };
  refused("{\"chunk_bytes\": 123456789012345678901234}", "chunk_bytes");
  refused("{\"chunk_bytes\": " + std::string(70000, ' ') + "65536}", "bytes, more than");
  refused("{\"chunk_bytes\": 1e6}", "not a whole number");
  refused("{\"chunk_bytes\": 0}", "outside");
  refused("{\"chunk_bytes\": -5}", "outside");
  refused("{\"chunk_bytes\": \"65536\"}", "not a whole number");
  refused("{\"nested\": {\"chunk_bytes\": 65536}, \"chunk_bytes\": {\"a\": 1}}",
          "not a whole number");
  refused("{\"chunk_bytes\": 655", "not valid JSON");
  refused("chunk_bytes = 65536", "not valid JSON");
  refused("[65536]", "not a JSON object");
  refused("{\"direct_until_bytes\": -2}", "outside");
  refused("{\"chunk_bytes\": 65536, \"chunk_bytes\": 4096}", "names \"chunk_bytes\" twice");
  refused(std::string("{\"chunk_bytes\": 65536}\0garbage", 30), "NUL byte at offset 22");
  // A symlink loop and a folder that cannot be entered are refused, not taken as absent.
  const std::filesystem::path loop = dir / "loop.json";
  std::filesystem::create_symlink(loop, loop);
  EXPECT_THROW(halox::read_tuning_file(loop.string()), halox::Error);
  EXPECT_THROW(halox::read_tuning_file(dir.string()), halox::Error);  // a directory
  EXPECT_THROW(halox::read_tuning_file("/dev/zero"), halox::Error);   // never ends
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(halox::read_tuning_file(fifo), halox::Error);  // would block
  // Absent: the defaults; a valid file with members of its own: read.
  EXPECT_FALSE(halox::read_tuning_file((dir / "none.json").string()).found);
  {
    std::ofstream out(dir / "ok.json");
    out << "{\"chunk_bytes\": 65536, \"sweep\": [1, 2.5, \"x\"], \"machine\": \"h200\"}";
  }
  const halox::TuningValues ok = halox::read_tuning_file((dir / "ok.json").string());
  EXPECT_EQ(ok.chunk_bytes, 65536);
  {
    std::ofstream out(dir / "spaces.json");  // 50,000 spaces once crashed the regex reader
    out << "{\"chunk_bytes\": " << std::string(50000, ' ') << "32768}";
  }
  EXPECT_EQ(halox::read_tuning_file((dir / "spaces.json").string()).chunk_bytes, 32768);
  EXPECT_EQ(ok.direct_until_bytes, -1);
  std::filesystem::remove_all(dir);
}
