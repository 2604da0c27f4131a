// The choice of a transport per memory and locality, and the rule of "auto".
#include "transport_chooser.hpp"

#include <algorithm>
#include <cstdio>

#include "../common/pointer_text.hpp"
#include "halox/error.hpp"
#include "halox/tuning.hpp"
#include "auto_choice.hpp"
#include "engine.hpp"
#if HALOX_HAS_MPI
#include "../common/mpi_wait.hpp"
#include "../runtime/node.hpp"
#include "halox/mpi.hpp"
#endif
#if HALOX_HAS_CUDA
#include "../common/cuda_check.hpp"
#include "../transport/grid_fused.hpp"
#if HALOX_HAS_MPI
#include "../transport/peer_halo.hpp"
#endif
#endif

namespace halox::detail {

AutoChoice choose_transport(const AutoInputs& in) {
  TransportKind kind;
  std::string why;
  // nccl-device is never the pick: on one node ipc-fused runs the same kernels without NCCL's
  // set-up, and across nodes it would need GIN puts, which halox does not build yet.
  // On one node: direct stores (measured on the H200, docs/PERFORMANCE.md: the MD halo
  // 3.5-5.4x staged's, the LBM with 2 processes on one GPU 1.2-1.8x nvshmem-stream's
  // MLUPS), unless halox-tune measured NVSHMEM's copy-engine puts to win from a message
  // size this exchange reaches (4 MiB on one H200 shared by 2 processes; about 4 MB
  // between two H200s in pingpong).
  const bool copy_engine =
      in.have_nvshmem && in.direct_until > 0 && in.largest_message >= in.direct_until;
  // The size rule, said once for every branch that follows it.
  const std::string crossover =
      in.direct_until > 0 ? "largest message " + std::to_string(in.largest_message) + " bytes " +
                                (copy_engine ? ">=" : "<") + " the measured crossover of " +
                                std::to_string(in.direct_until) +
                                " bytes from which NVSHMEM's copy-engine puts beat direct stores"
                          : std::string("direct-store crossover not measured (halox-tune)");
  if (in.all_local && !copy_engine) {
    kind = TransportKind::ipc_fused;
    why = std::string("every neighbour is on this node: one fused kernel ") +
          (in.particle ? "for every pulse" : "for every face of every stage") +
          " stores straight into their buffers (CUDA IPC), no host waits; " + crossover;
  } else if (in.all_local) {
    kind = TransportKind::nvshmem_stream;
    why = "every neighbour is on this node; " + crossover;
  } else if (in.have_nvshmem && !copy_engine) {
    // Per link inside one kernel: nvshmem_ptr maps this node's peers (direct stores), the
    // others get put-with-signal from the fused kernel (seed 003: GPU-initiated for the
    // small, frequent messages of a halo). Not measured across nodes: one node here.
    kind = TransportKind::nvshmem_fused;
    why =
        "neighbours on other nodes: one fused kernel, direct stores to this node's peers "
        "and NVSHMEM put-with-signal to the others, no host waits; " +
        crossover;
  } else if (in.have_nvshmem) {
    kind = TransportKind::nvshmem_stream;
    why =
        "neighbours on other nodes: NVSHMEM put-with-signal on the stream (copy engine or "
        "NIC), no host waits; " +
        crossover;
  } else if (in.proxy_thread_allowed && in.largest_message < in.pipelined_from) {
    // Per link: direct stores to this node's peers, the host proxy's MPI messages to the
    // others. Every link proxied on one H200 (2 processes, docs/PERFORMANCE.md): the LBM at
    // 64^3 ran at 1.4-1.7x staged's MLUPS, the MD halo at 1.3-1.7x staged's rate and its
    // whole step 1.2-1.5x (the proxies kept across neighbour searches); pipelined sizes were
    // not measured against it.
    kind = TransportKind::ipc_fused;
    why =
        "neighbours on other nodes, no NVSHMEM: one fused kernel, direct stores to this "
        "node's peers and the host proxy's MPI messages to the others; largest message " +
        std::to_string(in.largest_message) + " bytes < the measured pipelining crossover of " +
        std::to_string(in.pipelined_from) + " bytes";
  } else {
    // The proxy needs MPI_THREAD_MULTIPLE.
    const bool pipelined = in.largest_message >= in.pipelined_from;
    kind = pipelined ? TransportKind::pipelined : TransportKind::staged;
    why = "largest message " + std::to_string(in.largest_message) + " bytes " +
          (pipelined ? ">=" : "<") + " the measured pipelining crossover of " +
          std::to_string(in.pipelined_from) + " bytes";
  }
  return {kind, why};
}

namespace {
// Local ranks move device arrays by local-pulse or local-fused; "auto" and the default "host"
// mean local-fused (the ranks share this process: no other transport applies).
ExchangeOptions local_exchange_options(ExchangeOptions options, const char* exchange) {
  switch (options.transport) {
    case TransportKind::local_pulse:
    case TransportKind::local_fused: break;
    case TransportKind::host:
    case TransportKind::automatic: options.transport = TransportKind::local_fused; break;
    default:
      throw Error(std::string("halox::") + exchange + ": the transport " +
                  to_string(options.transport) +
                  " needs one rank per process (Ranks::mpi); ranks in this process "
                  "(Ranks::local) take local-pulse or local-fused");
  }
  return options;
}
}  // namespace

TransportChooser::TransportChooser(const Ranks& ranks, ExchangeOptions options, bool particle,
                                   BasicKind real)
    : m_ranks(ranks), m_options(options), m_particle(particle), m_real(real) {
  const char* exchange = particle ? "ParticleExchange" : "GridExchange";
  // A device wait counts nanoseconds in 64 bits: 1e6 s is far inside, and NaN, infinity,
  // zero or a negative limit would time out at once or never.
  if (!(options.timeout_seconds > 0 && options.timeout_seconds <= 1e6)) {
    throw Error(std::string("halox::") + exchange +
                ": ExchangeOptions::timeout_seconds = " + std::to_string(options.timeout_seconds) +
                "; it must be finite, above 0 and at most 1e6 s");
  }
  if (ranks.in_process()) {
    m_options = local_exchange_options(options, exchange);
    m_host.transport = make_local(false);
    return;
  }
  if (options.transport == TransportKind::local_pulse ||
      options.transport == TransportKind::local_fused) {
    throw Error(std::string("halox::") + exchange + ": the transport " +
                to_string(options.transport) +
                " moves ranks of one process (Ranks::local), not one rank per process");
  }
#if HALOX_HAS_MPI
  m_host.transport = make_host_transport(ranks, m_options.timeout_seconds);
#else
  throw Error(std::string("halox::") + exchange +
              ": halox was built without MPI; one rank per process (Ranks::mpi) needs it");
#endif
}

bool TransportChooser::on_device(const void* field) {
#if HALOX_HAS_CUDA
  auto it = m_kind.find(field);
  if (it == m_kind.end()) it = m_kind.emplace(field, is_device_memory(field)).first;
  return it->second;
#else
  (void)field;
  return false;
#endif
}

Transport& TransportChooser::connected(const void* field, bool device, const Connection& connection,
                                       int instance) {
  Slot& slot = slot_for(field, device, instance);
  if (slot.generation != m_generation || slot.connection != &connection) {
    slot.transport->connect(connection);
    slot.generation = m_generation;
    slot.connection = &connection;
  }
  return *slot.transport;
}

Transport& TransportChooser::for_field(const void* field, bool device) {
  return *slot_for(field, device, 0).transport;
}

void TransportChooser::check() const {
  for (const Slot& slot : m_device) {
    if (slot.transport) slot.transport->check();
  }
}

int TransportChooser::device_launches_per_run() const {
  int launches = 0;  // over the instances (one per field where one run cannot take them all)
  for (const Slot& slot : m_device) {
    if (slot.transport) launches += slot.transport->launches_per_run();
  }
  return launches;
}

namespace {

// The kinds whose runs take every counter from the device (grids: the grid kernel, or the
// copy kernels of local-pulse; particles: the fused particle kernels).
bool capturable_kind(TransportKind kind) {
  switch (kind) {
    case TransportKind::local_pulse:
    case TransportKind::local_fused:
    case TransportKind::ipc_pulse:
    case TransportKind::ipc_fused:
    case TransportKind::nvshmem_pulse:
    case TransportKind::nvshmem_fused: return true;
    default: return false;
  }
}

std::string capturable_kinds() {
  std::string names;
  for (TransportKind kind : all_transports()) {
    if (capturable_kind(kind)) names += (names.empty() ? "" : ", ") + to_string(kind);
  }
  return names + " (not through the host proxy)";
}

}  // namespace

bool TransportChooser::device_capturable() const {
  if (!HALOX_HAS_CUDA) return false;
  bool made = false;
  for (const Slot& slot : m_device) {
    if (!slot.transport) continue;
    made = true;
    if (!slot.transport->capturable()) return false;
  }
  return made || capturable_kind(m_options.transport);
}

void TransportChooser::require_capturable(const Connection& connection, Direction direction,
                                          std::span<void* const> fields, int instance,
                                          const std::string& call) const {
  const Slot* slot = instance < static_cast<int>(m_device.size()) ? &m_device[instance] : nullptr;
  const bool made = slot != nullptr && slot->transport != nullptr;
  const std::string name = made ? slot->transport->name() : to_string(m_options.transport);
  const bool known = made || m_options.transport != TransportKind::automatic;
  if (known && (made ? !slot->transport->capturable() : !capturable_kind(m_options.transport))) {
    throw Error("halox::" + call + ": called inside a CUDA graph capture, but its transport (" +
                name +
                ") cannot be captured: it waits on the host or takes its counters from "
                "there, so a replay would move nothing or wait forever. Capturable: " +
                capturable_kinds() +
                "; capturable() says so before. Call it outside the capture, between the "
                "graph's launches, or choose one of those");
  }
  if (!made || slot->generation != m_generation || slot->connection != &connection ||
      !slot->transport->set_up_for(direction, fields)) {
    throw Error("halox::" + call + ": called inside a CUDA graph capture before its set-up: " +
                "the first exchange of a plan, or of arrays at new addresses, maps the peers' " +
                "buffers and builds the tables, which a graph cannot hold. Run one exchange of " +
                "these arrays outside the capture first (transport " + name + ")");
  }
}

TransportChooser::Slot& TransportChooser::slot_for(const void* field, bool device, int instance) {
  if (!device) return m_host;
  if (static_cast<int>(m_device.size()) <= instance) m_device.resize(instance + 1);
  Slot& slot = m_device[instance];
  if (!slot.transport) slot.transport = make_device(field);
  return slot;
}

std::unique_ptr<Transport> TransportChooser::make_device(const void* field) const {
  const TransportKind t = m_options.transport;
  if (t == TransportKind::automatic) {
    throw Error("halox: internal: the auto transport was not resolved");
  }
  if (m_ranks.in_process()) return make_local(true);
  if (t == TransportKind::host) {
    throw Error("halox: the field at " + pointer_text(field) +
                " is in device memory; the host transport moves host memory only (choose "
                "staged, pipelined or mpi-direct)");
  }
#if HALOX_HAS_CUDA && HALOX_HAS_MPI
  if (m_particle && m_ranks.in_blocks() && t != TransportKind::staged &&
      t != TransportKind::mpi_direct && (!gpu_initiated(t) || t == TransportKind::nccl_device)) {
    throw Error("halox::ParticleExchange: the " + to_string(t) +
                " transport takes one rank per process; over Ranks::blocks (several ranks per "
                "MPI process) device arrays take ipc-fused, ipc-pulse, nvshmem-fused, "
                "nvshmem-pulse, staged or mpi-direct (auto: staged)");
  }
  if (gpu_initiated(t)) {
    // Particles: the fused kernels per pulse or for all pulses, of every rank of the
    // process; grids: one fused kernel for all stages, the pulse and the fused variants alike.
    if (m_particle) return make_particle_fused_transport(m_ranks, t, m_real, m_options);
    if (t == TransportKind::nccl_device) {
      throw Error(
          "halox::GridExchange: nccl-device moves particles only for now (grids: ipc-fused on "
          "one node, nvshmem-fused across nodes)");
    }
    const Mapping mapping = peer_mapping(t, m_options);
    return make_grid_fused_transport(
        m_ranks,
        make_grid_processes(m_ranks, mapping, proxy_policy(mapping, m_options), to_string(t),
                            m_options.timeout_seconds),
        to_string(t), m_options);
  }
  return make_device_transport(t, m_ranks, m_options.chunk_bytes, m_options.timeout_seconds);
#else
  // Without CUDA no pointer is device memory (on_device is false): not reached.
  throw Error(
      "halox: internal: a device field of one rank per process in a build without "
      "CUDA or MPI");
#endif
}

std::unique_ptr<Transport> TransportChooser::make_local(bool device) const {
  if (m_particle) return make_local_particle_transport(m_ranks, device, m_real, m_options);
#if HALOX_HAS_CUDA
  // local-fused: the grid kernel's transport, with no other process.
  if (device && m_options.transport != TransportKind::local_pulse)
    return make_grid_fused_transport(m_ranks, nullptr, "local-fused", m_options);
#endif
  return make_local_grid_transport(device);
}

TransportKind TransportChooser::choose_automatically(const std::vector<PulseHeader>& pulses,
                                                     std::int64_t item_bytes) {
#if HALOX_HAS_MPI
  // Which processes share my node (and can map my memory)? Over Ranks::blocks the pulses
  // are those of this process's first rank: its other ranks' neighbours count through the
  // whole node.
  const MPI_Comm comm = m_ranks.processes().comm();
  const int me = m_ranks.processes().rank();
  const WaitContext context{me, "auto", m_options.timeout_seconds};
  const std::vector<int> node_processes = NodeRanks(comm, context, true, me).ranks_in(comm);
  int processes = 1;
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &processes));
  int local = !m_ranks.in_blocks() || static_cast<int>(node_processes.size()) == processes;
  long long largest = 0;
  for (const auto& p : pulses) {
    for (int n : {p.send_rank, p.recv_rank}) {
      if (n >= 0 && std::find(node_processes.begin(), node_processes.end(),
                              m_ranks.process_of(n)) == node_processes.end())
        local = 0;
    }
    largest = std::max<long long>(largest, std::max(p.send_size, p.recv_size) * item_bytes);
  }
  // One reduction: the least of local and of thread support, the most of the sizes.
  long long agreed[3] = {local, mpi_thread_multiple() ? 1 : 0, -largest};
  bounded_allreduce(comm, MPI_IN_PLACE, agreed, 3, MPI_LONG_LONG, MPI_MIN, context,
                    "the automatic choice's agreement");
  const int all_local = static_cast<int>(agreed[0]);
  const int every_thread_multiple = static_cast<int>(agreed[1]);
  const long long most = -agreed[2];
  auto [kind, why] = choose_transport({.all_local = all_local != 0,
                                       .have_nvshmem = HALOX_HAS_NVSHMEM != 0,
                                       .largest_message = most,
                                       .direct_until = tuned_direct_until_bytes(),
                                       .pipelined_from = tuned_pipelined_from_bytes(),
                                       .particle = m_particle,
                                       .proxy_thread_allowed = every_thread_multiple != 0});
  if (m_ranks.in_blocks() && m_particle) {
    // Several ranks per process: the particle kernels take one rank per process.
    kind = TransportKind::staged;
    why = "particles of several ranks per process";
  } else if (m_ranks.in_blocks() && !(all_local && kind == TransportKind::ipc_fused)) {
    // Several ranks per process: the grid kernel over CUDA IPC on one node (copy faces
    // within a process), else staged (the host proxy serves one rank per process).
    kind = all_local ? TransportKind::ipc_fused : TransportKind::staged;
    why = all_local ? "several ranks per process, every process on this node: one fused kernel"
                    : "several ranks per process, some processes on another node";
  }
  if (me == 0) {
    std::printf("halox: transport auto -> %s (%s)\n", to_string(kind).c_str(), why.c_str());
    std::fflush(stdout);
  }
  return kind;
#else
  (void)pulses;
  (void)item_bytes;
  throw Error("halox: internal: auto needs MPI for one rank per process");
#endif
}

}  // namespace halox::detail
