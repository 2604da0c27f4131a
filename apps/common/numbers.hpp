// Option values of the mini-apps, parsed once and checked: a number is finite, a count is a
// whole number an int holds (a cast of 1e20 or 2.5 would be wrong silently).
#pragma once

#include <cmath>
#include <cstdlib>
#include <string>

#include "halox/error.hpp"

namespace halox::apps {

/// `text`, the value of `option` of `program`, as a finite number; throws halox::Error.
inline double parse_number(const char* program, const std::string& option,
                           const std::string& text) {
  char* end = nullptr;
  const double d = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') {
    throw Error(std::string(program) + ": " + option + ": '" + text + "' is not a number");
  }
  if (!std::isfinite(d)) {
    throw Error(std::string(program) + ": " + option + ": '" + text + "' is not finite");
  }
  return d;
}

/// The same, as a whole number an int holds.
inline int parse_count(const char* program, const std::string& option, const std::string& text) {
  const double d = parse_number(program, option, text);
  if (d != std::floor(d) || std::abs(d) > 2147483647.0) {
    throw Error(std::string(program) + ": " + option + ": " + std::to_string(d) +
                " is not a whole number an int holds");
  }
  return static_cast<int>(d);
}

}  // namespace halox::apps
