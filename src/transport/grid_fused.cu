// GPU-initiated grid halo (ipc-* and nvshmem-* transports for GridExchange): one fused kernel
// for every face of every stage (grid y = an op that sends or receives) packs each face
// straight into the receiving rank's staging area (a direct store through CUDA IPC or
// nvshmem_ptr; for a peer nvshmem_ptr cannot map, into a send staging area that the last
// block puts with its signal: grid_fused_puts.cu; for a peer neither reaches, into host
// memory that the host proxy sends by MPI: host_proxy.hpp), signals it, waits for its own
// faces and unpacks them. A face of a later stage carries edges and corners that the
// earlier stages deliver, so its pack waits on the device until this rank has unpacked the
// earlier stages' faces (a count per op); faces of the first stage go at once. The pack and
// unpack are the GPU pack engine's (pack_device.cuh), driven by the plan's datatypes; the
// signals and time-outs are those of the particle engine.
//
// Protocol per op (a plan pulse: one face out, one face in), e = the exchange's counter:
//   1. tell the rank I receive from that my staging is free   (release e into its ready slot)
//   2. later stages: wait until the earlier stages' faces are unpacked here (acquire, local)
//   3. wait until the rank I send to has freed its staging     (acquire >= e on my ready slot)
//   4. pack my face into its staging; the last block to finish sets its data signal
//   5. wait for my own face (the data signal of exchange e), unpack it into the
//      field, and count the block in (release).
// Steps 1, 3, 4 and 5 are the device channel's (device/channel.cuh).
// Every block of every op spins at some point, so the grid is sized for all of them to be
// resident at once.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../common/cuda_check.hpp"
#include "../runtime/nvshmem_runtime_stub.hpp"
#include "transport.hpp"
#include "../common/mpi_wait.hpp"
#include "grid_fused.hpp"
#include "host_proxy.hpp"
#include "peer_halo.hpp"
#include "../device/grid_fused_kernels.cuh"
#include "../device/signals.cuh"
#include "halox/config.hpp"
#include "halox/error.hpp"
#include "halox/exchange.hpp"
#include "halox/mpi.hpp"
#include "../runtime/env.hpp"

namespace halox::detail {

#if !HALOX_HAS_NVSHMEM
// No NVSHMEM, no peer reached by puts (PeerBlocks never makes one): never called.
namespace fused_grid {
void launch_grid_with_puts(dim3, const GridArgs&, const GridFields&, cudaStream_t, bool) {
  no_nvshmem();
}
int grid_resident_blocks_with_puts(bool) {
  no_nvshmem();
}
}  // namespace fused_grid
#endif

using namespace fused_grid;

namespace {

class GridFusedTransport final : public Transport {
 public:
  GridFusedTransport(MPI_Comm comm, int rank, Mapping mapping, ProxyPolicy proxy, std::string name,
                     const std::string& trace_name, double timeout_seconds, bool self_test)
      : m_comm(comm),
        m_rank(rank),
        m_mapping(mapping),
        m_proxy_policy(proxy),
        m_name(std::move(name)),
        m_trace_object(trace_object(trace_name)),
        m_peers(comm, rank, mapping),
        m_timeout_seconds(timeout_seconds),
        m_self_test(self_test) {}
  ~GridFusedTransport() override {
    cudaDeviceSynchronize();
    m_proxy.reset();
    m_peers.unmap();
    if (m_block) {
      if (symmetric(m_mapping))
        symmetric_free(m_block);
      else
        cudaFree(m_block);
    }
    cudaFree(m_counters);
    for (auto& [key, views] : m_views) cudaFree(views);
  }
  std::string name() const override { return m_name; }
  // The set-up's collectives end in an error naming this rank after the time-out, as its
  // waits for data do, instead of holding a rank whose neighbour never arrives.
  WaitContext wait_context() const { return {m_rank, m_name.c_str(), m_timeout_seconds}; }

  // Several fields per launch (up to kMaxGridFields; more: one instance per field).
  Capabilities capabilities() const override { return {true, true, false, kMaxGridFields}; }
  void check() const override {
    if (m_ready) check(ops(Direction::forward));
  }

