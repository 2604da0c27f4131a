#include "host_proxy.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "../common/cuda_check.hpp"
#include "../common/mpi_tags.hpp"
#include "../device/errors.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "../common/mpi_wait.hpp"

namespace halox::detail {

namespace {

using Clock = std::chrono::steady_clock;

// The signals' memory is written by the GPU (system-scope atomics) and by this thread.
u64 load(u64* p) {
  return std::atomic_ref<u64>(*p).load(std::memory_order_acquire);
}
void store(u64* p, u64 v) {
  std::atomic_ref<u64>(*p).store(v, std::memory_order_release);
}
constexpr u64 kProxyProbeMagic = 0x68616c6f78707879ull;  // "haloxpxy"

std::int64_t rounded(std::int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

int message_size(std::int64_t bytes, const std::string& transport) {
  if (bytes > 0x7fffffff) {
    throw Error("halox: " + transport + ": a face of 2 GiB or more cannot go through the host " +
                "proxy (one MPI message per face)");
  }
  return static_cast<int>(bytes);
}

}  // namespace

HostProxy::OwnComm::OwnComm(MPI_Comm parent) {
  HALOX_MPI_CHECK(MPI_Comm_dup(parent, &comm));  // collective; keeps the error handler
}
HostProxy::OwnComm::~OwnComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);  // nothing to report here
}

HostProxy::HostProxy(MPI_Comm comm, int rank, std::string transport, double timeout_seconds,
                     std::vector<ProxyLinkPlan> links, Memory memory, std::uint64_t first_epoch)
    : m_comm(comm),
      m_rank(rank),
      m_transport(std::move(transport)),
      m_timeout_seconds(timeout_seconds),
      m_links(std::move(links)),
      m_memory_kind(memory),
      m_first_epoch(first_epoch),
      m_launched(first_epoch - 1) {
  std::string error;
  if (!m_links.empty() && !mpi_thread_multiple()) {
    error = "halox: " + m_transport + ": rank " + std::to_string(m_rank) +
            " reaches a neighbour only through the host (a proxy thread that calls MPI), which "
            "needs MPI initialised with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)";
  }
  agree(error, "host proxy set-up");
  if (m_links.empty()) return;
  for (ProxyLinkPlan& l : m_links) {
    l.send_capacity = std::max(l.send_capacity, l.send_bytes);
    l.recv_capacity = std::max(l.recv_capacity, l.recv_bytes);
  }
  m_plan = m_links;
  m_state.resize(m_links.size());
  // Per link: 4 signals (one 256-byte line), then the send and receive staging.
  std::int64_t bytes = 0;
  std::vector<std::int64_t> at;
  for (const ProxyLinkPlan& l : m_plan) {
    at.push_back(bytes);
    bytes += 256 + rounded(l.send_capacity) + rounded(l.recv_capacity);
  }
  char* device = nullptr;
  if (memory == Memory::gpu_mapped) {
    HALOX_CUDA_CHECK(cudaHostAlloc(&m_memory, static_cast<std::size_t>(bytes),
                                   cudaHostAllocMapped | cudaHostAllocPortable));
    HALOX_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), m_memory, 0));
  } else {
    m_memory = std::aligned_alloc(256, static_cast<std::size_t>(bytes));
    if (!m_memory) throw Error("halox: " + m_transport + ": no host memory for the host proxy");
    device = static_cast<char*>(m_memory);
  }
  std::memset(m_memory, 0, static_cast<std::size_t>(bytes));
  auto ends_at = [&](char* base, std::size_t k) {
    const ProxyLinkPlan& l = m_plan[k];
    char* p = base + at[k];
    u64* signals = reinterpret_cast<u64*>(p);
    ProxyEnds e;
    e.packed = signals;
    e.ready = signals + 1;
    e.data = signals + 2;
    e.released = signals + 3;
    e.send_staging = p + 256;
    e.recv_staging = p + 256 + rounded(l.send_capacity);
    return e;
  };
  for (std::size_t k = 0; k < m_plan.size(); ++k) {
    m_ends.push_back(ends_at(device, k));
    m_host.push_back(ends_at(static_cast<char*>(m_memory), k));
    store(m_host.back().ready, first_epoch);  // the send staging is free for the first exchange
  }
  m_thread = std::thread([this] { serve(); });
}

HostProxy::~HostProxy() {
  if (m_thread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_stop = true;
    }
    m_wake.notify_all();
    m_thread.join();
  }
  if (m_memory && m_memory_kind == Memory::gpu_mapped) cudaFreeHost(m_memory);
  if (m_memory && m_memory_kind == Memory::host) std::free(m_memory);
}

