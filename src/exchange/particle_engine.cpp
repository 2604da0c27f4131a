// The particle exchange's engine, for ranks of either locality: coordinates forward, forces
// back, through the transport the chooser gives each memory. One rank per process: ops with
// gather/scatter callbacks for the host-orchestrated transports (the GPU-initiated ones read
// the plan); Ranks::local: every rank's plan, which its own transport reads.
#include <algorithm>
#include <cstring>

#include "halox/error.hpp"
#include "../common/mpi_tags.hpp"
#include "../plan/plan_checks.hpp"
#include "../transport/host_particles.hpp"
#include "engine.hpp"
#include "transport_chooser.hpp"
#if HALOX_HAS_CUDA
#include "../common/cuda_check.hpp"
#if HALOX_HAS_MPI
#include "../device/particle_kernels.hpp"
#endif
#endif

namespace halox::detail {

namespace {

class RankParticleEngine final : public ParticleEngine {
 public:
  RankParticleEngine(const Ranks& r, BasicKind k, const ExchangeOptions& o)
      : ranks(r), real(k), chooser(r, o, true, k) {
    if (real != BasicKind::float32 && real != BasicKind::float64) {
      throw Error("halox::ParticleExchange: coordinates must be float32 or float64");
    }
    item = 3 * (real == BasicKind::float32 ? 4 : 8);
  }

  void set_plans(std::vector<ParticlePlan> plans) override {
    if (static_cast<int>(plans.size()) != ranks.count()) {
      throw Error("halox::ParticleExchange: " + std::to_string(plans.size()) + " plans for the " +
                  std::to_string(ranks.count()) + " rank(s) of this process");
    }
    // Ranks in this process: their plans are checked here, as one rank per process checks
    // them collectively when they are built.
    for (std::size_t r = 0; r < plans.size(); ++r)
      check_particle_plan(plans[r], ranks.rank(static_cast<int>(r)), "ParticleExchange");
    if (ranks.in_process()) check_local_particle_plans(ranks.topology(), plans);
    plan_list = std::move(plans);
    chooser.new_plan();
    for (Connection* c : {&host, &device}) {
      c->forward.clear();
      c->reverse.clear();
      c->ranks = ranks.count();
      c->particles = plan_list;
    }
    device_index.clear();
    device_index_ready = false;
    if (!ranks.in_process()) {
      for (int r = 0; r < ranks.count(); ++r) build_ops(plan_list[r], r);
    }
  }
  const std::vector<ParticlePlan>& plans() const override { return plan_list; }

  void run(bool forward, std::span<void* const> arrays, std::span<const GpuStream> streams,
           ExchangeStats& stats) override {
    if (static_cast<int>(arrays.size()) != ranks.count()) {
      throw Error("halox::ParticleExchange: " + std::to_string(arrays.size()) +
                  " arrays given for " + std::to_string(ranks.count()) + " rank(s)");
    }
    if (!ranks.in_process() && streams.size() != 1) {
      throw Error("halox::ParticleExchange: one rank per process takes one array and one stream");
    }
    const bool on_device = chooser.on_device(arrays[0]);
    on_host = !on_device;
    const Direction direction = forward ? Direction::forward : Direction::reverse;
#if HALOX_HAS_CUDA
    bool capture = false;
    for (const GpuStream s : streams) capture = capture || (on_device && capturing(s));
#else
    const bool capture = false;
#endif
    if (capture) {  // never a collective or a set-up inside a CUDA graph capture
      chooser.require_capturable(
          device, direction, arrays, 0,
          forward ? "ParticleExchange::forward_async" : "ParticleExchange::reverse_async");
    } else if (on_device) {
      chooser.resolve(plan_list[0], item);
    }
    Transport& t = chooser.connected(arrays[0], on_device, on_device ? device : host);
    // The gather and scatter kernels of the stream-ordered transports read the indices on the
    // device; the GPU-initiated kernels keep their own.
    if (on_device && !ranks.in_process() && !t.capabilities().device_initiated) prepare_device();
    t.run_async(direction, arrays, streams, stats);
  }
  bool capturable() const override {
    return chooser.device_capturable();
  }

  void finish_default_streams(std::span<void* const> arrays) override {
#if HALOX_HAS_CUDA
    if (!chooser.on_device(arrays[0])) return;
    int current = 0;
    HALOX_CUDA_CHECK(cudaGetDevice(&current));
    for (const int d : devices()) {
      HALOX_CUDA_CHECK(cudaSetDevice(d));
      finish_default_stream();
    }
    HALOX_CUDA_CHECK(cudaSetDevice(current));
#else
    (void)arrays;
#endif
  }

