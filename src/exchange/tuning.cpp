#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>

#include "halox/error.hpp"
#include "halox/tuning.hpp"

namespace halox {

std::string tuning_file_path() {
  if (const char* file = std::getenv("HALOX_TUNING_FILE")) return file;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"))
    return std::string(xdg) + "/halox/tuning.json";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.config/halox/tuning.json";
}

std::int64_t tuned_chunk_bytes() {
  static std::once_flag once;
  static std::int64_t chunk = kDefaultChunkBytes;
  std::call_once(once, [] {
    const std::string path = tuning_file_path();
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    std::smatch m;
    const std::string s = text.str();
    if (in && std::regex_search(s, m, std::regex("\"chunk_bytes\"\\s*:\\s*([0-9]+)"))) {
      chunk = std::max<std::int64_t>(16, std::stoll(m[1]));
    } else {
      std::fprintf(stderr,
                   "halox: no tuning file at %s; the pipelined transport uses %lld KiB chunks "
                   "(run halox-tune to measure the best size on this machine)\n",
                   path.c_str(), static_cast<long long>(kDefaultChunkBytes / 1024));
    }
  });
  return chunk;
}

namespace {

// The tuning file's integer member `name`, or `otherwise` (no file, or no such member).
std::int64_t tuning_member(const char* name, std::int64_t otherwise) {
  std::ifstream in(tuning_file_path());
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  std::smatch m;
  if (in && std::regex_search(s, m, std::regex(std::string("\"") + name + "\"\\s*:\\s*([0-9]+)"))) {
    return static_cast<std::int64_t>(std::stoll(m[1]));
  }
  return otherwise;
}

}  // namespace

std::int64_t tuned_pipelined_from_bytes() {
  static const std::int64_t value = tuning_member("pipelined_from_bytes", std::int64_t{1} << 20);
  return value;
}

std::int64_t tuned_direct_until_bytes() {
  static const std::int64_t value = tuning_member("direct_until_bytes", -1);
  return value;
}

void write_tuning_file(const std::string& json) {
  const std::filesystem::path path = tuning_file_path();
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream out(path);
  out << json;
  if (!out) throw Error("halox: cannot write the tuning file " + path.string());
}

}  // namespace halox