bool HostProxy::fits(const std::vector<ProxyLinkPlan>& links) const {
  if (links.size() != m_plan.size()) return false;
  for (std::size_t k = 0; k < links.size(); ++k) {
    const ProxyLinkPlan &now = m_plan[k], &next = links[k];
    if (next.op != now.op || next.send_rank != now.send_rank || next.recv_rank != now.recv_rank ||
        next.send_bytes > now.send_capacity || next.recv_bytes > now.recv_capacity)
      return false;
  }
  return true;
}

void HostProxy::resize(std::vector<ProxyLinkPlan> links, std::uint64_t from_epoch) {
  if (!fits(links)) {
    throw Error("halox: " + m_transport + ": rank " + std::to_string(m_rank) +
                ": the host proxy was given links that are not its own or do not fit its "
                "staging (an internal error)");
  }
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    // An exchange counter that went back (the transport's new blocks restart theirs) would
    // never be served: a wait until the time-out. Said now instead.
    if (from_epoch <= m_launched) {
      throw Error("halox: " + m_transport + ": rank " + std::to_string(m_rank) +
                  ": the host proxy was resized from exchange " + std::to_string(from_epoch) +
                  " after exchange " + std::to_string(m_launched.load()) +
                  " was launched; a proxy serves its exchanges in order (an internal error)");
    }
    m_resizes.emplace_back(from_epoch, std::move(links));
  }
  m_wake.notify_all();
}

void HostProxy::launched(std::uint64_t epoch) {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_launched = epoch;
  }
  m_wake.notify_all();
}

void HostProxy::throw_if_failed() const {
  if (!m_failed) return;
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_timed_out) throw HaloTimeoutError(m_error);
  throw Error(m_error);
}

void HostProxy::fail(const std::string& message, bool timed_out) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_error.empty()) m_error = message, m_timed_out = timed_out;
  m_failed = true;
}

void HostProxy::serve() {
  std::uint64_t served = m_first_epoch - 1;
  try {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(m_mutex);
        m_wake.wait(lock, [&] { return m_stop || m_launched > served; });
        if (m_stop) return;
        while (!m_resizes.empty() && m_resizes.front().first <= served + 1) {
          m_links = std::move(m_resizes.front().second);
          m_resizes.pop_front();
        }
      }
      if (!serve_exchange(served + 1)) return;
      ++served;
    }
  } catch (const std::exception& e) {  // an MPI error: the transport's next call throws it
    fail(e.what(), false);
  }
}

// Every link of exchange `epoch` at once (a later stage's face leaves only after the earlier
// stages' faces have arrived, through this same loop).
bool HostProxy::serve_exchange(std::uint64_t e) {
  std::vector<LinkState>& state = m_state;
  for (std::size_t k = 0; k < m_links.size(); ++k) {
    state[k] = LinkState{};
    state[k].sent = m_links[k].send_rank < 0;
    state[k].received = m_links[k].recv_rank < 0;
  }
  bool started = false;  // this rank's kernel of the exchange is running: the clock runs
  Clock::time_point deadline{};
  int spins = 0;
  auto give_up = [&](const std::string& message, bool timed_out) {
    for (LinkState& s : state) {
      if (s.recv != MPI_REQUEST_NULL) {
        MPI_Cancel(&s.recv);
        MPI_Wait(&s.recv, MPI_STATUS_IGNORE);
      }
      if (s.send != MPI_REQUEST_NULL) MPI_Request_free(&s.send);
    }
    if (!message.empty()) fail(message, timed_out);
    return false;
  };
  for (;;) {
    bool done = true;
    for (std::size_t k = 0; k < m_links.size(); ++k) {
      const ProxyLinkPlan& l = m_links[k];
      const ProxyEnds& h = m_host[k];
      LinkState& s = state[k];
      if (!s.sent && !s.sending && load(h.packed) >= data_signal(e)) {
        started = true;
        HALOX_MPI_CHECK(MPI_Isend(h.send_staging, message_size(l.send_bytes, m_transport), MPI_BYTE,
                                  l.send_rank, tags::kHostProxy + l.op, m_comm.comm, &s.send));
        s.sending = true;
      }
      if (!s.received && !s.receiving && load(h.released) >= e) {
        started = true;
        HALOX_MPI_CHECK(MPI_Irecv(h.recv_staging, message_size(l.recv_bytes, m_transport), MPI_BYTE,
                                  l.recv_rank, tags::kHostProxy + l.op, m_comm.comm, &s.recv));
        s.receiving = true;
      }
      int flag = 0;
      if (s.sending) {
        HALOX_MPI_CHECK(MPI_Test(&s.send, &flag, MPI_STATUS_IGNORE));
        if (flag) {
          s.sending = false, s.sent = true;
          store(h.ready, e + 1);
        }
      }
      if (s.receiving) {
        MPI_Status status;
        HALOX_MPI_CHECK(MPI_Test(&s.recv, &flag, &status));
        if (flag) {
          s.receiving = false, s.received = true;
          int count = 0;
          MPI_Get_count(&status, MPI_BYTE, &count);
          if (count != l.recv_bytes) {
            return give_up("halox: " + m_transport + ": rank " + std::to_string(m_rank) +
                               " received " + std::to_string(count) + " bytes from rank " +
                               std::to_string(l.recv_rank) + " on " + l.name +
                               " through the host " + "proxy; its plan says " +
                               std::to_string(l.recv_bytes),
                           false);
          }
          store(h.data, data_signal(e));
        }
      }
      done = done && s.sent && s.received;
    }
    if (done) return true;
    if (m_stop) return give_up("", false);
    if (started && deadline == Clock::time_point{}) {
      deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(m_timeout_seconds));
    }
    if (started && Clock::now() > deadline) {
      for (std::size_t k = 0; k < m_links.size(); ++k) {
        const ProxyLinkPlan& l = m_links[k];
        if (!state[k].received || !state[k].sent) {
          const bool in = !state[k].received;
          return give_up("halox: rank " + std::to_string(m_rank) + " timed out after " +
                             seconds_text(m_timeout_seconds) + " s on " + l.name + " waiting for " +
                             (in ? "rank " + std::to_string(l.recv_rank) +
                                       " (its face to this rank "
                                       "did not arrive)"
                                 : "rank " + std::to_string(l.send_rank) +
                                       " (it did not take this rank's face)") +
                             " (" + m_transport + ", host proxy)",
                         true);
        }
      }
    }
    // Spin while messages are about to land; yield the core once they are slow.
    if (++spins > 64) std::this_thread::yield();
  }
}