  // The ranks' GPUs in the order of their first rank (the current one when none are given);
  // none once the exchange moves host arrays.
  std::vector<int> devices() const override {
    std::vector<int> out;
    if (on_host) return out;
    for (const int d : ranks.device_of_rank()) {
      if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
    }
#if HALOX_HAS_CUDA
    if (out.empty()) {
      int current = 0;
      HALOX_CUDA_CHECK(cudaGetDevice(&current));
      out.push_back(current);
    }
#endif
    return out;
  }
  int launches_per_exchange() const override {
    return chooser.device_launches_per_run();
  }
  void check() const override {
    chooser.check();
  }

 private:
  // The ops of this process's rank `rank` (index) for the host-orchestrated transports,
  // which gather and scatter through these callbacks; device ops for one rank per process.
  void build_ops(const ParticlePlan& plan, int rank) {
    const int n = static_cast<int>(plan.pulses.size());
    for (int i = 0; i < n; ++i) {
      const ParticlePulse& pulse = plan.pulses[i];
      const std::int64_t item_bytes = item;
      const std::int64_t recv_at = pulse.recv_offset * item;
      // Forward: gather + shift on the sender; the receiver's items land at recv_offset.
      Op fwd;
      fwd.rank = rank;
      fwd.stage = i;
      fwd.pulse = i;
      fwd.send_rank = pulse.header.send_rank;
      fwd.recv_rank = pulse.header.recv_rank;
      fwd.tag = tags::kParticleForward + i;
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
      rev.tag = tags::kParticleReverse + i;
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
#if HALOX_HAS_CUDA && HALOX_HAS_MPI
      Op fd = fwd, rd = rev;
      const std::size_t slot = static_cast<std::size_t>(i);
      auto* self = this;
      fd.pack = [=](const void* x, void* out, std::int64_t off, std::int64_t bytes, GpuStream s) {
        gather_shift_async(r, x, self->device_index[rank][slot].get(), off / item_bytes,
                           bytes / item_bytes, shift, out, s);
      };
      fd.unpack = [=](void* x, const void* in, std::int64_t off, std::int64_t bytes, GpuStream s) {
        copy_async(static_cast<char*>(x) + recv_at + off, in, bytes, s);
      };
      rd.pack = [=](const void* f, void* out, std::int64_t off, std::int64_t bytes, GpuStream s) {
        copy_async(out, static_cast<const char*>(f) + recv_at + off, bytes, s);
      };
      rd.unpack = [=](void* f, const void* in, std::int64_t off, std::int64_t bytes, GpuStream s) {
        scatter_add_async(r, f, self->device_index[rank][slot].get(), off / item_bytes,
                          bytes / item_bytes, in, s);
      };
      device.forward.push_back(std::move(fd));
      device.reverse.push_back(std::move(rd));
#endif
    }
  }

  void prepare_device() {
#if HALOX_HAS_CUDA && HALOX_HAS_MPI
    if (device_index_ready) return;  // the ops that read them: ranks in MPI processes only
    device_index.assign(plan_list.size(), {});
    for (std::size_t r = 0; r < plan_list.size(); ++r) {
      for (const auto& pulse : plan_list[r].pulses)
        device_index[r].push_back(upload_index(pulse.send_index));
    }
    device_index_ready = true;
#endif
  }

  Ranks ranks;
  BasicKind real;
  std::int64_t item = 0;
  TransportChooser chooser;
  std::vector<ParticlePlan> plan_list;  // plans(): one per rank of this process
  Connection host, device;              // per memory
  // Per rank of this process and pulse: the send indices on the device.
  std::vector<std::vector<std::shared_ptr<const std::int32_t>>> device_index;
  bool device_index_ready = false;
  bool on_host = false;  // the last run's arrays were in host memory
};

}  // namespace

std::unique_ptr<ParticleEngine> make_particle_engine(const Ranks& ranks,
                                                     std::vector<ParticlePlan> plans,
                                                     BasicKind real,
                                                     const ExchangeOptions& options) {
  auto engine = std::make_unique<RankParticleEngine>(ranks, real, options);
  engine->set_plans(std::move(plans));
  return engine;
}

}  // namespace halox::detail
