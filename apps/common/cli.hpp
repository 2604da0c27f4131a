// The programs' one command line (CLI11, linked into the programs only): --help and
// --version everywhere, "--opt value" and "--opt=value", every number checked (finite, in
// its range; counts whole), one wording for bad input: "halox-md: --cells: ... (see
// --help)". Under MPI, --help and --version print once (rank 0) and every rank finalises
// MPI and exits with 0.
#pragma once

#include <CLI/CLI.hpp>
#include <array>
#include <cctype>
#include <initializer_list>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "halox/config.hpp"
#include "halox/error.hpp"
#include "halox/topology.hpp"
#include "output.hpp"
#if HALOX_HAS_MPI
#include <mpi.h>
#endif

namespace halox::apps {

/// The first of the launcher's variables `names` that is set, as a whole number >= 0
/// (`fallback` when none is); a value that is not one is an error naming it, not a default.
inline int launcher_count(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    char* end = nullptr;
    const long n = std::strtol(value, &end, 10);
    if (end == value || *end != '\0' || n < 0 || n > std::numeric_limits<int>::max()) {
      throw Error(std::string("halox: the launcher's ") + name + "='" + value +
                  "' is not a whole number >= 0");
    }
    return static_cast<int>(n);
  }
  return fallback;
}

/// This process's rank in its job: MPI's once MPI is up, else the launcher's (mpirun, srun,
/// any PMI), so that a program without MPI started under mpirun prints --help, --version and
/// its errors once, from rank 0.
inline int job_rank() {
  int initialized = 0, rank = 0;
#if HALOX_HAS_MPI
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
#endif
  if (initialized) return rank;
  return launcher_count({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}, 0);
}

/// Prints `message` to stderr from rank 0 of the job only (an error every rank finds alike).
inline void print_once(const std::string& message) {
  if (job_rank() == 0) std::fprintf(stderr, "%s\n", message.c_str());
}

/// A grid option's value ("--grid 32x32x32", "--ranks 2x2"): halox::parse_dims, its error
/// naming the program and the option. `min_dims` 3 for a lattice.
inline std::array<int, 3> dims_of(const char* program, const char* option, const std::string& text,
                                  int min_dims) {
  try {
    return parse_dims(text, min_dims);
  } catch (const Error& e) {
    const std::string what = e.what();
    throw Error(std::string(program) + ": " + option + ": " + what.substr(what.find('\'')) +
                " (see --help)");
  }
}

class CommandLine {
 public:
  CommandLine(const char* program, const std::string& description)
      : m_program(program), m_app(description, program) {
    m_app.set_version_flag("--version", std::string(program) + " (halox) " + HALOX_VERSION);
    // A later value overrides an earlier one (scripts append overrides).
    m_app.option_defaults()->always_capture_default()->multi_option_policy(
        CLI::MultiOptionPolicy::TakeLast);
    m_app.get_formatter()->column_width(30);
  }

  CLI::App& app() { return m_app; }

