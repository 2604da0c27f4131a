// halox's environment knobs, each read through one of these: parsed strictly, so a typo is an
// error that names the variable and what it accepts, never a silent other meaning
// (HALOX_TRACE=off once switched tracing on).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "halox/error.hpp"

namespace halox::detail {

/// A switch: unset or empty gives `otherwise`; 1/on/true/yes and 0/off/false/no (any case)
/// give true and false; anything else throws halox::Error.
inline bool env_flag(const char* name, bool otherwise) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return otherwise;
  std::string v(raw);
  for (char& c : v) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (v == "1" || v == "on" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "off" || v == "false" || v == "no") return false;
  throw Error(std::string("halox: ") + name + "='" + raw +
              "' is not a switch (1, on, true, yes or 0, off, false, no)");
}

/// A whole number in [lo, hi]: unset or empty gives `otherwise`; anything else throws.
inline std::int64_t env_int(const char* name, std::int64_t lo, std::int64_t hi,
                            std::int64_t otherwise) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return otherwise;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(raw, &end, 10);
  if (*end != '\0' || errno != 0 || v < lo || v > hi) {
    throw Error(std::string("halox: ") + name + "='" + raw + "' is not a whole number in [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

}  // namespace halox::detail
