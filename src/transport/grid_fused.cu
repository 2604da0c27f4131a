// GPU-initiated grid halo (local-fused, ipc-* and nvshmem-* transports for GridExchange): the
// grid kernel (device/grid_fused_kernels.cuh) moves every face of every stage of every rank of
// this process (all of them for Ranks::local, one for Ranks::mpi, a block of them for
// Ranks::blocks) in one launch: a copy face per message between two ranks of the process (a
// periodic axis with one rank: from a rank to itself), straight from the sender's field to the
// receiver's, with no staging and no signals; a pack face per op that sends to another
// process, straight into the receiving rank's staging area (a direct store through CUDA IPC or
// nvshmem_ptr; for a peer nvshmem_ptr cannot map, into a send staging area that the last tile
// puts with its signal: grid_fused_puts.cu; for a peer neither reaches, into host memory that
// the host proxy sends by MPI: host_proxy.hpp), and an unpack face per op that receives from
// another process. The other processes are reached through GridProcesses (grid_fused.hpp),
// so that this file builds without MPI. A face of a later
// stage carries edges and corners that the earlier stages deliver, so its pack waits on the device
// until this rank has unpacked the earlier stages' faces of its field; faces of the first stage go
// at once. The pack and unpack are the GPU pack's (pack_device.cuh), driven by the plan's
// datatypes; the channel's protocol (device/channel.cuh) per op, e = the exchange's counter:
//   1. tell the rank I receive from that my staging is free   (release e into its ready slot)
//   2. later stages: wait until the earlier stages' faces are unpacked here (acquire, local)
//   3. wait until the rank I send to has freed its staging     (acquire >= e on my ready slot)
//   4. pack my face into its staging; the last tile to finish sets its data signal
//   5. wait for my own face (the data signal of exchange e), unpack it into the field.
// Each rank of the process has a block of its own (signal slots and staging), all in one
// allocation at a stride that every process agrees on, with the same layout (each op's
// staging sized for the largest of that op over all ranks): a sender finds rank g's op i at
// the base of g's process + index of g in it x stride + offset of op i.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../common/cuda_check.hpp"
#include "../device/grid_kernel.hpp"
#include "../device/signals.cuh"
#include "../runtime/env.hpp"
#include "grid_fused.hpp"
#include "halox/config.hpp"
#include "halox/error.hpp"
#include "halox/exchange_options.hpp"
#include "rank_links.hpp"
#include "transport.hpp"

namespace halox::detail {

using namespace fused_grid;

namespace {

// Fields per run: every field's ops share the kMaxGridOps signal slots of a rank's block (and
// fields x ranks of the process, the kernel's field slots).
constexpr int kMaxGridFields = 4;

// Ranks::local: every rank is in this process, every link a copy face.
class NoOtherProcess final : public GridProcesses {
 public:
  void agree_on_largest(std::span<long long>, const char*) override {}
  void barrier(const char*) override {}
  void check_collectively(const std::function<void()>& check, const char*) override { check(); }
  double gpu_share() override { return 1.0; }
  void reserve(long long) override {}
  bool puts(int) const override { return false; }
  char* allocate(long long bytes) override {
    char* blocks = nullptr;
    HALOX_CUDA_CHECK(cudaMalloc(&blocks, static_cast<std::size_t>(bytes)));
    return blocks;
  }
  void release(char* blocks) override { cudaFree(blocks); }
  void publish(char*, std::span<const long long>, const std::set<int>&) override {}
  char* base(int process) const override { throw no_process(process); }
  int put_pe(int) const override { return -1; }
  bool proxied(int) const override { return false; }
  bool same_gpu() const override { return true; }
  void start_proxy(std::vector<ProxyLinkPlan>) override {}
  const ProxyEnds& proxy_ends(std::size_t) const override { throw no_process(-1); }
  bool proxy_any() const override { return false; }
  bool may_proxy() const override { return false; }
  void launched(unsigned long long) override {}
  void check() const override {}
  void proxy_self_test() override {}

