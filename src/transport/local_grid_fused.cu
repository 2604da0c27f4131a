// The local-fused grid exchange (Ranks::local): every face of every rank of the process in one
// launch. The faces are cut into tiles; blocks take tiles in ticket order (stage Z's first,
// then Y's, then X's) and copy each straight from the sender's array to the receiver's in the
// widest word the face allows. A tile of a later stage waits on the device only for the
// faces its sender receives in the earlier stages (the edges and corners it forwards), not
// for the whole earlier stage, and not for the host.
//
// No deadlock without co-residency: a block waits only for tiles with smaller tickets, which
// running blocks hold and finish without waiting for anything later. Every wait has a
// time-out that records the rank, the peer and the pulse; the next exchange throws.
//
// A tile's set-up is a chain of dependent loads, and the tables are cold by the time the
// exchange runs (the updates before it stream hundreds of MB through L2): so a tile finds
// its face in one load (tile_face) rather than a scan of the faces (up to 47 loads in a row:
// the 8-rank LBM's phi exchange took 57 us for 3 MB), the face's waits carry what they test,
// and the face's canonical pieces are copied into shared memory in one round, where each
// word's piece search and offsets then read them.
#include "local_grid_fused.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>

#include "../common/cuda_check.hpp"
#include "../device/channel.cuh"
#include "../pack/pack_device.cuh"
#include "halox/error.hpp"
#include "halox/exchange.hpp"
#include "../runtime/env.hpp"

