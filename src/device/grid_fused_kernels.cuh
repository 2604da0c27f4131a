// The grid kernel: one kernel for every grid face of every rank in this process, whether its
// other end is a rank of this process or of another. Instantiated twice like the particle
// kernels (device_halo_kernels.cuh says why): PUTS = false in grid_kernel.cu, PUTS = true in
// grid_fused_puts.cu (relocatable code with NVSHMEM, for peers reached by puts). Include only
// from CUDA sources.
//
// A launch moves a table of faces, in stage order. A face is one of
//   copy    both ends in this process: straight from the sender's field at its send type to
//           the receiver's at its receive type (Ranks::local, or a periodic axis with one rank)
//   pack    my face to a rank of another process: into its staging, over the device channel
//   unpack  my face from a rank of another process: out of my staging into the field
// Faces are cut into tiles; blocks take tickets in order: ticket 0 frees every unpack face's
// staging for this exchange (RecvChannel::release), then the tiles, stage by stage, a
// stage's copy and pack tiles before its unpack tiles. A tile of a later stage waits on the
// device only for the faces of earlier stages into its sender (the edges and corners it
// forwards); a pack tile waits for its receiver's staging to be free; an unpack tile for the
// face's data. The data signal is set by the face's last tile to finish packing.
//
// No deadlock without co-residency: a block waits only for tickets below its own, here or,
// over a channel, in the peer's launch (whose tickets run in the same order: releases, then
// per stage packs before unpacks), and blocks holding those run and finish without waiting
// for anything later. What must be resident is one block of each process sharing the GPU:
// the transports size the grid to their share of it. Every wait has a time-out that records the
// rank, the peer and the pulse.
//
// A tile's set-up is a chain of dependent loads, and the tables are cold by the time the
// exchange runs (the updates before it stream hundreds of MB through L2): so a tile finds its
// face in one load (tile_face), the face's waits carry what they test, and the face's
// canonical pieces are copied into shared memory in one round, where each word's piece search
// and offsets then read them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "../pack/pack_device.cuh"
#include "../trace/device_trace.cuh"
#include "device_halo.hpp"
#include "channel.cuh"

