// Grid halos between ranks of one process: a face goes straight from the sender's array to
// the receiver's (the receiver's pulse i receives what the sender's pulse i sends: every
// rank's plan lists the same pulses in the same order).
#include "local_grid.hpp"

#include <algorithm>
#include <string>

#include "halox/config.hpp"
#include "halox/error.hpp"
#include "halox/pack.hpp"
#if HALOX_HAS_CUDA
#include "../common/cuda_check.hpp"
#include "halox/pack_gpu.hpp"
#endif
#include "local_grid_fused.hpp"

namespace halox::detail {

LocalGridEngine::LocalGridEngine(std::vector<GridPlan> plans, const ExchangeOptions& options)
    : m_options(options), m_fused_kernel(options.transport != TransportKind::local_pulse) {
  const int ranks = static_cast<int>(plans.size());
  if (ranks == 0) throw Error("halox::GridExchange: no plans");
  for (int r = 0; r < ranks; ++r) {
    if (plans[r].pulses.size() != plans[0].pulses.size()) {
      throw Error("halox::GridExchange: rank " + std::to_string(r) + " has " +
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
        throw Error("halox::GridExchange: rank " + std::to_string(r) + "'s " +
                    mine.name(static_cast<int>(p)) + " sends to rank " + std::to_string(to) +
                    ", beyond the " + std::to_string(ranks) + " ranks given");
      }
      const PulseHeader& theirs = plans[to].pulses[p].header;
      if (theirs.recv_rank != r || theirs.recv_size != mine.send_size) {
        throw Error("halox::GridExchange: rank " + std::to_string(r) + "'s " +
                    mine.name(static_cast<int>(p)) + " sends " + std::to_string(mine.send_size) +
                    " bytes to rank " + std::to_string(to) + ", which expects " +
                    std::to_string(theirs.recv_size) + " bytes from rank " +
                    std::to_string(theirs.recv_rank) + ": the plans do not match");
      }
      m_faces.push_back({mine.stage, static_cast<int>(p), r, to});
      if (to != r) {
        m_faces_between_ranks += 1;
        m_bytes_between_ranks += mine.send_size;
      }
    }
  }
  // Stage order (pulses are listed stage by stage already; keep it explicit).
  std::stable_sort(m_faces.begin(), m_faces.end(),
                   [](const LocalFace& a, const LocalFace& b) { return a.stage < b.stage; });
  m_plans = std::move(plans);
}

LocalGridEngine::~LocalGridEngine() = default;

bool LocalGridEngine::on_device(const void* field) {
#if HALOX_HAS_CUDA
  auto known = m_on_device.find(field);
  if (known == m_on_device.end()) {
    known = m_on_device.emplace(field, is_device_memory(field)).first;
  }
  return known->second;
#else
  (void)field;
  return false;
#endif
}

std::string LocalGridEngine::transport_name(const void* field) {
  if (!on_device(field)) return "host";
  return to_string(m_options.transport);
}

void LocalGridEngine::exchange_async(std::span<void* const> fields, GpuStream stream,
                                     ExchangeStats& stats) {
  if (fields.size() != m_plans.size()) {
    throw Error("halox::GridExchange: " + std::to_string(fields.size()) + " fields given for " +
                std::to_string(m_plans.size()) + " local ranks");
  }
  stats.exchanges += 1;
  stats.messages += m_faces_between_ranks;
  stats.bytes_sent += m_bytes_between_ranks;
  const bool device = on_device(fields[0]);
#if !HALOX_HAS_CUDA
  (void)stream;
#else
  if (device && m_fused_kernel) {
    if (!m_fused) m_fused = std::make_unique<LocalGridFused>(m_plans, m_faces, m_options);
    m_fused->exchange(fields, stream);
    return;
  }
#endif
  // Within a stage, faces read interior layers and write halo layers: no face reads what
  // another of its stage writes, so they need no order among themselves.
  for (const LocalFace& f : m_faces) {
    const GridPulse& send = m_plans[f.from].pulses[f.pulse];
    const GridPulse& recv = m_plans[f.to].pulses[f.pulse];
    if (device) {
#if HALOX_HAS_CUDA
      copy_async(fields[f.from], send.send_type, fields[f.to], recv.recv_type, stream);
#endif
    } else {
      m_scratch.resize(static_cast<std::size_t>(send.header.send_size));
      pack(fields[f.from], 1, send.send_type, m_scratch.data());
      unpack(m_scratch.data(), fields[f.to], 1, recv.recv_type);
    }
  }
}

// Local ranks move device arrays by local-pulse or local-fused; "auto" and the default "host"
// mean local-fused (the ranks share this process: no other transport applies).
ExchangeOptions local_exchange_options(ExchangeOptions options, const char* exchange) {
  switch (options.transport) {
    case TransportKind::local_pulse:
    case TransportKind::local_fused: break;
    case TransportKind::host:
    case TransportKind::automatic: options.transport = TransportKind::local_fused; break;
    default:
      throw Error(std::string("halox::") + exchange + ": the transport " +
                  to_string(options.transport) +
                  " needs one rank per process (Ranks::mpi); ranks in this process "
                  "(Ranks::local) take local-pulse or local-fused");
  }
  return options;
}

std::unique_ptr<GridEngine> make_local_grid_engine(const Ranks& ranks, std::vector<GridPlan> plans,
                                                   const ExchangeOptions& options) {
  if (static_cast<int>(plans.size()) != ranks.count()) {
    throw Error("halox::GridExchange: " + std::to_string(plans.size()) + " plans for " +
                std::to_string(ranks.count()) + " local ranks");
  }
#if HALOX_HAS_CUDA
  if (!ranks.device_of_rank().empty()) {
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
  return std::make_unique<LocalGridEngine>(std::move(plans),
                                           local_exchange_options(options, "GridExchange"));
}

}  // namespace halox::detail
