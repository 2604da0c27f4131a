// GPU-initiated grid halo (ipc-* and nvshmem-* transports for GridExchange): the grid kernel
// (device/grid_fused_kernels.cuh, the kernel of Ranks::local too) moves every face of every
// stage in one launch: a pack face per op that sends, straight into the receiving rank's
// staging area (a direct store through CUDA IPC or nvshmem_ptr; for a peer nvshmem_ptr cannot
// map, into a send staging area that the last tile puts with its signal: grid_fused_puts.cu;
// for a peer neither reaches, into host memory that the host proxy sends by MPI:
// host_proxy.hpp), and an unpack face per op that receives; a copy face for a message to
// this rank itself. A face of a later stage carries edges and corners that the earlier
// stages deliver, so its pack waits on the device until this rank has unpacked the earlier
// stages' faces of its field; faces of the first stage go at once. The pack and unpack are
// the GPU pack's (pack_device.cuh), driven by the plan's datatypes; the channel's
// protocol (device/channel.cuh) per op, e = the exchange's counter:
//   1. tell the rank I receive from that my staging is free   (release e into its ready slot)
//   2. later stages: wait until the earlier stages' faces are unpacked here (acquire, local)
//   3. wait until the rank I send to has freed its staging     (acquire >= e on my ready slot)
//   4. pack my face into its staging; the last tile to finish sets its data signal
//   5. wait for my own face (the data signal of exchange e), unpack it into the field.
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
#include "../device/grid_kernel.hpp"
#include "../device/signals.cuh"
#include "halox/config.hpp"
#include "halox/error.hpp"
#include "halox/exchange_options.hpp"
#include "halox/mpi.hpp"
#include "../runtime/env.hpp"