namespace halox::detail::fused_grid {

constexpr int kMaxGridOps = kMaxPulses;

// Signal slots at the start of a rank's block (ranks of other processes). One writer per slot.
struct GridSlots {
  u64 ready[kMaxGridOps];        // written by the rank I send to: its staging for this op is free
  u64 data[kMaxGridOps];         // written by the rank I receive from: my face has arrived
  ProbeSlot probe[kMaxGridOps];  // the self-test's, per op
};
constexpr long long kGridSlotsBytes = (sizeof(GridSlots) + 255) / 256 * 256;

// What a wait waited for, in its time-out's record.
enum GridWaitKind : int { wait_ready = 0, wait_data = 1, wait_probe = 2, wait_forwarded = 3 };

enum FaceKind : int { face_copy = 0, face_pack = 1, face_unpack = 2 };

// The faces of earlier stages into a face's sender (2 per stage with one pulse each).
constexpr int kMaxFaceWaits = 8;

// A face of an earlier stage that this face forwards from: all its tiles must be done.
struct FaceWait {
  int face, tiles;  // its index and tile count
  int peer, pulse;  // for the time-out's record
};

struct GridFace {
  int kind = face_copy;
  int word = 4;        // bytes per load and store
  int from = 0;        // the field slot read (copy, pack)
  int to = 0;          // the field slot written (copy, unpack)
  int rank = 0;        // who waits, in records: the sender of copy and pack, the receiver of unpack
  int peer = 0;        // the other end (records)
  int pulse = 0;       // the op or pulse (records and traces)
  int first_tile = 0;  // its tiles' tickets start at 1 + first_tile
  int tiles = 0;
  int waits = 0;
  FaceWait wait[kMaxFaceWaits];
  DevicePackView send, recv;  // the typed sides: send (copy, pack), recv (copy, unpack)
  SendChannel out;            // pack: to the peer's staging
  RecvChannel in;             // unpack: my staging
  long long bytes = 0;        // the message's bytes (a put moves them whole)
};

// Field slots per launch: ranks of this process times fields.
constexpr int kMaxGridSlots = 64;

// The counters a launch takes from the device, not from its arguments, so that a launch
// captured in a CUDA graph moves a new exchange at every replay: read by each block after
// wait_for_previous_kernel, advanced for the next launch by the block that draws the
// launch's last ticket (every block has read them by then: it drew a ticket after).
struct GridCounters {
  u64 ticket_base;  // the value of the ticket counter when the launch starts
  u64 table_epoch;  // exchanges of this table, the launch's included (for `done`)
};

// The values a block works with, read once at its start.
struct LaunchCounts {
  u64 ticket_base, table_epoch;
  u64 epoch;  // the transport's exchange counter (for the channels)
};

struct GridArgs {
  const GridFace* faces;
  const int* tile_face;  // per tile: its face
  int face_count;
  int total_tiles;
  long long tile_words;
  u64* done;               // per face: tiles finished, over all exchanges of this table
  u64* ticket;             // tickets handed out, over all exchanges of this table
  GridCounters* counters;  // the table's (device memory)
  u64* epoch;              // the transport's exchange counter (device memory; null: no channels)
  u64 timeout_ns;
  ErrorSink error;
  int system_scope;   // a peer on another GPU
  int stall_from;     // testing: copy faces from this slot are not moved (-1: none)
  DeviceTrace trace;  // null when tracing is off: per tile kTraceSlots slots
  char* field[kMaxGridSlots];
};

// Copies `pieces` canonical pieces to `to` (shared memory) with the block's threads, as words.
constexpr int kDescWords = static_cast<int>(sizeof(DeviceDesc) / sizeof(u64));
static_assert(sizeof(DeviceDesc) % sizeof(u64) == 0, "DeviceDesc is copied as u64 words");
__device__ inline const DeviceDesc* copy_pieces(u64* to, const DeviceDesc* from, int pieces) {
  for (int i = static_cast<int>(threadIdx.x); i < pieces * kDescWords;
       i += static_cast<int>(blockDim.x)) {
    to[i] = reinterpret_cast<const u64*>(from)[i];
  }
  return reinterpret_cast<const DeviceDesc*>(to);
}
// Canonical pieces per side that a tile copies into shared memory (more: read in place).
constexpr int kSharedPieces = 8;

// A trace record of tile `tile` of face f (its own slots: a block moves many tiles).
template <bool TRACE>
__device__ __forceinline__ void record(const GridArgs& a, u64 epoch, const GridFace& f,
                                       long long ticket, int tile, int event) {
  if constexpr (TRACE) {
    trace_record_in(a.trace, static_cast<unsigned long long>(ticket), tile, f.rank, f.pulse, event,
                    2, epoch);
  }
}

// Words [first, end) of face f, kBatch words in flight per thread whatever the word size (a
// tile is sized for that). false when a wait timed out.
template <int W, bool PUTS, bool TRACE>
__device__ bool move_tile(const GridArgs& a, u64 epoch, const GridFace& f,
                          const DevicePackView& send, const DevicePackView& recv, long long ticket,
                          int tile, long long first, long long end) {
  const long long me = first + threadIdx.x;
  const bool sys = a.system_scope != 0;
  const ChannelWait c{a.timeout_ns, a.error, f.rank, sys};
  switch (f.kind) {
    case face_copy:
      record<TRACE>(a, epoch, f, ticket, tile, trace_unpack_begin);
      move_face<W, Move::copy, unsigned, kBatch>(send, recv, me, end, blockDim.x, a.field[f.from],
                                                 a.field[f.to]);
      record<TRACE>(a, epoch, f, ticket, tile, trace_unpack_end);
      return true;
    case face_pack:
      record<TRACE>(a, epoch, f, ticket, tile, trace_ready_begin);
      if (!f.out.wait_free(epoch, c, f.peer, f.pulse, wait_ready, tile == 0)) return false;
      record<TRACE>(a, epoch, f, ticket, tile, trace_ready_end);
      record<TRACE>(a, epoch, f, ticket, tile, trace_pack_begin);
      move_face<W, Move::pack, unsigned, kBatch>(send, send, me, end, blockDim.x, a.field[f.from],
                                                 f.out.pack_target<PUTS>());
      f.out.deliver<PUTS, true>(epoch, tile, f.tiles, static_cast<std::size_t>(f.bytes), sys);
      record<TRACE>(a, epoch, f, ticket, tile, trace_pack_end);
      return true;
    default:
      record<TRACE>(a, epoch, f, ticket, tile, trace_data_begin);
      if (!f.in.wait_data(epoch, c, f.peer, f.pulse, wait_data, tile == 0)) return false;
      record<TRACE>(a, epoch, f, ticket, tile, trace_data_end);
      record<TRACE>(a, epoch, f, ticket, tile, trace_unpack_begin);
      move_face<W, Move::unpack, unsigned, kBatch>(recv, recv, me, end, blockDim.x, f.in.staging,
                                                   a.field[f.to]);
      record<TRACE>(a, epoch, f, ticket, tile, trace_unpack_end);
      return true;
  }
}

// PUTS: some peer is reached by NVSHMEM puts (see the top of this file). TRACE: device
// events into a.trace; a variant of its own, since the records cost registers when tracing
// is off too. Four blocks per SM, as Ranks::local's tile kernel had before it served both
// localities: 64 registers, and ptxas spills some of the tile's set-up (1 block per SM
// would take 86 registers without spills, and hold a third of the words in flight).
template <bool PUTS, bool TRACE>
__global__ void __launch_bounds__(256, 4) grid_kernel(GridArgs a) {
  __shared__ long long claimed;
  __shared__ int ok;
  // The tile's face's pieces, send side then receive side (raw words: DeviceDesc has
  // default member initialisers, which a __shared__ variable may not).
  __shared__ u64 pieces[2][kSharedPieces * kDescWords];
  __shared__ LaunchCounts counts;
  wait_for_previous_kernel();
  if (threadIdx.x == 0) {
    // An expired wait of an earlier launch left the counters behind: the exchange is
    // unusable, its recorded error says why, and this launch moves nothing.
    ok = *reinterpret_cast<volatile int*>(a.error.claim) == 0;
    counts.ticket_base = reinterpret_cast<volatile GridCounters*>(a.counters)->ticket_base;
    counts.table_epoch = reinterpret_cast<volatile GridCounters*>(a.counters)->table_epoch;
    counts.epoch = a.epoch != nullptr ? *reinterpret_cast<volatile u64*>(a.epoch) : 0;
  }
  __syncthreads();
  if (!ok) return;
  const u64 epoch = counts.epoch;
  for (;;) {
    __syncthreads();  // every thread is done with the previous tile's shared values
    if (threadIdx.x == 0)
      claimed = static_cast<long long>(atomicAdd(a.ticket, 1ull) - counts.ticket_base);
    __syncthreads();
    const long long t = claimed;
    if (t == 0) {
      // My staging is free for this exchange: the launch before this one on the stream (the
      // last to read it) is done.
      for (int k = static_cast<int>(threadIdx.x); k < a.face_count;
           k += static_cast<int>(blockDim.x)) {
        if (a.faces[k].kind == face_unpack) a.faces[k].in.release<PUTS>(epoch, a.system_scope);
      }
      continue;
    }
    if (t < 0) return;  // never, while the counters and the ticket agree
    if (t > a.total_tiles) {
      // Past the last tile. Each block draws one such ticket: the last of them is the
      // launch's last, and its block sets the counters for the next launch.
      if (threadIdx.x == 0 && t == a.total_tiles + static_cast<long long>(gridDim.x)) {
        a.counters->ticket_base = counts.ticket_base + 1 + a.total_tiles + gridDim.x;
        a.counters->table_epoch = counts.table_epoch + 1;
        if (a.epoch != nullptr) *a.epoch = epoch + 1;
      }
      return;
    }
    const int k = a.tile_face[t - 1];
    const GridFace& f = a.faces[k];
    const int tile = static_cast<int>(t - 1 - f.first_tile);
    if (f.kind == face_copy && f.from == a.stall_from)
      continue;  // testing: neither moved nor counted
    DevicePackView send = f.send, recv = f.recv;
    // The pieces go to shared memory while thread 0 waits for the faces this one forwards.
    if (send.pieces <= kSharedPieces && recv.pieces <= kSharedPieces) {
      if (f.kind != face_unpack) send.descs = copy_pieces(pieces[0], send.descs, send.pieces);
      if (f.kind != face_pack) recv.descs = copy_pieces(pieces[1], recv.descs, recv.pieces);
    }
    if (threadIdx.x == 0) {
      ok = 1;
      if (TRACE && f.waits > 0) record<TRACE>(a, epoch, f, t, tile, trace_deps_begin);
      for (int w = 0; w < f.waits && ok; ++w) {
        const FaceWait& before = f.wait[w];
        ok = wait_for(&a.done[before.face], counts.table_epoch * static_cast<u64>(before.tiles),
                      a.timeout_ns, a.error, f.rank, before.peer, before.pulse, wait_forwarded,
                      false);
      }
      if (TRACE && f.waits > 0) record<TRACE>(a, epoch, f, t, tile, trace_deps_end);
    }
    __syncthreads();
    if (!ok) return;
    const long long first = static_cast<long long>(tile) * a.tile_words;
    const long long words = f.kind == face_unpack ? recv.words : send.words;
    const long long end = words < first + a.tile_words ? words : first + a.tile_words;
    bool moved;
    switch (f.word) {
      case 16:
        moved = move_tile<16, PUTS, TRACE>(a, epoch, f, send, recv, t, tile, first, end);
        break;
      case 8:
        moved = move_tile<8, PUTS, TRACE>(a, epoch, f, send, recv, t, tile, first, end);
        break;
      case 4:
        moved = move_tile<4, PUTS, TRACE>(a, epoch, f, send, recv, t, tile, first, end);
        break;
      case 2:
        moved = move_tile<2, PUTS, TRACE>(a, epoch, f, send, recv, t, tile, first, end);
        break;
      default:
        moved = move_tile<1, PUTS, TRACE>(a, epoch, f, send, recv, t, tile, first, end);
        break;
    }
    if (!moved) return;
    if (f.kind != face_pack) {
      __syncthreads();
      if (threadIdx.x == 0)
        add_acq_rel(&a.done[k], 1ull, false);  // the tile's stores, then its count
    }
  }
}

// The PUTS instantiations (grid_fused_puts.cu; NVSHMEM builds only).
void launch_grid_with_puts(int blocks, const GridArgs& a, cudaStream_t stream, bool traced);
/// resident_blocks of the grid kernel with puts (traced or not).
int grid_resident_blocks_with_puts(bool traced);

}  // namespace halox::detail::fused_grid
