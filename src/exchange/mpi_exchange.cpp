// One rank per process (Ranks::mpi): the exchanges' engines over the transports, and the
// collective choice of "auto".
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "halox/error.hpp"
#include "halox/exchange.hpp"
#include "../transport/engine.hpp"
#include "halox/mpi.hpp"
#include "halox/pack.hpp"
#include "halox/trace.hpp"
#include "halox/tuning.hpp"
#include "auto_choice.hpp"
#include "../transport/transport.hpp"
#include "../common/mpi_tags.hpp"
#if HALOX_HAS_CUDA
#include "../common/cuda_check.hpp"
#include "../transport/grid_fused.hpp"
#include "../transport/peer_halo.hpp"
#include "../transport/device_kernels.hpp"
#include "../runtime/env.hpp"
#endif

namespace halox {

namespace detail {

AutoChoice choose_transport(bool all_local, bool have_nvshmem, std::int64_t largest_message,
                            std::int64_t direct_until, std::int64_t pipelined_from, bool particle) {
  TransportKind kind;
  std::string why;
  // On one node: direct stores (measured on the H200, docs/PERFORMANCE.md: the MD halo
  // 3.5-5.4x staged's, the LBM with 2 processes on one GPU 1.2-1.8x nvshmem-stream's
  // MLUPS), unless halox-tune measured NVSHMEM's copy-engine puts to win from a message
  // size this exchange reaches (4 MiB on one H200 shared by 2 processes; about 4 MB
  // between two H200s in pingpong).
  const bool copy_engine = have_nvshmem && direct_until > 0 && largest_message >= direct_until;
  // The size rule, said once for every branch that follows it.
  const std::string crossover =
      direct_until > 0 ? "largest message " + std::to_string(largest_message) + " bytes " +
                             (copy_engine ? ">=" : "<") + " the measured crossover of " +
                             std::to_string(direct_until) +
                             " bytes from which NVSHMEM's copy-engine puts beat direct stores"
                       : std::string("direct-store crossover not measured (halox-tune)");
  if (all_local && !copy_engine) {
    kind = TransportKind::ipc_fused;
    why = std::string("every neighbour is on this node: one fused kernel ") +
          (particle ? "for every pulse" : "for every face of every stage") +
          " stores straight into their buffers (CUDA IPC), no host waits; " + crossover;
  } else if (all_local) {
    kind = TransportKind::nvshmem_stream;
    why = "every neighbour is on this node; " + crossover;
  } else if (have_nvshmem && !copy_engine) {
    // Per link inside one kernel: nvshmem_ptr maps this node's peers (direct stores), the
    // others get put-with-signal from the fused kernel (seed 003: GPU-initiated for the
    // small, frequent messages of a halo). Not measured across nodes: one node here.
    kind = TransportKind::nvshmem_fused;
    why =
        "neighbours on other nodes: one fused kernel, direct stores to this node's peers "
        "and NVSHMEM put-with-signal to the others, no host waits; " +
        crossover;
  } else if (have_nvshmem) {
    kind = TransportKind::nvshmem_stream;
    why =
        "neighbours on other nodes: NVSHMEM put-with-signal on the stream (copy engine or "
        "NIC), no host waits; " +
        crossover;
  } else {
    const bool pipelined = largest_message >= pipelined_from;
    kind = pipelined ? TransportKind::pipelined : TransportKind::staged;
    why = "largest message " + std::to_string(largest_message) + " bytes " +
          (pipelined ? ">=" : "<") + " the measured pipelining crossover of " +
          std::to_string(pipelined_from) + " bytes";
  }
  return {kind, why};
}
}  // namespace detail

namespace {

using detail::Op;

// Which transport a buffer takes (asked once per buffer and cached), and the transports
// made so far, each connected to the exchange's current ops before it runs them.
class TransportChooser {
 public:
  /// particle: the exchange moves particles of `real` (else grids).
  TransportChooser(const Topology& topology, ExchangeOptions options, bool particle,
                   BasicKind real = BasicKind::float64)
      : m_comm(topology.comm()),
        m_rank(topology.rank()),
        m_options(options),
        m_particle(particle),
        m_real(real) {
    m_host.transport = detail::make_host_transport(m_comm, m_rank, m_options.timeout_seconds);
  }

