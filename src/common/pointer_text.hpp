// A pointer as error messages print it.
#pragma once

#include <cstdio>
#include <string>

namespace halox::detail {

inline std::string pointer_text(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

}  // namespace halox::detail
