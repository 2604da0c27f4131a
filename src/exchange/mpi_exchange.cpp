// One rank per process (Ranks::mpi): the particle exchange's engine over the transports, and
// the rule of "auto" (transport_chooser.cpp asks it, collectively).
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
#include "transport_chooser.hpp"
#include "../transport/transport.hpp"
#include "../common/mpi_tags.hpp"
#if HALOX_HAS_CUDA
#include "../common/cuda_check.hpp"
#include "../device/device_halo.hpp"
#include "../transport/device_kernels.hpp"
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
      : real(r), options(o), chooser(Ranks::mpi(t), o, true, r) {
    if (real != BasicKind::float32 && real != BasicKind::float64) {
      throw Error("halox::ParticleExchange: coordinates must be float32 or float64");
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
    if (on_device) options.transport = chooser.resolve(plan, item);
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
  detail::TransportChooser chooser;
  ParticlePlan plan;
  std::vector<ParticlePlan> plan_list;  // plans(): this rank's
  detail::Connection host, device;      // the ops of both directions, per memory
  std::vector<std::shared_ptr<const std::int32_t>> device_index;
  bool device_index_ready = false;
};

}  // namespace

namespace detail {
std::unique_ptr<ParticleEngine> make_mpi_particle_engine(const Topology& topology,
                                                         ParticlePlan plan, BasicKind real,
                                                         const ExchangeOptions& options) {
  auto engine = std::make_unique<MpiParticleEngine>(topology, real, options);
  engine->set_plans({std::move(plan)});
  return engine;
}
}  // namespace detail

}  // namespace halox
