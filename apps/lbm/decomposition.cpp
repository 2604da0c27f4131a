// The lattice over a set of ranks and its communication variants (decomposition.hpp).
#include "decomposition.hpp"

#include <dlfcn.h>

#include <string>

#include "../common/gather.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"

namespace halox::lbm {

void PhaseClock::marked(Backend& b, int at, bool moves, bool multiphase) {
  settle(b);
  m_pending = at;
  m_moves = moves;
  m_multiphase = multiphase;
}
double PhaseClock::exchange(Backend& b) {
  settle(b);
  return m_exchange;
}
double PhaseClock::compute(Backend& b) {
  settle(b);
  return m_compute;
}
void PhaseClock::reset(Backend& b) {
  settle(b);
  m_exchange = m_compute = 0;
}
// Adds the phase times of the step whose points are still unread (waits for its end).
void PhaseClock::settle(Backend& b) {
  if (m_pending < 0) return;
  const int at = m_pending;
  m_pending = -1;
  if (m_moves) {
    m_exchange +=
        b.seconds_between(at, at + 1) + (m_multiphase ? b.seconds_between(at + 2, at + 3) : 0);
  }
  m_compute += b.seconds_between(at + 1, at + 2) +
               (m_multiphase ? b.seconds_between(m_moves ? at + 3 : at + 2, at + 4) : 0);
}

namespace {
Topology grid_of(MPI_Comm comm, const Cli& cli) {
  return cli.local ? Topology(cli.ranks, {true, true, true}, 0)
                   : Topology::from_mpi(comm, cli.ranks);
}
// Every rank of the grid in this process (local-*), a block of them (--blocks), or one.
Ranks ranks_of(MPI_Comm comm, const Cli& cli) {
  if (cli.local) return Ranks::local(grid_of(comm, cli));
  if (cli.blocks[0] > 0) return Ranks::blocks(grid_of(comm, cli), cli.blocks);
  return Ranks::mpi(grid_of(comm, cli));
}
}  // namespace

Decomposition::Decomposition(MPI_Comm comm, const Cli& cli)
    : m_cli(cli), m_comm(comm), m_ranks(ranks_of(comm, cli)) {
  m_neighbor_comms.fill(MPI_COMM_NULL);
  const Topology& grid = m_ranks.topology();
  if (m_ranks.in_process() || m_ranks.in_blocks()) {
    for (int i = 0; i < m_ranks.count(); ++i) {
      m_blocks.push_back(std::make_unique<Block>(
          Topology(grid.dims(), grid.periodic(), m_ranks.rank(i)), cli, false));
    }
  } else {
    m_blocks.push_back(std::make_unique<Block>(grid, cli, true));
  }
  m_transport = cli.local || cli.transport_given
                    ? cli.transport
                    : (backend().on_device() ? TransportKind::staged : TransportKind::host);
  // mpi-*: the fields' device pointers go to MPI's own calls, which this MPI library moves
  // only when it is CUDA-aware or libhalox_mpi stands in front of it (else it faults).
  if (cli.comm.starts_with("mpi-") && backend().on_device() &&
      dlsym(RTLD_DEFAULT, "halox_mpi_active") == nullptr &&
      !transport_available(TransportKind::mpi_direct)) {
    throw Error("halox-lbm: --comm " + cli.comm +
                " on the GPU gives device memory to MPI, which this MPI library cannot move: "
                "run it with libhalox_mpi (mpirun -x LD_PRELOAD=<prefix>/lib/libhalox_mpi.so)");
  }
  // datatype and overlap: one exchange per field, none for a field whose every axis the
  // update wraps; by default f's exchange moves a second field: g (datatype: both before the
  // phi pass), or phi (overlap: g alone before the phi pass, f with phi behind the inner
  // stream-collide update).
  const bool halox_moves = cli.comm == "datatype" || cli.comm == "overlap";
  if (halox_moves && cli.params.multiphase && cli.fg_exchange == "fields") {
    m_with_f = cli.comm == "overlap" ? 2 : 1;
  }
  static constexpr const char* kFields[] = {"f", "g", "phi"};
  for (int k = 0; k < 3; ++k) {  // names made once: the exchange objects' and their spans'
    m_moved[k] = kFields[k];
    if (k == 0 && m_with_f > 0) m_moved[k] += std::string("+") + kFields[m_with_f];
    m_spans[k] = "exchange " + m_moved[k];
  }
  if (halox_moves) {
    for (int k = 0; k < (cli.params.multiphase ? 3 : 1); ++k) {
      if (k > 0 && k == m_with_f) continue;  // moved with f
      std::vector<GridPlan> plans;
      for (auto& b : m_blocks) plans.push_back(b->halo(k).moved);
      if (k == 0 && m_with_f > 0) {  // [f of every rank, the second field of every rank]
        for (auto& b : m_blocks) plans.push_back(b->halo(m_with_f).moved);
      }
      if (plans.front().pulses.empty()) continue;
      m_exchanges[k] = std::make_unique<GridExchange>(m_ranks, std::move(plans), options(k));
    }
  }
}

Decomposition::~Decomposition() {
  for (MPI_Comm& c : m_neighbor_comms) {
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  }
  for (auto& types : m_mpi_types) {
    for (MPI_Datatype& t : types) MPI_Type_free(&t);
  }
}

ExchangeOptions Decomposition::options(int field, const std::string& suffix) const {
  ExchangeOptions options;
  options.transport = m_transport;
  options.name = m_moved[field] + suffix;
  return options;
}

std::vector<void*>& Decomposition::arrays(int field) {
  m_pointers.clear();
  for (auto& b : m_blocks) m_pointers.push_back(b->field(field));
  if (field == 0 && m_with_f > 0) {
    for (auto& b : m_blocks) m_pointers.push_back(b->field(m_with_f));
  }
  return m_pointers;
}

std::string Decomposition::fg_exchange() const {
  if (!m_cli.params.multiphase) return "none";
  return m_with_f > 0 ? "fields" : "separate";
}

void Decomposition::gather_streams() {
  for (std::size_t r = 1; r < m_blocks.size(); ++r) backend().wait_for(m_blocks[r]->backend());
}
void Decomposition::scatter_streams() {
  for (std::size_t r = 1; r < m_blocks.size(); ++r) m_blocks[r]->backend().wait_for(backend());
}

void Decomposition::step() {
  if (m_cli.graph && m_steps >= 2) {
    step_graphed();
  } else {
    step_once();
  }
  ++m_steps;
}

void Decomposition::step_once() {
  if (m_cli.comm.ends_with("overlap")) {
    step_overlapped();  // swaps the fields itself
  } else {
    step_in_phases();
    for (auto& b : m_blocks) b->finish_step();
  }
}

// --graph: the step's work on every block's streams (updates and exchanges) captured into a
// CUDA graph once per parity (the fields swap every step and a graph keeps the addresses it
// was captured with), after two ordinary steps have set up every exchange for both; then
// replayed, the host swapping the fields as the captured step did. Between replays the
// exchanges' check() reports a device-side time-out, which no exchange call does now.
void Decomposition::step_graphed() {
  Backend& b = backend();
  const int parity = static_cast<int>(m_steps % 2);
  if (!m_captured[parity]) {
    b.begin_capture();
    try {
      scatter_streams();  // every block's stream joins the capture
      step_once();
      gather_streams();  // and ends in block 0's
    } catch (...) {
      b.abandon_capture();
      throw;
    }
    b.end_capture(parity);
    m_captured[parity] = true;
  } else {
    for (auto& block : m_blocks) block->finish_step();  // the captured step's swap
  }
  b.replay(parity);
  for (auto& exchange : m_exchanges) {
    if (exchange) exchange->check();
  }
  for (auto& exchange : m_stage_exchanges) {
    if (exchange) exchange->check();
  }
}

// Exchange, update, (exchange phi, update): every block's updates are timed together, from
// points marked on block 0's stream (PhaseClock). (A transport that needs the host, such as
// MPI through host memory, waits for its own work.)
void Decomposition::step_in_phases() {
  Backend& b = backend();
  const int at = PhaseClock::first_point(m_steps);
  const bool moves = !m_blocks.front()->exchange_free();
  const bool multiphase = m_cli.params.multiphase;
  // No phase times in a CUDA graph (--graph): an event recorded in a capture is not timed.
  auto mark = [&](int point) {
    if (!m_cli.graph) b.mark(point);
  };
  gather_streams();
  if (moves) {
    mark(at);
    exchange(0);
    if (multiphase && m_with_f != 1) exchange(1);
  }
  mark(at + 1);
  scatter_streams();
  for (auto& block : m_blocks) block->first_update();
  gather_streams();
  mark(at + 2);
  if (multiphase) {
    if (moves) {
      exchange(2);
      mark(at + 3);
    }
    scatter_streams();
    for (auto& block : m_blocks) block->second_update();
    gather_streams();
    mark(at + 4);
  }
  if (!m_cli.graph) m_phases.marked(b, at, moves, multiphase);
}

// The overlap variant: every block's inner cells of the stream-collide update on its side
// stream while the faces move (on block 0's stream), then the shells. Every cell still gets
// exactly the same arithmetic, so the fields stay bitwise those of the other variants. No
// phase times: one span. No wait for the GPU here: the next step's work queues behind this
// one (stream order and the fork/join events keep it correct), so no step starts on an idle
// GPU.
// - Every block's inner update waits for every block's last shells, although its own would
//   do: started early, the inner updates (most of the cells) took the GPU from the other
//   blocks' shells and the exchange after them, the step's critical path, and the whole step
//   ran 20% slower than without overlap (the event log showed it; docs/PERFORMANCE.md).
// - The exchange is queued before the inner updates, so that the host's launches of eight
//   inner updates do not delay it.
// - Multiphase: f's halo, with phi's, moves behind the stream-collide update's inner cells.
//   g's (all the phi pass reads) moves behind the phi pass's inner cells where a process
//   runs one block: on 2 processes (1x1x2) that lifted the run from 94.3-94.6% of one rank
//   to 95.1-95.2%. With 8 blocks in one process (1x2x4) the split pass lost (87.3-88.2%
//   against 91.0-91.2%; docs/PERFORMANCE.md), so there the phi pass runs whole, and g's
//   halo moves at the end of the step before, behind the stream-collide pass's inner cells:
//   its faces are the shells' cells, and the inner cells neither read nor write the new
//   g's halo or faces.
// - On that path a block's passes wait for the other blocks only where data crosses
//   blocks: its phi pass for its own last step and g's exchange (not for the other blocks'
//   inner cells), its inner cells for its own phi pass (not for the other blocks'), so no
//   pass waits for the tail of the slowest block's.
void Decomposition::step_overlapped() {
  const bool multiphase = m_cli.params.multiphase;
  if (multiphase && m_blocks.size() > 1) {
    step_overlapped_blocks();
    return;
  }
  gather_streams();  // the shells of the last step: the faces, and every inner cell's input
  if (multiphase) {
    overlapped_pass(0, 1);
    gather_streams();  // phi of every block, before its faces move
  }
  overlapped_pass(multiphase ? 1 : 0, 0);
  for (auto& b : m_blocks) b->finish_step();
}

// Multiphase, several blocks in one process (see step_overlapped). Each block's stream
// starts the step behind its own shells, its inner cells (joined) and g's exchange
// (scattered at the end of the step before).
void Decomposition::step_overlapped_blocks() {
  if (m_steps == 0) {  // later steps' g moved at the end of the step before
    gather_streams();
    exchange(1);
    scatter_streams();
  }
  for (auto& block : m_blocks) {
    block->first_update();
    block->fork();  // its inner cells read its own phi, no other block's
  }
  gather_streams();  // phi of every block, before its faces move
  // f's halo (with phi) behind the inner cells, then the shells, then the new g's halo,
  // still behind the inner cells; every block's main stream then joins its side stream.
  exchange_f();
  for (auto& block : m_blocks) block->update_inner(1);
  scatter_streams();
  for (auto& block : m_blocks) block->update_shell_alone(1);
  gather_streams();  // every block's shells: the new g's faces
  for (auto& b : m_blocks) b->finish_step();
  exchange(1);
  scatter_streams();  // the next step's phi pass of every block reads g's halo
  for (auto& block : m_blocks) block->join();
}

// Update pass `pass` of every block with the exchange of `field` (and f's second field, or
// phi when it moves alone) hidden behind the inner cells: the side streams wait for block
// 0's stream, which holds every block's last work, so every input of the inner cells is
// there.
// mpi-overlap, mpi-neighbor-overlap: the host waits in MPI's calls, so the inner cells are
// launched first and the faces move while they run (the seed's Overlap with MPI_Isend/
// MPI_Irecv of MPI datatypes, or with MPI_Neighbor_alltoallw).
void Decomposition::overlapped_pass(int pass, int field) {
  scatter_streams();
  for (auto& block : m_blocks) block->fork();
  const bool host_waits = m_cli.comm.starts_with("mpi-");
  if (host_waits) {
    for (auto& block : m_blocks) block->update_inner(pass);
  }
  if (field == 0) {
    exchange_f();
  } else {
    exchange(field);
  }
  if (!host_waits) {
    for (auto& block : m_blocks) block->update_inner(pass);
  }
  scatter_streams();
  for (auto& block : m_blocks) block->update_shell(pass);
}

// f's halo for the stream-collide pass, and phi's where it does not travel with f.
void Decomposition::exchange_f() {
  exchange(0);
  if (m_cli.params.multiphase && m_with_f != 2) exchange(2);
}

// Ordered by the caller: every block's stream is gathered into block 0's before, and waits
// for it after. A span on the event log (--trace), on block 0's stream.
void Decomposition::exchange(int field) {
  const char* span = m_spans[field].c_str();
  const int rank = first().topology().rank();
  backend().trace_span(span, rank, true, false);
  exchange_field(field);
  backend().trace_span(span, rank, false, false);
}

void Decomposition::exchange_field(int field) {
  if (m_cli.comm == "contig") {
    exchange_contiguous(field);
  } else if (m_cli.comm == "default") {
    exchange_by_hand(field);
  } else if (m_cli.comm.starts_with("mpi-")) {
    exchange_with_mpi(field);
  } else if (m_exchanges[field]) {  // none when every axis wraps
    m_exchanges[field]->exchange_async(arrays(field), backend().stream_handle());
  }
}

// The contig variant: the hand-written pack into contiguous buffers of the default variant,
// moved by a halox exchange of their byte ranges (one per axis, since each axis forwards
// what the previous one unpacked).
void Decomposition::exchange_contiguous(int field) {
  Block& first_block = first();
  for (int s = 0; s < 3; ++s) {
    if (first_block.stage_wraps(first_block.halo(field), s)) continue;  // alike on every rank
    for (auto& b : m_blocks) b->contig_pack(b->halo(field), s);
    std::unique_ptr<GridExchange>& stage = m_stage_exchanges[3 * field + s];
    if (!stage) {
      std::vector<GridPlan> plans;
      for (auto& b : m_blocks) plans.push_back(b->halo(field).stages[s].plan);
      ExchangeOptions o = options(
          field, std::string(" ") + "xyz"[first_block.halo(field).plan.pulses[2 * s].header.axis]);
      if (m_ranks.in_process()) o.transport = TransportKind::local_pulse;  // one kernel per face
      stage = std::make_unique<GridExchange>(m_ranks, std::move(plans), o);
    }
    m_pointers.clear();
    for (auto& b : m_blocks) m_pointers.push_back(b->halo(field).stages[s].buffer);
    gather_streams();
    stage->exchange_async(m_pointers, backend().stream_handle());
    scatter_streams();
    for (auto& b : m_blocks) b->contig_unpack(b->halo(field), s);
  }
}

// The "default" variant, as the seed's application does it: hand-written pack kernels into
// contiguous buffers, explicit copies to the host, MPI_Sendrecv (a host copy between the
// blocks of this process), copies back, unpack.
void Decomposition::exchange_by_hand(int field) {
  Block& first_block = first();
  const std::size_t pulses = first_block.halo(field).plan.pulses.size();
  for (std::size_t p = 0; p < pulses; ++p) {
    if (first_block.wraps(first_block.halo(field), p)) continue;  // alike on every rank
    std::size_t bytes = 0;
    for (auto& b : m_blocks) bytes = b->hand_pack(b->halo(field), p);
    if (m_ranks.in_process()) {
      for (auto& b : m_blocks) {
        const int to = b->halo(field).plan.pulses[p].header.send_rank;
        if (to >= 0) m_blocks[to]->host_recv() = b->host_send();
      }
    } else {
      const PulseHeader& hd = first_block.halo(field).plan.pulses[p].header;
      const int to = hd.send_rank < 0 ? MPI_PROC_NULL : hd.send_rank;
      const int from = hd.recv_rank < 0 ? MPI_PROC_NULL : hd.recv_rank;
      const int n = static_cast<int>(bytes), tag = 600 + static_cast<int>(p);
      HALOX_MPI_CHECK(MPI_Sendrecv(first_block.host_send().data(), n, MPI_BYTE, to, tag,
                                   first_block.host_recv().data(), n, MPI_BYTE, from, tag,
                                   topology().comm(), MPI_STATUS_IGNORE));
    }
    for (auto& b : m_blocks) {
      if (b->halo(field).plan.pulses[p].header.recv_rank >= 0) b->hand_unpack(b->halo(field), p);
    }
  }
}

// The seed's variants as an MPI code writes them, with no halox in the exchange: each stage's
// faces by MPI_Irecv / MPI_Isend of MPI datatypes and MPI_Waitall, on the field itself
// (mpi-datatype) or on the contig variant's packed buffers (mpi-contig). On device memory
// the MPI calls need a CUDA-aware MPI library or libhalox_mpi in front of it.
void Decomposition::exchange_with_mpi(int field) {
  Block& b = first();
  FieldHalo& h = b.halo(field);
  if (m_cli.comm != "mpi-contig") {
    backend().synchronize();  // the update that wrote the faces is done
    for (int s = 0; s < 3; ++s)
      mpi_stage(h.moved.pulses, s, b.field(field), field, m_mpi_types[3 * field + s]);
    return;
  }
  for (int s = 0; s < 3; ++s) {
    if (b.stage_wraps(h, s)) continue;
    b.contig_pack(h, s);
    backend().synchronize();
    mpi_stage(h.stages[s].plan.pulses, s, h.stages[s].buffer, field, m_mpi_types[3 * field + s]);
    b.contig_unpack(h, s);
  }
}

// The pulses of `stage` among `pulses`: receives posted, sends started, all waited for.
// `types` holds their MPI send and receive types, made at the first call.
void Decomposition::mpi_stage(const std::vector<GridPulse>& pulses, int stage, void* base,
                              int field, std::vector<MPI_Datatype>& types) {
  std::vector<std::size_t> mine;
  for (std::size_t p = 0; p < pulses.size(); ++p) {
    if (pulses[p].header.stage == stage) mine.push_back(p);
  }
  if (types.empty()) {
    for (const std::size_t p : mine) {
      types.push_back(to_mpi(pulses[p].send_type));
      types.push_back(to_mpi(pulses[p].recv_type));
    }
  }
  if (m_cli.comm.starts_with("mpi-neighbor")) {
    mpi_neighbor_stage(pulses, mine, base, field, stage, types);
    return;
  }
  std::vector<MPI_Request> requests(2 * mine.size());
  for (std::size_t k = 0; k < mine.size(); ++k) {
    const PulseHeader& hd = pulses[mine[k]].header;
    const int tag = 700 + 10 * field + static_cast<int>(mine[k]);
    const int from = hd.recv_rank < 0 ? MPI_PROC_NULL : hd.recv_rank;
    const int to = hd.send_rank < 0 ? MPI_PROC_NULL : hd.send_rank;
    HALOX_MPI_CHECK(
        MPI_Irecv(base, 1, types[2 * k + 1], from, tag, topology().comm(), &requests[2 * k]));
    HALOX_MPI_CHECK(
        MPI_Isend(base, 1, types[2 * k], to, tag, topology().comm(), &requests[2 * k + 1]));
  }
  HALOX_MPI_CHECK(
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
}

// mpi-neighbor: the stage as one MPI_Neighbor_alltoallw on a distributed graph whose
// destinations are the stage's pulses' send ranks and whose sources their receive ranks, in
// pulse order (between one pair of ranks MPI matches blocks in that order, so a periodic
// axis of 2 ranks, or of 1, pairs each pulse with its own).
void Decomposition::mpi_neighbor_stage(const std::vector<GridPulse>& pulses,
                                       const std::vector<std::size_t>& mine, void* base, int field,
                                       int stage, const std::vector<MPI_Datatype>& types) {
  std::vector<int> sources, destinations, scounts, rcounts;
  std::vector<MPI_Aint> sdispls, rdispls;
  std::vector<MPI_Datatype> stypes, rtypes;
  for (std::size_t k = 0; k < mine.size(); ++k) {
    const PulseHeader& hd = pulses[mine[k]].header;
    if (hd.send_rank >= 0) {
      destinations.push_back(hd.send_rank);
      stypes.push_back(types[2 * k]);
    }
    if (hd.recv_rank >= 0) {
      sources.push_back(hd.recv_rank);
      rtypes.push_back(types[2 * k + 1]);
    }
  }
  MPI_Comm& graph = m_neighbor_comms[static_cast<std::size_t>(3 * field + stage)];
  if (graph == MPI_COMM_NULL) {
    HALOX_MPI_CHECK(MPI_Dist_graph_create_adjacent(
        topology().comm(), static_cast<int>(sources.size()), sources.data(), MPI_UNWEIGHTED,
        static_cast<int>(destinations.size()), destinations.data(), MPI_UNWEIGHTED, MPI_INFO_NULL,
        0, &graph));
  }
  // One instance of each face's type at the field's base; arrays never empty (MPI refuses
  // null arrays even for no neighbours).
  scounts.assign(std::max<std::size_t>(1, stypes.size()), 1);
  rcounts.assign(std::max<std::size_t>(1, rtypes.size()), 1);
  sdispls.assign(scounts.size(), 0);
  rdispls.assign(rcounts.size(), 0);
  stypes.resize(scounts.size(), MPI_BYTE);
  rtypes.resize(rcounts.size(), MPI_BYTE);
  HALOX_MPI_CHECK(MPI_Neighbor_alltoallw(base, scounts.data(), sdispls.data(), stypes.data(), base,
                                         rcounts.data(), rdispls.data(), rtypes.data(), graph));
}

void Decomposition::synchronize() {
  for (auto& b : m_blocks) b->backend().synchronize();
}

std::array<double, 4> Decomposition::totals() {
  std::array<double, 4> sum{};
  for (auto& b : m_blocks) {
    const auto mine = b->totals();
    for (int k = 0; k < 4; ++k) sum[k] += mine[k];
  }
  if (m_ranks.in_process()) return sum;
  std::array<double, 4> global{};
  allreduce(m_ranks.processes(), sum.data(), global.data(), 4, MPI_DOUBLE, MPI_SUM,
            "the fluid's totals");
  return global;
}

std::vector<double> Decomposition::gather() {
  std::vector<double> mine;
  for (auto& b : m_blocks) {
    const auto tagged = b->tagged_moments();
    mine.insert(mine.end(), tagged.begin(), tagged.end());
  }
  if (m_ranks.in_process()) return Block::in_global_order(mine, m_cli.grid);
  const Topology& processes = m_ranks.processes();
  const std::vector<double> all = apps::gather_on_root(processes.comm(), mine);
  return processes.rank() == 0 ? Block::in_global_order(all, m_cli.grid) : std::vector<double>{};
}

std::string Decomposition::transport() const {
  if (!m_ranks.in_process()) {
    if (m_cli.comm == "default") return "default (hand-written pack + host copies + MPI)";
    if (m_cli.comm == "mpi-datatype") return "mpi-datatype (MPI_Isend/MPI_Irecv of MPI datatypes)";
    if (m_cli.comm == "mpi-neighbor")
      return "mpi-neighbor (MPI_Neighbor_alltoallw of MPI datatypes, one per stage)";
    if (m_cli.comm == "mpi-neighbor-overlap")
      return "mpi-neighbor-overlap (mpi-neighbor while the inner cells update)";
    if (m_cli.comm == "mpi-overlap")
      return "mpi-overlap (mpi-datatype while the inner cells update)";
    if (m_cli.comm == "mpi-contig")
      return "mpi-contig (hand-written pack + MPI_Isend/MPI_Irecv of the packed buffers)";
    if (m_ranks.in_blocks()) {
      return m_cli.comm + ", " + to_string(m_transport) + " (" + std::to_string(m_blocks.size()) +
             " ranks in each process)";
    }
    return m_cli.comm + ", " + to_string(m_transport);
  }
  const std::string where =
      to_string(m_transport) + " (" + std::to_string(m_blocks.size()) + " ranks in this process)";
  if (m_cli.comm == "default") {
    return "default (hand-written pack + host copies between the ranks), " + where;
  }
  return m_cli.comm +
         (m_transport == TransportKind::local_fused ? ", GPU-initiated (one kernel for every face)"
                                                    : "") +
         ", " + where;
}

}  // namespace halox::lbm
