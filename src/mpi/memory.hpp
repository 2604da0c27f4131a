// The MPI interposer's view of a user buffer: host memory (given to the MPI library as it
// is), device memory (moved through host staging by halox), or, for the tests on machines
// without a GPU, "pretend" device memory: host pages the program cannot touch, reached only
// through this layer's copies, as device memory is.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "halox/datatype.hpp"
#include "halox/device.hpp"

namespace halox::mpi {

enum class Memory { host, device, pretend };

/// `base` + `offset` bytes, by integer arithmetic: a buffer of MPI_BOTTOM with a type of
/// absolute addresses is a valid address to MPI but pointer arithmetic from null (or, for
/// a base below the data, wrapping around the address space: UBSan).
template <class T>
T* address(T* base, std::int64_t offset) {
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(base) +
                              static_cast<std::uintptr_t>(offset));
}

/// The interposer's environment knobs (runtime/env.hpp) and tuning file, read once. A malformed
/// value leaves them all at their defaults and `error` saying which; MPI_Init reports it (the calls
/// cannot throw into C).
struct Knobs {
  bool report = false;   ///< HALOX_MPI_REPORT
  bool pretend = false;  ///< HALOX_MPI_PRETEND_DEVICE
  bool ipc = true;       ///< HALOX_MPI_IPC
  double timeout = 60;   ///< HALOX_MPI_TIMEOUT, seconds
  /// The tuning file's "chunk_bytes" and "pipelined_from_bytes" (halox/tuning.hpp), 0 where
  /// there is no file: the chunked pipeline's chunk and the size it starts at.
  std::int64_t tuned_chunk = 0;
  std::int64_t tuned_chunked_from = 0;
  std::string error;
};
const Knobs& knobs();

/// Calls `done` until it returns true, at most HALOX_MPI_TIMEOUT (plus `grace` seconds); false
/// when that passed (the interposer's own waits, each of which then names what it waited for).
template <class Done>
bool poll_bounded(Done&& done, double grace = 0) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(knobs().timeout + grace);
  for (int spins = 0;; ++spins) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (spins > 1000) std::this_thread::yield();
  }
}

/// Where the byte at `p` lives. Managed memory counts as host memory: the CPU reads it, so the
/// MPI library can be given it (the driver migrates its pages). Not detail::is_device_memory:
/// that one counts managed memory as device memory, and its runtime call would make a CUDA
/// context in every MPI program the interposer is preloaded into.
Memory memory_of(const void* p);

/// Whether any buffer of this process can be device memory by now: a CUDA context is in use
/// (or pretend memory is on).
bool device_memory_possible();

/// MPI_Init's part: the thread level MPI gave the program. With MPI_THREAD_SINGLE the
/// program's one thread holds any CUDA context it uses current (the runtime API makes it so),
/// so memory_of asks only that thread, not every device's primary context (one driver query
/// less per call: issue 55's host 8 B latency).
void set_thread_level(int provided);

/// The offset of pretend memory's readable view from the program's for the region holding
/// `p`; false when `p` is in none.
bool pretend_delta(const void* p, std::ptrdiff_t* delta);

/// Whether `count` instances of `type` are one run of bytes (a copy, not a pack).
bool contiguous_layout(std::int64_t count, const Datatype& type);

/// Packs `count` instances of `type` from `in` (memory `kind`, MPI's buffer address) into
/// the host bytes `out` (count x size bytes), and the inverse: the first `bytes` packed
/// bytes of `in` scattered into `out`. Both are done when they return.
void pack_to_host(const void* in, std::int64_t count, const Datatype& type, void* out, Memory kind);
void unpack_from_host(const void* in, std::int64_t bytes, void* out, std::int64_t count,
                      const Datatype& type, Memory kind);

/// The chunked pipeline's two ends (protocol.hpp's chunked notes), in chunks of `chunk` bytes
/// of the packed stream. The sender's: the packed bytes of `count` instances of `type` at `in`
/// (memory `kind`) into the host bytes `out`, every chunk's copy queued at once; `ready(lo, n)`
/// is called for each chunk in order as soon as its bytes are on the host (it sends them while
/// the next ones are still copied), and `meanwhile()` while a chunk's copy is not done (it
/// drives the sends made so far). The receiver's: the first `bytes` packed bytes scattered
/// into `out` chunk by chunk; `arrived(lo, n)` returns once bytes [lo, lo + n) are in `in`
/// (it waits for their receive), and each chunk's copy to the device overlaps the next one's
/// arrival. Both are done when they return.
void pack_to_host_in_chunks(const void* in, std::int64_t count, const Datatype& type, void* out,
                            Memory kind, std::int64_t chunk,
                            const std::function<void(std::int64_t, std::int64_t)>& ready,
                            const std::function<void()>& meanwhile);
void unpack_from_host_in_chunks(const void* in, std::int64_t bytes, void* out, std::int64_t count,
                                const Datatype& type, Memory kind, std::int64_t chunk,
                                const std::function<void(std::int64_t, std::int64_t)>& arrived);

/// Plain byte copies between host memory and memory `kind`.
void copy_to_host(void* host, const void* from, std::size_t bytes, Memory kind);
void copy_from_host(void* to, const void* host, std::size_t bytes, Memory kind);

/// Host memory the staged messages go through: pinned where CUDA is there (one copy to or
/// from the device, by DMA), reused from a pool of power-of-two sizes.
class Staging {
 public:
  Staging() = default;
  explicit Staging(std::size_t bytes);
  ~Staging();
  Staging(Staging&& other) noexcept;
  Staging& operator=(Staging&& other) noexcept;
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  char* data() const { return m_data; }
  std::size_t size() const { return m_size; }

