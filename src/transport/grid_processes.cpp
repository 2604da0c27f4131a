// The other processes of the grid kernel's transport (grid_fused.hpp) for Ranks::mpi and
// Ranks::blocks: their blocks mapped through the peer mapping (runtime/peer_mapping.hpp), the
// neighbours it cannot map through the host proxy, and the set-up's agreements over MPI,
// each bounded by the exchange's time-out.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../common/cuda_check.hpp"
#include "../common/mpi_wait.hpp"
#include "../runtime/nvshmem_runtime_stub.hpp"
#include "grid_fused.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "host_proxy.hpp"

namespace halox::detail {

namespace {

class PeerProcesses final : public GridProcesses {
 public:
  PeerProcesses(const Ranks& ranks, Mapping mapping, ProxyPolicy proxy, std::string name,
                double timeout_seconds)
      : m_comm(ranks.processes().comm()),
        m_rank(ranks.processes().rank()),
        m_first_rank(ranks.rank(0)),
        m_mapping(mapping),
        m_proxy_policy(proxy),
        m_name(std::move(name)),
        m_timeout_seconds(timeout_seconds),
        m_peers(m_comm, m_rank, mapping) {}

  void agree_on_largest(std::span<long long> values, const char* what) override {
    if (values.empty()) return;
    bounded_allreduce(m_comm, MPI_IN_PLACE, values.data(), static_cast<int>(values.size()),
                      MPI_LONG_LONG, MPI_MAX, context(), what);
  }
  void barrier(const char* what) override { bounded_barrier(m_comm, context(), what); }
  void check_collectively(const std::function<void()>& check, const char* what) override {
    std::string error;
    try {
      check();
    } catch (const Error& e) {
      error = e.what();
    }
    raise_if_any(m_comm, error, bounded_wait(m_comm, context(), what));
  }
  double gpu_share() override { return detail::gpu_share(m_comm, context()); }

  void reserve(long long bytes) override {
    if (symmetric(m_mapping)) ensure_nvshmem(m_comm, 2 * bytes);  // collective, first use
  }
  bool puts(int process) const override {
    return symmetric(m_mapping) &&
           (m_mapping == Mapping::nvshmem_puts || !symmetric_reachable(process));
  }
  char* allocate(long long bytes) override {
    if (symmetric(m_mapping)) {
      const long long most =
          bounded_max(m_comm, bytes, context(), "the agreement on the block size");
      return static_cast<char*>(symmetric_alloc(most));
    }
    char* blocks = nullptr;
    HALOX_CUDA_CHECK(cudaMalloc(&blocks, static_cast<std::size_t>(bytes)));
    return blocks;
  }
  void release(char* blocks) override {
    m_proxy.reset();
    m_peers.unmap();
    if (symmetric(m_mapping))
      symmetric_free(blocks);
    else
      cudaFree(blocks);
  }

  void publish(char* blocks, std::span<const long long> offsets,
               const std::set<int>& neighbours) override {
    if (offsets.size() > kMaxBlockAreas) {
      throw Error("halox: internal: " + m_name + ": " + std::to_string(offsets.size()) +
                  " staging areas per block, more than " + std::to_string(kMaxBlockAreas));
    }
    BlockOffsets areas{};
    std::copy(offsets.begin(), offsets.end(), areas.begin());
    bounded_barrier(m_comm, context(), "the set-up (the blocks zeroed)");
    m_peers.publish(blocks, areas, neighbours, false, context(), m_proxy_policy);
  }
  char* base(int process) const override { return m_peers.base(process); }
  int put_pe(int process) const override { return m_peers.put_pe(process); }
  bool proxied(int process) const override { return m_peers.proxied(process); }
  bool same_gpu() const override { return m_peers.same_gpu(); }

  void start_proxy(std::vector<ProxyLinkPlan> links) override {
    m_proxy.reset();
    m_proxy =
        std::make_unique<HostProxy>(m_comm, m_rank, m_name, m_timeout_seconds, std::move(links));
  }
  const ProxyEnds& proxy_ends(std::size_t link) const override { return m_proxy->ends(link); }
  bool proxy_any() const override { return m_proxy && m_proxy->any(); }
  bool may_proxy() const override { return m_proxy_policy == ProxyPolicy::every_peer; }
  void launched(unsigned long long epoch) override {
    if (proxy_any()) m_proxy->launched(epoch);
  }
  void check() const override {
    if (m_proxy) m_proxy->throw_if_failed();
  }
  void proxy_self_test() override { m_proxy->self_test(); }

 private:
  // The set-up's collectives end in an error naming this process's first rank after the
  // time-out, as its waits for data do, instead of holding a rank whose neighbour never
  // arrives.
  WaitContext context() const { return {m_first_rank, m_name.c_str(), m_timeout_seconds}; }

  MPI_Comm m_comm;  // the processes'
  int m_rank;       // this process's rank in it
  int m_first_rank;
  Mapping m_mapping;
  ProxyPolicy m_proxy_policy;
  std::string m_name;
  double m_timeout_seconds;
  PeerBlocks m_peers;
  std::unique_ptr<HostProxy> m_proxy;  // the links to proxied neighbours (none, often)
};

}  // namespace

std::unique_ptr<GridProcesses> make_grid_processes(const Ranks& ranks, Mapping mapping,
                                                   ProxyPolicy proxy, const std::string& name,
                                                   double timeout_seconds) {
  return std::make_unique<PeerProcesses>(ranks, mapping, proxy, name, timeout_seconds);
}

}  // namespace halox::detail