  bool on_device(const void* field) {
#if HALOX_HAS_CUDA
    auto it = m_kind.find(field);
    if (it == m_kind.end()) it = m_kind.emplace(field, detail::is_device_memory(field)).first;
    return it->second;
#else
    (void)field;
    return false;
#endif
  }

  /// Collective, once: replaces "auto" by a concrete kind for device buffers. The plan's
  /// headers are only built while the choice is still open, not on every exchange.
  template <class Plan>
  TransportKind resolve(const Plan& plan, std::int64_t item_bytes, bool particle) {
    if (m_options.transport == TransportKind::automatic) {
      m_options.transport = choose_automatically(headers(plan), item_bytes, particle);
    }
    return m_options.transport;
  }

  /// The transport for `field`'s memory, connected to `connection` (collectively, at the
  /// first run after a new plan: every rank runs it together). `instance`: a transport that
  /// moves one field per run gets one instance per field of the exchange.
  detail::Transport& connected(const void* field, const detail::Connection& connection,
                               int instance = 0) {
    Slot& slot = slot_for(field, instance);
    if (slot.generation != m_generation || slot.connection != &connection) {
      slot.transport->connect(connection);
      slot.generation = m_generation;
      slot.connection = &connection;
    }
    return *slot.transport;
  }
  /// The transport for `field`'s memory (made, not connected).
  detail::Transport& for_field(const void* field) {
    return *slot_for(field, 0).transport;
  }

  /// The exchange's plan changed (collective): every transport connects again before it runs.
  void new_plan() {
    ++m_generation;
  }

  std::string name(const void* field) {
    return for_field(field).name();
  }

  /// Throws for a device-side time-out of an earlier run (the device transports made).
  void check() const {
    for (const Slot& slot : m_device) {
      if (slot.transport) slot.transport->check();
    }
  }

  TransportKind choose_automatically(const std::vector<PulseHeader>& pulses,
                                     std::int64_t item_bytes, bool particle) {
    // Which ranks share my node (and can map my memory)?
    MPI_Comm node;
    HALOX_MPI_CHECK(
        MPI_Comm_split_type(m_comm, MPI_COMM_TYPE_SHARED, m_rank, MPI_INFO_NULL, &node));
    MPI_Group world_group, node_group;
    HALOX_MPI_CHECK(MPI_Comm_group(m_comm, &world_group));
    HALOX_MPI_CHECK(MPI_Comm_group(node, &node_group));
    int node_size = 0;
    HALOX_MPI_CHECK(MPI_Comm_size(node, &node_size));
    std::vector<int> node_ranks(node_size), world_ranks(node_size);
    for (int i = 0; i < node_size; ++i) node_ranks[i] = i;
    HALOX_MPI_CHECK(MPI_Group_translate_ranks(node_group, node_size, node_ranks.data(), world_group,
                                              world_ranks.data()));
    HALOX_MPI_CHECK(MPI_Group_free(&node_group));
    HALOX_MPI_CHECK(MPI_Group_free(&world_group));
    HALOX_MPI_CHECK(MPI_Comm_free(&node));
    int local = 1;
    long long largest = 0;
    for (const auto& p : pulses) {
      for (int n : {p.send_rank, p.recv_rank}) {
        if (n >= 0 && std::find(world_ranks.begin(), world_ranks.end(), n) == world_ranks.end())
          local = 0;
      }
      largest = std::max<long long>(largest, std::max(p.send_size, p.recv_size) * item_bytes);
    }
    int all_local = 0;
    long long most = 0;
    HALOX_MPI_CHECK(MPI_Allreduce(&local, &all_local, 1, MPI_INT, MPI_MIN, m_comm));
    HALOX_MPI_CHECK(MPI_Allreduce(&largest, &most, 1, MPI_LONG_LONG, MPI_MAX, m_comm));
    const auto [kind, why] = detail::choose_transport(all_local != 0, HALOX_HAS_NVSHMEM != 0, most,
                                                      tuned_direct_until_bytes(),
                                                      tuned_pipelined_from_bytes(), particle);
    if (m_rank == 0) {
      std::printf("halox: transport auto -> %s (%s)\n", to_string(kind).c_str(), why.c_str());
      std::fflush(stdout);
    }
    return kind;
  }

