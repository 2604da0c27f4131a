// Start-up agreement of the MPI mini-apps: every rank's input is checked and compared before
// any other communication, so that bad input on one rank, or ranks started with different
// parameters (an MPMD launch, a typo in a script), stop every rank with one message instead
// of a hang, a heap overflow or a run that "succeeds" with mismatched halves.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "mpi_main.hpp"

namespace halox::apps {

namespace detail {

// Every rank's `text`, gathered on every rank (a bounded amount: error messages and
// command lines); each wait bounded (kStartSeconds), naming the ranks that do not arrive.
// MPI_COMM_WORLD's gathers travel on the programs' duplicate of it (their roll call's).
inline std::vector<std::string> all_gather_text(MPI_Comm comm, const std::string& text) {
  if (comm == MPI_COMM_WORLD) comm = programs_comm();
  int size = 1;
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  const int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), displs(lengths.size());
  MPI_Request request;
  HALOX_MPI_CHECK(MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm, &request));
  halox::wait_collective(comm, request, kStartSeconds, "the start-up's input check");
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[static_cast<std::size_t>(r)] = total;
    total += lengths[static_cast<std::size_t>(r)];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  HALOX_MPI_CHECK(MPI_Iallgatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(),
                                  displs.data(), MPI_CHAR, comm, &request));
  halox::wait_collective(comm, request, kStartSeconds, "the start-up's input check");
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) {
    out.push_back(all.substr(static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]),
                             static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])));
  }
  return out;
}

}  // namespace detail

/// Collective over `comm`, before any other communication of the run. Runs `check` on every
/// rank (parse and validate this rank's input; throws halox::Error for bad input, and must
/// not communicate), then compares the ranks' command lines (argv[1..]) with rank 0's. Throws
/// one InputError, the same on every rank, when some rank's input is bad (the lowest such
/// rank's message, naming it) or a rank's command line differs from rank 0's (naming the
/// rank and the first argument that differs).
template <class Check>
void check_input_collectively(MPI_Comm comm, const char* program, int argc, char** argv,
                              Check&& check) {
  std::string error;
  try {
    check();
  } catch (const Error& e) {
    error = e.what();
  }
  const std::vector<std::string> errors = detail::all_gather_text(comm, error);
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (errors[r].empty()) continue;
    bool everywhere = true;
    for (const std::string& e : errors) everywhere = everywhere && e == errors[r];
    throw InputError(everywhere ? errors[r] : errors[r] + " (on rank " + std::to_string(r) + ")");
  }
  // The program, then its arguments, separated by a byte no command line holds: an MPMD
  // launch of two programs is told as such.
  std::string line = std::string(program) + '\x1f';
  for (int i = 1; i < argc; ++i) line += std::string(argv[i]) + '\x1f';
  const std::vector<std::string> lines = detail::all_gather_text(comm, line);
  auto split = [](const std::string& s) {
    std::vector<std::string> args;
    std::string::size_type at = 0, end;
    while ((end = s.find('\x1f', at)) != std::string::npos) {
      args.push_back(s.substr(at, end - at));
      at = end + 1;
    }
    return args;
  };
  const std::vector<std::string> first = split(lines.front());
  for (std::size_t r = 1; r < lines.size(); ++r) {
    if (lines[r] == lines.front()) continue;
    const std::vector<std::string> args = split(lines[r]);
    std::size_t k = 0;
    while (k < first.size() && k < args.size() && first[k] == args[k]) ++k;
    auto shown = [](const std::vector<std::string>& a, std::size_t k) {
      return k < a.size() ? "'" + a[k] + "'" : std::string("nothing");
    };
    if (k == 0) {
      throw InputError(std::string(program) + ": the ranks run different programs: " +
                       first.front() + " on rank 0 but " + args.front() + " on rank " +
                       std::to_string(r) + "; every rank of a run must run the same program");
    }
    throw InputError(std::string(program) + ": the ranks were started with different parameters: " +
                     "argument " + std::to_string(k) + " is " + shown(first, k) +
                     " on rank 0 but " + shown(args, k) + " on rank " + std::to_string(r) +
                     "; every rank of a run must get the same parameters");
  }
}

}  // namespace halox::apps
