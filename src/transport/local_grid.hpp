// The grid exchange of Ranks::local: every rank of the grid in this process, each face
// straight from the sender's array into the receiver's, no staging buffer and no host
// wait. On the GPU one copy kernel per face in stage order (local-pulse) or one fused kernel
// for every face of every rank (local-fused); host arrays are packed and unpacked by the CPU.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <vector>

#include "halox/config.hpp"
#include "halox/exchange.hpp"
#include "halox/plan.hpp"
#include "engine.hpp"

namespace halox::detail {

/// One face: rank `from`'s pulse `pulse` sends to rank `to`'s pulse `pulse`.
struct LocalFace {
  int stage, pulse, from, to;
};

class LocalGridFused;

class LocalGridEngine final : public GridEngine {
 public:
  /// plans[f * ranks + r]: field f's plan of rank r; options.transport local-pulse or
  /// local-fused. Mismatched plans are refused (halox::Error naming both ranks and the pulse).
  LocalGridEngine(std::vector<GridPlan> plans, int ranks, const ExchangeOptions& options);
  ~LocalGridEngine() override;
  LocalGridEngine(const LocalGridEngine&) = delete;
  LocalGridEngine& operator=(const LocalGridEngine&) = delete;

  /// fields[f * ranks + r]: field f's array of rank r (all on the host, or all on this
  /// process's current GPU).
  void exchange_async(std::span<void* const> fields, GpuStream stream,
                      ExchangeStats& stats) override;
  /// Whether `field` is device memory (asked once per array).
  bool on_device(const void* field) override;
  std::string transport_name(const void* field) override;
  int faces_per_exchange() const override;
  /// GPU arrays: local-fused, one launch (one per field beyond the kernel's ranks x fields);
  /// local-pulse, one per face.
  int launches_per_exchange() const override;

 private:
  struct Field {
    std::vector<GridPlan> plans;   // per rank
    std::vector<LocalFace> faces;  // in stage order
#if HALOX_HAS_CUDA
    std::unique_ptr<LocalGridFused> fused;  // made at the first exchange of GPU arrays
#endif
  };
  std::vector<Field> m_fields;
#if HALOX_HAS_CUDA
  std::unique_ptr<LocalGridFused> m_all_fields;  // local-fused, several fields in one launch
#endif
  int m_ranks;
  std::vector<char> m_scratch;
  std::map<const void*, bool> m_on_device;
  ExchangeOptions m_options;
  bool m_fused_kernel;
  std::int64_t m_bytes_between_ranks = 0;  // per exchange, for the stats
  int m_faces_between_ranks = 0;
};

}  // namespace halox::detail
