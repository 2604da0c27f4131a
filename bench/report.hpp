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

inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

/// Writes {"benchmark":..., "machine":..., "date":..., "rows":[...]} to `path`.
inline void write_json(const std::string& path, const std::string& benchmark,
                       const std::map<std::string, std::string>& machine,
                       const std::vector<Row>& rows) {
  std::ofstream out(path);
  out << "{\n  \"benchmark\": \"" << json_escape(benchmark) << "\",\n  \"date\": \"" << today()
      << "\",\n  \"machine\": {";
  bool first = true;
  for (const auto& [k, v] : machine) {
    out << (first ? "" : ", ") << "\"" << json_escape(k) << "\": \"" << json_escape(v) << "\"";
    first = false;
  }
  out << "},\n  \"rows\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    out << "    {";
    bool f = true;
    for (const auto& [k, v] : rows[i].text) {
      out << (f ? "" : ", ") << "\"" << k << "\": \"" << json_escape(v) << "\"";
      f = false;
    }
    for (const auto& [k, v] : rows[i].numbers) {
      std::ostringstream num;
      num.precision(10);
      num << v;
      out << (f ? "" : ", ") << "\"" << k << "\": " << num.str();
      f = false;
    }
    out << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
}

}  // namespace halox::bench
