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

#if HALOX_HAS_CUDA
// How a GPU-initiated transport's kernels reach the peers' blocks.
detail::Mapping peer_mapping(TransportKind kind, const ExchangeOptions& options) {
  if (kind == TransportKind::ipc_fused || kind == TransportKind::ipc_pulse) {
    return detail::Mapping::ipc;
  }
  const bool puts = options.testing.nvshmem_puts_only || detail::env_nvshmem_puts();
  return puts ? detail::Mapping::nvshmem_puts : detail::Mapping::nvshmem;
}
#endif

// Which transport a buffer takes; asked once per buffer and cached.
class TransportChooser {
 public:
  TransportChooser(const Topology& topology, ExchangeOptions options)
      : m_comm(topology.comm()), m_rank(topology.rank()), m_options(options) {
    m_host = detail::make_host_transport(m_comm, m_rank, m_options.timeout_seconds);
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

  detail::Transport& for_field(const void* field) {
    if (!on_device(field)) return *m_host;
#if HALOX_HAS_CUDA
    if (!m_device) {
      if (m_options.transport == TransportKind::automatic) {
        throw Error("halox: internal: the auto transport was not resolved");
      }
      if (detail::gpu_initiated(m_options.transport)) {
        // Grid halos: one fused kernel for all stages, the pulse and the fused variants alike.
        const TransportKind t = m_options.transport;
        m_device = detail::make_grid_fused_transport(
            m_comm, m_rank, peer_mapping(t, m_options), to_string(t), m_options.name,
            m_options.timeout_seconds, m_options.self_test);
        return *m_device;
      }
      if (m_options.transport == TransportKind::host) {
        throw Error("halox: the field at " + address(field) +
                    " is in device memory; the host transport moves host memory only (choose "
                    "staged, pipelined or mpi-direct)");
      }
      m_device = detail::make_device_transport(m_options.transport, m_comm, m_rank,
                                               m_options.chunk_bytes, m_options.timeout_seconds);
    }
    return *m_device;
#else
    // Without CUDA no pointer is device memory (on_device is false): not reached.
    throw Error("halox: internal: a device field in a build without CUDA");
#endif
  }

  /// The exchange's plan changed (collective): the transports made so far learn it.
  void new_plan() {
    for (auto* t : {&m_host, &m_device}) {
      if (*t) (*t)->new_plan();
    }
  }

  std::string name(const void* field) {
    return for_field(field).name();
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
  static std::string address(const void* p) {
    char text[32];
    std::snprintf(text, sizeof text, "%p", p);
    return text;
  }
  MPI_Comm m_comm;
  int m_rank;
  ExchangeOptions m_options;
  std::unique_ptr<detail::Transport> m_host, m_device;
  std::map<const void*, bool> m_kind;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Grid

namespace {

class MpiGridEngine final : public detail::GridEngine {
 public:
  MpiGridEngine(const Topology& t, GridPlan p, const ExchangeOptions& o)
      : topology(t), plan(std::move(p)), chooser(t, o) {
    if (o.transport == TransportKind::local_pulse || o.transport == TransportKind::local_fused) {
      throw Error("halox::GridExchange: the transport " + to_string(o.transport) +
                  " moves ranks of one process (Ranks::local), not one rank per process");
    }
    for (std::size_t i = 0; i < plan.pulses.size(); ++i) {
      const GridPulse& pulse = plan.pulses[i];
      Op op;
      op.stage = pulse.header.stage;
      op.send_rank = pulse.header.send_rank;
      op.recv_rank = pulse.header.recv_rank;
      op.tag = detail::tags::kGridPulse + static_cast<int>(i);
      op.send_bytes = pulse.header.send_size;
      op.recv_bytes = pulse.header.recv_size;
      op.granule = 16;
      op.name = pulse.header.name(static_cast<int>(i));
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
      host_ops.push_back(std::move(host));
      device_ops.push_back(std::move(device));
    }
  }
  void exchange_async(std::span<void* const> fields, GpuStream stream,
                      ExchangeStats& stats) override {
    void* field = fields[0];
    const bool device = chooser.on_device(field);
    if (device) chooser.resolve(plan, 1, false);
    chooser.for_field(field).run(device ? device_ops : host_ops, field, stream, stats);
  }
  bool on_device(const void* field) override {
    return chooser.on_device(field);
  }
  std::string transport_name(const void* field) override {
    return chooser.name(field);
  }
  int faces_per_exchange() const override {
    return static_cast<int>(plan.pulses.size());
  }
  int launches_per_exchange() const override {
    return 0;
  }

 private:
  Topology topology;
  GridPlan plan;
  TransportChooser chooser;
  std::vector<Op> host_ops, device_ops;
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
      : topology(t), real(r), options(o), chooser(t, o) {
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
    if (ipc)
      return detail::all_pulses_in_one_kernel(options.transport)
                 ? 1
                 : static_cast<int>(plan.pulses.size());
#endif
    return 0;
  }
  void check() const override {
#if HALOX_HAS_CUDA
    if (ipc) ipc->check();
#endif
  }

 private:
  void build(const ParticlePlan& p) {
    plan = p;
    plan_list.assign(1, p);
    chooser.new_plan();
    ipc_ready = false;
    device_index.clear();
    device_index_ready = false;
    for (auto* ops : {&forward_host, &forward_device, &reverse_host, &reverse_device}) ops->clear();
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
      forward_host.push_back(std::move(fh));
      reverse_host.push_back(std::move(rh));
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
      forward_device.push_back(std::move(fd));
      reverse_device.push_back(std::move(rd));
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
    const bool device = chooser.on_device(field);
    if (device) options.transport = chooser.resolve(plan, item, true);
#if HALOX_HAS_CUDA
    if (device && detail::gpu_initiated(options.transport)) {
      // Collective on first use after a new plan: every rank calls forward/reverse together.
      if (!ipc) {
        ipc = std::make_unique<detail::PeerHalo>(topology.comm(), topology.rank(),
                                                 peer_mapping(options.transport, options), real,
                                                 options);
      }
      if (!ipc_ready) {
        ipc->set_plan(plan);
        ipc_ready = true;
      }
      if (forward)
        ipc->forward(field, stream);
      else
        ipc->reverse(field, stream);
      stats.exchanges += 1;
      for (const auto& p : plan.pulses) {
        const int peer = forward ? p.header.send_rank : p.header.recv_rank;
        if (peer >= 0 && peer != topology.rank()) {
          stats.messages += 1;
          stats.bytes_sent += (forward ? p.header.send_size : p.header.recv_size) * item;
        }
      }
      return;
    }
#endif
    if (device) prepare_device();
    auto& ops = forward ? (device ? forward_device : forward_host)
                        : (device ? reverse_device : reverse_host);
    chooser.for_field(field).run(ops, field, stream, stats);
  }

  Topology topology;
  BasicKind real;
  ExchangeOptions options;
  std::int64_t item = 0;
  TransportChooser chooser;
#if HALOX_HAS_CUDA
  std::unique_ptr<detail::PeerHalo> ipc;
#endif
  bool ipc_ready = false;
  ParticlePlan plan;
  std::vector<ParticlePlan> plan_list;  // plans(): this rank's
  std::vector<Op> forward_host, forward_device, reverse_host, reverse_device;
  std::vector<std::shared_ptr<const std::int32_t>> device_index;
  bool device_index_ready = false;
};

}  // namespace

namespace detail {
std::unique_ptr<GridEngine> make_mpi_grid_engine(const Topology& topology, GridPlan plan,
                                                 const ExchangeOptions& options) {
  return std::make_unique<MpiGridEngine>(topology, std::move(plan), options);
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