  /// A finite number in [lo, hi].
  CLI::Option* number(const std::string& name, double& value, const std::string& help,
                      double lo = -std::numeric_limits<double>::max(),
                      double hi = std::numeric_limits<double>::max()) {
    return m_app.add_option(name, value, help)->check(in_range(lo, hi))->type_name("X");
  }
  /// A whole number in [lo, hi] (written as 100 or 1e6).
  CLI::Option* count(const std::string& name, int& value, const std::string& help, int lo = 0,
                     int hi = std::numeric_limits<int>::max()) {
    auto* o = m_app.add_option_function<double>(
        name, [&value](double d) { value = static_cast<int>(d); }, help);
    o->check(in_range(lo, hi))
        ->check(CLI::Validator(
            [](std::string& text) -> std::string {
              const double d = std::strtod(text.c_str(), nullptr);
              return d == std::floor(d) ? "" : "'" + text + "' is not a whole number";
            },
            ""));
    o->type_name("N")->default_str(std::to_string(value));
    return o;
  }
  /// One of `choices`.
  CLI::Option* choice(const std::string& name, std::string& value, const std::string& help,
                      const std::vector<std::string>& choices) {
    std::string names;
    for (const std::string& c : choices) names += (names.empty() ? "" : "|") + c;
    CLI::Validator member = CLI::IsMember(choices);
    member.description("");  // the type name lists the choices
    return m_app.add_option(name, value, help)->check(member)->type_name(names);
  }
  CLI::Option* text(const std::string& name, std::string& value, const std::string& help,
                    const std::string& type = "TEXT") {
    return m_app.add_option(name, value, help)->type_name(type);
  }
  /// A file the program writes: refused at parse time, naming the option, when rank 0 (which
  /// writes every file) cannot write it (output.hpp's check_writable).
  CLI::Option* output(const std::string& name, std::string& value, const std::string& help) {
    const std::string program = m_program;
    return m_app.add_option(name, value, help)
        ->type_name("FILE")
        ->check(CLI::Validator(
            [program, name](std::string& path) -> std::string {
              if (!on_rank_0()) return "";
              try {
                check_writable(program.c_str(), name.c_str(), path);
              } catch (const Error& e) {
                // CLI11 prefixes the option's name; the reason is what follows it.
                const std::string what = e.what();
                return what.substr(what.find(": cannot write") + 2);
              }
              return "";
            },
            ""));
  }
  /// A comma-separated list ("a,b,c"); each element checked by the caller.
  CLI::Option* list(const std::string& name, std::vector<std::string>& value,
                    const std::string& help) {
    return m_app.add_option(name, value, help)
        ->delimiter(',')
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)  // every element, not the last
        ->type_name("A,B");
  }
  /// A comma-separated list of whole numbers in [lo, hi].
  CLI::Option* counts(const std::string& name, std::vector<long>& value, const std::string& help,
                      long lo = 1, long hi = std::numeric_limits<int>::max()) {
    return m_app.add_option(name, value, help)
        ->delimiter(',')
        ->check(in_range(static_cast<double>(lo), static_cast<double>(hi)))
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->type_name("N,M");
  }
  CLI::Option* flag(const std::string& name, bool& value, const std::string& help) {
    return m_app.add_flag(name, value, help);
  }

  /// The mini-apps' --watchdog (watchdog.hpp).
  CLI::Option* watchdog(double& seconds) {
    return number("--watchdog", seconds,
                  "end the job when a rank's steps make no progress for this many seconds (a "
                  "rank stalled or dead; 0: off)",
                  0, 1e9);
  }

  /// Parses argv; bad input throws halox::Error naming the program and the option.
  void parse(int argc, char** argv) {
    record_command_line(argc, argv);
    try {
      m_app.parse(argc, argv);
    } catch (const CLI::Success& done) {  // --help, --version
      const std::string text =
          done.get_name() == "CallForVersion" ? m_app.version() + "\n" : m_app.help();
      finish_with(text);
    } catch (const CLI::ParseError& e) {
      throw Error(m_program + ": " + e.what() + " (see --help)");
    }
  }

 private:
  static std::string g(double d) {
    char text[32];
    std::snprintf(text, sizeof text, d == std::floor(d) && std::abs(d) < 1e15 ? "%.0f" : "%g", d);
    return text;
  }
  static CLI::Validator in_range(double lo, double hi) {
    return CLI::Validator(
        [lo, hi](std::string& text) -> std::string {
          char* end = nullptr;
          const double d = std::strtod(text.c_str(), &end);
          // strtod also takes a leading blank and C's hexadecimal ("0x10"): not numbers here.
          const bool decimal = !text.empty() &&
                               !std::isspace(static_cast<unsigned char>(text[0])) &&
                               text.find_first_of("xXpP") == std::string::npos;
          if (end == text.c_str() || *end != '\0' || !decimal) {
            return "'" + text + "' is not a number";
          }
          if (!std::isfinite(d)) return "'" + text + "' is not finite";
          if (d < lo || d > hi) return "'" + text + "' is outside [" + g(lo) + ", " + g(hi) + "]";
          return "";
        },
        "");
  }

  static bool on_rank_0() { return job_rank() == 0; }

  // Help and version: once under mpirun, then a clean end on every rank.
  [[noreturn]] static void finish_with(const std::string& text) {
    int initialized = 0;
#if HALOX_HAS_MPI
    MPI_Initialized(&initialized);
#endif
    if (on_rank_0()) std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
#if HALOX_HAS_MPI
    if (initialized) MPI_Finalize();
#endif
    std::exit(0);
  }

  std::string m_program;
  CLI::App m_app;
};

}  // namespace halox::apps
