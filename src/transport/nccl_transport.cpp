// nccl: grouped ncclSend/ncclRecv per stage on the caller's stream (CPU-launched, no host
// waits), the stream-ordered comparison point of seed 003. NCCL needs one GPU per rank.
#include <cuda_runtime.h>

#include <string>

#include "../common/cuda_check.hpp"
#include "../common/growing_buffer.hpp"
#include "nccl_comm.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "transport.hpp"

namespace halox::detail {

namespace {

class NcclTransport final : public Transport {
 public:
  NcclTransport(MPI_Comm comm, int rank)
      : m_rank(rank), m_comm(make_nccl_comm(comm, rank, "nccl")) {}
  ~NcclTransport() override { ncclCommDestroy(m_comm); }
  std::string name() const override { return "nccl"; }
  Capabilities capabilities() const override { return {false, false, false, 0}; }

  void run_async(Direction direction, std::span<void* const> fields,
                 std::span<const GpuStream> streams, ExchangeStats& stats) override {
    const GpuStream stream = streams.front();  // one GPU
    const std::vector<Op>& ops = this->ops(direction);
    if (m_send.size() < ops.size()) {
      m_send.resize(ops.size());
      m_recv.resize(ops.size());
    }
    for (int stage = 0; stage < stage_count(ops); ++stage) {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage == stage && op.send_rank >= 0) {
          op.pack(fields[op.field], m_send[i].at_least(op.send_bytes), 0, op.send_bytes, stream);
        }
      }
      HALOX_NCCL_CHECK(ncclGroupStart());
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage) continue;
        if (op.send_rank >= 0 && op.send_rank != m_rank) {
          HALOX_NCCL_CHECK(ncclSend(m_send[i].get(), static_cast<std::size_t>(op.send_bytes),
                                    ncclUint8, op.send_rank, m_comm, stream));
          stats.messages += 1;
          stats.bytes_sent += op.send_bytes;
        }
        if (op.recv_rank >= 0 && op.recv_rank != m_rank) {
          HALOX_NCCL_CHECK(ncclRecv(m_recv[i].at_least(op.recv_bytes),
                                    static_cast<std::size_t>(op.recv_bytes), ncclUint8,
                                    op.recv_rank, m_comm, stream));
        }
      }
      HALOX_NCCL_CHECK(ncclGroupEnd());
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.stage != stage || op.recv_rank < 0) continue;
        const char* in =
            static_cast<const char*>(op.recv_rank == m_rank ? m_send[i].get() : m_recv[i].get());
        op.unpack(fields[op.field], in, 0, op.recv_bytes, stream);
      }
    }
    stats.exchanges += 1;
  }

 private:
  int m_rank;
  ncclComm_t m_comm;
  std::vector<DeviceBuffer> m_send, m_recv;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(MPI_Comm comm, int rank) {
  return std::make_unique<NcclTransport>(comm, rank);
}

}  // namespace halox::detail
