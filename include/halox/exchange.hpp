// halox: halo exchanges. An exchange runs a plan over a set of ranks and a transport; the
// ranks are one per process (MPI) or many in this process, the transport is chosen by name
// at run time, and the application code stays the same.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "halox/datatype.hpp"
#include "halox/exchange_options.hpp"
#include "halox/pack_gpu.hpp"
#include "halox/plan.hpp"
#include "halox/topology.hpp"

namespace halox {

/// A grid field as a typed view: its array of T (halo included, x fastest, the interior at
/// offset `halo` on every axis, as the plan lays it out) and the halo width it was allocated
/// with. An exchange given views checks each against its plan before it touches an array:
/// T must be the plan's element's basic type (every basic element of the element of T's
/// kind, the element a whole number of T: `Datatype::contiguous(3, of<double>())` cells are
/// viewed as double), and the halo width the plan's. A bare `void*` is taken unchecked.
template <class T>
struct FieldView {
  T* data = nullptr;
  int halo = 1;
};

/// The grid halo of a field laid out as the plan describes (x fastest, halo on each side),
/// for every rank this process holds. Stage by stage (Z, then Y carrying the Z halo, then X
/// carrying both), so edges and corners arrive.
class GridExchange {
 public:
  /// Collective over the ranks' processes. plans[i]: the plan of this process's i-th rank,
  /// grid rank ranks.rank(i) (build_grid_plans(ranks, ...): one for Ranks::mpi, one per rank
  /// of the grid for Ranks::local; or build_grid_plan, make_local_grid_plans). Several fields moved
  /// in one call (GHEX's exchange(f, g)): plans[f * ranks.count() + i] is field f's plan of rank i,
  /// the fields of a plan set may differ in element type and layout, and each call passes the
  /// arrays in the same order. Plans that do not match their neighbours' are refused on every rank,
  /// naming both ranks and the pulse; plans whose headers disagree with their types are refused
  /// naming the rank. Ranks::mpi: the exchange runs on a duplicate of the topology's communicator
  /// (Topology::duplicate), so that several exchanges may be in flight at once. An exchange is used
  /// by one thread at a time; a second thread calling it while one is inside gets a halox::Error.
  GridExchange(const Ranks& ranks, std::vector<GridPlan> plans, ExchangeOptions options = {});
  /// One rank per process: GridExchange(Ranks::mpi(topology), {plan}, options).
  GridExchange(const Topology& topology, GridPlan plan, ExchangeOptions options = {});
  ~GridExchange();
  GridExchange(const GridExchange&) = delete;
  GridExchange& operator=(const GridExchange&) = delete;

  /// Fills the halos: fields[f * ranks().count() + i] is field f's array of this process's
  /// i-th rank (all in host memory or all on the GPUs). Device fields: ordered on `stream`
  /// (the call may still block the host, as the staged transports do); host fields: done on
  /// return. The fields' pulses of one stage move together: one host wait per stage for all
  /// of them on the staged transports, one launch for all on the GPU-initiated ones.
  void exchange_async(std::span<void* const> fields, GpuStream stream);
  /// The same for a process holding one rank and one field.
  void exchange_async(void* field, GpuStream stream);
  /// The same, done on return for device fields too (the default stream synchronised).
  void exchange(std::span<void* const> fields);
  void exchange(void* field);
  /// The same with typed views, checked against the plans first (FieldView): a view of
  /// the wrong element type or halo width is a halox::Error naming the field and rank.
  template <class T>
  void exchange_async(std::span<const FieldView<T>> fields, GpuStream stream) {
    exchange_async(checked(fields), stream);
  }
  template <class T>
  void exchange_async(FieldView<T> field, GpuStream stream) {
    exchange_async(std::span<const FieldView<T>>(&field, 1), stream);
  }
  template <class T>
  void exchange(std::span<const FieldView<T>> fields) {
    exchange(checked(fields));
  }
  template <class T>
  void exchange(FieldView<T> field) {
    exchange(std::span<const FieldView<T>>(&field, 1));
  }

  const Ranks& ranks() const;
  /// The plan of this process's first rank (first field), and those of all its ranks and
  /// fields.
  const GridPlan& plan() const;
  const std::vector<GridPlan>& plans() const;
  /// Fields per call.
  int fields() const;
  const ExchangeStats& stats() const;
  void reset_stats();
  /// Whether exchange_async of device fields may be called inside a CUDA graph capture
  /// (any capture mode) and the graph replayed any number of times, each replay a new
  /// exchange: true for local-fused, local-pulse, ipc-fused, ipc-pulse, nvshmem-fused and
  /// nvshmem-pulse, unless a link goes through the host proxy (known after the first
  /// exchange; "auto" too). A call inside a capture on any other transport is refused with
  /// a halox::Error naming it, never recorded into a graph that would hang on replay. The
  /// first exchange of a plan (or of arrays at new addresses) sets up buffers, peer mappings
  /// and tables and must run outside the capture; a captured exchange stays bound to the
  /// arrays it was captured with. Replays count nothing in stats(), and report an expired
  /// device-side wait through check(), which a replaying application calls between launches.
  bool capturable() const;
  /// Throws HaloTimeoutError when a device-side wait of an earlier exchange (or replay of a
  /// captured one) expired, naming the rank, the peer and the pulse; reads a flag in mapped
  /// host memory, without synchronising. Every exchange call checks first itself.
  void check() const;
  /// The transport a field uses ("host" for host fields of one rank per process).
  std::string transport_name(const void* field) const;
  /// The faces this process's ranks send per exchange; and, once GPU arrays were
  /// exchanged, the kernel launches per exchange where the transport counts them (local
  /// ranks: local-fused 1, local-pulse one per face; else 0).
  int faces_per_exchange() const;
  int launches_per_exchange() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;