namespace halox::detail {

using namespace fused_grid;

namespace {

// Fields per run: every field's ops share the kMaxGridOps signal slots of a rank's block.
constexpr int kMaxGridFields = 4;
static_assert(kMaxGridOps <= kMaxBlockAreas, "a block's staging: one area per op");

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
    m_tables.clear();
    cudaFree(m_epoch_device);
  }
  std::string name() const override { return m_name; }
  // Every run's counters are on the device; a proxied link's thread is told each epoch from
  // the host, so a run with one cannot be replayed.
  bool capturable() const override {
    return m_ready ? !m_proxy->any() : m_proxy_policy != ProxyPolicy::every_peer;
  }
  bool set_up_for(Direction, std::span<void* const> fields) const override {
    if (!m_ready) return false;
    std::vector<std::uintptr_t> key;
    key_of(fields, key);
    return m_faces.empty() || m_tables.count(key) > 0;
  }
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
    a.stall_from = -1;
    for (std::size_t k = 0; k < fields.size(); ++k) a.field[k] = static_cast<char*>(fields[k]);
    // The traced kernel only where the grid was sized for it (tracing on at set-up), and
    // never into a CUDA graph (each replay would write the one launch's trace records).
    const bool traced = m_sized_for_trace && !capturing(stream);
    table_for(fields).launch(a, m_blocks, m_puts, traced, m_trace_object, stream);
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
    w.transport = m_name;
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
    find_stages(ops);
    BlockOffsets offsets{};
    std::vector<long long> send_offsets(ops.size(), 0);
    allocate_block(ops, offsets, send_offsets);
    map_neighbours(ops, offsets);
    const std::vector<int> link_of = start_proxy(ops);
    std::vector<ProbeLink> probes = build_faces(ops, offsets, send_offsets, link_of);
    m_ops = &ops;
    m_puts = std::any_of(m_faces.begin(), m_faces.end(),
                         [](const FacePlan& p) { return p.face.out.pe >= 0 || p.face.in.pe >= 0; });
    size_grid();
    m_ready = true;
    if (m_self_test) self_test(ops, probes);
  }

  // Stages: consecutive ops of one stage each (the plan lists them in stage order).
  void find_stages(const std::vector<Op>& ops) {
    if (static_cast<int>(ops.size()) > kMaxGridOps) {
      throw Error("halox: " + m_name + ": at most " + std::to_string(kMaxGridOps) +
                  " pulses per grid plan");
    }
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

  // Whether this rank reaches `rank` by NVSHMEM puts (another node, or nvshmem_puts).
  bool by_puts(int rank) const {
    return symmetric(m_mapping) && rank >= 0 && rank != m_rank &&
           (m_mapping == Mapping::nvshmem_puts || !symmetric_reachable(rank));
  }

  // My block: slots, then one staging area per op (what that op receives); with NVSHMEM,
  // one more per op whose receiver is reached by puts, for what it packs and puts: at most
  // twice the face bytes. Its slots zeroed; the kernel's exchange counter made.
  void allocate_block(const std::vector<Op>& ops, BlockOffsets& offsets,
                      std::vector<long long>& send_offsets) {
    long long bytes = kGridSlotsBytes;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      offsets[i] = bytes;
      bytes += (ops[i].recv_bytes + 255) / 256 * 256;
    }
    if (symmetric(m_mapping)) ensure_nvshmem(m_comm, 2 * bytes);  // collective, first use
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
    HALOX_CUDA_CHECK(cudaDeviceSynchronize());
    if (m_epoch_device == nullptr) {
      HALOX_CUDA_CHECK(cudaMalloc(&m_epoch_device, sizeof(u64)));
      const u64 first = m_epoch + 1;
      copy_to_device_now(m_epoch_device, &first, sizeof(u64));
    }
  }

  // Every neighbour's block mapped (or marked for the host proxy), once every block is
  // zeroed: before anyone signals into it.
  void map_neighbours(const std::vector<Op>& ops, const BlockOffsets& offsets) {
    std::set<int> neighbours;
    for (const Op& op : ops) {
      for (int n : {op.send_rank, op.recv_rank}) {
        if (n >= 0 && n != m_rank) neighbours.insert(n);
      }
    }
    bounded_barrier(m_comm, wait_context(), "the set-up (the blocks zeroed)");
    m_peers.publish(m_block, offsets, neighbours, false, wait_context(), m_proxy_policy);
    m_same_gpu = m_peers.same_gpu();
  }

  bool proxied(int r) const { return r >= 0 && r != m_rank && m_peers.proxied(r); }

  // The links to proxied neighbours, whose ends are the proxy's, in mapped host memory; per
  // op its link (-1: none). On every rank, links or not: the proxy's set-up and self-test
  // are collective (a rank whose neighbours are all mapped has none).
  std::vector<int> start_proxy(const std::vector<Op>& ops) {
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
    m_proxy.reset();
    m_proxy =
        std::make_unique<HostProxy>(m_comm, m_rank, m_name, m_timeout_seconds, std::move(links));
    return link_of;
  }

  char* base_of(int r) const { return r == m_rank ? m_block : m_peers.base(r); }

  // The faces, stage by stage: the stage's copy and pack faces, then its unpack faces (the
  // kernel's ticket order, which both ends of a link share); the self-test's probes, one per
  // op.
  std::vector<ProbeLink> build_faces(const std::vector<Op>& ops, const BlockOffsets& offsets,
                                     const std::vector<long long>& send_offsets,
                                     const std::vector<int>& link_of) {
    m_faces.clear();
    std::vector<ProbeLink> probes;
    std::vector<FacePlan> unpacks;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const ProxyEnds* proxy = link_of[i] >= 0 ? &m_proxy->ends(link_of[i]) : nullptr;
      const bool to_myself = op.send_rank == m_rank && op.recv_rank == m_rank;
      if (to_myself) {
        // A periodic axis with one rank: straight from the send layout to the receive
        // layout, no staging and no signals.
        face_of(m_faces, op, i, face_copy, op.field, op.field, m_rank);
      } else if (op.send_rank >= 0) {
        pack_face(op, i, proxy, offsets, send_offsets[i]);
      }
      if (op.recv_rank >= 0 && !to_myself) unpack_face(unpacks, op, i, proxy, offsets[i]);
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
    p.face.rank = m_rank;
    p.face.peer = peer;
    p.face.pulse = static_cast<int>(i);
    return p;
  }

  // Op i's pack face: into its receiver's staging (mapped, or my send staging that is put),
  // or into the host proxy's.
  void pack_face(const Op& op, std::size_t i, const ProxyEnds* proxy, const BlockOffsets& offsets,
                 long long send_offset) {
    FacePlan& p = face_of(m_faces, op, i, face_pack, op.field, -1, op.send_rank);
    p.face.bytes = op.send_bytes;
    SendChannel& out = p.face.out;
    if (proxied(op.send_rank)) {
      out.remote = proxy->send_staging;
      out.remote_signal = proxy->packed;
      out.ready = proxy->ready;
      p.relayed = true;
      return;
    }
    char* dest = base_of(op.send_rank);
    out.pe = op.send_rank == m_rank ? -1 : m_peers.put_pe(op.send_rank);
    if (out.pe >= 0 && send_offset == 0) {
      throw Error("halox: " + m_name + ": rank " + std::to_string(op.send_rank) +
                  " is reached by puts, but NVSHMEM's team of shared memory said otherwise");
    }
    const BlockOffsets& theirs = op.send_rank == m_rank ? offsets : m_peers.offsets(op.send_rank);
    out.remote = dest + theirs[i];
    out.remote_signal = &reinterpret_cast<GridSlots*>(dest)->data[i];
    out.ready = &reinterpret_cast<GridSlots*>(m_block)->ready[i];
    out.staging = m_block + send_offset;
  }

  // Op i's unpack face: out of my staging, or the host proxy's.
  void unpack_face(std::vector<FacePlan>& unpacks, const Op& op, std::size_t i,
                   const ProxyEnds* proxy, long long offset) {
    FacePlan& p = face_of(unpacks, op, i, face_unpack, -1, op.field, op.recv_rank);
    RecvChannel& in = p.face.in;
    if (proxied(op.recv_rank)) {
      in.staging = proxy->recv_staging;
      in.signal = proxy->data;
      in.remote_ready = proxy->released;
      p.relayed = true;
      return;
    }
    in.pe = op.recv_rank == m_rank ? -1 : m_peers.put_pe(op.recv_rank);
    in.remote_ready = &reinterpret_cast<GridSlots*>(base_of(op.recv_rank))->ready[i];
    in.staging = m_block + offset;
    in.signal = &reinterpret_cast<GridSlots*>(m_block)->data[i];
  }

  // The self-test's probe over op i's link: mine to its receiver, its sender's to me (a
  // proxied link's probe is the proxy's own, HostProxy::self_test).
  ProbeLink probe_of(const Op& op, std::size_t i) const {
    ProbeLink link;
    link.rank = m_rank;
    link.pulse = static_cast<int>(i);
    link.kind = wait_probe;
    link.out_link = link.in_link = static_cast<int>(i);
    if (op.send_rank >= 0 && !proxied(op.send_rank)) {
      link.out = &reinterpret_cast<GridSlots*>(base_of(op.send_rank))->probe[i];
      link.out_pe = op.send_rank == m_rank ? -1 : m_peers.put_pe(op.send_rank);
    }
    if (op.recv_rank >= 0 && !proxied(op.recv_rank)) {
      link.in = &reinterpret_cast<GridSlots*>(m_block)->probe[i];
      link.peer = op.recv_rank;
    }
    return link;
  }

  // The blocks of this process's launch wait only for tickets below their own, here or in a
  // peer's launch; what must be resident is a block of each process sharing the GPU: so this
  // launch takes at most its share of what the GPU holds at once. With tracing on, sized for
  // the traced kernel (more registers), which then serves while tracing stays on.
  void size_grid() {
    m_sized_for_trace = device_trace().records != nullptr;
    const int fit = spinning_blocks_per_group(grid_resident_blocks(m_puts, m_sized_for_trace),
                                              gpu_share(m_comm, wait_context()), 1);
    if (fit < 1) throw Error("halox: " + m_name + ": the grid kernel does not fit on the GPU");
    m_blocks = detail::env_grid_blocks(fit);
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
    raise_if_any(m_comm, error, bounded_wait(m_comm, wait_context(), "the self-test's verdict"));
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

  // The grid kernel's table at these field addresses: every face's pack descriptors in the
  // widest words its stage allows (x faces of a field of floats: 4 bytes; y and z faces of
  // whole aligned rows: up to 16). Cached per addresses % 16.
  // A table's key: each face's word follows from its arrays' addresses modulo 16.
  static void key_of(std::span<void* const> fields, std::vector<std::uintptr_t>& key) {
    key.clear();
    for (void* f : fields) key.push_back(reinterpret_cast<std::uintptr_t>(f) % 16);
  }
  GridTable& table_for(std::span<void* const> fields) {
    std::vector<std::uintptr_t>& key = m_key;  // a member: no allocation per exchange
    key_of(fields, key);
    auto found = m_tables.find(key);
    if (found != m_tables.end()) return *found->second;
    std::vector<FacePlan> faces = m_faces;
    for (FacePlan& p : faces) {
      GridFace& f = p.face;
      const Op& op = (*m_ops)[f.pulse];
      if (op.field >= static_cast<int>(fields.size())) {
        throw Error("halox: internal: " + m_name + ": an op of field " + std::to_string(op.field) +
                    " in a run of " + std::to_string(fields.size()) + " fields");
      }
      const auto& [first, count] = *std::find_if(
          m_stages.begin(), m_stages.end(),
          [&](const std::pair<int, int>& st) { return f.pulse < st.first + st.second; });
      f.word = word_for(fields, key, first, count);
      if (f.kind != face_unpack) f.send = device_pack_view(op.send_type, 1, f.word);
      if (f.kind != face_pack) f.recv = device_pack_view(op.recv_type, 1, f.word);
    }
    auto table = std::make_unique<GridTable>(std::move(faces), grid_tile_words());
    return *m_tables.emplace(key, std::move(table)).first->second;
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
  std::vector<FacePlan> m_faces;              // in the kernel's order, without typed views
  std::map<std::vector<std::uintptr_t>, std::unique_ptr<GridTable>> m_tables;  // per addresses % 16
  std::map<std::pair<int, std::vector<std::uintptr_t>>, int> m_words;  // per stage and those
  std::vector<std::uintptr_t> m_key;                                   // table_for's scratch
  char* m_block = nullptr;
  u64 m_epoch = 0;                // runs so far (the proxy's epoch)
  u64* m_epoch_device = nullptr;  // the kernel's exchange counter: the next run's epoch
  int m_blocks = 1;
  bool m_sized_for_trace = false;  // m_blocks fits the traced kernel
  bool m_puts = false;             // some op reaches its peer by NVSHMEM puts
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