void HostProxy::self_test() {
  struct Probe {
    u64 magic, sender, op;
  };
  struct Buffers {
    std::vector<Probe> out, in;
  };
  auto buffers = std::make_unique<Buffers>();
  std::vector<Probe>& out = buffers->out;
  std::vector<Probe>& in = buffers->in;
  out.resize(m_plan.size());
  in.resize(m_plan.size());
  MessageWait wait;
  std::vector<std::string> names;
  names.reserve(m_plan.size());
  for (std::size_t k = 0; k < m_plan.size(); ++k) {
    const ProxyLinkPlan& l = m_plan[k];
    names.push_back(l.name + " (the host proxy's self-test)");
    if (l.recv_rank >= 0) {
      PendingMessage m;
      m.peer = l.recv_rank;
      m.expected_bytes = sizeof(Probe);
      m.pulse = &names.back();
      HALOX_MPI_CHECK(MPI_Irecv(&in[k], sizeof(Probe), MPI_BYTE, l.recv_rank,
                                tags::kHostProxyProbe + l.op, m_comm.comm, &m.request));
      wait.add(m);
    }
    if (l.send_rank >= 0) {
      out[k] = {kProxyProbeMagic, static_cast<u64>(m_rank), static_cast<u64>(l.op)};
      PendingMessage m;
      m.peer = l.send_rank;
      m.pulse = &names.back();
      HALOX_MPI_CHECK(MPI_Isend(&out[k], sizeof(Probe), MPI_BYTE, l.send_rank,
                                tags::kHostProxyProbe + l.op, m_comm.comm, &m.request));
      wait.add(m);
    }
  }
  std::string error;
  try {
    wait_leaving_buffers(buffers, [&] {
      wait.wait({m_rank, m_transport.c_str(), m_timeout_seconds});
    });
    for (std::size_t k = 0; k < m_plan.size() && error.empty(); ++k) {
      const ProxyLinkPlan& l = m_plan[k];
      if (l.recv_rank < 0) continue;
      const Probe want{kProxyProbeMagic, static_cast<u64>(l.recv_rank), static_cast<u64>(l.op)};
      if (std::memcmp(&in[k], &want, sizeof want) != 0) {
        error = "halox: " + m_transport + ": rank " + std::to_string(m_rank) +
                "'s host-proxy link from rank " + std::to_string(l.recv_rank) + " on " + l.name +
                " delivered a wrong probe";
      }
    }
  } catch (const Error& e) {
    error = e.what();
  }
  agree(error, "host proxy self-test");
}

void HostProxy::agree(const std::string& error, const char* what) const {
  raise_if_any(m_comm.comm, error,
               bounded_wait(m_comm.comm, {m_rank, m_transport.c_str(), m_timeout_seconds}, what));
}

}  // namespace halox::detail
