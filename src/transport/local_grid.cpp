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

LocalGridEngine::LocalGridEngine(std::vector<GridPlan> plans, int ranks,
                                 const ExchangeOptions& options)
    : m_ranks(ranks),
      m_options(options),
      m_fused_kernel(options.transport != TransportKind::local_pulse) {
  if (ranks < 1 || plans.empty() || plans.size() % static_cast<std::size_t>(ranks) != 0) {
    throw Error("halox::GridExchange: " + std::to_string(plans.size()) + " plans for " +
                std::to_string(ranks) + " local ranks");
  }
  m_fields.resize(plans.size() / ranks);
  for (std::size_t k = 0; k < m_fields.size(); ++k) {
    Field& field = m_fields[k];
    field.plans.assign(std::make_move_iterator(plans.begin() + k * ranks),
                       std::make_move_iterator(plans.begin() + (k + 1) * ranks));
    const std::vector<GridPlan>& mine = field.plans;
    for (int r = 0; r < ranks; ++r) {
      if (mine[r].pulses.size() != mine[0].pulses.size()) {
        throw Error("halox::GridExchange: rank " + std::to_string(r) + " has " +
                    std::to_string(mine[r].pulses.size()) + " pulses, rank 0 " +
                    std::to_string(mine[0].pulses.size()));
      }
    }
    for (std::size_t p = 0; p < mine[0].pulses.size(); ++p) {
      for (int r = 0; r < ranks; ++r) {
        const PulseHeader& here = mine[r].pulses[p].header;
        const int to = here.send_rank;
        if (to < 0) continue;
        if (to >= ranks) {
          throw Error("halox::GridExchange: rank " + std::to_string(r) + "'s " +
                      here.name(static_cast<int>(p)) + " sends to rank " + std::to_string(to) +
                      ", beyond the " + std::to_string(ranks) + " ranks given");
        }
        const PulseHeader& theirs = mine[to].pulses[p].header;
        if (theirs.recv_rank != r || theirs.recv_size != here.send_size) {
          throw Error("halox::GridExchange: rank " + std::to_string(r) + "'s " +
                      here.name(static_cast<int>(p)) + " sends " + std::to_string(here.send_size) +
                      " bytes to rank " + std::to_string(to) + ", which expects " +
                      std::to_string(theirs.recv_size) + " bytes from rank " +
                      std::to_string(theirs.recv_rank) + ": the plans do not match");
        }
        field.faces.push_back({here.stage, static_cast<int>(p), r, to});
        if (to != r) {
          m_faces_between_ranks += 1;
          m_bytes_between_ranks += here.send_size;
        }
      }
    }
    // Stage order (pulses are listed stage by stage already; keep it explicit).
    std::stable_sort(field.faces.begin(), field.faces.end(),
                     [](const LocalFace& a, const LocalFace& b) { return a.stage < b.stage; });
  }
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

int LocalGridEngine::faces_per_exchange() const {
  int faces = 0;
  for (const Field& f : m_fields) faces += static_cast<int>(f.faces.size());
  return faces;
}

int LocalGridEngine::launches_per_exchange() const {
  if (!m_fused_kernel) return faces_per_exchange();
  const bool one_launch =
#if HALOX_HAS_CUDA
      static_cast<int>(m_fields.size()) * m_ranks <= LocalGridFused::max_ranks();
#else
      true;
#endif
  return one_launch ? 1 : static_cast<int>(m_fields.size());
}

void LocalGridEngine::exchange_async(std::span<void* const> fields, GpuStream stream,
                                     ExchangeStats& stats) {
  if (fields.size() != m_fields.size() * static_cast<std::size_t>(m_ranks)) {
    throw Error("halox::GridExchange: " + std::to_string(fields.size()) + " arrays given for " +
                std::to_string(m_fields.size()) + " field(s) of " + std::to_string(m_ranks) +
                " local ranks");
  }
  stats.exchanges += 1;
  stats.messages += m_faces_between_ranks;
  stats.bytes_sent += m_bytes_between_ranks;
  const bool device = on_device(fields[0]);
#if !HALOX_HAS_CUDA
  (void)stream;
#endif
#if HALOX_HAS_CUDA
  // local-fused: every field in one launch, as one grid of ranks x fields, when the kernel
  // takes that many (else one launch per field).
  if (device && m_fused_kernel && m_fields.size() > 1 &&
      static_cast<int>(fields.size()) <= LocalGridFused::max_ranks()) {
    if (!m_all_fields) {
      std::vector<GridPlan> plans;
      std::vector<LocalFace> faces;
      for (std::size_t k = 0; k < m_fields.size(); ++k) {
        const int first = static_cast<int>(k) * m_ranks;
        plans.insert(plans.end(), m_fields[k].plans.begin(), m_fields[k].plans.end());
        for (LocalFace f : m_fields[k].faces) {
          f.from += first;
          f.to += first;
          faces.push_back(f);
        }
      }
      std::stable_sort(faces.begin(), faces.end(),
                       [](const LocalFace& a, const LocalFace& b) { return a.stage < b.stage; });
      m_all_fields = std::make_unique<LocalGridFused>(plans, faces, m_options, m_ranks);
    }
    m_all_fields->exchange(fields, stream);
    return;
  }
#endif
  for (std::size_t k = 0; k < m_fields.size(); ++k) {
    Field& field = m_fields[k];
    const std::span<void* const> arrays = fields.subspan(k * m_ranks, m_ranks);
#if HALOX_HAS_CUDA
    if (device && m_fused_kernel) {
      if (!field.fused) {
        field.fused = std::make_unique<LocalGridFused>(field.plans, field.faces, m_options);
      }
      field.fused->exchange(arrays, stream);
      continue;
    }
#endif
    // Within a stage, faces read interior layers and write halo layers: no face reads what
    // another of its stage writes, so they need no order among themselves.
    for (const LocalFace& f : field.faces) {
      const GridPulse& send = field.plans[f.from].pulses[f.pulse];
      const GridPulse& recv = field.plans[f.to].pulses[f.pulse];
      if (device) {
#if HALOX_HAS_CUDA
        copy_async(arrays[f.from], send.send_type, arrays[f.to], recv.recv_type, stream);
#endif
      } else {
        m_scratch.resize(static_cast<std::size_t>(send.header.send_size));
        pack(arrays[f.from], 1, send.send_type, m_scratch.data());
        unpack(m_scratch.data(), arrays[f.to], 1, recv.recv_type);
      }
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
  return std::make_unique<LocalGridEngine>(std::move(plans), ranks.count(),
                                           local_exchange_options(options, "GridExchange"));
}

}  // namespace halox::detail
