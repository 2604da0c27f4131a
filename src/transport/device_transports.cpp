// The device transports built on MPI: staged, pipelined and mpi-direct.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>

#include "../common/cuda_check.hpp"
#include "../common/growing_buffer.hpp"
#include "../common/mpi_wait.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "halox/trace.hpp"
#include "rank_links.hpp"
#include "transport.hpp"
#include "halox/tuning.hpp"

#include "../runtime/mpi_cuda_aware.hpp"

namespace halox::detail {

namespace {

bool remote(int peer, int rank) {
  return peer >= 0 && peer != rank;
}

// Buffers per op, grown on demand: device send/receive and their pinned host mirrors.
struct OpBuffers {
  DeviceBuffer dev_send, dev_recv;
  PinnedBuffer host_send, host_recv;
};

// An op whose message goes from its rank to itself, with a direct copy available.
bool to_self(const Op& op, int rank) {
  return op.self_copy && op.send_rank == rank && op.recv_rank == rank;
}

// staged (and mpi-direct): per stage, pack on the stream; a message between ranks of this
// process is unpacked from the sender's packed bytes on the device, any other goes through
// pinned host memory (or, mpi-direct, device memory) by MPI (rank_links.hpp).
class StagedTransport final : public Transport {
 public:
  StagedTransport(const Ranks& ranks, bool direct, double timeout_seconds)
      : m_links(ranks),
        m_comm(ranks.processes().comm()),
        m_rank(ranks.rank(0)),
        m_direct(direct),
        m_timeout(timeout_seconds) {}
  std::string name() const override { return m_direct ? "mpi-direct" : "staged"; }
  Capabilities capabilities() const override { return {}; }

  void connect(const Connection& connection) override {
    Transport::connect(connection);
    for (const Direction d : {Direction::forward, Direction::reverse}) {
      m_links.check_tags(connection.ops(d), m_comm, name());
      m_source[d == Direction::forward] = m_links.local_sources(connection.ops(d), name());
    }
  }