 private:
  struct Slot {
    std::unique_ptr<detail::Transport> transport;
    int generation = -1;  // the plan it was last connected for
    const detail::Connection* connection = nullptr;
  };

  Slot& slot_for(const void* field, int instance) {
    if (!on_device(field)) return m_host;
#if HALOX_HAS_CUDA
    if (static_cast<int>(m_device.size()) <= instance) m_device.resize(instance + 1);
    Slot& slot = m_device[instance];
    if (!slot.transport) slot.transport = make_device(field);
    return slot;
#else
    (void)instance;
    // Without CUDA no pointer is device memory (on_device is false): not reached.
    throw Error("halox: internal: a device field in a build without CUDA");
#endif
  }

#if HALOX_HAS_CUDA
  std::unique_ptr<detail::Transport> make_device(const void* field) const {
    const TransportKind t = m_options.transport;
    if (t == TransportKind::automatic) {
      throw Error("halox: internal: the auto transport was not resolved");
    }
    if (detail::gpu_initiated(t)) {
      // Particles: the fused kernels per pulse or for all pulses; grids: one fused kernel
      // for all stages, the pulse and the fused variants alike.
      if (m_particle)
        return detail::make_particle_fused_transport(m_comm, m_rank, t, m_real, m_options);
      return detail::make_grid_fused_transport(m_comm, m_rank, detail::peer_mapping(t, m_options),
                                               to_string(t), m_options.name,
                                               m_options.timeout_seconds, m_options.self_test);
    }
    if (t == TransportKind::host) {
      throw Error("halox: the field at " + address(field) +
                  " is in device memory; the host transport moves host memory only (choose "
                  "staged, pipelined or mpi-direct)");
    }
    return detail::make_device_transport(t, m_comm, m_rank, m_options.chunk_bytes,
                                         m_options.timeout_seconds);
  }
#endif

  static std::string address(const void* p) {
    char text[32];
    std::snprintf(text, sizeof text, "%p", p);
    return text;
  }
  MPI_Comm m_comm;
  int m_rank;
  ExchangeOptions m_options;
  bool m_particle;
  BasicKind m_real;
  Slot m_host;
  std::vector<Slot> m_device;  // one per instance
  std::map<const void*, bool> m_kind;
  int m_generation = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Grid

namespace {

// One rank per process: the grid ops of every field (fields[f] packs and unpacks with
// plans[f]'s types), moved by the chosen transport in one run; with more fields than a
// transport moves in one run (the GPU-initiated grid kernel takes up to four), one instance
// of it per field, each connected to that field's ops.
class MpiGridEngine final : public detail::GridEngine {
 public:
  MpiGridEngine(const Topology& t, std::vector<GridPlan> p, const ExchangeOptions& o)
      : plans(std::move(p)), chooser(t, o, false) {
    if (o.transport == TransportKind::local_pulse || o.transport == TransportKind::local_fused) {
      throw Error("halox::GridExchange: the transport " + to_string(o.transport) +
                  " moves ranks of one process (Ranks::local), not one rank per process");
    }
    int tag = detail::tags::kGridPulse;
    per_field_host.resize(plans.size());
    per_field_device.resize(plans.size());
    for (std::size_t f = 0; f < plans.size(); ++f) {
      for (std::size_t i = 0; i < plans[f].pulses.size(); ++i) {
        auto [host, device] = ops_of(plans[f].pulses[i], static_cast<int>(i), tag++);
        host.field = device.field = static_cast<int>(f);
        all_host.forward.push_back(host);
        all_device.forward.push_back(device);
        host.field = device.field = 0;  // the one field of its own runs
        per_field_host[f].forward.push_back(std::move(host));
        per_field_device[f].forward.push_back(std::move(device));
      }
    }
    if (tag > detail::tags::kParticleForward) {
      throw Error("halox::GridExchange: " + std::to_string(tag - detail::tags::kGridPulse) +
                  " pulses over all fields, more than the " +
                  std::to_string(detail::tags::kParticleForward - detail::tags::kGridPulse) +
                  " one exchange takes");
    }
    // Stage order across the fields: the fields' pulses of one stage run together.
    for (auto* c : {&all_host, &all_device}) {
      std::stable_sort(c->forward.begin(), c->forward.end(),
                       [](const Op& x, const Op& y) { return x.stage < y.stage; });
    }
  }
  void exchange_async(std::span<void* const> fields, GpuStream stream,
                      ExchangeStats& stats) override {
    if (fields.size() != plans.size()) {
      throw Error("halox::GridExchange: " + std::to_string(fields.size()) + " fields given, " +
                  std::to_string(plans.size()) + " planned");
    }
    const bool device = chooser.on_device(fields[0]);
    for (void* f : fields) {
      if (chooser.on_device(f) != device) {
        throw Error(
            "halox::GridExchange: the fields of one call must all be in host memory or "
            "all on the GPU");
      }
    }
    if (device) chooser.resolve(plans[0], 1, false);
    const int most = chooser.for_field(fields[0]).capabilities().fields_per_run;
    if (fields.size() == 1 || most == 0 || static_cast<int>(fields.size()) <= most) {
      chooser.connected(fields[0], device ? all_device : all_host)
          .run_async(detail::Direction::forward, fields, stream, stats);
      return;
    }
    const std::int64_t exchanges = stats.exchanges;
    for (std::size_t f = 0; f < fields.size(); ++f) {
      chooser
          .connected(fields[0], device ? per_field_device[f] : per_field_host[f],
                     static_cast<int>(f))
          .run_async(detail::Direction::forward, fields.subspan(f, 1), stream, stats);
    }
    stats.exchanges = exchanges + 1;
  }
  bool on_device(const void* field) override { return chooser.on_device(field); }
  std::string transport_name(const void* field) override { return chooser.name(field); }
  int faces_per_exchange() const override { return static_cast<int>(all_host.forward.size()); }
  int launches_per_exchange() const override { return 0; }