namespace halox::detail {

namespace {

constexpr int kMaxLocalRanks = 64;
constexpr int kMaxWaits =
    8;  // the faces of earlier stages into a sender (2 per stage with one pulse each)
// Words per tile: 256 threads with kBatch words in flight each, once. Measured on the 8-rank
// LBM (docs/PERFORMANCE.md, 41e61ea): against two rounds per tile, the exchange kernels took
// 15 and 32 us, not 22 and 35 (1x2x4), and 30 and 175, not 40 and 192 (2x2x2); four and eight
// rounds were slower still. The environment variable HALOX_LOCAL_TILE_WORDS, a multiple of
// 256 * kBatch, sets it for measurements of the choice.
constexpr long long kTileWords = 256LL * kBatch;

long long tile_words_from_environment() {
  return detail::env_local_tile_words(256LL * kBatch, kTileWords);
}
// Canonical pieces per side that a tile copies into shared memory (more: read in place).
constexpr int kSharedPieces = 8;

// A face of an earlier stage that this face forwards from: all its tiles must be done.
struct FaceWait {
  int face, tiles;  // its index and tile count
  int from, pulse;  // its sender and pulse, for the time-out's report
};

struct FaceView {
  DevicePackView send, recv;
  int word;  // bytes per word for this face
  int from, to, pulse;
  int first_tile, tiles;
  int waits;
  FaceWait wait[kMaxWaits];
};

struct LocalArgs {
  const FaceView* faces;
  const int* tile_face;  // per tile: the face it belongs to
  int total_tiles;
  long long tile_words;
  u64* done;        // per face: tiles finished, over all exchanges of this table
  u64* ticket;      // tickets handed out, over all exchanges of this table
  u64 ticket_base;  // the value of *ticket when this launch started
  u64 epoch;        // exchanges of this table, this one included
  u64 timeout_ns;
  ErrorSink error;
  int stall_rank;  // testing: this rank's faces are not moved
  char* field[kMaxLocalRanks];
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

__global__ void __launch_bounds__(256) local_grid_kernel(LocalArgs a) {
  __shared__ long long claimed;
  __shared__ int ok;
  // The tile's face's pieces, send side then receive side (raw words: DeviceDesc has
  // default member initialisers, which a __shared__ variable may not).
  __shared__ u64 pieces[2][kSharedPieces * kDescWords];
  wait_for_previous_kernel();
  for (;;) {
    __syncthreads();  // every thread is done with the previous tile's shared values
    if (threadIdx.x == 0)
      claimed = static_cast<long long>(atomicAdd(a.ticket, 1ull) - a.ticket_base);
    __syncthreads();
    const long long t = claimed;
    if (t >= a.total_tiles) return;
    const int k = a.tile_face[t];
    const FaceView& f = a.faces[k];
    DevicePackView send = f.send, recv = f.recv;
    // The pieces go to shared memory while thread 0 waits for the faces this one forwards.
    const bool shared = send.pieces <= kSharedPieces && recv.pieces <= kSharedPieces;
    if (shared) {
      send.descs = copy_pieces(pieces[0], send.descs, send.pieces);
      recv.descs = copy_pieces(pieces[1], recv.descs, recv.pieces);
    }
    if (threadIdx.x == 0) {
      ok = 1;
      for (int w = 0; w < f.waits && ok; ++w) {
        const FaceWait& before = f.wait[w];
        ok = wait_for(&a.done[before.face], a.epoch * static_cast<u64>(before.tiles), a.timeout_ns,
                      a.error, f.from, before.from, before.pulse, 0, false);
      }
    }
    __syncthreads();
    if (!ok) return;
    if (f.from != a.stall_rank) {
      const long long first = (t - f.first_tile) * a.tile_words;
      const long long end = send.words < first + a.tile_words ? send.words : first + a.tile_words;
      const char* src = a.field[f.from];
      char* dst = a.field[f.to];
      const long long me = first + threadIdx.x;
      // kBatch words in flight whatever the word size: a tile is sized for that (tile_words),
      // and this kernel's many blocks are not capped to stay resident.
      switch (f.word) {
        case 16:
          move_face<16, Move::copy, unsigned, kBatch>(send, recv, me, end, blockDim.x, src, dst);
          break;
        case 8:
          move_face<8, Move::copy, unsigned, kBatch>(send, recv, me, end, blockDim.x, src, dst);
          break;
        case 4:
          move_face<4, Move::copy, unsigned, kBatch>(send, recv, me, end, blockDim.x, src, dst);
          break;
        case 2:
          move_face<2, Move::copy, unsigned, kBatch>(send, recv, me, end, blockDim.x, src, dst);
          break;
        default:
          move_face<1, Move::copy, unsigned, kBatch>(send, recv, me, end, blockDim.x, src, dst);
          break;
      }
      __syncthreads();
      if (threadIdx.x == 0)
        add_acq_rel(&a.done[k], 1ull, false);  // the tile's stores, then its count
    }
  }
}

}  // namespace

struct LocalGridFused::Impl {
  // The device tables of one alignment of the ranks' arrays (each face's word follows from
  // where the arrays start: f and its copy for the next step share one).
  struct Table {
    FaceView* faces = nullptr;
    int* tile_face = nullptr;
    u64* counters = nullptr;  // done per face, then the ticket
    int total_tiles = 0;
    u64 ticket_base = 0, epoch = 0;
  };
  std::vector<LocalFace> faces;
  int arrays = 0;
  std::map<std::vector<int>, Table> tables;  // per alignment of the ranks' arrays
  std::vector<int> key;                      // table_for's scratch
  double timeout_seconds;
  int stall_rank;
  int ranks_per_field = 1;
  int blocks = 0;  // resident blocks of the whole GPU
  long long tile_words = kTileWords;
  ErrorChannel errors;

