// The particle transport of Ranks::local: every rank of a grid in this process, on one GPU or
// spread over several (one DeviceHalo per GPU holding that GPU's ranks; blocks on other GPUs
// are reached through peer access, i.e. the same direct stores over NVLink), or in host
// memory (the CPU moves the same pulses in order; in every build). One driver thread, one
// launch per GPU covering every rank on it: kernel launches, not the exchange, would
// otherwise bound a step of many ranks.
#include "transport.hpp"

#include <algorithm>
#include <map>

#include "halox/config.hpp"
#include "halox/error.hpp"
#include "host_particles.hpp"

#if HALOX_HAS_CUDA
#include <cuda_runtime.h>

#include "../common/cuda_check.hpp"
#include "../device/device_halo.hpp"
#endif

namespace halox::detail {

namespace {

// The host path: pulse by pulse, each rank's items copied (with the periodic shift) into
// the halo of the rank it sends to; the reverse in reverse pulse order, adding the forces of
// those copies back into the items sent. Pulse order is what makes forwarding work: an
// item received by an earlier pulse is in place before a later pulse sends it on, and its
// forces are complete before the reverse of the pulse that delivered it returns them.
template <class Real>
void host_forward(std::span<const ParticlePlan> plans, std::span<void* const> arrays) {
  const std::size_t pulses = plans.empty() ? 0 : plans[0].pulses.size();
  for (std::size_t p = 0; p < pulses; ++p) {
    for (std::size_t r = 0; r < plans.size(); ++r) {
      const ParticlePulse& send = plans[r].pulses[p];
      if (send.header.send_rank < 0) continue;
      const ParticlePulse& recv = plans[send.header.send_rank].pulses[p];
      Real* to = static_cast<Real*>(arrays[send.header.send_rank]) + 3 * recv.recv_offset;
      gather_shift<Real>(arrays[r], send.send_index.data(),
                         static_cast<std::int64_t>(send.send_index.size()), send.shift, to);
    }
  }
}
template <class Real>
void host_reverse(std::span<const ParticlePlan> plans, std::span<void* const> arrays) {
  const std::size_t pulses = plans.empty() ? 0 : plans[0].pulses.size();
  for (std::size_t p = pulses; p-- > 0;) {
    for (std::size_t r = 0; r < plans.size(); ++r) {
      const ParticlePulse& send = plans[r].pulses[p];
      if (send.header.send_rank < 0) continue;
      const ParticlePulse& recv = plans[send.header.send_rank].pulses[p];
      const Real* from =
          static_cast<const Real*>(arrays[send.header.send_rank]) + 3 * recv.recv_offset;
      scatter_add<Real>(arrays[r], send.send_index.data(),
                        static_cast<std::int64_t>(send.send_index.size()), from);
    }
  }
}

#if HALOX_HAS_CUDA

// Makes `device` current for a scope and restores the caller's GPU afterwards.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    HALOX_CUDA_CHECK(cudaGetDevice(&m_saved));
    HALOX_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { cudaSetDevice(m_saved); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int m_saved = 0;
};
#endif

// Made for host arrays or for GPU arrays (at the first exchange of each).
class LocalParticleTransport final : public Transport {
 public:
  LocalParticleTransport(const Ranks& ranks, bool gpu, BasicKind r, const ExchangeOptions& o)
      : topology(ranks.topology()),
        real(r),
        on_gpu(gpu),
        device_of(ranks.device_of_rank()),
        kind(o.transport),
        item(3 * (r == BasicKind::float32 ? 4 : 8)) {
    if (!on_gpu) return;
#if HALOX_HAS_CUDA
    set_up_gpus(o);
#else
    throw Error("halox::ParticleExchange: built without CUDA: local ranks' arrays in host memory");
#endif
  }
#if HALOX_HAS_CUDA
  ~LocalParticleTransport() override {
    for (Group& g : groups) {
      DeviceScope on(g.device);
      g.halo.reset();  // its destructor waits for and frees on its own GPU
    }
  }
#endif