 private:
  // The host and device ops of one pulse: pack and unpack through its datatypes.
  static std::pair<Op, Op> ops_of(const GridPulse& pulse, int index, int tag) {
    Op op;
    op.stage = pulse.header.stage;
    op.send_rank = pulse.header.send_rank;
    op.recv_rank = pulse.header.recv_rank;
    op.tag = tag;
    op.send_bytes = pulse.header.send_size;
    op.recv_bytes = pulse.header.recv_size;
    op.granule = 16;
    op.name = pulse.header.name(index);
    Op host = op, device = op;
    const Datatype send = pulse.send_type, recv = pulse.recv_type;
    device.send_type = send;
    device.recv_type = recv;
    host.pack = [send](const void* field, void* out, std::int64_t offset, std::int64_t bytes,
                       GpuStream) { halox::pack(field, 1, send, out, offset, bytes); };
    host.unpack = [recv](void* field, const void* in, std::int64_t offset, std::int64_t bytes,
                         GpuStream) { halox::unpack(in, field, 1, recv, offset, bytes); };
#if HALOX_HAS_CUDA
    device.pack = [send](const void* field, void* out, std::int64_t offset, std::int64_t bytes,
                         GpuStream stream) {
      pack_range_async(field, 1, send, out, offset, bytes, stream);
    };
    device.unpack = [recv](void* field, const void* in, std::int64_t offset, std::int64_t bytes,
                           GpuStream stream) {
      unpack_range_async(in, field, 1, recv, offset, bytes, stream);
    };
    device.self_copy = [send, recv](void* field, GpuStream stream) {
      copy_async(field, send, field, recv, stream);
    };
#endif
    return {std::move(host), std::move(device)};
  }