 private:
  static Error no_process(int process) {
    return Error("halox: internal: a link to process " + std::to_string(process) +
                 " over ranks of one process");
  }
};

class GridFusedTransport final : public Transport {
 public:
  GridFusedTransport(const Ranks& ranks, std::unique_ptr<GridProcesses> processes, std::string name,
                     const ExchangeOptions& options)
      : m_links(ranks),
        m_rank(ranks.in_process() ? 0 : ranks.processes().rank()),
        m_local(ranks.count()),
        m_other_processes(!ranks.in_process()),
        m_processes(processes ? std::move(processes) : std::make_unique<NoOtherProcess>()),
        m_name(std::move(name)),
        m_trace_object(m_other_processes ? trace_object(options.name) : -1),
        m_timeout_seconds(options.timeout_seconds),
        m_self_test(options.self_test),
        m_stall_rank(ranks.in_process() ? options.testing.stall_rank : -1) {}
  ~GridFusedTransport() override {
    cudaDeviceSynchronize();
    if (m_block) m_processes->release(m_block);
    m_tables.clear();
    cudaFree(m_epoch_device);
  }
  std::string name() const override { return m_name; }
  // Every run's counters are on the device; a proxied link's thread is told each epoch from
  // the host, so a run with one cannot be replayed.
  bool capturable() const override {
    return m_ready ? !m_processes->proxy_any() : !m_processes->may_proxy();
  }
  bool set_up_for(Direction, std::span<void* const> fields) const override {
    if (!m_ready) return false;
    return m_faces.empty() || m_tables.has(fields);
  }
  int launches_per_run() const override { return 1; }

  // Several fields per launch (up to kMaxGridFields, and fields x ranks within the kernel's
  // field slots; more: one instance per field).
  Capabilities capabilities() const override {
    return {true, true, false, std::max(1, std::min(kMaxGridFields, kMaxGridSlots / m_local))};
  }
  void check() const override {
    if (m_ready) check(ops(Direction::forward));
  }

