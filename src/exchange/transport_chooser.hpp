// Which transport moves a field's memory, for the ranks of an exchange: one per memory (host
// or device) and, for transports that move fewer fields per run than an exchange has, one
// instance per field; each connected to the exchange's current ops before it runs them.
// Ranks::mpi takes the kind of the options ("auto" resolved collectively, once); Ranks::local
// takes its own grid or particle transport for both memories; Ranks::blocks the host
// transport, and staged or mpi-direct for device arrays (auto: staged).
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "halox/datatype.hpp"
#include "halox/exchange_options.hpp"
#include "halox/plan.hpp"
#include "../transport/transport.hpp"

namespace halox::detail {

class TransportChooser {
 public:
  /// particle: the exchange moves particles of `real` (else grids). Throws halox::Error for
  /// a kind the ranks' locality does not take.
  TransportChooser(const Ranks& ranks, ExchangeOptions options, bool particle,
                   BasicKind real = BasicKind::float64);

  /// Whether `field` is device memory (asked once per buffer).
  bool on_device(const void* field);

  /// Collective, once: replaces "auto" by a concrete kind for device buffers. The plan's
  /// headers are only built while the choice is still open, not on every exchange.
  template <class Plan>
  TransportKind resolve(const Plan& plan, std::int64_t item_bytes) {
    if (m_options.transport == TransportKind::automatic) {
      m_options.transport = choose_automatically(headers(plan), item_bytes);
    }
    return m_options.transport;
  }

  /// The transport for `field`'s memory (`device`: on_device(field), which the caller asked
  /// already), connected to `connection` (collectively, at the first run after a new plan:
  /// every rank runs it together). `instance`: a transport that moves fewer fields per run
  /// than the exchange has gets one instance per field.
  Transport& connected(const void* field, bool device, const Connection& connection,
                       int instance = 0);
  /// The transport for `field`'s memory (made, not connected).
  Transport& for_field(const void* field, bool device);
  /// The exchange's plan changed (collective): every transport connects again before it runs.
  void new_plan() { ++m_generation; }
  std::string name(const void* field) { return for_field(field, on_device(field)).name(); }
  /// Throws for a device-side time-out of an earlier run (the device transports made).
  void check() const;
  /// Kernel launches per exchange of GPU arrays, over its instances (0: not counted).
  int device_launches_per_run() const;
  /// Whether runs of device arrays may be captured into a CUDA graph: the made transports'
  /// answer, else the kind's ("auto": known once resolved).
  bool device_capturable() const;
  /// Throws halox::Error, naming `call` and the transport, unless instance `instance`'s run
  /// of `fields` may be captured: a capturable transport, connected to `connection` and set
  /// up for these arrays by an earlier run (a capture cannot hold a set-up).
  void require_capturable(const Connection& connection, Direction direction,
                          std::span<void* const> fields, int instance,
                          const std::string& call) const;
  const ExchangeOptions& options() const { return m_options; }

 private:
  struct Slot {
    std::unique_ptr<Transport> transport;
    int generation = -1;  // the plan it was last connected for
    const Connection* connection = nullptr;
  };
  Slot& slot_for(const void* field, bool device, int instance);
  std::unique_ptr<Transport> make_device(const void* field) const;
  std::unique_ptr<Transport> make_local(bool device) const;  // Ranks::local's, for a memory
  TransportKind choose_automatically(const std::vector<PulseHeader>& pulses,
                                     std::int64_t item_bytes);

  Ranks m_ranks;
  ExchangeOptions m_options;
  bool m_particle;
  BasicKind m_real;
  Slot m_host;
  std::vector<Slot> m_device;  // one per instance
  std::map<const void*, bool> m_kind;
  int m_generation = 0;
};

}  // namespace halox::detail
