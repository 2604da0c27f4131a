// The local engine: every rank of a grid in this process, on one GPU or spread over several
// (one DeviceHalo per GPU holding that GPU's ranks; blocks on other GPUs are reached through
// peer access, i.e. the same direct stores over NVLink), or in host memory (the CPU moves
// the same pulses in order; in every build).
#include <algorithm>
#include <map>

#include "halox/config.hpp"
#include "halox/gpu_halo.hpp"

#if HALOX_HAS_CUDA
#include <cuda_runtime.h>

#include "../common/cuda_check.hpp"
#include "device_halo.hpp"
#endif

namespace halox {

namespace {

// The host path: pulse by pulse, each rank's items copied (with the periodic shift) into
// the halo of the rank it sends to; the reverse in reverse pulse order, adding the forces of
// those copies back into the items sent. Pulse order is what makes forwarding work: an
// item received by an earlier pulse is in place before a later pulse sends it on, and its
// forces are complete before the reverse of the pulse that delivered it returns them.
template <class Real>
void host_forward(const std::vector<ParticlePlan>& plans, const std::vector<void*>& arrays) {
  const std::size_t pulses = plans.empty() ? 0 : plans[0].pulses.size();
  for (std::size_t p = 0; p < pulses; ++p) {
    for (std::size_t r = 0; r < plans.size(); ++r) {
      const ParticlePulse& send = plans[r].pulses[p];
      if (send.header.send_rank < 0) continue;
      const ParticlePulse& recv = plans[send.header.send_rank].pulses[p];
      const Real* from = static_cast<const Real*>(arrays[r]);
      Real* to = static_cast<Real*>(arrays[send.header.send_rank]) + 3 * recv.recv_offset;
      for (std::size_t k = 0; k < send.send_index.size(); ++k) {
        for (int a = 0; a < 3; ++a) {
          to[3 * k + a] = from[3 * static_cast<std::size_t>(send.send_index[k]) + a] +
                          static_cast<Real>(send.shift[a]);
        }
      }
    }
  }
}
template <class Real>
void host_reverse(const std::vector<ParticlePlan>& plans, const std::vector<void*>& arrays) {
  const std::size_t pulses = plans.empty() ? 0 : plans[0].pulses.size();
  for (std::size_t p = pulses; p-- > 0;) {
    for (std::size_t r = 0; r < plans.size(); ++r) {
      const ParticlePulse& send = plans[r].pulses[p];
      if (send.header.send_rank < 0) continue;
      const ParticlePulse& recv = plans[send.header.send_rank].pulses[p];
      const Real* from =
          static_cast<const Real*>(arrays[send.header.send_rank]) + 3 * recv.recv_offset;
      Real* to = static_cast<Real*>(arrays[r]);
      for (std::size_t k = 0; k < send.send_index.size(); ++k) {
        for (int a = 0; a < 3; ++a) {
          to[3 * static_cast<std::size_t>(send.send_index[k]) + a] += from[3 * k + a];
        }
      }
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

}  // namespace

struct LocalParticleExchange::Impl {
  Impl(const Topology& t, BasicKind r, GpuHaloOptions o, std::vector<int> device_of_rank,
       LocalMemory m)
      : topology(t), real(r), memory(m), device_of(std::move(device_of_rank)) {
    if (real != BasicKind::float32 && real != BasicKind::float64) {
      throw Error("halox::LocalParticleExchange: coordinates must be float32 or float64");
    }
    if (memory == LocalMemory::host) return;
#if HALOX_HAS_CUDA
    set_up_gpus(o);
#else
    (void)o;
    throw Error("halox::LocalParticleExchange: built without CUDA; use LocalMemory::host");
#endif
  }
#if HALOX_HAS_CUDA
  ~Impl() {
    for (Group& g : groups) {
      DeviceScope on(g.device);
      g.halo.reset();  // its destructor waits for and frees on its own GPU
    }
  }

#endif

  Topology topology;
  BasicKind real;
  LocalMemory memory;
  std::vector<int> device_of;
  std::vector<int> devices;
  std::vector<ParticlePlan> plans;
#if HALOX_HAS_CUDA
  // The ranks of one GPU and their engine.
  struct Group {
    int device = 0;
    std::vector<int> ranks;  // global ranks, ascending
    std::unique_ptr<detail::DeviceHalo> halo;
    std::vector<void*> arrays;  // the ranks' arrays of the current call (reused: no allocation)
  };
  std::vector<Group> groups;
  std::vector<GpuStream> single_stream;  // one_stream's result (reused)
  std::vector<int> last_links;           // the plans' links the self-test last checked

  // The GPUs of the ranks, one engine per GPU, peer access between them.
  void set_up_gpus(GpuHaloOptions o) {
    int current = 0, count = 0;
    HALOX_CUDA_CHECK(cudaGetDevice(&current));
    HALOX_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (device_of.empty()) device_of.assign(topology.size(), current);
    if (static_cast<int>(device_of.size()) != topology.size()) {
      throw Error("halox::LocalParticleExchange: " + std::to_string(device_of.size()) +
                  " devices given for " + std::to_string(topology.size()) + " ranks");
    }
    std::map<int, int> group_of_device;
    for (int r = 0; r < topology.size(); ++r) {
      const int d = device_of[r];
      if (d < 0 || d >= count) {
        throw Error("halox::LocalParticleExchange: rank " + std::to_string(r) + " on GPU " +
                    std::to_string(d) + ", but this process sees " + std::to_string(count) +
                    " GPU(s)");
      }
      if (!group_of_device.count(d)) {
        group_of_device[d] = static_cast<int>(groups.size());
        groups.push_back(Group{d, {}, nullptr, {}});
        devices.push_back(d);
      }
      groups[group_of_device[d]].ranks.push_back(r);
    }
    for (Group& g : groups) g.arrays.resize(g.ranks.size());
    single_stream.resize(groups.size());
    for (Group& g : groups) {
      DeviceScope on(g.device);
      g.halo = std::make_unique<detail::DeviceHalo>(real, o, /*gpu_share=*/1.0);
      for (const Group& other : groups) {
        if (other.device == g.device) continue;
        int can = 0;
        HALOX_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, g.device, other.device));
        if (!can) {
          throw Error("halox::LocalParticleExchange: GPU " + std::to_string(g.device) +
                      " cannot access GPU " + std::to_string(other.device) +
                      " directly (no peer access); run one process per GPU instead");
        }
        const cudaError_t rc = cudaDeviceEnablePeerAccess(other.device, 0);
        if (rc == cudaErrorPeerAccessAlreadyEnabled) {
          cudaGetLastError();  // already on (an earlier engine): clear the recorded error
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
      return detail::PeerBlock{};
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

  void run_on_gpus(const std::vector<void*>& arrays, const std::vector<GpuStream>& streams,
                   bool forward) {
    if (streams.size() != groups.size()) {
      throw Error("halox::LocalParticleExchange: " + std::to_string(streams.size()) +
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

  void install(std::vector<ParticlePlan> p) {
    if (static_cast<int>(p.size()) != topology.size()) {
      throw Error("halox::LocalParticleExchange: " + std::to_string(p.size()) +
                  " plans for a grid of " + std::to_string(topology.size()) + " ranks");
    }
    plans = std::move(p);
    // Matching sizes, as validate_plan checks across processes.
    for (int r = 0; r < topology.size(); ++r) {
      for (std::size_t q = 0; q < plans[r].pulses.size(); ++q) {
        const PulseHeader& h = plans[r].pulses[q].header;
        if (h.send_rank < 0) continue;
        const PulseHeader& peer = plans[h.send_rank].pulses[q].header;
        if (peer.recv_size != h.send_size) {
          throw Error("halox::LocalParticleExchange: " + h.name(static_cast<int>(q)) + ": rank " +
                      std::to_string(r) + " sends " + std::to_string(h.send_size) +
                      " items but rank " + std::to_string(h.send_rank) + " expects " +
                      std::to_string(peer.recv_size));
        }
      }
    }
#if HALOX_HAS_CUDA
    if (memory == LocalMemory::gpu) install_on_gpus();
#endif
  }

  void run(const std::vector<void*>& arrays, const std::vector<GpuStream>& streams, bool forward) {
    if (static_cast<int>(arrays.size()) != topology.size()) {
      throw Error("halox::LocalParticleExchange: " + std::to_string(arrays.size()) +
                  " arrays given for " + std::to_string(topology.size()) + " ranks");
    }
    if (memory == LocalMemory::host) {
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

  void check() const {
#if HALOX_HAS_CUDA
    for (const Group& g : groups) g.halo->check();
#endif
  }

  // The synchronous calls: each GPU's default stream done (nothing to wait for in host
  // memory).
  void finish_default_streams() const {
#if HALOX_HAS_CUDA
    if (memory == LocalMemory::host) return;
    int current = 0;
    HALOX_CUDA_CHECK(cudaGetDevice(&current));
    for (const int d : devices) {
      HALOX_CUDA_CHECK(cudaSetDevice(d));
      detail::finish_default_stream();
    }
    HALOX_CUDA_CHECK(cudaSetDevice(current));
#endif
  }

  // A stream belongs to one GPU: several GPUs take one stream each, or the default stream
  // (none in host memory).
  const std::vector<GpuStream>& one_stream(GpuStream stream) {
#if HALOX_HAS_CUDA
    if (groups.size() > 1 && stream != nullptr) {
      throw Error("halox::LocalParticleExchange: the ranks are on " +
                  std::to_string(groups.size()) + " GPUs; pass one stream per GPU of devices()");
    }
    single_stream.assign(groups.size(), stream);
    return single_stream;
#else
    (void)stream;
    static const std::vector<GpuStream> none;
    return none;
#endif
  }
};

LocalParticleExchange::LocalParticleExchange(const Topology& topology,
                                             std::vector<ParticlePlan> plans, BasicKind real,
                                             GpuHaloOptions options,
                                             std::vector<int> device_of_rank, LocalMemory memory)
    : m_impl(std::make_unique<Impl>(topology, real, options, std::move(device_of_rank), memory)) {
  m_impl->install(std::move(plans));
}
LocalParticleExchange::~LocalParticleExchange() = default;

std::vector<int> LocalParticleExchange::spread_over_gpus(int ranks, int gpus) {
  if (ranks < 1 || gpus < 1)
    throw Error("halox::LocalParticleExchange: ranks and GPUs must be >= 1");
  std::vector<int> out(ranks);
  for (int r = 0; r < ranks; ++r)
    out[r] = static_cast<int>(static_cast<long long>(r) * gpus / ranks);
  return out;
}
const std::vector<int>& LocalParticleExchange::devices() const {
  return m_impl->devices;
}
void LocalParticleExchange::set_plans(std::vector<ParticlePlan> plans) {
  m_impl->install(std::move(plans));
}
void LocalParticleExchange::forward_async(const std::vector<void*>& xyz, GpuStream stream) {
  forward_async(xyz, m_impl->one_stream(stream));
}
void LocalParticleExchange::reverse_async(const std::vector<void*>& forces, GpuStream stream) {
  reverse_async(forces, m_impl->one_stream(stream));
}
void LocalParticleExchange::forward_async(const std::vector<void*>& xyz,
                                          const std::vector<GpuStream>& streams) {
  m_impl->run(xyz, streams, true);
}
void LocalParticleExchange::reverse_async(const std::vector<void*>& forces,
                                          const std::vector<GpuStream>& streams) {
  m_impl->run(forces, streams, false);
}
void LocalParticleExchange::forward(const std::vector<void*>& xyz) {
  forward_async(xyz, nullptr);
  m_impl->finish_default_streams();
}
void LocalParticleExchange::reverse(const std::vector<void*>& forces) {
  reverse_async(forces, nullptr);
  m_impl->finish_default_streams();
}
void LocalParticleExchange::check() const {
  m_impl->check();
}
const std::vector<ParticlePlan>& LocalParticleExchange::plans() const {
  return m_impl->plans;
}
int LocalParticleExchange::launches_per_exchange() const {
#if HALOX_HAS_CUDA
  if (m_impl->memory == LocalMemory::gpu)
    return m_impl->groups.front().halo->launches_per_exchange();
#endif
  return 0;
}

}  // namespace halox
