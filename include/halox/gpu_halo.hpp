// halox: GPU-initiated particle halo exchange. The fused kernels move the halo with no host
// involvement: each pulse packs straight into the receiving rank's buffer (a direct store:
// same GPU, CUDA IPC), signals it with a release store at system scope, and waits for its own
// data with an acquire load and a time-out. Signals carry a per-exchange counter, so nothing
// is reset between steps. Two kernel designs (seed 000), one source:
//  - per_pulse:  one kernel per pulse, stream-ordered;
//  - all_pulses: one kernel for every pulse; items a pulse forwards (received by an earlier
//                pulse) wait only for the pulses that deliver them, the others go at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "halox/datatype.hpp"
#include "halox/error.hpp"
#include "halox/pack_gpu.hpp"
#include "halox/plan.hpp"
#include "halox/topology.hpp"

namespace halox {

enum class FusedKernels { per_pulse, all_pulses };

struct GpuHaloOptions {
  FusedKernels kernels = FusedKernels::all_pulses;
  /// Every device-side wait gives up after this long and records who waited for whom.
  double timeout_seconds = 5.0;
  /// At set-up, and after a new plan that changes the links (new blocks or a new
  /// neighbour): a small message over every link of the plan in both directions, data and
  /// signal checked, before any real exchange.
  bool self_test = true;
  /// Testing only: this rank's blocks do nothing, as if the rank had stalled.
  int stall_rank = -1;
  /// Between ranks of one launch (the local engine's ranks on one GPU, a rank's pulses to
  /// itself): coordinates go straight into the receiver's halo and returned forces straight
  /// into the sender's home items, with no staging, signal or wait, wherever no forwarded
  /// item needs that pulse's staging. Off: through staging as between processes (tests of
  /// that path; a stalled rank then shows as a time-out, which a launch never waits for).
  bool direct_in_launch = true;
  /// In traces: the name that this exchange's device events carry (ExchangeOptions::name).
  std::string name{};
};

/// Where the arrays of a LocalParticleExchange's ranks live.
enum class LocalMemory { gpu, host };

/// Several ranks of a Cartesian grid in one process: one driver thread, each rank with its
/// own buffers, one launch per GPU covering every rank on it (kernel launches, not the
/// exchange, would otherwise bound a step of many ranks). By default every rank is on this
/// process's current GPU; `device_of_rank` spreads them over several GPUs (peer access is
/// enabled between them, signals and fences then work at system scope). With
/// LocalMemory::host the arrays are host memory and the CPU moves the same pulses in order
/// (no GPU needed, in every build; the options, GPUs and streams are then unused).
class LocalParticleExchange {
 public:
  /// plans[r] is rank r's plan (build_local_particle_plans); `topology` gives the grid.
  LocalParticleExchange(const Topology& topology, std::vector<ParticlePlan> plans, BasicKind real,
                        GpuHaloOptions options = {}, std::vector<int> device_of_rank = {},
                        LocalMemory memory = LocalMemory::gpu);
  ~LocalParticleExchange();
  LocalParticleExchange(const LocalParticleExchange&) = delete;
  LocalParticleExchange& operator=(const LocalParticleExchange&) = delete;

  /// Rank r on GPU r * gpus / ranks: consecutive ranks (neighbours along x) share a GPU.
  static std::vector<int> spread_over_gpus(int ranks, int gpus);
  /// The GPUs in use, in the order `forward`/`reverse` take one stream each (none in host
  /// memory).
  const std::vector<int>& devices() const;

  /// New plans after a neighbour search (waits for the device; re-runs the self-test).
  void set_plans(std::vector<ParticlePlan> plans);
  /// xyz[r]: rank r's coordinates (3 reals per item; device or host memory, as constructed).
  /// Rank r's arrays live on its GPU. One stream per GPU of devices() (or one stream when
  /// every rank is on one GPU); each GPU's launch is ordered on its stream, and successive
  /// calls must run in order on each GPU (ParticleExchange::forward_async says why).
  void forward_async(const std::vector<void*>& xyz, GpuStream stream);
  void reverse_async(const std::vector<void*>& forces, GpuStream stream);
  void forward_async(const std::vector<void*>& xyz, const std::vector<GpuStream>& streams);
  void reverse_async(const std::vector<void*>& forces, const std::vector<GpuStream>& streams);
  /// The same on each GPU's default stream, done on return.
  void forward(const std::vector<void*>& xyz);
  void reverse(const std::vector<void*>& forces);
  /// Throws HaloTimeoutError when a device-side wait expired (no host synchronisation:
  /// reads a flag in mapped host memory). forward and reverse call it first.
  void check() const;
  const std::vector<ParticlePlan>& plans() const;
  /// Kernel launches per forward (or reverse) call and GPU: 1 for all_pulses (0 in host
  /// memory).
  int launches_per_exchange() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace halox
