// The local engine: every rank of a grid in this process, on the current GPU.
#include "device_halo.hpp"

namespace halox {

struct LocalParticleExchange::Impl {
  Impl(const Topology& t, BasicKind real, GpuHaloOptions o)
      : topology(t), halo(real, o, /*gpu_share=*/1.0) {}
  Topology topology;
  std::vector<ParticlePlan> plans;
  detail::DeviceHalo halo;

  void install(std::vector<ParticlePlan> p) {
    if (static_cast<int>(p.size()) != topology.size()) {
      throw Error("halox::LocalParticleExchange: " + std::to_string(p.size()) +
                  " plans for a grid of " + std::to_string(topology.size()) + " ranks");
    }
    plans = std::move(p);
    std::vector<int> ranks;
    std::vector<const ParticlePlan*> pointers;
    for (int r = 0; r < topology.size(); ++r) {
      ranks.push_back(r);
      pointers.push_back(&plans[r]);
    }
    halo.allocate(ranks, pointers);
    halo.set_system_scope(false);  // every rank on this GPU
    // Matching sizes, as validate_plan checks across processes.
    for (int r = 0; r < topology.size(); ++r) {
      for (std::size_t p = 0; p < plans[r].pulses.size(); ++p) {
        const PulseHeader& h = plans[r].pulses[p].header;
        if (h.send_rank < 0) continue;
        const PulseHeader& peer = plans[h.send_rank].pulses[p].header;
        if (peer.recv_size != h.send_size) {
          throw Error("halox::LocalParticleExchange: " + h.name(static_cast<int>(p)) + ": rank " +
                      std::to_string(r) + " sends " + std::to_string(h.send_size) +
                      " items but rank " + std::to_string(h.send_rank) + " expects " +
                      std::to_string(peer.recv_size));
        }
      }
    }
    halo.connect([&](int rank) { return halo.block(rank); });
    halo.self_test();
  }
};

LocalParticleExchange::LocalParticleExchange(const Topology& topology,
                                             std::vector<ParticlePlan> plans, BasicKind real,
                                             GpuHaloOptions options)
    : m_impl(std::make_unique<Impl>(topology, real, options)) {
  m_impl->install(std::move(plans));
}
LocalParticleExchange::~LocalParticleExchange() = default;
void LocalParticleExchange::set_plans(std::vector<ParticlePlan> plans) {
  m_impl->install(std::move(plans));
}
void LocalParticleExchange::forward(const std::vector<void*>& xyz, GpuStream stream) {
  m_impl->halo.forward(xyz, stream);
}
void LocalParticleExchange::reverse(const std::vector<void*>& forces, GpuStream stream) {
  m_impl->halo.reverse(forces, stream);
}
void LocalParticleExchange::check() const {
  m_impl->halo.check();
}
const std::vector<ParticlePlan>& LocalParticleExchange::plans() const {
  return m_impl->plans;
}
int LocalParticleExchange::launches_per_exchange() const {
  return m_impl->halo.launches_per_exchange();
}

}  // namespace halox
