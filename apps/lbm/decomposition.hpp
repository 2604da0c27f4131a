// The lattice over a set of ranks: one block on each (one rank per MPI process, or every rank
// of the grid in this process), and the communication variants, written once over the set:
// the halo exchanges are GridExchanges over Ranks::mpi or Ranks::local, whose transport moves
// the faces between processes or between the blocks of this process.
//  - datatype: one exchange per field (f with g as its second field by default), moving
//    each face's crossing planes described by a datatype;
//  - overlap:  the same, the cells of the stream-collide update that read no halo updated
//    while the halo moves (multiphase: g's exchange and the phi pass first, then f's with
//    phi's behind the inner cells);
//  - contig:   faces packed by hand into contiguous buffers, moved by an exchange of byte
//    ranges stage by stage;
//  - default:  packed by hand, copied to the host, MPI_Sendrecv (between processes) or a
//    host copy (between the blocks of this process), copied back and unpacked.
// Several blocks in one process step in lockstep, their streams ordered through events, not
// the host: block 0's stream waits for every block's updates before an exchange (which runs
// on it), and every block's stream waits for the exchange before its next update.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "block.hpp"
#include "cli.hpp"
#include "halox/exchange.hpp"

namespace halox::lbm {

// Phase times from points marked in stream order on one back end, read one step late: the
// host waits for step s - 1 while step s is queued, so the GPU never idles between the
// phases or the steps of a stream-ordered exchange. A step marks the points of its set
// (two sets, by step parity): before the exchanges, after them, after the first update,
// after the phi exchange, after the second update (multiphase). A step that moves nothing
// (every axis wrapped) marks no points around its exchanges.
class PhaseClock {
 public:
  /// The first point of the set of step `step`.
  static int first_point(long step) { return 5 * static_cast<int>(step % 2); }
  /// After a step marked the set from `at`: adds the previous step's times.
  void marked(Backend& b, int at, bool moves, bool multiphase);
  double exchange(Backend& b);
  double compute(Backend& b);
  void reset(Backend& b);

 private:
  void settle(Backend& b);
  double m_exchange = 0, m_compute = 0;
  int m_pending = -1;  // the first point of the step not yet added, or -1
  bool m_moves = true, m_multiphase = false;
};

class Decomposition {
 public:
  /// cli.local: every rank of cli.ranks in this process; else this process's rank of the
  /// grid over `comm` (collective).
  Decomposition(MPI_Comm comm, const Cli& cli);
  ~Decomposition();

  void step();
  /// Waits for every block's queued work.
  void synchronize();
  /// Sums over all ranks: fluid mass, phase A and B amounts, kinetic energy (collective).
  std::array<double, 4> totals();
  /// Every cell's moments in global order (rho, ux, uy, uz, phi) on rank 0 (collective).
  std::vector<double> gather();

  const Topology& topology() const { return m_ranks.topology(); }
  /// Rank 0's block (its back end's name, real type, memory).
  Block& first() { return *m_blocks.front(); }
  Backend& backend() { return first().backend(); }
  std::array<int, 3> local() const { return m_blocks.front()->local(); }
  std::string wrapped_axes() const { return m_blocks.front()->wrapped_axes(); }
  /// Whether g moves as the second field of f's exchange call, and how they move ("fields",
  /// "separate"; "none" for BGK).
  std::string fg_exchange() const;
  /// The variant and the transport, as the report prints them.
  std::string transport() const;
  double time_exchange() { return m_phases.exchange(backend()); }
  double time_compute() { return m_phases.compute(backend()); }
  void reset_timers() { m_phases.reset(backend()); }

 private:
  void step_once();
  void step_graphed();
  void step_in_phases();
  void step_overlapped();
  void step_overlapped_blocks();
  void overlapped_pass(int pass, int field);
  void exchange(int field);
  void exchange_f();
  void exchange_field(int field);
  void exchange_contiguous(int field);
  void exchange_by_hand(int field);
  // --comm mpi-datatype | mpi-contig | mpi-neighbor: plain MPI calls on the fields or the
  // contig buffers (mpi-neighbor: one MPI_Neighbor_alltoallw per stage).
  void exchange_with_mpi(int field);
  void mpi_stage(const std::vector<GridPulse>& pulses, int stage, void* base, int field,
                 std::vector<MPI_Datatype>& types);
  void mpi_neighbor_stage(const std::vector<GridPulse>& pulses,
                          const std::vector<std::size_t>& mine, void* base, int field, int stage,
                          const std::vector<MPI_Datatype>& types);
  // Block 0's stream waits for every block's work so far; every block's for block 0's.
  void gather_streams();
  void scatter_streams();
  ExchangeOptions options(int field, const std::string& suffix = "") const;
  std::vector<void*>& arrays(int field);

  Cli m_cli;
  MPI_Comm m_comm;
  Ranks m_ranks;
  TransportKind m_transport = TransportKind::host;
  // --fg-exchange fields, multiphase: the field f's exchange moves as its second (1 g,
  // 2 phi), which has no exchange of its own; 0: none.
  int m_with_f = 0;
  // Field k's exchange: what it moves ("f+g", "phi"; its objects' names) and its span.
  std::array<std::string, 3> m_moved, m_spans;
  std::vector<std::unique_ptr<Block>> m_blocks;
  std::array<std::unique_ptr<GridExchange>, 3> m_exchanges;        // f (and g), g, phi
  std::array<std::unique_ptr<GridExchange>, 9> m_stage_exchanges;  // contig: field, stage
  std::vector<void*> m_pointers;                                   // arrays()'s (reused)
  // mpi-*: per field and stage, its pulses' MPI send and receive types (halox::to_mpi of
  // the plan's), made at the first exchange and freed with the decomposition.
  std::array<std::vector<MPI_Datatype>, 9> m_mpi_types;
  // mpi-neighbor: per field and stage, a distributed-graph communicator whose neighbours are
  // the stage's pulses' (made at the first exchange).
  std::array<MPI_Comm, 9> m_neighbor_comms;
  PhaseClock m_phases;
  long m_steps = 0;
  std::array<bool, 2> m_captured{};  // --graph: the step of each parity is in a CUDA graph
};

}  // namespace halox::lbm
