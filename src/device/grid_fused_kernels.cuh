// The fused grid kernel and its device views, instantiated twice like the particle kernels
// (device_halo_kernels.cuh says why): PUTS = false in grid_fused.cu, PUTS = true in
// grid_fused_puts.cu (relocatable code with NVSHMEM, for peers reached by puts). The
// protocol is described in grid_fused.cu. Include only from CUDA sources.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "../pack/pack_device.cuh"
#include "../trace/device_trace.cuh"
#include "device_halo.hpp"
#include "channel.cuh"

namespace halox::detail::fused_grid {

constexpr int kMaxGridOps = kMaxPulses;

// Signal slots at the start of a rank's block. One writer per slot.
struct GridSlots {
  u64 ready[kMaxGridOps];        // written by the rank I send to: its staging for this op is free
  u64 data[kMaxGridOps];         // written by the rank I receive from: my face has arrived
  ProbeSlot probe[kMaxGridOps];  // the self-test's, per op
};
constexpr long long kGridSlotsBytes = (sizeof(GridSlots) + 255) / 256 * 256;

enum GridWaitKind : int { wait_ready = 0, wait_data = 1, wait_probe = 2, wait_unpacked = 3 };

struct GridOpView {
  int send_rank = -1, recv_rank = -1;
  int field = 0;            // which of the launch's fields its faces are in
  int word = 4;             // bytes per load and store of this op's faces
  unsigned deps = 0;        // the ops of earlier stages whose faces this rank receives
  u64* unpacked = nullptr;  // blocks that finished unpacking this op's face (local counter)
  DevicePackView send, recv;
  SendChannel out;  // to send_rank: its staging for this op
  RecvChannel in;   // from recv_rank: my staging for this op
  long long send_bytes = 0;
};

struct GridArgs {
  const GridOpView* views;
  int rank;
  u64 epoch;
  u64 timeout_ns;
  ErrorSink error;
  int system_scope;
  DeviceTrace trace;  // null when tracing is off
  // The exchange kernel's grid row y moves the op of the y-th set bit of `active`: ops that
  // neither send nor receive (no neighbour on that side) get no blocks, which leaves the
  // resident blocks to the others. A mask, not a list: a parameter array indexed by
  // blockIdx.y is copied to local memory (ptxas: 58 registers and 88 bytes of stack, against
  // 48 and 24).
  unsigned active = 0;
};
static_assert(kMaxGridOps <= 32, "GridArgs::active is a 32-bit mask");

// Row y's op: the y-th set bit of the mask.
__device__ __forceinline__ int active_op(unsigned active, unsigned y) {
  for (; y > 0; --y) active &= active - 1;
  return __ffs(static_cast<int>(active)) - 1;
}

// Counts this block's unpack (or copy) of op v's face in, once all its threads are done.
__device__ inline void count_unpacked(const GridOpView& v) {
  __syncthreads();
  if (threadIdx.x == 0) add_acq_rel(v.unpacked, 1ull, false);
}

template <int W, bool PUTS, bool TRACE>
__device__ void move_op(const GridArgs& a, const GridOpView& v, int op, char* field) {
  const bool sys = a.system_scope != 0;
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  auto record = [&](int event) {
    if constexpr (TRACE) trace_record(a.trace, a.rank, op, event, 2, a.epoch);
  };
  if (v.send_rank == a.rank && v.recv_rank == a.rank) {
    // A message to myself (a periodic axis with one rank): straight from the send layout to
    // the receive layout, no staging and no signals.
    record(trace_unpack_begin);
    move_face<W, Move::copy>(v.send, v.recv, first, v.send.words, stride, field, field);
    count_unpacked(v);
    record(trace_unpack_end);
    return;
  }
  const ChannelWait c{a.timeout_ns, a.error, a.rank, sys};
  if (v.send_rank >= 0) {
    record(trace_ready_begin);
    if (!v.out.wait_free(a.epoch, c, v.send_rank, op, wait_ready)) return;
    record(trace_ready_end);
    record(trace_pack_begin);
    move_face<W, Move::pack>(v.send, v.send, first, v.send.words, stride, field,
                             v.out.pack_target<PUTS>());
    v.out.deliver<PUTS, true>(a.epoch, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x),
                              static_cast<std::size_t>(v.send_bytes), sys);
    record(trace_pack_end);
  }
  if (v.recv_rank >= 0) {
    record(trace_data_begin);
    if (!v.in.wait_data(a.epoch, c, v.recv_rank, op, wait_data)) return;
    record(trace_data_end);
    record(trace_unpack_begin);
    move_face<W, Move::unpack>(v.recv, v.recv, first, v.recv.words, stride, v.in.staging, field);
    count_unpacked(v);
    record(trace_unpack_end);
  }
}

// The fields of one launch (several fields in one exchange call); an op's faces are in
// base[its field]. Selected by comparisons, not by indexing the parameter array (which
// would copy it to local memory).
constexpr int kMaxGridFields = 4;
struct GridFields {
  char* base[kMaxGridFields];
};
__device__ __forceinline__ char* field_of(const GridFields& f, int k) {
  return k == 0 ? f.base[0] : k == 1 ? f.base[1] : k == 2 ? f.base[2] : f.base[3];
}

// PUTS: some peer is reached by NVSHMEM puts (see the top of this file). TRACE: device
// events into a.trace; a variant of its own, since the records cost the kernel 16 registers
// (48 -> 64: one resident block fewer per SM) when tracing is off too.
template <bool PUTS, bool TRACE>
__global__ void __launch_bounds__(256, 1) grid_exchange_kernel(GridArgs a, GridFields fields) {
  wait_for_previous_kernel();
  const int op = active_op(a.active, blockIdx.y);
  const GridOpView& v = a.views[op];
  const bool to_myself = v.send_rank == a.rank && v.recv_rank == a.rank;
  if (!to_myself && v.recv_rank >= 0 && blockIdx.x == 0 && threadIdx.x == 0) {
    v.in.release<PUTS>(a.epoch, a.system_scope != 0);
  }
  // The edges and corners this face forwards: every block of the earlier stages' ops has
  // unpacked (each exchange adds gridDim.x per op).
  const u64 unpacked = a.epoch * gridDim.x;
  if (TRACE && v.deps != 0) trace_record(a.trace, a.rank, op, trace_deps_begin, 2, a.epoch);
  for (unsigned deps = v.deps; deps != 0; deps &= deps - 1) {
    const int k = __ffs(static_cast<int>(deps)) - 1;
    if (!block_wait(a.views[k].unpacked, unpacked, a.timeout_ns, a.error, a.rank,
                    a.views[k].recv_rank, k, wait_unpacked, false)) {
      return;
    }
  }
  if (TRACE && v.deps != 0) trace_record(a.trace, a.rank, op, trace_deps_end, 2, a.epoch);
  char* const field = field_of(fields, v.field);
  switch (v.word) {
    case 16: move_op<16, PUTS, TRACE>(a, v, op, field); break;
    case 8: move_op<8, PUTS, TRACE>(a, v, op, field); break;
    default: move_op<4, PUTS, TRACE>(a, v, op, field); break;
  }
}

// The PUTS instantiations (grid_fused_puts.cu; NVSHMEM builds only).
void launch_grid_with_puts(dim3 grid, const GridArgs& a, const GridFields& fields,
                           cudaStream_t stream, bool traced);
/// resident_blocks of the grid kernel with puts (traced or not).
int grid_resident_blocks_with_puts(bool traced);

}  // namespace halox::detail::fused_grid