 private:
  char* m_data = nullptr;
  std::size_t m_size = 0;      // what was asked for
  std::size_t m_capacity = 0;  // the pool's size class
};

/// Where a message's packed bytes lie for a process on the same node to read them itself
/// (MVAPICH2-GDR's CUDA IPC path): the allocation's IPC handle, or for pretend memory its
/// memfd, and the bytes' offset in it. Travels inside a protocol note (protocol.hpp).
struct Exported {
  std::uint64_t id = 0;           ///< the allocation (CUDA's buffer id; a serial for pretend)
  std::int64_t offset = 0;        ///< of the first byte in the allocation
  std::int64_t length = 0;        ///< of the allocation (pretend memory is mapped whole)
  std::int32_t pid = 0, fd = -1;  ///< pretend memory: the memfd of process `pid`
  unsigned char handle[64] = {};  ///< device memory: its cudaIpcMemHandle_t
};

/// `p` (memory `kind`, device or pretend) as a peer on this node can map it; false where it
/// cannot be (CUDA IPC unavailable: such messages are staged).
bool export_memory(const void* p, Memory kind, Exported* out);
/// The first `bytes` packed bytes that `peer` (world rank) exported as `e` (memory `kind`,
/// mapped here and cached per peer and allocation) into `count` instances of `type` at `out`
/// (memory `out_kind`); done when it returns, or, without `wait`, a device-to-device unpack
/// may still be queued: wait_for_unpacks() waits for every such unpack.
/// `ready`, where not null, is the sender's ReadyEvent handle: the bytes are read after it.
void unpack_from_peer(int peer, const Exported& e, Memory kind, std::int64_t bytes, void* out,
                      std::int64_t count, const Datatype& type, Memory out_kind, bool wait = true,
                      const unsigned char* ready = nullptr);
void wait_for_unpacks();
/// Runs `queue` with the staging stream (the highest priority; it waits for the legacy
/// default stream, as cudaMemcpy does) and waits for what it queued. A neighbourhood
/// collective's halox exchange runs so: its kernels are scheduled before the remaining blocks
/// of a large kernel the program overlaps it with. Its device-side waits end after
/// HALOX_MPI_TIMEOUT, and this wait 3 s after that (so that theirs, which name rank, peer and
/// pulse, end first); past it, throws that `what` did not finish.
void on_staging_stream(const std::function<void(GpuStream)>& queue, const char* what);
/// Waits until the device work a program queued before an MPI call (on the legacy default
/// stream, as cudaMemcpy orders it) is done: a peer is about to read the buffer itself.
void settle(Memory kind);

/// Packed bytes that a peer can map: device memory (pretend memory in the tests) from a pool
/// of power-of-two sizes, exported once per block.
class PeerStaging {
 public:
  PeerStaging() = default;
  PeerStaging(std::size_t bytes, Memory kind);
  ~PeerStaging();
  PeerStaging(PeerStaging&& other) noexcept;
  PeerStaging& operator=(PeerStaging&& other) noexcept;
  PeerStaging(const PeerStaging&) = delete;
  PeerStaging& operator=(const PeerStaging&) = delete;
  char* data() const { return m_data; }

 private:
  char* m_data = nullptr;
  std::size_t m_capacity = 0;
  Memory m_kind = Memory::host;
};

/// A CUDA event that a process on this node can wait for (interprocess), from a pool, given
/// back when dropped: recorded after a pack into a PeerStaging, so that the sender queues the
/// pack and sends its note at once and the receiver's GPU waits for the pack instead (without
/// it, each non-contiguous device send waited for its pack: osu_bw's vector rows were bound
/// by that wait). Empty where CUDA exports no events (the pack is then waited for).
class ReadyEvent {
 public:
  ReadyEvent() = default;
  /// One from the pool for packs of memory `kind`; empty for other than device memory.
  explicit ReadyEvent(Memory kind);
  ~ReadyEvent();
  ReadyEvent(ReadyEvent&& other) noexcept;
  ReadyEvent& operator=(ReadyEvent&& other) noexcept;
  ReadyEvent(const ReadyEvent&) = delete;
  ReadyEvent& operator=(const ReadyEvent&) = delete;
  bool empty() const { return m_event == nullptr; }
  void* event() const { return m_event; }  ///< a cudaEvent_t
  /// Its cudaIpcEventHandle_t, for a note.
  const unsigned char* handle() const { return m_handle; }
  static constexpr std::size_t kHandleBytes = 64;

 private:
  void* m_event = nullptr;
  unsigned char m_handle[kHandleBytes] = {};
};

/// Packs `count` instances of `type` from `in` (memory `kind`) into `out`, memory of the same
/// kind (a PeerStaging): queued and `ready` recorded after it where `ready` holds an event,
/// else done when it returns.
void pack_to_peer_staging(const void* in, std::int64_t count, const Datatype& type, void* out,
                          Memory kind, const ReadyEvent& ready);

}  // namespace halox::mpi

#define HALOX_MPI_EXPORT __attribute__((visibility("default")))

extern "C" {
/// Test-only (HALOX_MPI_PRETEND_DEVICE=1; otherwise they fail): `bytes` of host memory that
/// the program cannot read or write (its pages have no access), which the interposer treats
/// as device memory; filled and read with halox_mpi_pretend_copy, as cudaMemcpy does for
/// device memory (either side may be pretend memory).
HALOX_MPI_EXPORT void* halox_mpi_pretend_alloc(std::size_t bytes);
HALOX_MPI_EXPORT void halox_mpi_pretend_free(void* p);
HALOX_MPI_EXPORT int halox_mpi_pretend_copy(void* to, const void* from, std::size_t bytes);
/// 1 when libhalox_mpi is in the process (halox-info asks).
HALOX_MPI_EXPORT int halox_mpi_active();
}
