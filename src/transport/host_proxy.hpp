// The host proxy of the fused grid kernel: the links whose peer the kernel cannot store into
// (another node without NVSHMEM, or every link under HALOX_HOST_PROXY=1) go through the host,
// as NCCL's and NVSHMEM's proxies carry what the GPU cannot send itself. The kernel sees such
// a link as any other device channel (channel.cuh), with every end in this process's pinned,
// mapped host memory:
//   sender    waits on `ready`, packs into `send staging`, sets `packed` to data_signal(e)
//   proxy     sees `packed`, MPI_Isend of the staging; once sent, `ready` = e + 1
//   receiver  sets `released` to e (its staging is free for exchange e)
//   proxy     sees `released`, MPI_Irecv into the receive staging; once in, `data` =
//             data_signal(e), which the receiver's kernel waits for
// So the kernel's code is the one it runs for direct stores; it only needs system-scope
// signals. The proxy thread serves the exchanges in order. It waits without a time-out until
// this rank's kernel of an exchange starts (queued steps may sit behind long updates), then
// bounds the exchange's messages by the time-out and records the first that does not finish
// (rank, peer, pulse), which the transport's next call throws. MPI is called from the proxy
// thread: the process must have MPI_THREAD_MULTIPLE.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../device/proxy_ends.hpp"

namespace halox::detail {

class HostProxy {
 public:
  /// Where the links' ends live: pinned host memory mapped into the GPU's address space (the
  /// kernel's), or plain host memory (tests of the proxy's protocol, with host threads in
  /// the kernel's place, on machines without a GPU).
  enum class Memory { gpu_mapped, host };
  /// Collective over `comm` (every rank, links or not; tags tags::kHostProxy + op on a
  /// duplicate of it).
  /// Throws on every rank when a rank with links lacks MPI_THREAD_MULTIPLE. No thread
  /// without links.
  /// `first_epoch`: the first exchange it serves (a transport whose counters run on across
  /// plans, the particles', rebuilds its proxy at the next one).
  HostProxy(MPI_Comm comm, int rank, std::string transport, double timeout_seconds,
            std::vector<ProxyLinkPlan> links, Memory memory = Memory::gpu_mapped,
            std::uint64_t first_epoch = 1);
  ~HostProxy();
  HostProxy(const HostProxy&) = delete;
  HostProxy& operator=(const HostProxy&) = delete;

  /// Some link goes through this proxy.
  bool any() const { return !m_plan.empty(); }
  /// The ends of link k (in the order given), as the kernel addresses them.
  const ProxyEnds& ends(std::size_t k) const { return m_ends[k]; }
  /// The same ends, as this process's threads address them.
  const ProxyEnds& host_ends(std::size_t k) const { return m_host[k]; }
  /// Collective (every rank, links or not): a message over every proxied link, checked
  /// (magic, sender, op); every rank learns whether any link is broken.
  void self_test();
  /// Whether `links` are this proxy's links (ops and ranks, in order) with faces that fit
  /// their staging. Local; the caller agrees on it collectively before resize.
  bool fits(const std::vector<ProxyLinkPlan>& links) const;
  /// Serves `links` (fits() true) from exchange `from_epoch` (after every exchange launched so
  /// far; halox::Error otherwise) on, the earlier ones as before:
  /// a new plan with the same neighbours keeps its proxy (a duplicate communicator, pinned
  /// memory, a thread and a self-test each time cost the particles' re-plan 0.5-2.4 ms).
  void resize(std::vector<ProxyLinkPlan> links, std::uint64_t from_epoch);
  /// The kernel of exchange `epoch` (1, 2, ...) is queued: serve it.
  void launched(std::uint64_t epoch);
  /// Throws the first failure the proxy met (it then serves nothing more): HaloTimeoutError
  /// for a message that did not finish in time, halox::Error for others.
  void throw_if_failed() const;

 private:
  void serve();
  bool serve_exchange(std::uint64_t epoch);  // false: failed or stopping
  void fail(const std::string& message, bool timed_out);
  /// Every rank learns, within the time-out, whether some rank's `error` is not empty
  /// (`what`: the step, for the errors); throws on every rank if so.
  void agree(const std::string& error, const char* what) const;

  // One link's messages of the exchange being served (the proxy thread's; kept, not made
  // per exchange).
  struct LinkState {
    MPI_Request send = MPI_REQUEST_NULL, recv = MPI_REQUEST_NULL;
    bool sending = false, sent = false, receiving = false, received = false;
  };
  std::vector<LinkState> m_state;

  // A duplicate of the exchange's communicator, its own: the proxy threads of two exchanges
  // over one communicator post their messages concurrently with the same tags, and would
  // match each other's where their kernels run on different streams.
  struct OwnComm {
    explicit OwnComm(MPI_Comm parent);
    ~OwnComm();
    OwnComm(const OwnComm&) = delete;
    OwnComm& operator=(const OwnComm&) = delete;
    MPI_Comm comm = MPI_COMM_NULL;
  };
  OwnComm m_comm;
  int m_rank;
  std::string m_transport;
  double m_timeout_seconds;
  std::vector<ProxyLinkPlan> m_plan;   // as built: ops, ranks, capacities (never changes)
  std::vector<ProxyLinkPlan> m_links;  // the sizes of the exchange being served (the thread's)
  // Sizes from a later exchange on (resize), taken by the thread when it gets there.
  std::deque<std::pair<std::uint64_t, std::vector<ProxyLinkPlan>>> m_resizes;
  std::vector<ProxyEnds> m_ends;  // device pointers
  std::vector<ProxyEnds> m_host;  // the same memory, host pointers
  void* m_memory = nullptr;       // one allocation for every link
  Memory m_memory_kind;
  std::uint64_t m_first_epoch;
  std::atomic<std::uint64_t> m_launched{0};
  std::atomic<bool> m_stop{false};
  std::atomic<bool> m_failed{false};
  mutable std::mutex m_mutex;  // m_error, m_resizes, and the sleep of the thread
  std::condition_variable m_wake;
  std::string m_error;
  bool m_timed_out = false;
  std::thread m_thread;
};

}  // namespace halox::detail
