// The grid exchange's engine, for ranks of either locality: the ops of every field of every
// rank this process holds (fields[f * ranks + r] packs and unpacks with plans[f * ranks +
// r]'s types), moved by the chosen transport in one run; with more fields than a transport
// moves in one run (the GPU-initiated grid kernel of one rank per process takes up to four),
// one instance of it per field, each connected to that field's ops.
#include <algorithm>

#include "halox/error.hpp"
#include "halox/pack.hpp"
#include "../common/mpi_tags.hpp"
#include "../plan/plan_checks.hpp"
#include "engine.hpp"
#include "../transport/local_grid.hpp"
#include "transport_chooser.hpp"
#if HALOX_HAS_CUDA
#include "../common/cuda_check.hpp"
#include "halox/pack_gpu.hpp"
#endif

namespace halox::detail {

namespace {

class RankGridEngine final : public GridEngine {
 public:
  RankGridEngine(const Ranks& r, std::vector<GridPlan> p, const ExchangeOptions& o)
      : ranks(r.count()), plans(std::move(p)), chooser(r, o, false) {
    const int fields = static_cast<int>(plans.size()) / ranks;
    int tag = tags::kGridPulse;
    per_field_host.resize(fields);
    per_field_device.resize(fields);
    for (auto* c : {&all_host, &all_device}) c->ranks = ranks;
    for (int f = 0; f < fields; ++f) {
      per_field_host[f].ranks = per_field_device[f].ranks = ranks;
      // A pulse's tag is the same on every rank: a sender's op and its receiver's share it.
      int most = 0;
      for (int r = 0; r < ranks; ++r) {
        const GridPlan& plan = plans[f * ranks + r];
        most = std::max(most, static_cast<int>(plan.pulses.size()));
        for (std::size_t i = 0; i < plan.pulses.size(); ++i) {
          auto [host, device] =
              ops_of(plan.pulses[i], static_cast<int>(i), tag + static_cast<int>(i));
          host.rank = device.rank = r;
          host.field = device.field = f;
          all_host.forward.push_back(host);
          all_device.forward.push_back(device);
          host.field = device.field = 0;  // the one field of its own runs
          per_field_host[f].forward.push_back(std::move(host));
          per_field_device[f].forward.push_back(std::move(device));
        }
      }
      tag += most;
    }
    if (tag > tags::kParticleForward) {
      throw Error("halox::GridExchange: " + std::to_string(tag - tags::kGridPulse) +
                  " pulses over all fields, more than the " +
                  std::to_string(tags::kParticleForward - tags::kGridPulse) +
                  " one exchange takes");
    }
    // Stage order across the fields and ranks: the pulses of one stage run together (the
    // grid kernel's host side requires it: its tickets go stage by stage).
    auto by_stage = [](Connection& c) {
      std::stable_sort(c.forward.begin(), c.forward.end(),
                       [](const Op& x, const Op& y) { return x.stage < y.stage; });
    };
    by_stage(all_host);
    by_stage(all_device);
    for (Connection& c : per_field_host) by_stage(c);
    for (Connection& c : per_field_device) by_stage(c);
    // Ranks in this process: their plans are checked here, at construction, as one rank per
    // process checks them collectively when they are built.
    if (r.in_process()) (void)pair_local_faces(all_host);
  }

