// Grid halos between ranks of one process: a face goes straight from the sender's array to
// the receiver's (the receiver's pulse i receives what the sender's pulse i sends: every
// rank's plan lists the same pulses in the same order).
#include "halox/local_grid.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <string>

#include "halox/config.hpp"
#include "halox/error.hpp"
#include "halox/pack.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>

#include "../common/cuda_check.hpp"
#include "halox/pack_gpu.hpp"
#endif
#include "local_grid_fused.hpp"

namespace halox {

std::vector<GridPlan> make_local_grid_plans(
    const Topology& shape, const std::vector<std::array<std::int64_t, 3>>& interior, int halo,
    const Datatype& element, const std::vector<std::array<std::int64_t, 3>>& allocated) {
  const int ranks = shape.size();
  if (static_cast<int>(interior.size()) != ranks ||
      (!allocated.empty() && static_cast<int>(allocated.size()) != ranks)) {
    throw Error("halox::make_local_grid_plans: " + std::to_string(interior.size()) +
                " interiors (and " + std::to_string(allocated.size()) + " allocations) for " +
                std::to_string(ranks) + " ranks");
  }
  std::vector<GridPlan> plans;
  for (int r = 0; r < ranks; ++r) {
    const Topology rank(shape.dims(), shape.periodic(), r);
    plans.push_back(
        make_grid_plan(rank, interior[r], halo, element,
                       allocated.empty() ? std::array<std::int64_t, 3>{} : allocated[r]));
  }
  return plans;
}

struct LocalGridExchange::Impl {
  std::vector<GridPlan> plans;
  std::vector<detail::LocalFace> faces;  // in stage order
  std::vector<char> scratch;
  std::map<const void*, bool> on_device;  // per buffer, asked once
  LocalGridOptions options;
#if HALOX_HAS_CUDA
  std::unique_ptr<detail::LocalGridFused> fused;  // made at the first exchange of GPU arrays
#endif
};

LocalGridExchange::LocalGridExchange(std::vector<GridPlan> plans, LocalGridOptions options)
    : m_impl(std::make_unique<Impl>()) {
  m_impl->options = options;
  const int ranks = static_cast<int>(plans.size());
  if (ranks == 0) throw Error("halox::LocalGridExchange: no plans");
  for (int r = 0; r < ranks; ++r) {
    if (plans[r].pulses.size() != plans[0].pulses.size()) {
      throw Error("halox::LocalGridExchange: rank " + std::to_string(r) + " has " +
                  std::to_string(plans[r].pulses.size()) + " pulses, rank 0 " +
                  std::to_string(plans[0].pulses.size()));
    }
  }
  for (std::size_t p = 0; p < plans[0].pulses.size(); ++p) {
    for (int r = 0; r < ranks; ++r) {
      const PulseHeader& mine = plans[r].pulses[p].header;
      const int to = mine.send_rank;
      if (to < 0) continue;
      if (to >= ranks) {
        throw Error("halox::LocalGridExchange: rank " + std::to_string(r) + "'s " +
                    mine.name(static_cast<int>(p)) + " sends to rank " + std::to_string(to) +
                    ", beyond the " + std::to_string(ranks) + " ranks given");
      }
      const PulseHeader& theirs = plans[to].pulses[p].header;
      if (theirs.recv_rank != r || theirs.recv_size != mine.send_size) {
        throw Error("halox::LocalGridExchange: rank " + std::to_string(r) + "'s " +
                    mine.name(static_cast<int>(p)) + " sends " + std::to_string(mine.send_size) +
                    " bytes to rank " + std::to_string(to) + ", which expects " +
                    std::to_string(theirs.recv_size) + " bytes from rank " +
                    std::to_string(theirs.recv_rank) + ": the plans do not match");
      }
      m_impl->faces.push_back({mine.stage, static_cast<int>(p), r, to});
    }
  }
  // Stage order (pulses are listed stage by stage already; keep it explicit).
  std::stable_sort(
      m_impl->faces.begin(), m_impl->faces.end(),
      [](const detail::LocalFace& a, const detail::LocalFace& b) { return a.stage < b.stage; });
  m_impl->plans = std::move(plans);
}

LocalGridExchange::~LocalGridExchange() = default;

void LocalGridExchange::exchange(const std::vector<void*>& fields) {
  exchange_async(fields, nullptr);
#if HALOX_HAS_CUDA
  const auto known = m_impl->on_device.find(fields[0]);
  if (known != m_impl->on_device.end() && known->second) {
    detail::finish_default_stream();
  }
#endif
}

void LocalGridExchange::exchange_async(const std::vector<void*>& fields, CUstream_st* stream) {
  Impl& m = *m_impl;
  if (fields.size() != m.plans.size()) {
    throw Error("halox::LocalGridExchange: " + std::to_string(fields.size()) +
                " fields given for " + std::to_string(m.plans.size()) + " ranks");
  }
  bool device = false;
#if !HALOX_HAS_CUDA
  (void)stream;
#else
  auto known = m.on_device.find(fields[0]);
  if (known == m.on_device.end()) {
    known = m.on_device.emplace(fields[0], detail::is_device_memory(fields[0])).first;
  }
  device = known->second;
  if (device && m.options.fused) {
    if (!m.fused) {
      m.fused = std::make_unique<detail::LocalGridFused>(m.plans, m.faces, m.options);
    }
    m.fused->exchange(fields, stream);
    return;
  }
#endif
  // Within a stage, faces read interior layers and write halo layers: no face reads what
  // another of its stage writes, so they need no order among themselves.
  for (const detail::LocalFace& f : m.faces) {
    const GridPulse& send = m.plans[f.from].pulses[f.pulse];
    const GridPulse& recv = m.plans[f.to].pulses[f.pulse];
    if (device) {
#if HALOX_HAS_CUDA
      copy_async(fields[f.from], send.send_type, fields[f.to], recv.recv_type, stream);
#endif
    } else {
      m.scratch.resize(static_cast<std::size_t>(send.header.send_size));
      pack(fields[f.from], 1, send.send_type, m.scratch.data());
      unpack(m.scratch.data(), fields[f.to], 1, recv.recv_type);
    }
  }
}

const std::vector<GridPlan>& LocalGridExchange::plans() const {
  return m_impl->plans;
}

int LocalGridExchange::faces_per_exchange() const {
  return static_cast<int>(m_impl->faces.size());
}

int LocalGridExchange::launches_per_exchange() const {
  return m_impl->options.fused ? 1 : faces_per_exchange();
}

}  // namespace halox