  std::vector<GridPlan> plans;  // one per field
  TransportChooser chooser;
  detail::Connection all_host, all_device;  // every field's ops, in stage order
  std::vector<detail::Connection> per_field_host, per_field_device;
};

// ---------------------------------------------------------------------------------------------
// Particles

template <class Real>
void gather_shift(const void* x, const std::int32_t* index, std::int64_t n,
                  const std::array<double, 3>& shift, void* out) {
  const Real* in = static_cast<const Real*>(x);
  Real* o = static_cast<Real*>(out);
  for (std::int64_t k = 0; k < n; ++k) {
    for (int a = 0; a < 3; ++a) o[3 * k + a] = in[3 * index[k] + a] + static_cast<Real>(shift[a]);
  }
}

template <class Real>
void scatter_add(void* f, const std::int32_t* index, std::int64_t n, const void* in) {
  Real* out = static_cast<Real*>(f);
  const Real* i = static_cast<const Real*>(in);
  for (std::int64_t k = 0; k < n; ++k) {
    for (int a = 0; a < 3; ++a) out[3 * index[k] + a] += i[3 * k + a];
  }
}

class MpiParticleEngine final : public detail::ParticleEngine {
 public:
  MpiParticleEngine(const Topology& t, BasicKind r, const ExchangeOptions& o)
      : real(r), options(o), chooser(t, o, true, r) {
    if (real != BasicKind::float32 && real != BasicKind::float64) {
      throw Error("halox::ParticleExchange: coordinates must be float32 or float64");
    }
    if (o.transport == TransportKind::local_pulse || o.transport == TransportKind::local_fused) {
      throw Error("halox::ParticleExchange: the transport " + to_string(o.transport) +
                  " moves ranks of one process (Ranks::local), not one rank per process");
    }
    item = 3 * (real == BasicKind::float32 ? 4 : 8);
  }

  void set_plans(std::vector<ParticlePlan> plans) override { build(plans.at(0)); }
  const std::vector<ParticlePlan>& plans() const override { return plan_list; }
  void run(bool forward, std::span<void* const> arrays, std::span<const GpuStream> streams,
           ExchangeStats& stats) override {
    if (arrays.size() != 1 || streams.size() != 1) {
      throw Error("halox::ParticleExchange: one rank per process takes one array and one stream");
    }
    run(forward, arrays[0], streams[0], stats);
  }
  void finish_default_streams(std::span<void* const> arrays) override {
#if HALOX_HAS_CUDA
    if (chooser.on_device(arrays[0])) detail::finish_default_stream();
#else
    (void)arrays;
#endif
  }
  std::vector<int> devices() const override {
#if HALOX_HAS_CUDA
    int current = 0;
    HALOX_CUDA_CHECK(cudaGetDevice(&current));
    return {current};
#else
    return {};
#endif
  }
  int launches_per_exchange() const override {
#if HALOX_HAS_CUDA
    if (detail::gpu_initiated(options.transport))
      return detail::all_pulses_in_one_kernel(options.transport)
                 ? 1
                 : static_cast<int>(plan.pulses.size());
#endif
    return 0;
  }
  void check() const override {
    chooser.check();
  }

