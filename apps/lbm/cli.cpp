// halox-lbm's command line (cli.hpp).
#include "cli.hpp"

#include <cmath>

#include "../common/cli.hpp"
#include "../common/watchdog.hpp"
#include "halox/error.hpp"
#include "halox/topology.hpp"

namespace halox::lbm {

namespace {

// The options' text forms, turned into the Cli's values after parsing.
struct RawOptions {
  std::string grid = "64x64x64", ranks, precision = "float", transport, blocks;
  double seed = 0;
};

void declare_options(halox::apps::CommandLine& line, Cli& c, RawOptions& raw) {
  line.choice("--model", c.model, "multiphase: D3Q19 + D3Q7 free energy; bgk: D3Q19",
              {"multiphase", "bgk"});
  line.choice("--init", c.init,
              "multiphase: droplet (default) | spinodal; bgk: taylor-green (default) | uniform",
              {"droplet", "spinodal", "taylor-green", "uniform"});
  line.text("--grid", raw.grid, "global lattice; any size, uneven splits handled", "XxYxZ");
  line.text("--ranks", raw.ranks,
            "rank grid (default: the one whose halo moves the fewest face cells per rank, x "
            "faces, strided, counted 32 / element bytes times: halox::grid_rank_dims)",
            "XxYxZ");
  line.text("--blocks", raw.blocks,
            "each MPI process runs a block of AxBxC ranks (halox::Ranks::blocks; --comm "
            "datatype or overlap): --ranks is then the grid of processes, the rank grid "
            "that times the block",
            "AxBxC");
  line.count("--rank-count", c.rank_count,
             "N ranks on that grid (--transport local-*: how many it runs)", 1);
  line.count("--steps", c.steps, "time steps");
  line.choice("--device", c.device, "auto: gpu when one is visible", {"auto", "cpu", "gpu"});
  line.choice("--precision", raw.precision, "arithmetic and storage", {"float", "double"});
  line.choice("--comm", c.comm,
              "datatype: halox datatypes describe the faces, halox packs and moves them; "
              "default: hand-written pack kernels + host copies + MPI; contig: the "
              "hand-written pack, moved by a halox transport; overlap: datatype, inner cells "
              "updated while the halo moves; mpi-datatype, mpi-contig: datatype and contig "
              "written with plain MPI calls (MPI_Isend/MPI_Irecv of MPI datatypes) instead of "
              "halox's exchange; mpi-overlap: mpi-datatype while the inner cells update; "
              "mpi-neighbor: mpi-datatype as one MPI_Neighbor_alltoallw per stage; "
              "mpi-neighbor-overlap: mpi-neighbor while the inner cells update (on a GPU: the "
              "mpi- forms under libhalox_mpi or a CUDA-aware MPI)",
              {"datatype", "default", "contig", "overlap", "mpi-datatype", "mpi-contig",
               "mpi-overlap", "mpi-neighbor", "mpi-neighbor-overlap"});
  line.text("--transport", raw.transport,
            "for --comm datatype/contig/overlap: host | staged | pipelined | nvshmem-stream | "
            "ipc-fused | nvshmem-fused | nccl | auto (default: host on the CPU, staged on the "
            "GPU) | local-pulse (every rank of --ranks in this one process, run without mpirun; "
            "GPU: one kernel per face) | local-fused (the same, datatype or overlap; GPU: one "
            "kernel moves every face of every rank)");
  line.number("--tau", c.params.tau, "momentum relaxation time (must exceed 0.5)", 0, 1e6);
  line.number("--tau-g", c.params.tau_g, "order-parameter relaxation time", 0, 1e6);
  line.number("--A", c.params.A, "bulk free-energy coefficient", 0, 1e6);
  line.number("--kappa", c.params.kappa, "interface stiffness", 0, 1e6);
  line.number("--mobility", c.params.mobility, "order-parameter mobility", 0, 1e6);
  line.number("--radius", c.radius, "droplet radius", 0, 1e6);
  line.number("--velocity", c.velocity, "Taylor-Green amplitude");
  line.count("--report", c.report_every, "progress line every N steps (0: 10 lines per run)");
  line.count("--warmup", c.warmup,
             "the first N steps are not timed (default min(10, steps/10)): they carry the "
             "transports' lazy set-up (NCCL, NVSHMEM: ~0.4 s)",
             -1);
  line.number("--seed", raw.seed, "spinodal noise seed", 0, 9e15);
  line.flag("--check-taylor-green", c.check_taylor_green,
            "compare the decay with the analytic solution (1% tolerance)");
  line.flag("--check-mass", c.check_mass,
            "check conservation of each phase and of the fluid (1e-10)");
  line.choice("--self-halo", c.self_halo,
              "a periodic axis that one rank spans alone: wrap (the update reads the opposite "
              "edge in place, no exchange) | exchange (its halo moves like any other)",
              {"wrap", "exchange"});
  line.choice("--fg-exchange", c.fg_exchange,
              "multiphase with --comm datatype or overlap: fields (one exchange call moves f "
              "and g as two fields; overlap: f and phi, g alone before the phi pass) | "
              "separate (one exchange each)",
              {"fields", "separate"});
  line.flag("--graph", c.graph,
            "GPU: capture the step (every rank's updates and halo exchanges in this process) "
            "in a CUDA graph once, after two ordinary steps, and replay it (--comm datatype, "
            "overlap or contig on local-pulse, local-fused, ipc-* or nvshmem-fused/pulse)");
  line.output("--dump", c.dump, "rho, u, phi of every cell after the run (binary, global order)");
  line.output("--slice", c.slice, "the order parameter (or |u|) in the mid z plane as a PGM image");
  line.output("--trace", c.trace,
              "Chrome trace JSON of the last steps: the exchange kernels' events and, on the GPU, "
              "every rank's updates and exchange calls as stream spans");
  line.watchdog(c.watchdog);
  line.output("--json", c.json, "results as JSON");
}

// The Cli's values from the text forms, each checked alone.
void take_raw(Cli& c, const RawOptions& raw) {
  c.grid = halox::apps::dims_of("halox-lbm", "--grid", raw.grid, 3);
  if (!raw.ranks.empty()) c.ranks = halox::apps::dims_of("halox-lbm", "--ranks", raw.ranks, 1);
  if (!raw.blocks.empty()) c.blocks = halox::apps::dims_of("halox-lbm", "--blocks", raw.blocks, 1);
  c.single = raw.precision == "float";
  if (!raw.transport.empty()) {
    c.transport = parse_transport(raw.transport);
    c.local_fused = c.transport == TransportKind::local_fused;
    c.local = c.local_fused || c.transport == TransportKind::local_pulse;
    c.transport_given = true;
  }
  if (raw.seed != std::floor(raw.seed)) throw Error("halox-lbm: --seed must be a whole number");
  c.seed = static_cast<std::uint64_t>(raw.seed);
  // The lattice's sound speed is 1/sqrt(3): flows near it are outside what LBM describes.
  if (!(std::abs(c.velocity) < 0.3))
    throw Error("halox-lbm: --velocity must be below 0.3 in lattice units (Mach ~0.5)");
  if (c.init.empty()) c.init = c.model == "bgk" ? "taylor-green" : "droplet";
  const bool ok_init = c.model == "bgk" ? (c.init == "taylor-green" || c.init == "uniform")
                                        : (c.init == "droplet" || c.init == "spinodal");
  if (!ok_init) throw Error("halox-lbm: --init " + c.init + " does not fit --model " + c.model);
}

// The options that exclude or need each other, and the physical limits.
void check_combinations(Cli& c) {
  if (c.rank_count > 0 && c.ranks != std::array<int, 3>{0, 0, 0}) {
    throw Error("halox-lbm: --rank-count and --ranks exclude each other");
  }
  if (c.local && c.rank_count == 0 && !(c.ranks[0] > 0 && c.ranks[1] > 0 && c.ranks[2] > 0)) {
    throw Error("halox-lbm: --transport " + to_string(c.transport) +
                " needs the ranks it runs in this process (--ranks XxYxZ, "
                "or --rank-count N for N ranks on the rank grid halox picks)");
  }
  if (c.comm.starts_with("mpi-") && (c.local || c.transport_given)) {
    throw Error("halox-lbm: --comm " + c.comm +
                " moves the faces with MPI's own calls, one rank per MPI process: no "
                "--transport");
  }
  if (c.blocks[0] > 0 && (c.local || (c.comm != "datatype" && c.comm != "overlap") || c.graph)) {
    throw Error(
        "halox-lbm: --blocks runs halox's exchange over several ranks per process: "
        "--comm datatype or overlap, without --graph and without a local-* transport");
  }
  if (c.local_fused && (c.comm == "default" || c.comm == "contig")) {
    throw Error("halox-lbm: --transport local-fused moves the faces of --comm datatype or overlap");
  }
  if (c.graph && c.comm != "datatype" && c.comm != "overlap" && c.comm != "contig") {
    throw Error(
        "halox-lbm: --graph captures halox's exchanges: --comm datatype, overlap or "
        "contig (--comm " +
        c.comm + " waits on the host)");
  }
  if (c.graph && c.device == "cpu") {
    throw Error("halox-lbm: --graph captures CUDA graphs: it needs --device gpu (or auto)");
  }
  if (c.graph && !c.trace.empty()) {
    throw Error(
        "halox-lbm: --graph and --trace exclude each other (a replayed graph's "
        "kernels are not traced)");
  }
  if (!(c.params.tau > 0.5)) throw Error("halox-lbm: --tau must exceed 0.5 (unstable otherwise)");
  if (!(c.params.tau_g > 0.5))
    throw Error("halox-lbm: --tau-g must exceed 0.5 (unstable otherwise)");
  if (c.warmup < 0) c.warmup = std::min(10, c.steps / 10);
  if (c.warmup > c.steps) throw Error("halox-lbm: --warmup must be at most --steps");
  if (c.params.A <= 0 || c.params.kappa <= 0)
    throw Error("halox-lbm: --A and --kappa must be positive");
  c.params.multiphase = c.model == "multiphase";
}

}  // namespace

Cli parse(int argc, char** argv) {
  Cli c;
  RawOptions raw;
  raw.seed = static_cast<double>(c.seed);
  halox::apps::CommandLine line(
      "halox-lbm",
      "Lattice Boltzmann on a periodic box split over a rank grid; halo exchange by halox.\n"
      "Run it as mpiexec -n N halox-lbm [options].");
  declare_options(line, c, raw);
  line.parse(argc, argv);
  take_raw(c, raw);
  check_combinations(c);
  return c;
}

}  // namespace halox::lbm