  void run_async(Direction direction, std::span<void* const> fields,
                 std::span<const GpuStream> streams, ExchangeStats& stats) override {
    const GpuStream stream = streams.front();  // one GPU
    const std::vector<Op>& ops = this->ops(direction);
    if (fields.empty() || fields.size() > static_cast<std::size_t>(kMaxGridFields)) {
      throw Error("halox: internal: " + m_name + " moves 1 to " + std::to_string(kMaxGridFields) +
                  " fields per run, not " + std::to_string(fields.size()));
    }
    if (ops.empty()) {  // no neighbour on any axis: nothing to move (and no grid of 0 rows)
      stats.exchanges += 1;
      return;
    }
    check(ops);
    if (!m_ready) set_up(ops);
    if (m_active.empty()) {  // neighbours on no side: nothing to move
      stats.exchanges += 1;
      return;
    }
    const u64 epoch = ++m_epoch;
    GridArgs a{views_for(fields),
               m_rank,
               epoch,
               static_cast<u64>(m_timeout_seconds * 1e9),
               m_errors.sink(),
               m_same_gpu ? 0 : 1,
               {}};
    for (const unsigned char op : m_active) a.active |= 1u << op;
    const dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>(m_active.size()));
    a.trace = device_trace(static_cast<unsigned long long>(grid.x) * grid.y, m_trace_object);
    // The traced kernel only where the grid was sized for it (tracing on at set-up).
    const bool traced = m_sized_for_trace && a.trace.records != nullptr;
    GridFields f{};
    for (std::size_t k = 0; k < fields.size(); ++k) f.base[k] = static_cast<char*>(fields[k]);
    if (m_puts)
      launch_grid_with_puts(grid, a, f, stream, traced);
    else
      launch_dependent(
          traced ? grid_exchange_kernel<false, true> : grid_exchange_kernel<false, false>, grid,
          256, stream, a, f);
    if (m_proxy->any()) m_proxy->launched(epoch);
    for (const Op& op : ops) {
      if (op.send_rank >= 0 && op.send_rank != m_rank) {
        stats.messages += 1;
        stats.bytes_sent += op.send_bytes;
      }
    }
    stats.exchanges += 1;
  }

 private:
  // A time-out or a wrong plan becomes an error naming the ranks and the pulse.
  void check(const std::vector<Op>& ops) const {
    ErrorWording w;
    w.engine = m_name;
    w.timeout_seconds = m_timeout_seconds;
    w.pulse = [&ops](int, int pulse) {
      return pulse >= 0 && pulse < static_cast<int>(ops.size()) ? ops[pulse].name
                                                                : "pulse " + std::to_string(pulse);
    };
    w.waited_for = [](int kind) -> std::string {
      switch (kind) {
        case wait_ready: return "its staging to become free";
        case wait_data: return "the face it sends";
        case wait_probe: return "the link";
        default: return "the face it sends, which this face forwards";
      }
    };
    w.is_probe = [](int kind) { return kind == wait_probe; };
    w.progress = [](const ErrorRecord& e) {
      return e.kind == wait_data
                 ? data_signal_progress(e)
                 : "signal " + std::to_string(e.seen) + ", expected " + std::to_string(e.expected);
    };
    check_device_error(m_errors.record(), w);
    if (m_proxy) m_proxy->throw_if_failed();
  }