 private:
  void build(const ParticlePlan& p) {
    plan = p;
    plan_list.assign(1, p);
    chooser.new_plan();
    device_index.clear();
    device_index_ready = false;
    for (auto* ops : {&host.forward, &device.forward, &host.reverse, &device.reverse}) ops->clear();
    device.particles = &plan;
    const int n = static_cast<int>(plan.pulses.size());
    for (int i = 0; i < n; ++i) {
      const ParticlePulse& pulse = plan.pulses[i];
      const std::int64_t item_bytes = item;
      const std::int64_t recv_at = pulse.recv_offset * item;
      // Forward: gather + shift on the sender; the receiver's items land at recv_offset.
      Op fwd;
      fwd.stage = i;
      fwd.send_rank = pulse.header.send_rank;
      fwd.recv_rank = pulse.header.recv_rank;
      fwd.tag = detail::tags::kParticleForward + i;
      fwd.send_bytes = static_cast<std::int64_t>(pulse.send_index.size()) * item;
      fwd.recv_bytes = pulse.recv_count * item;
      fwd.granule = item;
      fwd.name = pulse.header.name(i) + " forward";
      // Reverse: the forces on my received items go back to their sender and are added to
      // its send_index items; reverse pulse order so forwarded forces are summed first.
      Op rev = fwd;
      rev.stage = n - 1 - i;
      rev.send_rank = pulse.header.recv_rank;
      rev.recv_rank = pulse.header.send_rank;
      rev.tag = detail::tags::kParticleReverse + i;
      std::swap(rev.send_bytes, rev.recv_bytes);
      rev.name = pulse.header.name(i) + " reverse";
      const std::int32_t* index = pulse.send_index.data();
      const auto shift = pulse.shift;
      const BasicKind r = real;
      Op fh = fwd, rh = rev;
      fh.pack = [=](const void* x, void* out, std::int64_t off, std::int64_t bytes, GpuStream) {
        (r == BasicKind::float32
             ? gather_shift<float>
             : gather_shift<double>)(x, index + off / item_bytes, bytes / item_bytes, shift, out);
      };
      fh.unpack = [=](void* x, const void* in, std::int64_t off, std::int64_t bytes, GpuStream) {
        std::memcpy(static_cast<char*>(x) + recv_at + off, in, static_cast<std::size_t>(bytes));
      };
      rh.pack = [=](const void* f, void* out, std::int64_t off, std::int64_t bytes, GpuStream) {
        std::memcpy(out, static_cast<const char*>(f) + recv_at + off,
                    static_cast<std::size_t>(bytes));
      };
      rh.unpack = [=](void* f, const void* in, std::int64_t off, std::int64_t bytes, GpuStream) {
        (r == BasicKind::float32
             ? scatter_add<float>
             : scatter_add<double>)(f, index + off / item_bytes, bytes / item_bytes, in);
      };
      host.forward.push_back(std::move(fh));
      host.reverse.push_back(std::move(rh));
#if HALOX_HAS_CUDA
      Op fd = fwd, rd = rev;
      const std::size_t slot = static_cast<std::size_t>(i);
      auto* self = this;
      fd.pack = [=](const void* x, void* out, std::int64_t off, std::int64_t bytes, GpuStream s) {
        detail::gather_shift_async(r, x, self->device_index[slot].get(), off / item_bytes,
                                   bytes / item_bytes, shift, out, s);
      };
      fd.unpack = [=](void* x, const void* in, std::int64_t off, std::int64_t bytes, GpuStream s) {
        detail::copy_async(static_cast<char*>(x) + recv_at + off, in, bytes, s);
      };
      rd.pack = [=](const void* f, void* out, std::int64_t off, std::int64_t bytes, GpuStream s) {
        detail::copy_async(out, static_cast<const char*>(f) + recv_at + off, bytes, s);
      };
      rd.unpack = [=](void* f, const void* in, std::int64_t off, std::int64_t bytes, GpuStream s) {
        detail::scatter_add_async(r, f, self->device_index[slot].get(), off / item_bytes,
                                  bytes / item_bytes, in, s);
      };
      device.forward.push_back(std::move(fd));
      device.reverse.push_back(std::move(rd));
#endif
    }
  }

  void prepare_device() {
#if HALOX_HAS_CUDA
    if (device_index_ready) return;
    for (const auto& pulse : plan.pulses)
      device_index.push_back(detail::upload_index(pulse.send_index));
    device_index_ready = true;
#endif
  }

  void run(bool forward, void* field, GpuStream stream, ExchangeStats& stats) {
    const bool on_device = chooser.on_device(field);
    if (on_device) options.transport = chooser.resolve(plan, item, true);
    detail::Transport& t = chooser.connected(field, on_device ? device : host);
    // The gather and scatter kernels of the stream-ordered transports read the indices on the
    // device; the GPU-initiated kernels keep their own.
    if (on_device && !t.capabilities().device_initiated) prepare_device();
    t.run_async(forward ? detail::Direction::forward : detail::Direction::reverse,
                std::span<void* const>(&field, 1), stream, stats);
  }

  BasicKind real;
  ExchangeOptions options;
  std::int64_t item = 0;
  TransportChooser chooser;
  ParticlePlan plan;
  std::vector<ParticlePlan> plan_list;  // plans(): this rank's
  detail::Connection host, device;      // the ops of both directions, per memory
  std::vector<std::shared_ptr<const std::int32_t>> device_index;
  bool device_index_ready = false;
};

}  // namespace

namespace detail {
std::unique_ptr<GridEngine> make_mpi_grid_engine(const Topology& topology,
                                                 std::vector<GridPlan> plans,
                                                 const ExchangeOptions& options) {
  return std::make_unique<MpiGridEngine>(topology, std::move(plans), options);
}
std::unique_ptr<ParticleEngine> make_mpi_particle_engine(const Topology& topology,
                                                         ParticlePlan plan, BasicKind real,
                                                         const ExchangeOptions& options) {
  auto engine = std::make_unique<MpiParticleEngine>(topology, real, options);
  engine->set_plans({std::move(plan)});
  return engine;
}
}  // namespace detail

}  // namespace halox