  Table& table_for(std::span<void* const> fields) {
    key.clear();  // a member: no allocation per exchange
    for (void* p : fields)
      key.push_back(static_cast<int>(reinterpret_cast<std::uintptr_t>(p) & 15));
    auto it = tables.find(key);
    if (it != tables.end()) return it->second;
    std::vector<FaceView> views;
    std::vector<int> tile_face;
    int tiles = 0;
    for (std::size_t i = 0; i < faces.size(); ++i) {
      const LocalFace& lf = faces[i];
      FaceView v{};
      v.word = std::min(device_pack_word(lf.send_type, 1, fields[lf.from]),
                        device_pack_word(lf.recv_type, 1, fields[lf.to]));
      v.send = device_pack_view(lf.send_type, 1, v.word);
      v.recv = device_pack_view(lf.recv_type, 1, v.word);
      v.from = lf.from;
      v.to = lf.to;
      v.pulse = lf.pulse;
      v.first_tile = tiles;
      v.tiles = static_cast<int>((v.send.words + tile_words - 1) / tile_words);
      tiles += v.tiles;
      tile_face.insert(tile_face.end(), v.tiles, static_cast<int>(i));
      // The faces of earlier stages into my sender: what this face forwards.
      for (std::size_t j = 0; j < i; ++j) {
        if (faces[j].to != lf.from || faces[j].stage >= lf.stage) continue;
        if (v.waits == kMaxWaits)
          throw Error("halox::GridExchange (local-fused): too many forwarded faces");
        const FaceView& before = views[j];
        v.wait[v.waits++] = {static_cast<int>(j), before.tiles, before.from, before.pulse};
      }
      views.push_back(v);
    }
    Table t;
    t.total_tiles = tiles;
    HALOX_CUDA_CHECK(cudaMalloc(&t.faces, views.size() * sizeof(FaceView)));
    copy_to_device_now(t.faces, views.data(), views.size() * sizeof(FaceView));
    if (tiles > 0) {
      HALOX_CUDA_CHECK(cudaMalloc(&t.tile_face, tile_face.size() * sizeof(int)));
      copy_to_device_now(t.tile_face, tile_face.data(), tile_face.size() * sizeof(int));
    }
    HALOX_CUDA_CHECK(cudaMalloc(&t.counters, (views.size() + 1) * sizeof(u64)));
    fill_device_now(t.counters, 0, (views.size() + 1) * sizeof(u64));
    return tables.emplace(key, t).first->second;
  }

  // `rank` as an error record names it (in_ranks): the face's sender or receiver in any field.
  std::string pulse_name(int rank, int pulse) const {
    for (const LocalFace& f : faces) {
      if (f.pulse == pulse && (f.from % ranks_per_field == rank || f.to % ranks_per_field == rank))
        return f.name;
    }
    return "pulse " + std::to_string(pulse);
  }

  // A probe over every face's link both ways (from -> to, then to -> from: links 2i and
  // 2i + 1 of face i), in one launch, waited for here. Thread j sends link j and receives
  // link j ^ 1, the same face the other way, into slots of its own.
  void self_test() {
    if (faces.empty()) return;
    ProbeSlot* slots = nullptr;
    const std::size_t slot_bytes = 2 * faces.size() * sizeof(ProbeSlot);
    HALOX_CUDA_CHECK(cudaMalloc(&slots, slot_bytes));
    fill_device_now(slots, 0, slot_bytes);
    std::vector<ProbeLink> links;
    for (const LocalFace& f : faces) {
      for (int back = 0; back < 2; ++back) {
        const int j = static_cast<int>(links.size());
        ProbeLink& link = links.emplace_back();
        link.rank = back == 0 ? f.from : f.to;
        link.peer = back == 0 ? f.to : f.from;
        link.pulse = f.pulse;
        link.kind = 1 - back;  // what this thread receives: the link back, or the face's link
        link.out = slots + j;
        link.out_link = j;
        link.in = slots + (j ^ 1);
        link.in_link = j ^ 1;
      }
    }
    // A stalled rank (tests) neither sends nor receives.
    std::erase_if(links, [this](const ProbeLink& l) { return l.rank == stall_rank; });
    ProbeRun probes;
    try {
      probes.launch(links, 1, timeout_seconds, errors.sink(), false, false);
      probes.finish();
    } catch (...) {
      cudaFree(slots);
      throw;
    }
    cudaFree(slots);
    check_device_error(in_ranks(errors.record()), wording(true));
  }

  void check() const { check_device_error(in_ranks(errors.record()), wording(false)); }