  std::string name() const override {
    return on_gpu ? to_string(kind) : "host";
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.device_initiated = on_gpu;
    c.direct_stores = true;
    c.host_waits = !on_gpu;
    c.fields_per_run = 1;
    return c;
  }
  // The plans, checked when they were given (check_local_particle_plans), onto the GPUs.
  void connect(const Connection& connection) override {
    Transport::connect(connection);
    plans = connection.particles;
    messages = 0;
    bytes = 0;
    for (std::size_t r = 0; r < plans.size(); ++r) {
      for (const ParticlePulse& p : plans[r].pulses) {
        if (p.header.send_rank < 0 || p.header.send_rank == static_cast<int>(r)) continue;
        messages += 1;
        bytes += p.header.send_size * item;
      }
    }
#if HALOX_HAS_CUDA
    if (on_gpu) install_on_gpus();
#endif
  }
  void run_async(Direction direction, std::span<void* const> arrays,
                 std::span<const GpuStream> streams, ExchangeStats& stats) override {
    run(arrays, streams, direction == Direction::forward);
    stats.exchanges += 1;
    stats.messages += messages;
    stats.bytes_sent += bytes;
  }
  int launches_per_run() const override {
#if HALOX_HAS_CUDA
    if (on_gpu && !groups.empty()) return groups.front().halo->launches_per_exchange();
#endif
    return 0;
  }
  void check() const override {
#if HALOX_HAS_CUDA
    for (const Group& g : groups) g.halo->check();
#endif
  }
  bool capturable() const override {
    return on_gpu;
  }
  // Each GPU's halo took these ranks' arrays last time (one call's arrays in rank order).
  bool set_up_for(Direction direction, std::span<void* const> arrays) const override {
#if HALOX_HAS_CUDA
    if (!on_gpu || static_cast<int>(arrays.size()) != topology.size()) return false;
    std::vector<void*> mine;
    for (const Group& g : groups) {
      mine.clear();
      for (const int r : g.ranks) mine.push_back(arrays[r]);
      if (!g.halo->set_up_for(direction == Direction::forward, mine)) return false;
    }
    return true;
#else
    (void)direction, (void)arrays;
    return false;
#endif
  }

 private:
  Topology topology;
  BasicKind real;
  bool on_gpu;
  std::vector<int> device_of;
  TransportKind kind;
  std::int64_t item;
  std::int64_t messages = 0, bytes = 0;  // per exchange, for the stats
  std::span<const ParticlePlan> plans;
#if HALOX_HAS_CUDA
  // The ranks of one GPU and their halo (DeviceHalo).
  struct Group {
    int device = 0;
    std::vector<int> ranks;  // global ranks, ascending
    std::unique_ptr<DeviceHalo> halo;
    std::vector<void*> arrays;  // the ranks' arrays of the current call (reused: no allocation)
  };
  std::vector<Group> groups;
  std::vector<GpuStream> single_stream;  // the default stream for every GPU (reused)
  std::vector<int> last_links;           // the plans' links the self-test last checked

  // The GPUs of the ranks, one DeviceHalo per GPU, peer access between them.
  void set_up_gpus(const ExchangeOptions& o) {
    int current = 0, count = 0;
    HALOX_CUDA_CHECK(cudaGetDevice(&current));
    HALOX_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (device_of.empty()) device_of.assign(topology.size(), current);
    if (static_cast<int>(device_of.size()) != topology.size()) {
      throw Error("halox::ParticleExchange: " + std::to_string(device_of.size()) +
                  " devices given for " + std::to_string(topology.size()) + " ranks");
    }
    std::map<int, int> group_of_device;
    for (int r = 0; r < topology.size(); ++r) {
      const int d = device_of[r];
      if (d < 0 || d >= count) {
        throw Error("halox::ParticleExchange: rank " + std::to_string(r) + " on GPU " +
                    std::to_string(d) + ", but this process sees " + std::to_string(count) +
                    " GPU(s)");
      }
      if (!group_of_device.count(d)) {
        group_of_device[d] = static_cast<int>(groups.size());
        groups.push_back(Group{d, {}, nullptr, {}});  // in the order of devices()
      }
      groups[group_of_device[d]].ranks.push_back(r);
    }
    for (Group& g : groups) g.arrays.resize(g.ranks.size());
    single_stream.resize(groups.size());
    for (Group& g : groups) {
      DeviceScope on(g.device);
      g.halo = std::make_unique<DeviceHalo>(real, o, /*gpu_share=*/1.0);
      for (const Group& other : groups) {
        if (other.device == g.device) continue;
        int can = 0;
        HALOX_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, g.device, other.device));
        if (!can) {
          throw Error("halox::ParticleExchange: GPU " + std::to_string(g.device) +
                      " cannot access GPU " + std::to_string(other.device) +
                      " directly (no peer access); run one process per GPU instead");
        }
        const cudaError_t rc = cudaDeviceEnablePeerAccess(other.device, 0);
        if (rc == cudaErrorPeerAccessAlreadyEnabled) {
          cudaGetLastError();  // already on (an earlier GPU's halo): clear the recorded error
        } else {
          HALOX_CUDA_CHECK(rc);
        }
      }
    }
  }

