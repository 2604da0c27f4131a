// The kernel's side of the host proxy's protocol, played by a host thread on plain host
// memory (HostProxy::Memory::host): its signal loads and stores, its bounded waits, and the
// links of two ranks on a periodic axis. Used by tests/mpi/test_host_proxy.cpp (and by the
// round-trip diagnostic of session 30, in git history before the diag/ pruning).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "../../src/transport/host_proxy.hpp"

namespace halox::testing::proxy {

using u64 = unsigned long long;

inline u64 load(u64* p) {
  return std::atomic_ref<u64>(*p).load(std::memory_order_acquire);
}
inline void store(u64* p, u64 v) {
  std::atomic_ref<u64>(*p).store(v, std::memory_order_release);
}
// The kernel's waits, bounded: false when `seconds` pass first. They yield the core, which
// the GPU's would not take.
inline bool wait_until(u64* p, u64 target, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (load(p) < target) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

// Two ranks on a periodic axis: each op sends to the other rank and receives from it.
inline std::vector<detail::ProxyLinkPlan> two_rank_links(const std::vector<std::int64_t>& bytes,
                                                         int peer) {
  std::vector<detail::ProxyLinkPlan> links;
  for (std::size_t op = 0; op < bytes.size(); ++op) {
    detail::ProxyLinkPlan& l = links.emplace_back();
    l.op = static_cast<int>(op);
    l.send_rank = l.recv_rank = peer;
    l.send_bytes = l.recv_bytes = bytes[op];
    l.name = "pulse " + std::to_string(op);
  }
  return links;
}

}  // namespace halox::testing::proxy
