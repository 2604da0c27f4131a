// The shared benchmark driver's reporting: a readable table and machine-readable JSON, each
// figure with the machine, the date and its ratio to the ceiling measured in the same run.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "../apps/common/output.hpp"

namespace halox::bench {

inline std::string today() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d", std::gmtime(&now));
  return text;
}

inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

inline std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// "a,b,c" -> {"a", "b", "c"} (empty items dropped): the benchmarks' list options.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// One row of results: ordered string and number fields.
struct Row {
  std::vector<std::pair<std::string, std::string>> text;
  std::vector<std::pair<std::string, double>> numbers;
  Row& set(const std::string& k, const std::string& v) {
    text.emplace_back(k, v);
    return *this;
  }
  Row& set(const std::string& k, double v) {
    numbers.emplace_back(k, v);
    return *this;
  }
};

/// Writes {"benchmark":..., "date":..., "machine":..., "rows":[...]} to `path` (numbers as
/// numbers, non-finite ones as null); a file that cannot be written is an error.
inline void write_json(const std::string& path, const std::string& benchmark,
                       const std::map<std::string, std::string>& machine,
                       const std::vector<Row>& rows) {
  halox::apps::Json j;
  j["benchmark"] = benchmark;
  j["date"] = today();
  j["machine"] = machine;
  j["rows"] = halox::apps::Json::array();
  for (const Row& row : rows) {
    halox::apps::Json r;
    for (const auto& [k, v] : row.text) r[k] = v;
    for (const auto& [k, v] : row.numbers) r[k] = v;
    j["rows"].push_back(std::move(r));
  }
  halox::apps::write_json("halox-bench", path, j);
}

}  // namespace halox::bench