  // The plans on the GPUs: blocks, views, self-test.
  void install_on_gpus() {
    std::vector<int> index_in_group(topology.size());
    std::vector<std::vector<const ParticlePlan*>> of_group(groups.size());
    bool all_fit = true;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const Group& g = groups[i];
      for (std::size_t k = 0; k < g.ranks.size(); ++k) {
        of_group[i].push_back(&plans[g.ranks[k]]);
        index_in_group[g.ranks[k]] = static_cast<int>(k);
      }
      all_fit = all_fit && g.halo->fits(of_group[i]);
    }
    // Blocks kept only if every GPU keeps its own: the signal counters of kept blocks run on,
    // and those of the ranks they talk to must too.
    bool kept = true;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      DeviceScope on(groups[i].device);
      kept = groups[i].halo->allocate(groups[i].ranks, of_group[i], all_fit) && kept;
      groups[i].halo->set_system_scope(groups.size() > 1);  // GPU scope when all share one
    }
    // The links: who sends to and receives from whom, per rank and pulse.
    std::vector<int> links;
    for (const ParticlePlan& plan : plans) {
      for (const auto& pulse : plan.pulses) {
        links.push_back(pulse.header.send_rank);
        links.push_back(pulse.header.recv_rank);
      }
    }
    const bool links_changed = !kept || links != last_links;
    last_links = std::move(links);
    auto block_of = [&](int rank) {
      for (const Group& g : groups) {
        if (g.device == device_of[rank]) return g.halo->block(index_in_group[rank]);
      }
      return PeerBlock{};
    };
    for (Group& g : groups) {
      DeviceScope on(g.device);
      g.halo->connect(block_of);
    }
    // The self-test again only when the links changed (new blocks or new neighbours).
    if (!links_changed) return;
    // Every GPU's probes are in flight before any is waited for: they wait on each other.
    for (Group& g : groups) {
      DeviceScope on(g.device);
      g.halo->launch_self_test();
    }
    for (Group& g : groups) {
      DeviceScope on(g.device);
      g.halo->finish_self_test();
    }
  }

  void run_on_gpus(std::span<void* const> arrays, std::span<const GpuStream> streams,
                   bool forward) {
    // One stream for all: the default stream of every GPU, or the caller's on one GPU.
    if (streams.size() == 1 && groups.size() > 1) {
      if (streams[0] != nullptr) {
        throw Error("halox::ParticleExchange: the ranks are on " + std::to_string(groups.size()) +
                    " GPUs; pass one stream per GPU of devices()");
      }
      single_stream.assign(groups.size(), nullptr);
      streams = single_stream;
    }
    if (streams.size() != groups.size()) {
      throw Error("halox::ParticleExchange: " + std::to_string(streams.size()) +
                  " streams given for " + std::to_string(groups.size()) +
                  " GPUs (one per GPU of devices())");
    }
    check();
    for (std::size_t k = 0; k < groups.size(); ++k) {
      Group& g = groups[k];
      for (std::size_t i = 0; i < g.ranks.size(); ++i) g.arrays[i] = arrays[g.ranks[i]];
      DeviceScope on(g.device);
      if (forward)
        g.halo->forward(g.arrays, streams[k]);
      else
        g.halo->reverse(g.arrays, streams[k]);
    }
  }

#endif

  void run(std::span<void* const> arrays, std::span<const GpuStream> streams, bool forward) {
    if (static_cast<int>(arrays.size()) != topology.size()) {
      throw Error("halox::ParticleExchange: " + std::to_string(arrays.size()) +
                  " arrays given for " + std::to_string(topology.size()) + " ranks");
    }
    if (!on_gpu) {
      if (real == BasicKind::float32)
        forward ? host_forward<float>(plans, arrays) : host_reverse<float>(plans, arrays);
      else
        forward ? host_forward<double>(plans, arrays) : host_reverse<double>(plans, arrays);
      return;
    }
#if HALOX_HAS_CUDA
    run_on_gpus(arrays, streams, forward);
#else
    (void)streams;
#endif
  }
};

}  // namespace

// One plan per rank, matching sizes (as validate_plan checks across processes).
void check_local_particle_plans(const Topology& topology, std::span<const ParticlePlan> plans) {
  if (static_cast<int>(plans.size()) != topology.size()) {
    throw Error("halox::ParticleExchange: " + std::to_string(plans.size()) +
                " plans for a grid of " + std::to_string(topology.size()) + " local ranks");
  }
  for (int r = 0; r < topology.size(); ++r) {
    if (plans[r].pulses.size() != plans[0].pulses.size()) {
      throw Error("halox::ParticleExchange: rank " + std::to_string(r) + " has " +
                  std::to_string(plans[r].pulses.size()) + " pulses, rank 0 " +
                  std::to_string(plans[0].pulses.size()));
    }
    for (std::size_t q = 0; q < plans[r].pulses.size(); ++q) {
      const PulseHeader& h = plans[r].pulses[q].header;
      if (h.send_rank < 0) continue;
      if (h.send_rank >= topology.size()) {
        throw Error("halox::ParticleExchange: rank " + std::to_string(r) + "'s " +
                    h.name(static_cast<int>(q)) + " sends to rank " + std::to_string(h.send_rank) +
                    ", beyond the grid's " + std::to_string(topology.size()) + " ranks");
      }
      const PulseHeader& peer = plans[h.send_rank].pulses[q].header;
      if (peer.recv_size != h.send_size) {
        throw Error("halox::ParticleExchange: " + h.name(static_cast<int>(q)) + ": rank " +
                    std::to_string(r) + " sends " + std::to_string(h.send_size) +
                    " items but rank " + std::to_string(h.send_rank) + " expects " +
                    std::to_string(peer.recv_size));
      }
    }
  }
}

std::unique_ptr<Transport> make_local_particle_transport(const Ranks& ranks, bool device,
                                                         BasicKind real,
                                                         const ExchangeOptions& options) {
  return std::make_unique<LocalParticleTransport>(ranks, device, real, options);
}

}  // namespace halox::detail