  void run_async(Direction direction, std::span<void* const> fields,
                 std::span<const GpuStream> streams, ExchangeStats& stats) override {
    const GpuStream stream = streams.front();  // one GPU
    const std::vector<Op>& ops = this->ops(direction);
    const int most = capabilities().fields_per_run * m_local;
    if (fields.empty() || fields.size() > static_cast<std::size_t>(most)) {
      throw Error("halox: internal: " + m_name + " moves 1 to " + std::to_string(most) +
                  " arrays per run, not " + std::to_string(fields.size()));
    }
    if (ops.empty()) {  // no neighbour on any axis: nothing to move (and no grid of 0 rows)
      stats.exchanges += 1;
      return;
    }
    check(ops);
    if (!m_ready) set_up(ops);
    if (m_faces.empty()) {  // neighbours on no side: nothing to move
      stats.exchanges += 1;
      return;
    }
    const u64 epoch = ++m_epoch;  // the device's counter too, while the proxy is in use
    GridArgs a{};
    a.epoch = m_epoch_device;
    a.timeout_ns = static_cast<u64>(m_timeout_seconds * 1e9);
    a.error = m_errors.sink();
    a.system_scope = m_same_gpu ? 0 : 1;
    a.stall_from = m_stall_rank;
    for (std::size_t k = 0; k < fields.size(); ++k) a.field[k] = static_cast<char*>(fields[k]);
    // The traced kernel only where the grid was sized for it (tracing on at set-up), and
    // never into a CUDA graph (each replay would write the one launch's trace records).
    const bool traced = m_sized_for_trace && !capturing(stream);
    table_for(fields).launch(a, m_blocks, m_puts, traced, m_trace_object, stream);
    m_processes->launched(epoch);
    for (const Op& op : ops) {
      if (op.send_rank >= 0 && op.send_rank != m_links.me(op)) {
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
    w.transport = m_name;
    w.timeout_seconds = m_timeout_seconds;
    w.pulse = [this, &ops](int rank, int pulse) {
      const int op = op_at(rank, pulse);
      return op >= 0 ? ops[op].name : "pulse " + std::to_string(pulse);
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
    m_processes->check();
  }

  void set_up(const std::vector<Op>& ops) {
    index_ops(ops);
    find_stages(ops);
    std::vector<long long> send_offsets(ops.size(), 0);
    allocate_blocks(ops, send_offsets);
    map_neighbours(ops);
    const std::vector<int> link_of = start_proxy(ops);
    std::vector<ProbeLink> probes = build_faces(ops, send_offsets, link_of);
    m_ops = &ops;
    m_puts = std::any_of(m_faces.begin(), m_faces.end(),
                         [](const FacePlan& p) { return p.face.out.pe >= 0 || p.face.in.pe >= 0; });
    size_grid();
    m_ready = true;
    if (m_self_test) self_test(ops, probes);
  }

  // Each op's index among its rank's ops (its signal slots and staging area in the rank's
  // block; a sender's op and its receiver's share it, as the ranks' plans list the same
  // pulses); every rank of the process lists as many.
  void index_ops(const std::vector<Op>& ops) {
    if (m_local > kMaxGridSlots) {
      throw Error("halox: " + m_name + ": the grid kernel takes at most " +
                  std::to_string(kMaxGridSlots) + " ranks per process, not " +
                  std::to_string(m_local));
    }
    m_index.assign(ops.size(), 0);
    m_rank_ops.assign(static_cast<std::size_t>(m_local), {});
    for (std::size_t i = 0; i < ops.size(); ++i) {
      std::vector<int>& mine = m_rank_ops.at(static_cast<std::size_t>(ops[i].rank));
      m_index[i] = static_cast<int>(mine.size());
      mine.push_back(static_cast<int>(i));
    }
    m_per_rank = static_cast<int>(m_rank_ops[0].size());
    for (int r = 0; r < m_local; ++r) {
      if (static_cast<int>(m_rank_ops[r].size()) != m_per_rank) {
        throw Error("halox: " + m_name + ": rank " + std::to_string(m_links.ranks().rank(r)) +
                    " has " + std::to_string(m_rank_ops[r].size()) + " pulses, rank " +
                    std::to_string(m_links.ranks().rank(0)) + " " + std::to_string(m_per_rank) +
                    ": the plans do not match");
      }
    }
    if (m_per_rank > kMaxGridOps) {
      throw Error("halox: " + m_name + ": at most " + std::to_string(kMaxGridOps) +
                  " pulses per grid plan");
    }
  }

  // The op of grid rank `rank` (of this process) at index `pulse` among its ops; -1: none.
  int op_at(int rank, int pulse) const {
    if (m_rank_ops.empty() || rank < 0 || m_links.ranks().process_of(rank) != m_rank) return -1;
    const std::vector<int>& mine = m_rank_ops[m_links.ranks().index_in_process(rank)];
    return pulse >= 0 && pulse < static_cast<int>(mine.size()) ? mine[pulse] : -1;
  }

  // Stages: consecutive ops of one stage each (the plan lists them in stage order).
  void find_stages(const std::vector<Op>& ops) {
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
  }

  // Whether op reaches grid rank `peer` of another process by NVSHMEM puts (another node, or
  // nvshmem_puts).
  bool by_puts(int peer, const Op& op) const {
    return m_links.remote(peer, op) && m_processes->puts(m_links.process(peer));
  }

  // One block per rank of this process, at a stride every process agrees on: slots, then one
  // staging area per op index (what that op receives, sized for the largest over every rank
  // of the grid). After the blocks, with NVSHMEM, a send staging area per op whose receiver
  // is reached by puts, for what it packs and puts. The slots zeroed; the kernel's exchange
  // counter made.
  void allocate_blocks(const std::vector<Op>& ops, std::vector<long long>& send_offsets) {
    // Every process lists as many ops per rank (the most and the fewest agree), so that the
    // agreement on their sizes below is one call of one length everywhere.
    long long counts[2] = {m_per_rank, -m_per_rank};
    m_processes->agree_on_largest(counts, "the agreement on the pulses per rank");
    if (counts[0] != -counts[1]) {
      throw Error("halox: " + m_name + ": the ranks' plans list from " +
                  std::to_string(-counts[1]) + " to " + std::to_string(counts[0]) +
                  " pulses (rank " + std::to_string(m_links.ranks().rank(0)) + ": " +
                  std::to_string(m_per_rank) + "): the plans do not match");
    }
    // Staging only for what comes from another process (a copy face needs none).
    std::vector<long long> largest(static_cast<std::size_t>(m_per_rank), 0);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (!m_links.remote(ops[i].recv_rank, ops[i])) continue;
      largest[m_index[i]] = std::max<long long>(largest[m_index[i]], ops[i].recv_bytes);
    }
    m_processes->agree_on_largest(largest, "the agreement on the staging sizes");
    m_offsets = {};
    long long stride = kGridSlotsBytes;
    for (int i = 0; i < m_per_rank; ++i) {
      m_offsets[i] = stride;
      stride += (largest[i] + 255) / 256 * 256;
    }
    m_stride = stride;
    long long bytes = stride * m_local;
    m_processes->reserve(bytes);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (!by_puts(ops[i].send_rank, ops[i])) continue;
      send_offsets[i] = bytes;
      bytes += (ops[i].send_bytes + 255) / 256 * 256;
    }
    m_block = m_processes->allocate(bytes);
    for (int r = 0; r < m_local; ++r)
      HALOX_CUDA_CHECK(cudaMemset(m_block + r * m_stride, 0, kGridSlotsBytes));
    HALOX_CUDA_CHECK(cudaDeviceSynchronize());
    if (m_epoch_device == nullptr) {
      HALOX_CUDA_CHECK(cudaMalloc(&m_epoch_device, sizeof(u64)));
      const u64 first = m_epoch + 1;
      copy_to_device_now(m_epoch_device, &first, sizeof(u64));
    }
  }

  // Every neighbouring process's blocks mapped (or marked for the host proxy), once every
  // block is zeroed: before anyone signals into it.
  void map_neighbours(const std::vector<Op>& ops) {
    std::set<int> neighbours;
    for (const Op& op : ops) {
      for (int n : {op.send_rank, op.recv_rank}) {
        if (m_links.remote(n, op)) neighbours.insert(m_links.process(n));
      }
    }
    m_processes->publish(m_block, std::span<const long long>(m_offsets.data(), m_per_rank),
                         neighbours);
    m_same_gpu = m_processes->same_gpu();
  }

  // Whether op's peer `r` is a rank of another process reached through the host proxy.
  bool proxied(int r, const Op& op) const {
    return m_links.remote(r, op) && m_processes->proxied(m_links.process(r));
  }

  // The links to proxied neighbours, whose ends are the proxy's, in mapped host memory; per
  // op its link (-1: none). On every rank, links or not: the proxy's set-up and self-test
  // are collective (a rank whose neighbours are all mapped has none).
  std::vector<int> start_proxy(const std::vector<Op>& ops) {
    std::vector<ProxyLinkPlan> links;
    std::vector<int> link_of(ops.size(), -1);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const bool out = proxied(ops[i].send_rank, ops[i]), in = proxied(ops[i].recv_rank, ops[i]);
      if (!out && !in) continue;
      if (m_local > 1) {
        throw Error("halox: " + m_name + ": rank " + std::to_string(m_links.me(ops[i])) + "'s " +
                    ops[i].name + " reaches a rank of another node, which needs the host " +
                    "proxy; the proxy serves one rank per process (Ranks::mpi): across nodes " +
                    "take nvshmem-fused or staged over Ranks::blocks");
      }
      link_of[i] = static_cast<int>(links.size());
      ProxyLinkPlan& l = links.emplace_back();
      l.op = static_cast<int>(i);
      l.name = ops[i].name;
      if (out) l.send_rank = ops[i].send_rank, l.send_bytes = ops[i].send_bytes;
      if (in) l.recv_rank = ops[i].recv_rank, l.recv_bytes = ops[i].recv_bytes;
    }
    m_processes->start_proxy(std::move(links));
    return link_of;
  }