  void run_async(Direction direction, std::span<void* const> fields,
                 std::span<const GpuStream> streams, ExchangeStats& stats) override {
    const GpuStream stream = streams.front();  // one GPU
    const std::vector<Op>& ops = this->ops(direction);
    const std::vector<int>& source = m_source[direction == Direction::forward];
    const int ranks = m_connection->ranks;
    auto field = [&](const Op& op) { return fields[op.field * ranks + op.rank]; };
    if (m_buffers.size() < ops.size()) m_buffers.resize(ops.size());
    for (int stage = 0; stage < stage_count(ops); ++stage) {
      bool any_remote = false;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage) continue;
        const bool sends_out = m_links.remote(op.send_rank, op);
        any_remote |= sends_out || m_links.remote(op.recv_rank, op);
        if (op.send_rank < 0) continue;
        if (to_self(op, m_links.me(op))) {
          op.self_copy(field(op), stream);
          continue;
        }
        OpBuffers& b = m_buffers[i];
        op.pack(field(op), b.dev_send.at_least(op.send_bytes), 0, op.send_bytes, stream);
        if (op.send_rank != m_links.me(op)) {
          stats.messages += 1;
          stats.bytes_sent += op.send_bytes;
        }
        if (sends_out && !m_direct) {
          HALOX_CUDA_CHECK(cudaMemcpyAsync(b.host_send.at_least(op.send_bytes), b.dev_send.get(),
                                           static_cast<std::size_t>(op.send_bytes),
                                           cudaMemcpyDeviceToHost, stream));
        }
      }
      MessageWait& requests = m_requests;  // reused: no allocation per exchange
      requests.clear();
      if (any_remote) {
        // Wait 1: the packed data (and the previous stage's copies up) are complete.
        {
          trace::Scope scope("wait: stream (packed)", m_rank);
          HALOX_CUDA_CHECK(cudaStreamSynchronize(stream));
        }
        stats.host_waits += 1;
        for (std::size_t i = 0; i < ops.size(); ++i) {
          const Op& op = ops[i];
          if (op.stage != stage) continue;
          OpBuffers& b = m_buffers[i];
          MPI_Request r;
          if (m_links.remote(op.recv_rank, op)) {
            char* in =
                m_direct ? b.dev_recv.at_least(op.recv_bytes) : b.host_recv.at_least(op.recv_bytes);
            HALOX_MPI_CHECK(MPI_Irecv(in, static_cast<int>(op.recv_bytes), MPI_BYTE,
                                      m_links.process(op.recv_rank), m_links.recv_tag(op), m_comm,
                                      &r));
            requests.add({r, op.recv_rank, op.recv_bytes, &op.name});
          }
          if (m_links.remote(op.send_rank, op)) {
            const char* out = m_direct ? b.dev_send.get() : b.host_send.get();
            HALOX_MPI_CHECK(MPI_Isend(out, static_cast<int>(op.send_bytes), MPI_BYTE,
                                      m_links.process(op.send_rank), m_links.send_tag(op), m_comm,
                                      &r));
            requests.add({r, op.send_rank, -1, &op.name});
          }
        }
        // Wait 2: the messages have arrived.
        {
          trace::Scope scope("wait: MPI", m_rank);
          requests.wait({m_rank, m_direct ? "mpi-direct" : "staged", m_timeout});
        }
        stats.host_waits += 1;
      }
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.recv_rank < 0 || to_self(op, m_links.me(op))) continue;
        OpBuffers& b = m_buffers[i];
        // A message from a rank of this process never leaves the device: the sender's bytes.
        const char* in = source[i] >= 0 ? m_buffers[source[i]].dev_send.get() : nullptr;
        if (source[i] < 0) {
          in = b.dev_recv.at_least(op.recv_bytes);
          if (!m_direct) {
            HALOX_CUDA_CHECK(cudaMemcpyAsync(b.dev_recv.get(), b.host_recv.get(),
                                             static_cast<std::size_t>(op.recv_bytes),
                                             cudaMemcpyHostToDevice, stream));
          }
        }
        op.unpack(field(op), in, 0, op.recv_bytes, stream);
      }
    }
    stats.exchanges += 1;
  }

 private:
  RankLinks m_links;
  MPI_Comm m_comm;
  int m_rank;  // this process's first rank (for its messages and traces)
  bool m_direct;
  double m_timeout;
  std::vector<int> m_source[2];  // RankLinks::local_sources per direction (reverse, forward)
  std::vector<OpBuffers> m_buffers;
  MessageWait m_requests;
};

// Seed 002's pipeline: chunk c of a message is packed (caller's stream), copied down (copy-out
// stream), sent as soon as its copy completes, and on the receiver copied up and unpacked
// (copy-in stream) as soon as it arrives, so the stages of different chunks overlap.
class PipelinedTransport final : public Transport {
 public:
  PipelinedTransport(MPI_Comm comm, int rank, std::int64_t chunk_bytes, double timeout_seconds)
      : m_comm(comm), m_rank(rank), m_chunk(chunk_bytes), m_timeout(timeout_seconds) {
    HALOX_CUDA_CHECK(cudaStreamCreateWithFlags(&m_copy_out, cudaStreamNonBlocking));
    HALOX_CUDA_CHECK(cudaStreamCreateWithFlags(&m_copy_in, cudaStreamNonBlocking));
  }
  ~PipelinedTransport() override {
    for (cudaEvent_t e : m_events) cudaEventDestroy(e);
    cudaStreamDestroy(m_copy_out);
    cudaStreamDestroy(m_copy_in);
  }
  std::string name() const override {
    return "pipelined (" + std::to_string(m_chunk / 1024) + " KiB chunks)";
  }

  Capabilities capabilities() const override { return {}; }

  void run_async(Direction direction, std::span<void* const> fields,
                 std::span<const GpuStream> streams, ExchangeStats& stats) override {
    const GpuStream stream = streams.front();  // one GPU
    const std::vector<Op>& ops = this->ops(direction);
    if (m_buffers.size() < ops.size()) m_buffers.resize(ops.size());
    for (int stage = 0; stage < stage_count(ops); ++stage)
      run_stage(ops, stage, fields, stream, stats);
    stats.exchanges += 1;
  }

 private:
  struct Chunk {
    std::size_t op;
    std::int64_t offset, bytes;
    cudaEvent_t copied = nullptr;  // send side: the chunk is in pinned memory
    MPI_Request request = MPI_REQUEST_NULL;
    bool done = false;
  };

