// Files the programs write go through here: a file that cannot be written (a missing
// folder, a full disk) is an error naming it and the reason, never "wrote X" for a file
// that is not there; JSON is written by one library (nlohmann/json: numbers as numbers,
// strings escaped, non-finite values as null, which every JSON reader accepts).
#pragma once

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "halox/error.hpp"

namespace halox::apps {

/// Keys in the order they are set (the order the docs list them in).
using Json = nlohmann::ordered_json;

inline void write_file(const char* program, const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    throw Error(std::string(program) + ": cannot write " + path + ": " + std::strerror(errno));
  }
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    throw Error(std::string(program) + ": writing " + path +
                " failed: " + std::strerror(written ? errno : write_errno));
  }
}

inline void write_json(const char* program, const std::string& path, const Json& json) {
  write_file(program, path, json.dump(2) + "\n");
}

}  // namespace halox::apps
