#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "halox/error.hpp"
#include "halox/tuning.hpp"
#include "../runtime/env.hpp"

namespace halox {

std::string tuning_file_path() {
  if (const char* file = detail::env_tuning_file()) return file;
  return detail::env_config_home() + "/halox/tuning.json";
}

namespace {

// The tuning file is small: halox-tune writes a few hundred bytes.
constexpr std::uintmax_t kMaxTuningFileBytes = 64 * 1024;

[[noreturn]] void bad_file(const std::string& path, const std::string& why) {
  throw Error("halox: the tuning file " + path + " " + why +
              " (fix or delete it, or run halox-tune to write it anew)");
}

// An integer member in [lo, hi], or `otherwise` when absent; anything else is an error.
std::int64_t member(const nlohmann::json& j, const std::string& path, const char* name,
                    std::int64_t lo, std::int64_t hi, std::int64_t otherwise) {
  const auto it = j.find(name);
  if (it == j.end()) return otherwise;
  if (!it->is_number_integer()) {
    bad_file(path, std::string("has \"") + name + "\": " + it->dump() + ", not a whole number");
  }
  const std::int64_t v = it->get<std::int64_t>();
  if (v < lo || v > hi || (it->is_number_unsigned() && it->get<std::uint64_t>() > 1ull << 62)) {
    bad_file(path, std::string("has \"") + name + "\": " + it->dump() + ", outside [" +
                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

}  // namespace

// A regular file of bounded size (not a FIFO or a device, which could block or never end),
// parsed as JSON and every value checked.
TuningValues read_tuning_file(const std::string& path) {
  TuningValues t;
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    t.found = false;
    return t;
  }
  // A folder that cannot be entered or a symlink loop is a file that cannot be read, not one
  // that is absent: the run would otherwise go untuned without a word.
  if (ec) bad_file(path, "cannot be reached (" + ec.message() + ")");
  if (!std::filesystem::is_regular_file(status)) bad_file(path, "is not a regular file");
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) bad_file(path, "cannot be read (" + ec.message() + ")");
  if (size > kMaxTuningFileBytes) {
    bad_file(path, "has " + std::to_string(size) + " bytes, more than a tuning file's " +
                       std::to_string(kMaxTuningFileBytes));
  }
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<std::size_t>(size), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size))) bad_file(path, "cannot be read");
  if (const auto nul = text.find('\0'); nul != std::string::npos) {
    bad_file(path, "holds a NUL byte at offset " + std::to_string(nul));
  }
  nlohmann::json j;
  std::set<std::string> keys;
  std::string duplicate;  // JSON parsers keep the last of two equal keys: refused instead
  try {
    j = nlohmann::json::parse(
        text, [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
              !keys.insert(parsed.get<std::string>()).second && duplicate.empty()) {
            duplicate = parsed.get<std::string>();
          }
          return true;
        });
  } catch (const nlohmann::json::exception& e) {
    bad_file(path, std::string("is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) bad_file(path, "names \"" + duplicate + "\" twice");
  if (!j.is_object()) bad_file(path, "is not a JSON object");
  constexpr std::int64_t kGiB = std::int64_t{1} << 30, kTiB = std::int64_t{1} << 40;
  t.chunk_bytes = member(j, path, "chunk_bytes", 16, kGiB, t.chunk_bytes);
  t.pipelined_from_bytes = member(j, path, "pipelined_from_bytes", 0, kTiB, t.pipelined_from_bytes);
  t.direct_until_bytes = member(j, path, "direct_until_bytes", -1, kTiB, t.direct_until_bytes);
  return t;
}

namespace {

// Read once per process, at the first use.
const TuningValues& tuning() {
  static const TuningValues value = [] {
    const std::string path = tuning_file_path();
    TuningValues t = read_tuning_file(path);
    if (!t.found) {
      std::fprintf(stderr,
                   "halox: no tuning file at %s; the pipelined transport uses %lld KiB chunks "
                   "(run halox-tune to measure the best size on this machine)\n",
                   path.c_str(), static_cast<long long>(kDefaultChunkBytes / 1024));
    }
    return t;
  }();
  return value;
}

}  // namespace

std::int64_t tuned_chunk_bytes() {
  return tuning().chunk_bytes;
}

std::int64_t tuned_pipelined_from_bytes() {
  return tuning().pipelined_from_bytes;
}

std::int64_t tuned_direct_until_bytes() {
  return tuning().direct_until_bytes;
}

void write_tuning_file(const std::string& json) {
  const std::filesystem::path path = tuning_file_path();
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream out(path);
  out << json;
  out.close();
  if (!out) throw Error("halox: cannot write the tuning file " + path.string());
}

}  // namespace halox
