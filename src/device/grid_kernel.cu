// The grid kernel's tables and launch (grid_kernel.hpp), and its instantiations without puts.
#include "grid_kernel.hpp"

#include <algorithm>
#include <string>

#include "../common/cuda_check.hpp"
#include "../runtime/env.hpp"
#include "../runtime/nvshmem_runtime_stub.hpp"
#include "../trace/device_trace.hpp"
#include "halox/config.hpp"
#include "halox/error.hpp"

namespace halox::detail::fused_grid {

#if !HALOX_HAS_NVSHMEM
// No NVSHMEM, no peer reached by puts (PeerBlocks never makes one): never called.
void launch_grid_with_puts(int, const GridArgs&, cudaStream_t, bool) {
  no_nvshmem();
}
int grid_resident_blocks_with_puts(bool) {
  no_nvshmem();
}
#endif

GridTable::GridTable(std::vector<FacePlan> plans, long long tile_words)
    : m_face_count(static_cast<int>(plans.size())), m_tile_words(tile_words) {
  const std::size_t n = plans.size();
  std::vector<GridFace> faces;
  std::vector<int> tile_face;
  for (std::size_t i = 0; i < n; ++i) {
    GridFace f = plans[i].face;
    const long long words = f.kind == face_unpack ? f.recv.words : f.send.words;
    if (words >= (1ll << 31)) throw Error("halox: a grid face of 2^31 words or more");
    f.first_tile = m_total_tiles;
    f.tiles = static_cast<int>((words + tile_words - 1) / tile_words);
    m_total_tiles += f.tiles;
    tile_face.insert(tile_face.end(), f.tiles, static_cast<int>(i));
    // The faces of earlier stages into the slot this one reads: what it forwards.
    if (f.kind != face_unpack) {
      for (std::size_t j = 0; j < i; ++j) {
        const GridFace& before = faces[j];
        if (before.kind == face_pack || before.to != f.from || plans[j].stage >= plans[i].stage)
          continue;
        if (f.waits == kMaxFaceWaits)
          throw Error("halox: a grid face forwards from more than " +
                      std::to_string(kMaxFaceWaits) + " faces");
        const int sender = before.kind == face_unpack ? before.peer : before.rank;
        f.wait[f.waits++] = {static_cast<int>(j), before.tiles, sender, before.pulse};
      }
    }
    faces.push_back(f);
  }
  // Counters: done per face, the ticket, blocks packed per face, the proxy's relays per face,
  // then the launch's GridCounters (the first launch: ticket base 0, table epoch 1).
  const std::size_t words = 4 * n + 1;
  HALOX_CUDA_CHECK(cudaMalloc(&m_counters, words * sizeof(u64) + sizeof(GridCounters)));
  std::vector<u64> initial(words, 0);
  initial.push_back(0);
  initial.push_back(1);
  static_assert(sizeof(GridCounters) == 2 * sizeof(u64));
  copy_to_device_now(m_counters, initial.data(), initial.size() * sizeof(u64));
  m_launch = reinterpret_cast<GridCounters*>(m_counters + words);
  u64* packed = m_counters + n + 1;
  u64* ready_relay = packed + n;
  u64* data_relay = ready_relay + n;
  for (std::size_t i = 0; i < n; ++i) {
    GridFace& f = faces[i];
    if (f.kind == face_pack) {
      f.out.packed = packed + i;
      if (plans[i].relayed) f.out.ready_relay = ready_relay + i;
    }
    if (f.kind == face_unpack && plans[i].relayed) f.in.data_relay = data_relay + i;
  }
  if (n > 0) {
    HALOX_CUDA_CHECK(cudaMalloc(&m_faces, n * sizeof(GridFace)));
    copy_to_device_now(m_faces, faces.data(), n * sizeof(GridFace));
  }
  if (m_total_tiles > 0) {
    HALOX_CUDA_CHECK(cudaMalloc(&m_tile_face, tile_face.size() * sizeof(int)));
    copy_to_device_now(m_tile_face, tile_face.data(), tile_face.size() * sizeof(int));
  }
}

GridTable::~GridTable() {
  cudaFree(m_faces);
  cudaFree(m_tile_face);
  cudaFree(m_counters);
}

void GridTable::launch(GridArgs a, int max_blocks, bool puts, bool traced, int trace_object,
                       cudaStream_t stream) {
  a.faces = m_faces;
  a.tile_face = m_tile_face;
  a.face_count = m_face_count;
  a.total_tiles = m_total_tiles;
  a.tile_words = m_tile_words;
  a.done = m_counters;
  a.ticket = m_counters + m_face_count;
  a.counters = m_launch;
  // Ticket 0 frees the staging, then one per tile.
  const int tickets = 1 + m_total_tiles;
  const int blocks = std::max(1, std::min(max_blocks, tickets));
  a.trace =
      traced ? device_trace(static_cast<unsigned long long>(tickets), trace_object) : DeviceTrace{};
  traced = a.trace.records != nullptr;
  if (puts)
    launch_grid_with_puts(blocks, a, stream, traced);
  else
    launch_dependent(traced ? grid_kernel<false, true> : grid_kernel<false, false>, blocks, 256,
                     stream, a);
}

long long grid_tile_words() {
  static const long long words = env_grid_tile_words(256LL * kBatch, 256LL * kBatch);
  return words;
}

int grid_resident_blocks(bool puts, bool traced) {
  if (puts) return grid_resident_blocks_with_puts(traced);
  return traced ? resident_blocks(grid_kernel<false, true>)
                : resident_blocks(grid_kernel<false, false>);
}

}  // namespace halox::detail::fused_grid