  // Grid rank g's block: in this process's allocation or in its process's, mapped.
  char* block_of(int g) const {
    const int process = m_links.process(g);
    char* base = process == m_rank ? m_block : m_processes->base(process);
    return base + m_links.ranks().index_in_process(g) * m_stride;
  }
  GridSlots* slots_of(int g) const { return reinterpret_cast<GridSlots*>(block_of(g)); }
  // The PE that op's peer is reached by puts at; -1: stores.
  int put_pe(int peer, const Op& op) const {
    return m_links.remote(peer, op) ? m_processes->put_pe(m_links.process(peer)) : -1;
  }
  // The kernel's field slot of op's rank and field (fields[field * ranks + rank]).
  int slot_of(const Op& op, int rank_index) const { return op.field * m_local + rank_index; }

  // The faces, stage by stage: the stage's copy and pack faces, then its unpack faces (the
  // kernel's ticket order, which both ends of a link share); the self-test's probes, one per
  // op.
  std::vector<ProbeLink> build_faces(const std::vector<Op>& ops,
                                     const std::vector<long long>& send_offsets,
                                     const std::vector<int>& link_of) {
    // Per op that receives from a rank of this process (itself included): the sender's op.
    const std::vector<int> source = m_links.local_sources(ops, m_name);
    m_faces.clear();
    std::vector<ProbeLink> probes;
    std::vector<FacePlan> unpacks;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const ProxyEnds* proxy = link_of[i] >= 0 ? &m_processes->proxy_ends(link_of[i]) : nullptr;
      if (source[i] >= 0) {
        // From a rank of this process (or a periodic axis with one rank: from itself):
        // straight from the send layout to the receive layout, no staging and no signals.
        const Op& from = ops[source[i]];
        FacePlan& p = face_of(m_faces, from, static_cast<std::size_t>(source[i]), face_copy,
                              slot_of(from, from.rank), slot_of(op, op.rank), m_links.me(op));
        p.recv_op = static_cast<int>(i);
      }
      if (m_links.remote(op.send_rank, op)) pack_face(op, i, proxy, send_offsets[i]);
      if (m_links.remote(op.recv_rank, op)) unpack_face(unpacks, op, i, proxy);
      const bool stage_ends = i + 1 == ops.size() || ops[i + 1].stage != op.stage;
      if (stage_ends) {
        m_faces.insert(m_faces.end(), unpacks.begin(), unpacks.end());
        unpacks.clear();
      }
      probes.push_back(probe_of(op, i));
    }
    return probes;
  }