  /// Throws unless a view of `element` (a basic type) with `halo` fits plans()[index].
  void check_view(const Datatype& element, int halo, std::size_t index) const;
  template <class T>
  std::vector<void*> checked(std::span<const FieldView<T>> fields) const {
    std::vector<void*> arrays;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (i < plans().size()) check_view(Datatype::of<std::remove_cv_t<T>>(), fields[i].halo, i);
      arrays.push_back(const_cast<std::remove_cv_t<T>*>(fields[i].data));
    }
    return arrays;
  }
};

/// The particle halo: coordinates forward (with the periodic shifts), forces back (added).
/// Each item is three reals (x, y, z), float or double.
class ParticleExchange {
 public:
  /// Collective over the ranks' processes. plans[i]: the plan of this process's i-th rank
  /// (build_particle_plans(ranks, ...), or build_particle_plan for one rank), checked
  /// when taken (and by set_plan(s)): a plan whose indices or ranges leave its arrays is
  /// refused naming the rank and pulse. Communicator and threads as GridExchange's.
  ParticleExchange(const Ranks& ranks, std::vector<ParticlePlan> plans, BasicKind real,
                   ExchangeOptions options = {});
  /// One rank per process: ParticleExchange(Ranks::mpi(topology), {plan}, real, options).
  ParticleExchange(const Topology& topology, const ParticlePlan& plan, BasicKind real,
                   ExchangeOptions options = {});
  ~ParticleExchange();
  ParticleExchange(const ParticleExchange&) = delete;
  ParticleExchange& operator=(const ParticleExchange&) = delete;

  /// Replaces the plans after a neighbour search (buffers grow, never shrink). Collective.
  void set_plans(std::vector<ParticlePlan> plans);
  void set_plan(const ParticlePlan& plan);
  /// Coordinates: fills items [home_count, total_count) of each rank's `xyz` from the
  /// peers. xyz[i]: the array of this process's i-th rank. Device arrays: successive
  /// forward and reverse calls on one exchange must run in order on the device (one
  /// stream, or ordered by the caller with events), as a run's steps are; the
  /// GPU-initiated transports rely on it (a launch after one of the other direction knows
  /// the peers' buffers are free and does not wait for them).
  void forward_async(std::span<void* const> xyz, GpuStream stream);
  /// Forces: sends the forces on items [home_count, total_count) back to their owners, in
  /// reverse pulse order, and adds them there (so forwarded items are accumulated first).
  /// Afterwards the home items hold their total forces; the halo items' forces are
  /// transport-dependent (the GPU-initiated transports sum forwarded items' forces on the
  /// way and leave the halo items as they were).
  void reverse_async(std::span<void* const> forces, GpuStream stream);
  /// Local ranks on several GPUs: one stream per GPU of devices(), each GPU's launch
  /// ordered on its own.
  void forward_async(std::span<void* const> xyz, std::span<const GpuStream> streams);
  void reverse_async(std::span<void* const> forces, std::span<const GpuStream> streams);
  /// A process holding one rank.
  void forward_async(void* xyz, GpuStream stream);
  void reverse_async(void* forces, GpuStream stream);
  /// The same on the default stream (each GPU's), done on return.
  void forward(std::span<void* const> xyz);
  void reverse(std::span<void* const> forces);
  void forward(void* xyz);
  void reverse(void* forces);
  /// Throws HaloTimeoutError when a device-side wait of an earlier call expired (no host
  /// synchronisation: it reads a flag in mapped host memory). Every call checks first; this
  /// reports it without another exchange, e.g. after the caller synchronised its stream.
  void check() const;

  const Ranks& ranks() const;
  /// The plan of this process's first rank, and those of all its ranks.
  const ParticlePlan& plan() const;
  const std::vector<ParticlePlan>& plans() const;
  /// Whether forward_async / reverse_async of device arrays may be called inside a CUDA graph
  /// capture (any mode) and the graph replayed any number of times, each replay new
  /// exchanges: the transports GridExchange::capturable names (not nvshmem-stream, whose
  /// launches take the host's counters, nor nccl-device, untested in graphs). The first
  /// exchange of a plan in each direction, or of arrays at new addresses, runs outside the
  /// capture (its set-up: blocks, peer mapping, the array tables); a call inside a capture
  /// before it, or on another transport, is refused with a halox::Error naming it. A graph
  /// replayed after set_plan(s) moves nothing: its launches stop at their start and check()
  /// then throws, saying to capture again (the exchange is unusable until the next plan).
  /// Replays count nothing in stats(); check() between replays reports a device time-out.
  bool capturable() const;
  const ExchangeStats& stats() const;
  void reset_stats();
  /// The GPUs of this process's ranks, in the order the stream lists take them (local
  /// ranks; the current GPU for one rank per process); empty once the exchange moved host
  /// arrays.
  std::vector<int> devices() const;
  /// Local ranks on the GPU, after the first exchange: kernel launches per forward (or
  /// reverse) call and GPU (local-fused: 1, local-pulse: one per pulse); 0 in host memory.
  int launches_per_exchange() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace halox