  cudaEvent_t event(std::size_t i) {
    while (m_events.size() <= i) {
      cudaEvent_t e;
      HALOX_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      m_events.push_back(e);
    }
    return m_events[i];
  }

  std::int64_t chunk_for(const Op& op) const {
    return std::max(op.granule, m_chunk / op.granule * op.granule);
  }

  // One stage: receives posted, chunks packed and copied down, each sent when its copy is
  // done, each received chunk copied up and unpacked on arrival; the caller's stream then
  // follows the last unpack.
  void run_stage(const std::vector<Op>& ops, int stage, std::span<void* const> fields,
                 GpuStream stream, ExchangeStats& stats) {
    std::size_t events = 0;
    // The copy-in stream unpacks into the field: it must follow the caller's earlier work.
    cudaEvent_t start = event(events++);
    HALOX_CUDA_CHECK(cudaEventRecord(start, stream));
    HALOX_CUDA_CHECK(cudaStreamWaitEvent(m_copy_in, start, 0));
    // Reused between exchanges: no allocation on the exchange path once warm.
    m_sends.clear();
    m_recvs.clear();
    bool any_remote = false;
    for (const Op& op : ops) {
      if (op.stage == stage)
        any_remote |= remote(op.send_rank, m_rank) || remote(op.recv_rank, m_rank);
    }
    if (any_remote) {
      // The previous exchange's copies up read the pinned receive buffers we now reuse.
      HALOX_CUDA_CHECK(cudaStreamSynchronize(m_copy_in));
      stats.host_waits += 1;
    }
    post_receives(ops, stage);
    pack_and_copy_down(ops, stage, fields, stream, events);
    // Messages to myself: unpack from the device send buffer, after its pack.
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.stage == stage && op.recv_rank >= 0 && !remote(op.recv_rank, m_rank) &&
          !to_self(op, m_rank)) {
        op.unpack(fields[op.field], m_buffers[i].dev_send.get(), 0, op.recv_bytes, stream);
      }
    }
    const std::string wrong_size = progress(ops, fields, stats);
    MessageWait& pending = m_pending;
    pending.clear();
    for (Chunk& c : m_sends) pending.add({c.request, ops[c.op].send_rank, -1, &ops[c.op].name});
    pending.wait({m_rank, "pipelined", m_timeout});
    if (!wrong_size.empty()) throw Error(wrong_size);
    // The caller's stream continues after the last unpack.
    cudaEvent_t end = event(events++);
    HALOX_CUDA_CHECK(cudaEventRecord(end, m_copy_in));
    HALOX_CUDA_CHECK(cudaStreamWaitEvent(stream, end, 0));
  }

  // The stage's receives from other ranks, chunk by chunk, into pinned host memory.
  void post_receives(const std::vector<Op>& ops, int stage) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.stage != stage || !remote(op.recv_rank, m_rank)) continue;
      OpBuffers& b = m_buffers[i];
      b.dev_recv.at_least(op.recv_bytes);
      char* in = b.host_recv.at_least(op.recv_bytes);
      const std::int64_t chunk = chunk_for(op);
      for (std::int64_t off = 0; off < op.recv_bytes; off += chunk) {
        Chunk c{i, off, std::min(chunk, op.recv_bytes - off)};
        HALOX_MPI_CHECK(MPI_Irecv(in + off, static_cast<int>(c.bytes), MPI_BYTE, op.recv_rank,
                                  op.tag, m_comm, &c.request));
        m_recvs.push_back(c);
      }
    }
  }

  // The stage's sends: to myself a copy; to another rank, each chunk packed on the caller's
  // stream and copied down on the copy-out stream, its event recorded for progress().
  void pack_and_copy_down(const std::vector<Op>& ops, int stage, std::span<void* const> fields,
                          GpuStream stream, std::size_t& events) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.stage != stage || op.send_rank < 0) continue;
      if (to_self(op, m_rank)) {
        op.self_copy(fields[op.field], stream);
        continue;
      }
      OpBuffers& b = m_buffers[i];
      char* dev = b.dev_send.at_least(op.send_bytes);
      if (!remote(op.send_rank, m_rank)) {
        op.pack(fields[op.field], dev, 0, op.send_bytes, stream);
        continue;
      }
      char* host = b.host_send.at_least(op.send_bytes);
      const std::int64_t chunk = chunk_for(op);
      for (std::int64_t off = 0; off < op.send_bytes; off += chunk) {
        Chunk c{i, off, std::min(chunk, op.send_bytes - off)};
        op.pack(fields[op.field], dev + off, off, c.bytes, stream);
        cudaEvent_t packed = event(events++);
        HALOX_CUDA_CHECK(cudaEventRecord(packed, stream));
        HALOX_CUDA_CHECK(cudaStreamWaitEvent(m_copy_out, packed, 0));
        HALOX_CUDA_CHECK(cudaMemcpyAsync(host + off, dev + off, static_cast<std::size_t>(c.bytes),
                                         cudaMemcpyDeviceToHost, m_copy_out));
        c.copied = event(events++);
        HALOX_CUDA_CHECK(cudaEventRecord(c.copied, m_copy_out));
        m_sends.push_back(c);
      }
    }
  }

  // Until every chunk is sent and received: posts each send when its copy down is done,
  // copies up and unpacks each chunk on arrival; a time-out names the chunk. Returns the
  // first wrong-sized chunk's error (raised once the sends are done), else "".
  std::string progress(const std::vector<Op>& ops, std::span<void* const> fields,
                       ExchangeStats& stats) {
    trace::Scope scope("pipeline progress", m_rank);
    std::size_t next_send = 0, received = 0;
    if (!m_sends.empty() || !m_recvs.empty()) stats.host_waits += 1;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(m_timeout));
    std::string wrong_size;
    while (next_send < m_sends.size() || received < m_recvs.size()) {
      if (std::chrono::steady_clock::now() > deadline) timed_out(ops, wrong_size);
      while (next_send < m_sends.size()) {
        Chunk& c = m_sends[next_send];
        const cudaError_t q = cudaEventQuery(c.copied);
        if (q == cudaErrorNotReady) break;
        HALOX_CUDA_CHECK(q);
        const Op& op = ops[c.op];
        HALOX_MPI_CHECK(MPI_Isend(m_buffers[c.op].host_send.get() + c.offset,
                                  static_cast<int>(c.bytes), MPI_BYTE, op.send_rank, op.tag, m_comm,
                                  &c.request));
        stats.messages += 1;
        stats.bytes_sent += c.bytes;
        ++next_send;
      }
      for (Chunk& c : m_recvs) {
        if (c.done) continue;
        int flag = 0;
        MPI_Status status;
        const int rc = MPI_Test(&c.request, &flag, &status);
        if (rc == MPI_SUCCESS && !flag) continue;
        c.done = true;
        ++received;
        arrived(ops[c.op], c, rc, status, fields, wrong_size);
      }
    }
    return wrong_size;
  }

  // A received chunk: copied up and unpacked, or, of the wrong size, recorded in
  // `wrong_size` (reported once every other message has landed: the buffers must outlive
  // MPI's writes) and not unpacked.
  void arrived(const Op& op, const Chunk& c, int rc, const MPI_Status& status,
               std::span<void* const> fields, std::string& wrong_size) {
    auto where = [&] {
      return "halox: rank " + std::to_string(m_rank) + " on " + op.name +
             " (pipelined transport): the chunk from rank " + std::to_string(op.recv_rank) +
             " at byte " + std::to_string(c.offset);
    };
    if (rc != MPI_SUCCESS) {
      if (wrong_size.empty()) {
        wrong_size = where() + " is larger than the " + std::to_string(c.bytes) +
                     " bytes of this rank's plan (" + mpi_error_text(rc) +
                     "): the ranks' plans differ";
      }
      return;
    }
    int bytes = 0;
    HALOX_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &bytes));
    if (bytes != c.bytes) {
      if (wrong_size.empty()) {
        wrong_size = where() + " has " + std::to_string(bytes) + " bytes, this rank's plan " +
                     std::to_string(c.bytes) + ": the ranks' plans differ";
      }
      return;
    }
    OpBuffers& b = m_buffers[c.op];
    HALOX_CUDA_CHECK(cudaMemcpyAsync(b.dev_recv.get() + c.offset, b.host_recv.get() + c.offset,
                                     static_cast<std::size_t>(c.bytes), cudaMemcpyHostToDevice,
                                     m_copy_in));
    op.unpack(fields[op.field], b.dev_recv.get() + c.offset, c.offset, c.bytes, m_copy_in);
  }

  // The progress's time-out: a wrong-sized chunk's error first, else the first chunk that did
  // not arrive, else the copies down that did not finish.
  [[noreturn]] void timed_out(const std::vector<Op>& ops, const std::string& wrong_size) const {
    if (!wrong_size.empty()) throw Error(wrong_size);
    for (const Chunk& c : m_recvs) {
      if (c.done) continue;
      throw HaloTimeoutError("rank " + std::to_string(m_rank) + " timed out after " +
                                 seconds_text(m_timeout) + " s on " + ops[c.op].name +
                                 " waiting for rank " + std::to_string(ops[c.op].recv_rank) +
                                 " (the chunk at byte " + std::to_string(c.offset) +
                                 " did not arrive; pipelined transport)",
                             m_rank, ops[c.op].recv_rank, ops[c.op].name);
    }
    throw HaloTimeoutError("rank " + std::to_string(m_rank) + " timed out after " +
                           seconds_text(m_timeout) +
                           " s copying its chunks to the host (pipelined transport)");
  }

  MPI_Comm m_comm;
  int m_rank;
  std::int64_t m_chunk;
  double m_timeout;
  cudaStream_t m_copy_out = nullptr, m_copy_in = nullptr;
  std::vector<cudaEvent_t> m_events;
  std::vector<OpBuffers> m_buffers;
  std::vector<Chunk> m_sends, m_recvs;
  MessageWait m_pending;
};

}  // namespace

