// halox-lbm's command line: what a run is asked to do, checked (ranges, combinations) before
// any rank starts.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "halox/exchange.hpp"
#include "lattice.hpp"

namespace halox::lbm {

struct Cli {
  std::array<int, 3> grid = {64, 64, 64};
  std::array<int, 3> ranks = {0, 0, 0};
  int rank_count = 0;  // --rank-count N: N ranks on the rank grid grid_rank_dims picks
  std::string model = "multiphase";  // multiphase | bgk
  std::string init;  // droplet | spinodal (multiphase); taylor-green | uniform (bgk)
  std::string device = "auto", comm = "datatype";
  std::string self_halo = "wrap";      // a periodic axis with one rank: wrap | exchange
  std::string fg_exchange = "fields";  // multiphase, halox moving the faces: fields | separate
  TransportKind transport = TransportKind::host;
  bool transport_given = false, single = true;
  bool local =
      false;  // --transport local-pulse or local-fused: every rank of --ranks in this process
  bool local_fused = false;  // --transport local-fused: one kernel for all faces of all ranks
  std::array<int, 3> blocks = {0, 0, 0};  // --blocks: the ranks each MPI process runs (0: one)
  Params params;
  double radius = 12, velocity = 0.02;
  int steps = 100, report_every = 0;
  int warmup = -1;  // untimed first steps; -1: min(10, steps / 10)
  std::uint64_t seed = 7;
  std::string json, dump, slice, trace;
  double watchdog = 30;
  bool check_taylor_green = false, check_mass = false;
  bool graph = false;  // --graph: each step captured in a CUDA graph once, then replayed
};

/// Parses and checks the command line (--help and --version print and exit); throws
/// halox::Error naming the option for bad input.
Cli parse(int argc, char** argv);

}  // namespace halox::lbm
