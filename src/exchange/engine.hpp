// What the public exchanges run: one engine per exchange, for ranks of either locality, over
// the transports of transport.hpp (Ranks::local's own among them), so that GridExchange and
// ParticleExchange are one class each whatever the ranks.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "halox/device.hpp"
#include "halox/exchange_options.hpp"
#include "halox/plan.hpp"

namespace halox::detail {

class GridEngine {
 public:
  virtual ~GridEngine() = default;
  /// fields[f * ranks + i]: field f's array of this process's i-th rank.
  virtual void exchange_async(std::span<void* const> fields, GpuStream stream,
                              ExchangeStats& stats) = 0;
  virtual bool on_device(const void* field) = 0;
  virtual std::string transport_name(const void* field) = 0;
  virtual int faces_per_exchange() const = 0;
  virtual int launches_per_exchange() const = 0;
  /// Whether runs of device fields may be captured into a CUDA graph.
  virtual bool capturable() const = 0;
  /// Throws HaloTimeoutError for a device-side wait that expired (GPU-initiated transports).
  virtual void check() const = 0;
};

class ParticleEngine {
 public:
  virtual ~ParticleEngine() = default;
  /// Collective over the ranks' processes.
  virtual void set_plans(std::vector<ParticlePlan> plans) = 0;
  virtual const std::vector<ParticlePlan>& plans() const = 0;
  /// arrays[i]: this process's i-th rank's; streams: one per GPU of devices(), or one for
  /// all (refused for several GPUs unless it is the default stream).
  virtual void run(bool forward, std::span<void* const> arrays, std::span<const GpuStream> streams,
                   ExchangeStats& stats) = 0;
  /// After a run on the default streams: waits for them when the arrays are on the GPU.
  virtual void finish_default_streams(std::span<void* const> arrays) = 0;
  virtual std::vector<int> devices() const = 0;
  virtual int launches_per_exchange() const = 0;
  /// Throws HaloTimeoutError for a device-side wait that expired (GPU-initiated transports).
  virtual void check() const = 0;
  /// Whether runs of device arrays may be captured into a CUDA graph.
  virtual bool capturable() const = 0;
};

/// plans[f * ranks.count() + r]: field f's plan of this process's rank r (either locality).
std::unique_ptr<GridEngine> make_grid_engine(const Ranks& ranks, std::vector<GridPlan> plans,
                                             const ExchangeOptions& options);
/// plans[r]: the plan of this process's rank r (either locality).
std::unique_ptr<ParticleEngine> make_particle_engine(const Ranks& ranks,
                                                     std::vector<ParticlePlan> plans,
                                                     BasicKind real,
                                                     const ExchangeOptions& options);

}  // namespace halox::detail