  void set_up(const std::vector<Op>& ops) {
    if (static_cast<int>(ops.size()) > kMaxGridOps) {
      throw Error("halox: " + m_name + ": at most " + std::to_string(kMaxGridOps) +
                  " pulses per grid plan");
    }
    // Stages: consecutive ops of one stage each (the plan lists them in stage order).
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].send_rank >= 0 && !ops[i].send_type.committed()) {
        throw Error("halox: " + m_name + " moves grid halos described by datatypes only");
      }
      if (m_stages.empty() || ops[i].stage != ops[i - 1].stage) {
        if (!m_stages.empty() && ops[i].stage < ops[i - 1].stage) {
          throw Error("halox: " + m_name + ": the plan's pulses are not in stage order");
        }
        m_stages.push_back({static_cast<int>(i), 0});
      }
      ++m_stages.back().second;
    }
    // My block: slots, then one staging area per op (what that op receives); with NVSHMEM,
    // one more per op whose receiver is reached by puts (another node, or nvshmem_puts), for
    // what it packs and puts: at most twice the face bytes.
    BlockOffsets offsets{};
    std::vector<long long> send_offsets(ops.size(), 0);
    long long bytes = kGridSlotsBytes;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      offsets[i] = bytes;
      bytes += (ops[i].recv_bytes + 255) / 256 * 256;
    }
    if (symmetric(m_mapping)) ensure_nvshmem(m_comm, 2 * bytes);  // collective, first use
    auto by_puts = [&](int rank) {
      return symmetric(m_mapping) && rank >= 0 && rank != m_rank &&
             (m_mapping == Mapping::nvshmem_puts || !symmetric_reachable(rank));
    };
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (!by_puts(ops[i].send_rank)) continue;
      send_offsets[i] = bytes;
      bytes += (ops[i].send_bytes + 255) / 256 * 256;
    }
    if (symmetric(m_mapping)) {
      const long long most =
          bounded_max(m_comm, bytes, wait_context(), "the agreement on the block size");
      m_block = static_cast<char*>(symmetric_alloc(most));
    } else {
      HALOX_CUDA_CHECK(cudaMalloc(&m_block, static_cast<std::size_t>(bytes)));
    }
    HALOX_CUDA_CHECK(cudaMemset(m_block, 0, kGridSlotsBytes));
    // Per op: blocks packed, blocks unpacked, and the host proxy's ready and data signals
    // relayed into device memory.
    HALOX_CUDA_CHECK(cudaMalloc(&m_counters, 4 * kMaxGridOps * sizeof(u64)));
    HALOX_CUDA_CHECK(cudaMemset(m_counters, 0, 4 * kMaxGridOps * sizeof(u64)));
    HALOX_CUDA_CHECK(cudaDeviceSynchronize());
    std::set<int> neighbours;
    for (const Op& op : ops) {
      for (int n : {op.send_rank, op.recv_rank}) {
        if (n >= 0 && n != m_rank) neighbours.insert(n);
      }
    }
    // Every block zeroed before anyone signals into it.
    bounded_barrier(m_comm, wait_context(), "the set-up (the blocks zeroed)");
    m_peers.publish(m_block, offsets, neighbours, false, wait_context(), m_proxy_policy);
    m_same_gpu = m_peers.same_gpu();
    // The links to proxied neighbours: their ends are the proxy's, in mapped host memory.
    auto proxied = [&](int r) { return r >= 0 && r != m_rank && m_peers.proxied(r); };
    std::vector<ProxyLinkPlan> links;
    std::vector<int> link_of(ops.size(), -1);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const bool out = proxied(ops[i].send_rank), in = proxied(ops[i].recv_rank);
      if (!out && !in) continue;
      link_of[i] = static_cast<int>(links.size());
      ProxyLinkPlan& l = links.emplace_back();
      l.op = static_cast<int>(i);
      l.name = ops[i].name;
      if (out) l.send_rank = ops[i].send_rank, l.send_bytes = ops[i].send_bytes;
      if (in) l.recv_rank = ops[i].recv_rank, l.recv_bytes = ops[i].recv_bytes;
    }
    // On every rank, links or not: its set-up and self-test are collective (a rank whose
    // neighbours are all mapped has none).
    m_proxy.reset();
    m_proxy =
        std::make_unique<HostProxy>(m_comm, m_rank, m_name, m_timeout_seconds, std::move(links));
    auto base_of = [&](int r) { return r == m_rank ? m_block : m_peers.base(r); };
    auto offsets_of = [&](int r) { return r == m_rank ? offsets : m_peers.offsets(r); };
    GridSlots* mine = reinterpret_cast<GridSlots*>(m_block);
    m_host_views.assign(ops.size(), GridOpView{});
    std::vector<ProbeLink> probes;  // the self-test's, one per op
    for (std::size_t i = 0; i < ops.size(); ++i) {
      GridOpView& v = m_host_views[i];
      v.send_rank = ops[i].send_rank;
      v.recv_rank = ops[i].recv_rank;
      v.unpacked = m_counters + kMaxGridOps + i;
      for (std::size_t k = 0; k < i; ++k) {
        if (ops[k].stage < ops[i].stage && ops[k].recv_rank >= 0) v.deps |= 1u << k;
      }
      const ProxyEnds* proxy = link_of[i] >= 0 ? &m_proxy->ends(link_of[i]) : nullptr;
      if (proxied(v.send_rank)) {
        v.out.remote = proxy->send_staging;
        v.out.remote_signal = proxy->packed;
        v.out.ready = proxy->ready;
        v.out.ready_relay = m_counters + 2 * kMaxGridOps + i;
        v.out.packed = m_counters + i;
        v.send_bytes = ops[i].send_bytes;
      } else if (v.send_rank >= 0) {
        char* dest = base_of(v.send_rank);
        SendChannel& out = v.out;
        out.pe = v.send_rank == m_rank ? -1 : m_peers.put_pe(v.send_rank);
        if (out.pe >= 0 && send_offsets[i] == 0) {
          throw Error("halox: " + m_name + ": rank " + std::to_string(v.send_rank) +
                      " is reached by puts, but NVSHMEM's team of shared memory said otherwise");
        }
        out.remote = dest + offsets_of(v.send_rank)[i];
        out.remote_signal = &reinterpret_cast<GridSlots*>(dest)->data[i];
        out.ready = &mine->ready[i];
        out.staging = m_block + send_offsets[i];
        out.packed = m_counters + i;
        v.send_bytes = ops[i].send_bytes;
      }
      if (proxied(v.recv_rank)) {
        v.in.staging = proxy->recv_staging;
        v.in.signal = proxy->data;
        v.in.data_relay = m_counters + 3 * kMaxGridOps + i;
        v.in.remote_ready = proxy->released;
      } else if (v.recv_rank >= 0) {
        v.in.pe = v.recv_rank == m_rank ? -1 : m_peers.put_pe(v.recv_rank);
        v.in.remote_ready = &reinterpret_cast<GridSlots*>(base_of(v.recv_rank))->ready[i];
        v.in.staging = m_block + offsets[i];
        v.in.signal = &mine->data[i];
      }
      // The self-test's probe over op i's link: mine to its receiver, its sender's to me.
      ProbeLink& link = probes.emplace_back();
      link.rank = m_rank;
      link.pulse = static_cast<int>(i);
      link.kind = wait_probe;
      link.out_link = link.in_link = static_cast<int>(i);
      // (a proxied link's probe is the proxy's own, HostProxy::self_test)
      if (v.send_rank >= 0 && !proxied(v.send_rank)) {
        link.out = &reinterpret_cast<GridSlots*>(base_of(v.send_rank))->probe[i];
        link.out_pe = v.out.pe;
      }
      if (v.recv_rank >= 0 && !proxied(v.recv_rank)) {
        link.in = &mine->probe[i];
        link.peer = v.recv_rank;
      }
    }
    m_ops = &ops;
    m_active.clear();
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].send_rank >= 0 || ops[i].recv_rank >= 0)
        m_active.push_back(static_cast<unsigned char>(i));
    }
    m_puts = std::any_of(m_host_views.begin(), m_host_views.end(),
                         [](const GridOpView& v) { return v.out.pe >= 0 || v.in.pe >= 0; });
    // Every block of every op spins at some point: all must be resident at once, with the GPU
    // shared by the processes on it.
    // With tracing on, sized for the traced kernel (more registers, fewer resident blocks),
    // which then serves while tracing stays on.
    m_sized_for_trace = device_trace().records != nullptr;
    const int on_gpu = m_puts              ? grid_resident_blocks_with_puts(m_sized_for_trace)
                       : m_sized_for_trace ? resident_blocks(grid_exchange_kernel<false, true>)
                                           : resident_blocks(grid_exchange_kernel<false, false>);
    const int fit =
        spinning_blocks_per_group(on_gpu, gpu_share(m_comm), static_cast<int>(m_active.size()));
    if (fit < 1) {
      throw Error("halox: " + m_name + ": " + std::to_string(m_active.size()) +
                  " faces do not fit on the GPU at once; use staged");
    }
    // 128 blocks per op whatever the face's size: a 2-process multiphase LBM step ran 4.6%
    // slower with blocks sized from the face (8 four-byte words in flight per thread: 40 and
    // 8 blocks for its faces; 10,673 against 11,166 MLUPS, PERFORMANCE.md). Why more blocks
    // win where the words are few is not established.
    m_blocks = std::min(128, fit);
    // Diagnostics: HALOX_GRID_BLOCKS=N forces N blocks per op (still at most what fits).
    m_blocks = detail::env_grid_blocks(fit, m_blocks);
    m_ready = true;
    if (m_self_test) self_test(ops, probes);
  }

  // A small message over every link of the plan before any real exchange; every rank learns
  // whether any rank found a broken link.
  void self_test(const std::vector<Op>& ops, const std::vector<ProbeLink>& links) {
    bounded_barrier(m_comm, wait_context(), "the self-test");
    ProbeRun probes;
    probes.launch(links, 1, m_timeout_seconds, m_errors.sink(), true, m_puts);
    probes.finish();
    m_proxy->self_test();  // collective
    std::string error;
    try {
      check(ops);
    } catch (const Error& e) {
      error = e.what();
    }
    raise_if_any(m_comm, error, bounded_wait(wait_context(), "the self-test's verdict"));
  }

  // The widest word every op's type and its field's address allow. It depends on the
  // addresses only through their offsets within 16 bytes: worked out once per stage and
  // offsets, not per exchange.
  int word_for(std::span<void* const> fields, const std::vector<std::uintptr_t>& offsets, int first,
               int count) {
    const auto key = std::make_pair(first, offsets);
    auto known = m_words.find(key);
    if (known != m_words.end()) return known->second;
    int word = 16;
    for (int i = first; i < first + count; ++i) {
      const Op& op = (*m_ops)[i];
      const void* field = fields[op.field];
      if (op.send_rank >= 0) word = std::min(word, device_pack_word(op.send_type, 1, field));
      if (op.recv_rank >= 0) word = std::min(word, device_pack_word(op.recv_type, 1, field));
    }
    if (word < 4) {
      throw Error("halox: " + m_name + " needs faces of 4-byte aligned elements (a field at " +
                  "this address allows " + std::to_string(word) + "-byte words); use staged");
    }
    m_words.emplace(key, word);
    return word;
  }

  // The device views of every op, each with its pack descriptors in the widest words its
  // stage allows at these field addresses (x faces of a field of floats: 4 bytes; y and z
  // faces of whole aligned rows: up to 16). Cached per addresses % 16; for no fields, views
  // without descriptors (the self-test reads none).
  const GridOpView* views_for(std::span<void* const> fields) {
    std::vector<std::uintptr_t>& key = m_key;  // a member: no allocation per exchange
    key.clear();
    for (void* f : fields) key.push_back(reinterpret_cast<std::uintptr_t>(f) % 16);
    auto found = m_views.find(key);
    if (found != m_views.end()) return found->second;
    std::vector<GridOpView> views = m_host_views;
    for (const auto& [first, count] : m_stages) {
      if (fields.empty()) break;
      const int word = word_for(fields, key, first, count);
      for (int i = first; i < first + count; ++i) {
        const Op& op = (*m_ops)[i];
        if (op.field >= static_cast<int>(fields.size())) {
          throw Error("halox: internal: " + m_name + ": an op of field " +
                      std::to_string(op.field) + " in a run of " + std::to_string(fields.size()) +
                      " fields");
        }
        views[i].field = op.field;
        views[i].word = word;
        if (op.send_rank >= 0) views[i].send = device_pack_view(op.send_type, 1, word);
        if (op.recv_rank >= 0) views[i].recv = device_pack_view(op.recv_type, 1, word);
        if (views[i].send.words >= (1ll << 31) || views[i].recv.words >= (1ll << 31)) {
          throw Error("halox: " + m_name + ": a face of 2^31 words or more");
        }
      }
    }
    GridOpView* device = nullptr;
    HALOX_CUDA_CHECK(cudaMalloc(&device, views.size() * sizeof(GridOpView)));
    detail::copy_to_device_now(device, views.data(), views.size() * sizeof(GridOpView));
    m_views[key] = device;
    return device;
  }

  MPI_Comm m_comm;
  int m_rank;
  Mapping m_mapping;
  ProxyPolicy m_proxy_policy;
  std::string m_name;
  int m_trace_object;  // this exchange in traces
  PeerBlocks m_peers;
  double m_timeout_seconds;
  bool m_self_test;
  bool m_ready = false, m_same_gpu = true;
  const std::vector<Op>* m_ops = nullptr;     // the exchange's ops (it owns them and this)
  std::vector<std::pair<int, int>> m_stages;  // (first op, ops) per stage
  std::vector<GridOpView> m_host_views;
  std::map<std::vector<std::uintptr_t>, GridOpView*> m_views;          // per field addresses % 16
  std::map<std::pair<int, std::vector<std::uintptr_t>>, int> m_words;  // per stage and those
  std::vector<std::uintptr_t> m_key;                                   // views_for's scratch
  char* m_block = nullptr;
  u64* m_counters = nullptr;
  u64 m_epoch = 0;
  int m_blocks = 1;
  std::vector<unsigned char> m_active;  // the ops that send or receive (GridArgs::active)
  bool m_sized_for_trace = false;       // m_blocks fits the traced kernel
  bool m_puts = false;                  // some op reaches its peer by NVSHMEM puts
  ErrorChannel m_errors;
  std::unique_ptr<HostProxy> m_proxy;  // the links to proxied neighbours (none, often)
};

}  // namespace

std::unique_ptr<Transport> make_grid_fused_transport(MPI_Comm comm, int rank, Mapping mapping,
                                                     ProxyPolicy proxy, const std::string& name,
                                                     const std::string& trace_name,
                                                     double timeout_seconds, bool self_test) {
  return std::make_unique<GridFusedTransport>(comm, rank, mapping, proxy, name, trace_name,
                                              timeout_seconds, self_test);
}

}  // namespace halox::detail
