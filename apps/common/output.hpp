// Files the programs write go through here: a path that cannot be written is found before
// the run (check_writable), a write that fails (a full disk) is an error naming the file and
// the reason and leaves the earlier file whole, never "wrote X" for a file that is not there; JSON
// is written by one library (nlohmann/json: numbers as numbers, strings escaped, non-finite values
// as null, which every JSON reader accepts).
#pragma once

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "halox/config.hpp"
#include "halox/error.hpp"

namespace halox::apps {

/// Keys in the order they are set (the order the docs list them in).
using Json = nlohmann::ordered_json;

/// Throws halox::Error naming the option when `path` cannot be written: its folder missing
/// or not writable, or the path a folder or a read-only file. The programs call it in their
/// input check, so that a run does not end, after all its work, on a path it could not use.
inline void check_writable(const char* program, const char* option, const std::string& path) {
  if (path.empty()) return;
  const auto fail = [&](const std::string& why) {
    throw Error(std::string(program) + ": " + option + ": cannot write " + path + ": " + why);
  };
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail("it is a folder");
    if (access(path.c_str(), W_OK) != 0) fail(std::strerror(errno));
    return;
  }
  if (errno != ENOENT) fail(std::strerror(errno));
  const std::string::size_type slash = path.find_last_of('/');
  const std::string folder = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  if (stat(folder.c_str(), &st) != 0) fail("folder " + folder + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) fail(folder + " is not a folder");
  if (access(folder.c_str(), W_OK | X_OK) != 0) {
    fail("folder " + folder + ": " + std::strerror(errno));
  }
}

/// Writes `bytes` to `path` through a temporary file renamed over it: a failed write (a full
/// disk) leaves the earlier file as it was, never a truncated one.
inline void write_file(const char* program, const std::string& path, const std::string& bytes) {
  const std::string temporary = path + ".tmp" + std::to_string(getpid());
  std::FILE* f = std::fopen(temporary.c_str(), "wb");
  if (f == nullptr) {
    throw Error(std::string(program) + ": cannot write " + path + ": " + std::strerror(errno));
  }
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int write_errno = errno;
  const bool flushed = std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  const int flush_errno = errno;
  const bool closed = std::fclose(f) == 0;
  const int close_errno = errno;
  if (!written || !flushed || !closed) {
    std::remove(temporary.c_str());
    throw Error(std::string(program) + ": writing " + path + " failed: " +
                std::strerror(!written   ? write_errno
                              : !flushed ? flush_errno
                                         : close_errno));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temporary.c_str());
    throw Error(std::string(program) + ": cannot write " + path + ": " +
                std::strerror(rename_errno));
  }
}

/// The command line of this run, as the JSON files record it (set once, by the first
/// CommandLine::parse or by a main that dispatches to a subcommand).
inline std::string& recorded_command_line() {
  static std::string line;
  return line;
}
inline void record_command_line(int argc, char** argv) {
  if (!recorded_command_line().empty()) return;
  std::string line;
  for (int i = 0; i < argc; ++i) line += (i ? " " : "") + std::string(argv[i]);
  recorded_command_line() = line;
}

/// Writes `json` with two members first, in every file a program writes: "halox_version"
/// and "command_line" (what made the file).
inline void write_json(const char* program, const std::string& path, const Json& json) {
  Json out;
  out["halox_version"] = HALOX_VERSION;
  out["command_line"] = recorded_command_line();
  for (auto it = json.begin(); it != json.end(); ++it) out[it.key()] = it.value();
  write_file(program, path, out.dump(2) + "\n");
}

}  // namespace halox::apps