  // A face of op i (slots: the field it reads, the field it writes, -1 for none).
  FacePlan& face_of(std::vector<FacePlan>& into, const Op& op, std::size_t i, int kind, int from,
                    int to, int peer) const {
    FacePlan& p = into.emplace_back();
    p.stage = op.stage;
    p.face.kind = kind;
    p.face.from = from;
    p.face.to = to;
    p.face.rank = m_links.me(op);
    p.face.peer = peer;
    p.face.pulse = m_index[i];
    if (kind != face_unpack) p.send_op = static_cast<int>(i);
    if (kind != face_pack) p.recv_op = static_cast<int>(i);
    return p;
  }

  // Op i's pack face: into its receiver's staging (mapped, or my send staging that is put),
  // or into the host proxy's.
  void pack_face(const Op& op, std::size_t i, const ProxyEnds* proxy, long long send_offset) {
    FacePlan& p = face_of(m_faces, op, i, face_pack, slot_of(op, op.rank), -1, op.send_rank);
    p.face.bytes = op.send_bytes;
    SendChannel& out = p.face.out;
    if (proxy && proxied(op.send_rank, op)) {
      out.remote = proxy->send_staging;
      out.remote_signal = proxy->packed;
      out.ready = proxy->ready;
      p.relayed = true;
      return;
    }
    const int index = m_index[i];
    out.pe = put_pe(op.send_rank, op);
    if (out.pe >= 0 && send_offset == 0) {
      throw Error("halox: " + m_name + ": rank " + std::to_string(op.send_rank) +
                  " is reached by puts, but NVSHMEM's team of shared memory said otherwise");
    }
    out.remote = block_of(op.send_rank) + m_offsets[index];
    out.remote_signal = &slots_of(op.send_rank)->data[index];
    out.ready = &slots_of(m_links.me(op))->ready[index];
    out.staging = m_block + send_offset;
  }