std::unique_ptr<Transport> make_device_transport(TransportKind kind, const Ranks& ranks,
                                                 std::int64_t chunk_bytes, double timeout_seconds) {
  if (ranks.in_blocks() && kind != TransportKind::staged && kind != TransportKind::mpi_direct) {
    throw Error("halox::GridExchange: the " + to_string(kind) +
                " transport takes one rank per process; over Ranks::blocks (several ranks per "
                "MPI process) device arrays take ipc-fused, ipc-pulse, nvshmem-fused, "
                "nvshmem-pulse, staged or mpi-direct");
  }
  const MPI_Comm comm = ranks.topology().comm();
  const int rank = ranks.topology().rank();
  switch (kind) {
    case TransportKind::staged:
      return std::make_unique<StagedTransport>(ranks, false, timeout_seconds);
    case TransportKind::mpi_direct:
      if (!mpi_is_cuda_aware()) {
        throw Error(
            "halox: the mpi-direct transport needs a CUDA-aware MPI, and this one says it is "
            "not (MPIX_Query_cuda_support); use staged or pipelined");
      }
      return std::make_unique<StagedTransport>(ranks, true, timeout_seconds);
    case TransportKind::pipelined:
      return std::make_unique<PipelinedTransport>(
          comm, rank, chunk_bytes > 0 ? chunk_bytes : tuned_chunk_bytes(), timeout_seconds);
    case TransportKind::nccl:
#if HALOX_HAS_NCCL
      return make_nccl_transport(comm, rank);
#else
      throw Error("halox: the nccl transport needs a build with NCCL (HALOX_ENABLE_NCCL=ON)");
#endif
    case TransportKind::nvshmem_stream:
#if HALOX_HAS_NVSHMEM
      return make_nvshmem_stream_transport(comm, rank, timeout_seconds);
#else
      throw Error("halox: the nvshmem-stream transport needs a build with NVSHMEM");
#endif
    case TransportKind::host:
    case TransportKind::ipc_pulse:
    case TransportKind::ipc_fused:
    case TransportKind::nvshmem_pulse:
    case TransportKind::nvshmem_fused:
    case TransportKind::nccl_device:
    case TransportKind::local_pulse:
    case TransportKind::local_fused:
    case TransportKind::automatic: break;
  }
  throw Error("halox: the host transport cannot move device memory");
}

}  // namespace halox::detail