  // Several fields run as one grid of ranks_per_field * fields ranks (field f's rank r is
  // f * ranks_per_field + r): a record names the ranks themselves.
  ErrorRecord in_ranks(const volatile ErrorRecord& r) const {
    ErrorRecord e{r.flag, r.rank, r.peer, r.pulse, r.kind, r.seen, r.expected};
    e.rank %= ranks_per_field;
    e.peer %= ranks_per_field;
    return e;
  }

  // The self-test's waits are for its probes (kind 0: the face's link, 1: the link back);
  // the exchange's for the tiles of a face a tile forwards.
  ErrorWording wording(bool self_test) const {
    ErrorWording w;
    w.engine = "local-fused";
    w.timeout_seconds = timeout_seconds;
    w.pulse = [this](int rank, int pulse) { return pulse_name(rank, pulse); };
    if (arrays > ranks_per_field) {
      w.engine += " (" + std::to_string(arrays / ranks_per_field) + " fields)";
    }
    if (self_test) {
      w.waited_for = [](int kind) {
        return std::string(kind == 0 ? "the face's link" : "the link back");
      };
      w.is_probe = [](int) { return true; };
    } else {
      w.waited_for = [](int) { return std::string("a face it forwards"); };
      w.progress = [](const ErrorRecord& e) {
        return std::to_string(e.seen) + " of " + std::to_string(e.expected) + " tiles arrived";
      };
    }
    return w;
  }
};

LocalGridFused::LocalGridFused(std::vector<LocalFace> faces, int arrays,
                               const ExchangeOptions& options, int ranks_per_field)
    : m_impl(std::make_unique<Impl>()) {
  Impl& m = *m_impl;
  m.ranks_per_field = ranks_per_field;
  if (arrays > kMaxLocalRanks) {
    throw Error("halox::GridExchange (local-fused): the fused kernel takes at most " +
                std::to_string(kMaxLocalRanks) + " ranks times fields, not " +
                std::to_string(arrays));
  }
  m.arrays = arrays;
  m.faces = std::move(faces);
  m.timeout_seconds = options.timeout_seconds;
  m.stall_rank = options.testing.stall_rank;
  m.blocks = env_local_blocks(std::max(1, resident_blocks(local_grid_kernel)));
  m.tile_words = tile_words_from_environment();
  if (options.self_test) m.self_test();
}

int LocalGridFused::max_ranks() {
  return kMaxLocalRanks;
}

LocalGridFused::~LocalGridFused() {
  Impl& m = *m_impl;
  cudaDeviceSynchronize();
  for (auto& [key, t] : m.tables) {
    cudaFree(t.faces);
    cudaFree(t.tile_face);
    cudaFree(t.counters);
  }
}

void LocalGridFused::exchange(std::span<void* const> fields, GpuStream stream) {
  Impl& m = *m_impl;
  m.check();
  if (m.faces.empty()) return;
  Impl::Table& t = m.table_for(fields);
  if (t.total_tiles == 0) return;  // faces of no words
  LocalArgs a{};
  a.faces = t.faces;
  a.tile_face = t.tile_face;
  a.total_tiles = t.total_tiles;
  a.tile_words = m.tile_words;
  a.done = t.counters;
  a.ticket = t.counters + m.faces.size();
  a.ticket_base = t.ticket_base;
  a.epoch = ++t.epoch;
  a.timeout_ns = static_cast<u64>(m.timeout_seconds * 1e9);
  a.error = m.errors.sink();
  a.stall_rank = m.stall_rank;
  for (std::size_t r = 0; r < fields.size(); ++r) a.field[r] = static_cast<char*>(fields[r]);
  const int blocks = std::min(m.blocks, t.total_tiles);
  launch_dependent(local_grid_kernel, blocks, 256, stream, a);
  // Each block takes tickets until it draws one past the last tile.
  t.ticket_base += static_cast<u64>(t.total_tiles + blocks);
}

}  // namespace halox::detail