  void exchange_async(std::span<void* const> fields, GpuStream stream,
                      ExchangeStats& stats) override {
    // fields.size() == plans.size(): GridExchange checked it.
    const bool device = chooser.on_device(fields[0]);
    for (void* f : fields) {
      if (chooser.on_device(f) != device) {
        throw Error(
            "halox::GridExchange: the fields of one call must all be in host memory or "
            "all on the GPU");
      }
    }
#if HALOX_HAS_CUDA
    const bool capture = device && capturing(stream);
#else
    const bool capture = false;
#endif
    if (device && !capture) chooser.resolve(plans[0], 1);  // collective: never in a capture
    const std::span<const GpuStream> streams(&stream, 1);  // grids: the ranks share one GPU
    // One instance's run: inside a capture only where the graph can replay it.
    auto run = [&](const Connection& connection, std::span<void* const> arrays, int instance) {
      if (capture) {
        chooser.require_capturable(connection, Direction::forward, arrays, instance,
                                   "GridExchange::exchange_async");
      }
      chooser.connected(fields[0], device, connection, instance)
          .run_async(Direction::forward, arrays, streams, stats);
    };
    const std::size_t count = per_field_host.size();
    if (capture && !chooser.device_capturable()) {
      chooser.require_capturable(all_device, Direction::forward, fields, 0,
                                 "GridExchange::exchange_async");
    }
    const int most = chooser.for_field(fields[0], device).capabilities().fields_per_run;
    if (count == 1 || most == 0 || static_cast<int>(count) <= most) {
      run(device ? all_device : all_host, fields, 0);
      return;
    }
    const std::int64_t exchanges = stats.exchanges;
    for (std::size_t f = 0; f < count; ++f) {
      run(device ? per_field_device[f] : per_field_host[f], fields.subspan(f * ranks, ranks),
          static_cast<int>(f));
    }
    stats.exchanges = exchanges + 1;
  }
  bool capturable() const override {
    return chooser.device_capturable();
  }
  void check() const override {
    chooser.check();
  }
  bool on_device(const void* field) override {
    return chooser.on_device(field);
  }
  std::string transport_name(const void* field) override {
    return chooser.name(field);
  }
  int faces_per_exchange() const override {
    return static_cast<int>(std::count_if(all_host.forward.begin(), all_host.forward.end(),
                                          [](const Op& op) { return op.send_rank >= 0; }));
  }
  int launches_per_exchange() const override {
    return chooser.device_launches_per_run();
  }

 private:
  // The host and device ops of one pulse: pack and unpack through its datatypes.
  static std::pair<Op, Op> ops_of(const GridPulse& pulse, int index, int tag) {
    Op op;
    op.stage = pulse.header.stage;
    op.pulse = index;
    op.send_rank = pulse.header.send_rank;
    op.recv_rank = pulse.header.recv_rank;
    op.tag = tag;
    op.send_bytes = pulse.header.send_size;
    op.recv_bytes = pulse.header.recv_size;
    op.granule = 16;
    op.name = pulse.header.name(index);
    const Datatype send = pulse.send_type, recv = pulse.recv_type;
    op.send_type = send;
    op.recv_type = recv;
    Op host = op, device = op;
    host.pack = [send](const void* field, void* out, std::int64_t offset, std::int64_t bytes,
                       GpuStream) { halox::pack(field, 1, send, out, offset, bytes); };
    host.unpack = [recv](void* field, const void* in, std::int64_t offset, std::int64_t bytes,
                         GpuStream) { halox::unpack(in, field, 1, recv, offset, bytes); };
#if HALOX_HAS_CUDA
    device.pack = [send](const void* field, void* out, std::int64_t offset, std::int64_t bytes,
                         GpuStream stream) {
      pack_range_async(field, 1, send, out, offset, bytes, stream);
    };
    device.unpack = [recv](void* field, const void* in, std::int64_t offset, std::int64_t bytes,
                           GpuStream stream) {
      unpack_range_async(in, field, 1, recv, offset, bytes, stream);
    };
    device.self_copy = [send, recv](void* field, GpuStream stream) {
      copy_async(field, send, field, recv, stream);
    };
#endif
    return {std::move(host), std::move(device)};
  }

  int ranks;                    // this process's
  std::vector<GridPlan> plans;  // [field * ranks + rank]
  TransportChooser chooser;
  Connection all_host, all_device;  // every field's ops, in stage order
  std::vector<Connection> per_field_host, per_field_device;
};

}  // namespace

std::unique_ptr<GridEngine> make_grid_engine(const Ranks& ranks, std::vector<GridPlan> plans,
                                             const ExchangeOptions& options) {
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const int index = static_cast<int>(i % static_cast<std::size_t>(std::max(1, ranks.count())));
    check_grid_plan(plans[i], ranks.rank(index), "GridExchange");
  }
#if HALOX_HAS_CUDA
  if (ranks.in_process() && !ranks.device_of_rank().empty()) {
    int current = 0;
    HALOX_CUDA_CHECK(cudaGetDevice(&current));
    for (const int d : ranks.device_of_rank()) {
      if (d != current) {
        throw Error("halox::GridExchange: local ranks on GPU " + std::to_string(d) +
                    ": grid exchanges of local ranks take every rank on the current GPU (" +
                    std::to_string(current) + ")");
      }
    }
  }
#endif
  return std::make_unique<RankGridEngine>(ranks, std::move(plans), options);
}

}  // namespace halox::detail