  // Op i's unpack face: out of my staging, or the host proxy's.
  void unpack_face(std::vector<FacePlan>& unpacks, const Op& op, std::size_t i,
                   const ProxyEnds* proxy) {
    FacePlan& p = face_of(unpacks, op, i, face_unpack, -1, slot_of(op, op.rank), op.recv_rank);
    RecvChannel& in = p.face.in;
    if (proxy && proxied(op.recv_rank, op)) {
      in.staging = proxy->recv_staging;
      in.signal = proxy->data;
      in.remote_ready = proxy->released;
      p.relayed = true;
      return;
    }
    const int index = m_index[i];
    const int me = m_links.me(op);
    in.pe = put_pe(op.recv_rank, op);
    in.remote_ready = &slots_of(op.recv_rank)->ready[index];
    in.staging = block_of(me) + m_offsets[index];
    in.signal = &slots_of(me)->data[index];
  }

  // The self-test's probe over op i's link: mine to its receiver, its sender's to me (a
  // proxied link's probe is the proxy's own, HostProxy::self_test).
  ProbeLink probe_of(const Op& op, std::size_t i) const {
    ProbeLink link;
    link.rank = m_links.me(op);
    link.pulse = m_index[i];
    link.kind = wait_probe;
    link.out_link = link.in_link = m_index[i];
    if (op.send_rank >= 0 && !proxied(op.send_rank, op)) {
      link.out = &slots_of(op.send_rank)->probe[m_index[i]];
      link.out_pe = put_pe(op.send_rank, op);
    }
    if (op.recv_rank >= 0 && !proxied(op.recv_rank, op)) {
      link.in = &slots_of(link.rank)->probe[m_index[i]];
      link.peer = op.recv_rank;
    }
    return link;
  }

  // The blocks of this process's launch wait only for tickets below their own, here or in a
  // peer's launch; what must be resident is a block of each process sharing the GPU: so this
  // launch takes at most its share of what the GPU holds at once. With tracing on, sized for
  // the traced kernel (more registers), which then serves while tracing stays on.
  void size_grid() {
    m_sized_for_trace = m_trace_object >= 0 && device_trace().records != nullptr;
    const int fit = spinning_blocks_per_group(grid_resident_blocks(m_puts, m_sized_for_trace),
                                              m_processes->gpu_share(), 1);
    if (fit < 1) throw Error("halox: " + m_name + ": the grid kernel does not fit on the GPU");
    m_blocks = detail::env_grid_blocks(fit);
  }

  // A small message over every link of the plan before any real exchange; every rank learns
  // whether any rank found a broken link.
  void self_test(const std::vector<Op>& ops, std::vector<ProbeLink> links) {
    m_processes->barrier("the self-test");
    // A stalled rank (tests) neither sends nor receives.
    std::erase_if(links, [this](const ProbeLink& l) { return l.rank == m_stall_rank; });
    ProbeRun probes;
    probes.launch(links, 1, m_timeout_seconds, m_errors.sink(), m_other_processes, m_puts);
    probes.finish();
    m_processes->proxy_self_test();  // collective
    m_processes->check_collectively([&] { check(ops); }, "the self-test's verdict");
  }

  // The widest word that every message to or from another process of the stage of ops
  // [first, first + count) and its field's address allow.
  int word_for(std::span<void* const> fields, int first, int count) const {
    int word = 16;
    for (int i = first; i < first + count; ++i) {
      const Op& op = (*m_ops)[i];
      const void* field = fields[slot_of(op, op.rank)];
      if (m_links.remote(op.send_rank, op))
        word = std::min(word, device_pack_word(op.send_type, 1, field));
      if (m_links.remote(op.recv_rank, op))
        word = std::min(word, device_pack_word(op.recv_type, 1, field));
    }
    if (word < 4) {
      throw Error("halox: " + m_name + " needs faces of 4-byte aligned elements (a field at " +
                  "this address allows " + std::to_string(word) + "-byte words); use staged");
    }
    return word;
  }

  // The grid kernel's table at these field addresses: every face's pack descriptors in the
  // widest words it allows (x faces of a field of floats: 4 bytes; y and z faces of whole
  // aligned rows: up to 16): a copy face's own, a pack or unpack face's its stage's.
  GridTable& table_for(std::span<void* const> fields) {
    return m_tables.at(fields, [this](std::span<void* const> at) {
      std::map<int, int> words;  // per stage's first op
      std::vector<FacePlan> faces = m_faces;
      for (FacePlan& p : faces) {
        GridFace& f = p.face;
        const int any_op = p.send_op >= 0 ? p.send_op : p.recv_op;
        for (int slot : {f.from, f.to}) {
          if (slot >= static_cast<int>(at.size())) {
            throw Error("halox: internal: " + m_name + ": a face of array " + std::to_string(slot) +
                        " in a run of " + std::to_string(at.size()) + " arrays");
          }
        }
        if (f.kind == face_copy) {
          f.word = std::min(device_pack_word((*m_ops)[p.send_op].send_type, 1, at[f.from]),
                            device_pack_word((*m_ops)[p.recv_op].recv_type, 1, at[f.to]));
        } else {
          const auto& [first, count] = *std::find_if(
              m_stages.begin(), m_stages.end(),
              [&](const std::pair<int, int>& st) { return any_op < st.first + st.second; });
          auto [word, fresh] = words.try_emplace(first, 0);
          if (fresh) word->second = word_for(at, first, count);
          f.word = word->second;
        }
        if (p.send_op >= 0) f.send = device_pack_view((*m_ops)[p.send_op].send_type, 1, f.word);
        if (p.recv_op >= 0) f.recv = device_pack_view((*m_ops)[p.recv_op].recv_type, 1, f.word);
      }
      return faces;
    });
  }

  RankLinks m_links;       // this process's ranks and where their peers are
  int m_rank;              // this process's rank among the processes
  int m_local;             // this process's ranks
  bool m_other_processes;  // Ranks::mpi, Ranks::blocks (not Ranks::local)
  std::unique_ptr<GridProcesses> m_processes;
  std::string m_name;
  int m_trace_object;  // this exchange in traces (-1: not traced: Ranks::local's spans are
                       // the application's, per rank)
  double m_timeout_seconds;
  bool m_self_test;
  int m_stall_rank;  // testing, Ranks::local: this rank sends nothing (-1: none)
  bool m_ready = false, m_same_gpu = true;
  const std::vector<Op>* m_ops = nullptr;          // the exchange's ops (it owns them and this)
  std::vector<int> m_index;                        // per op: its index among its rank's ops
  std::vector<std::vector<int>> m_rank_ops;        // per rank of the process: its ops
  int m_per_rank = 0;                              // ops per rank
  std::array<long long, kMaxGridOps> m_offsets{};  // per op index: its staging in a block
  long long m_stride = 0;                          // bytes from one rank's block to the next
  std::vector<std::pair<int, int>> m_stages;       // (first op, ops) per stage
  std::vector<FacePlan> m_faces;                   // in the kernel's order, without typed views
  GridTables m_tables;
  char* m_block = nullptr;
  u64 m_epoch = 0;                // runs so far (the proxy's epoch)
  u64* m_epoch_device = nullptr;  // the kernel's exchange counter: the next run's epoch
  int m_blocks = 1;
  bool m_sized_for_trace = false;  // m_blocks fits the traced kernel
  bool m_puts = false;             // some op reaches its peer by NVSHMEM puts
  ErrorChannel m_errors;
};

}  // namespace

std::unique_ptr<Transport> make_grid_fused_transport(const Ranks& ranks,
                                                     std::unique_ptr<GridProcesses> processes,
                                                     const std::string& name,
                                                     const ExchangeOptions& options) {
  return std::make_unique<GridFusedTransport>(ranks, std::move(processes), name, options);
}

}  // namespace halox::detail
