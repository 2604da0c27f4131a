#include "memory.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <type_traits>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "halox/config.hpp"
#include "halox/error.hpp"
#include "halox/pack.hpp"
#include "halox/tuning.hpp"
#include "../runtime/env.hpp"
#include "state.hpp"
#if HALOX_HAS_CUDA
#include <cuda.h>
#include <cuda_runtime.h>

#include "halox/pack_gpu.hpp"
#include "../common/cuda_check.hpp"
#endif

namespace halox::mpi {

namespace {

// Pretend device memory: one memfd mapped twice, the program's view without access (so that
// the MPI library, given it by mistake, faults as it would on device memory) and a readable
// view that only the copies below use.
struct Region {
  std::size_t bytes = 0;
  char* open = nullptr;  // the readable view
  int fd = -1;           // kept open: a peer maps the memory through /proc/<pid>/fd (IPC)
  std::uint64_t id = 0;  // a serial: the peers' mappings are cached by it
};

std::mutex& pretend_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::uintptr_t, Region>& pretend_regions() {  // keyed by the program's view
  static std::map<std::uintptr_t, Region> regions;
  return regions;
}

// The region holding `p` (its program's view and the region), found false when none does.
bool pretend_region(const void* p, std::uintptr_t* base, Region* region) {
  std::lock_guard<std::mutex> lock(pretend_mutex());
  auto& regions = pretend_regions();
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = regions.upper_bound(at);
  if (it == regions.begin()) return false;
  --it;
  if (at >= it->first + it->second.bytes) return false;
  *base = it->first;
  *region = it->second;
  return true;
}

template <class T>
T* readable(T* p, std::ptrdiff_t delta) {
  // Integer arithmetic: MPI's buffer address may lie outside the region (MPI_BOTTOM).
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(p) + delta);
}

bool pretend_enabled() {
  return knobs().pretend;
}

#if HALOX_HAS_CUDA
// The driver's calls, found at run time (libcuda.so.1 comes with the driver, not with the
// toolkit this was built with): no link dependency. Never initialized here (no cuInit): a
// program that never touches a GPU keeps a driver that answers "not initialized", and no
// CUDA context.
struct Driver {
  CUresult (*current)(CUcontext*) = nullptr;
  CUresult (*device_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_state)(CUdevice, unsigned*, int*) = nullptr;
  CUresult (*pointer_attribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  CUresult (*pointer_attributes)(unsigned, CUpointer_attribute*, void**, CUdeviceptr) = nullptr;
  CUresult (*address_range)(CUdeviceptr*, std::size_t*, CUdeviceptr) = nullptr;
};

const Driver* driver() {
  static const Driver* loaded = []() -> const Driver* {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return nullptr;
    static Driver d;
    auto find = [&](auto& slot, const char* name) {
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(dlsym(lib, name));
      return slot != nullptr;
    };
    const bool all =
        find(d.current, "cuCtxGetCurrent") && find(d.device_count, "cuDeviceGetCount") &&
        find(d.device_get, "cuDeviceGet") && find(d.primary_state, "cuDevicePrimaryCtxGetState") &&
        find(d.pointer_attribute, "cuPointerGetAttribute") &&
        find(d.pointer_attributes, "cuPointerGetAttributes") &&
        find(d.address_range, "cuMemGetAddressRange_v2");
    return all ? &d : nullptr;
  }();
  return loaded;
}

// MPI_THREAD_SINGLE (set_thread_level): the calling thread's context is the only one to ask.
std::atomic<bool> single_thread{false};

// Until some device's primary context is active (or a context is current), no pointer can
// be device memory.
bool cuda_in_use() {
  static std::atomic<bool> seen{false};
  if (seen.load(std::memory_order_relaxed)) return true;
  const Driver* d = driver();
  if (d == nullptr) return false;
  CUcontext current = nullptr;
  const CUresult asked = d->current(&current);
  if (asked == CUDA_ERROR_NOT_INITIALIZED) return false;  // the program has not called cuInit
  if (asked == CUDA_SUCCESS && current != nullptr) return seen = true;
  if (single_thread.load(std::memory_order_relaxed)) return false;
  // The devices are asked for once: each call of a host program that never touches a GPU
  // pays only the two queries above and below (osu_latency on host memory: +0.2 us at 8 B
  // when the devices were listed at every call).
  static const std::vector<CUdevice> devices = [d] {
    std::vector<CUdevice> found;
    int count = 0;
    if (d->device_count(&count) != CUDA_SUCCESS) return found;
    for (int i = 0; i < count; ++i) {
      CUdevice device;
      if (d->device_get(&device, i) == CUDA_SUCCESS) found.push_back(device);
    }
    return found;
  }();
  for (const CUdevice device : devices) {
    unsigned flags = 0;
    int active = 0;
    if (d->primary_state(device, &flags, &active) == CUDA_SUCCESS && active) return seen = true;
  }
  return false;
}

// One stream that waits for the legacy default stream, as cudaMemcpy does: a program that
// launched its kernel there and calls MPI_Send finds its data written. At the highest
// priority: its packs and unpacks are what a program overlapping communication with a
// large kernel (halox-lbm --comm mpi-overlap) waits for, and the GPU then runs their blocks
// before the large kernel's remaining ones.
cudaStream_t staging_stream() {
  static cudaStream_t stream = [] {
    int lowest = 0, highest = 0;
    HALOX_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    cudaStream_t s = nullptr;
    HALOX_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamDefault, highest));
    return s;
  }();
  return stream;
}

// Waits until `query` (cudaStreamQuery or cudaEventQuery of the work) says done, at most
// HALOX_MPI_TIMEOUT plus `grace` seconds; past it, throws that `what` did not finish, and `why`
// it may not have.
template <class Query>
void wait_for_gpu(Query query, const char* what, const char* why, double grace = 0) {
  const bool done = poll_bounded(
      [&] {
        const cudaError_t rc = query();
        if (rc != cudaErrorNotReady) HALOX_CUDA_CHECK(rc);
        return rc == cudaSuccess;
      },
      grace);
  if (!done) {
    throw Error(std::string(what) + " did not finish in " +
                std::to_string(static_cast<long long>(knobs().timeout)) + " s" + why +
                " (HALOX_MPI_TIMEOUT)");
  }
}

// Waits for the staging stream's work, at most HALOX_MPI_TIMEOUT: its copies of a peer's
// packed bytes wait for the peer's pack (a ReadyEvent), which a peer that died never records.
void wait_staging() {
  wait_for_gpu([stream = staging_stream()] { return cudaStreamQuery(stream); }, "the GPU's copies",
               ": a sender's pack they wait for never ran (is the sender dead?)");
}

// Bytes [lo, lo + n) of the packed stream of `count` instances of `type` at `in` (device
// memory) queued on the staging stream into `out` (host; out[0] gets byte lo): one copy for
// a contiguous layout, else one GPU pack storing into pinned memory.
void pack_range_to_host_async(const void* in, std::int64_t count, const Datatype& type, void* out,
                              std::int64_t lo, std::int64_t n) {
  const cudaStream_t stream = staging_stream();
  if (contiguous_layout(count, type)) {
    HALOX_CUDA_CHECK(cudaMemcpyAsync(out, address(in, type.true_lb() + lo),
                                     static_cast<std::size_t>(n), cudaMemcpyDeviceToHost, stream));
  } else {
    pack_range_async(in, count, type, out, lo, n, stream);
  }
}

// A peer's ReadyEvent, opened once per peer and handle (the peer reuses its events).
cudaEvent_t opened_event(int peer, const unsigned char* handle) {
  static std::mutex mutex;
  using Handle = std::array<unsigned char, ReadyEvent::kHandleBytes>;
  static std::map<std::pair<int, Handle>, cudaEvent_t> opened;
  std::lock_guard<std::mutex> lock(mutex);
  std::pair<int, Handle> key{peer, {}};
  std::memcpy(key.second.data(), handle, ReadyEvent::kHandleBytes);
  auto [it, added] = opened.try_emplace(key, nullptr);
  if (added) {
    cudaIpcEventHandle_t h;
    static_assert(sizeof(h) == ReadyEvent::kHandleBytes);
    std::memcpy(&h, handle, sizeof(h));
    const cudaError_t rc = cudaIpcOpenEventHandle(&it->second, h);
    if (rc != cudaSuccess) {
      cudaGetLastError();
      opened.erase(it);
      throw Error(std::string("cannot open the sender's event (cudaIpcOpenEventHandle: ") +
                  cudaGetErrorString(rc) + "); HALOX_MPI_IPC=0 stages device messages instead");
    }
  }
  return it->second;
}

// Packed bytes [lo, lo + n) at `in` (in[0] is byte lo; pinned host memory, or device memory
// of this or a peer's process) into `count` instances of `type` on the device: one copy for
// a contiguous layout, else one GPU unpack; done when it returns, unless not `wait`.
void unpack_on_device(const void* in, std::int64_t lo, std::int64_t n, void* out,
                      std::int64_t count, const Datatype& type, bool wait = true) {
  const cudaStream_t stream = staging_stream();
  if (contiguous_layout(count, type)) {
    HALOX_CUDA_CHECK(cudaMemcpyAsync(address(out, type.true_lb() + lo), in,
                                     static_cast<std::size_t>(n), cudaMemcpyDefault, stream));
  } else {
    unpack_range_async(in, out, count, type, lo, n, stream);
  }
  if (wait) wait_staging();
}
#endif

}  // namespace

void set_thread_level(int provided) {
#if HALOX_HAS_CUDA
  single_thread = provided == MPI_THREAD_SINGLE;
#else
  (void)provided;
#endif
}

bool device_memory_possible() {
#if HALOX_HAS_CUDA
  if (cuda_in_use()) return true;
#endif
  return pretend_enabled();
}

bool pretend_delta(const void* p, std::ptrdiff_t* delta) {
  std::uintptr_t base = 0;
  Region region;
  if (!pretend_region(p, &base, &region)) return false;
  *delta = region.open - reinterpret_cast<char*>(base);
  return true;
}

bool contiguous_layout(std::int64_t count, const Datatype& type) {
  return type.canonical().is_contiguous() && (count == 1 || type.extent() == type.size());
}

const Knobs& knobs() {
  static const Knobs read = [] {
    Knobs k;
    try {
      k.report = detail::env_mpi_report();
      k.pretend = detail::env_mpi_pretend_device();
      k.ipc = detail::env_mpi_ipc();
      k.timeout = static_cast<double>(detail::env_mpi_timeout());
      const TuningValues tuned = read_tuning_file(tuning_file_path());
      if (tuned.found) {
        k.tuned_chunk = tuned.chunk_bytes;
        k.tuned_chunked_from = tuned.pipelined_from_bytes;
      }
    } catch (const std::exception& e) {
      k = Knobs{};
      k.error = e.what();
    }
    return k;
  }();
  return read;
}

Memory memory_of(const void* p) {
  if (p == nullptr) return Memory::host;
  if (pretend_enabled()) {
    std::ptrdiff_t delta;
    if (pretend_delta(p, &delta)) return Memory::pretend;
  }
#if HALOX_HAS_CUDA
  if (!cuda_in_use()) return Memory::host;
  const Driver* d = driver();
  // Both attributes in one query (one driver call per buffer and MPI call); memory CUDA
  // does not know gets zeros, i.e. host memory.
  CUmemorytype type{};
  int managed = 0;
  CUpointer_attribute asked[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void* answers[2] = {&type, &managed};
  if (d->pointer_attributes(2, asked, answers, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    return Memory::host;
  if (type != CU_MEMORYTYPE_DEVICE) return Memory::host;
  return managed ? Memory::host : Memory::device;
#else
  return Memory::host;
#endif
}

void pack_to_host(const void* in, std::int64_t count, const Datatype& type, void* out,
                  Memory kind) {
  if (count <= 0 || type.size() == 0) return;
  if (kind == Memory::pretend) {
    std::ptrdiff_t delta = 0;
    pretend_delta(address(in, type.true_lb()), &delta);
    pack(readable(in, delta), count, type, out);
    return;
  }
#if HALOX_HAS_CUDA
  if (kind == Memory::device) {
    pack_range_to_host_async(in, count, type, out, 0, count * type.size());
    wait_staging();  // bounded: the stream may hold copies that wait for a peer's pack
    return;
  }
#endif
  pack(in, count, type, out);
}

void unpack_from_host(const void* in, std::int64_t bytes, void* out, std::int64_t count,
                      const Datatype& type, Memory kind) {
  if (bytes <= 0 || count <= 0) return;
  if (kind == Memory::pretend) {
    std::ptrdiff_t delta = 0;
    pretend_delta(address(out, type.true_lb()), &delta);
    unpack(in, readable(out, delta), count, type, 0, bytes);
    return;
  }
#if HALOX_HAS_CUDA
  if (kind == Memory::device) {
    unpack_on_device(in, 0, bytes, out, count, type);
    return;
  }
#endif
  unpack(in, out, count, type, 0, bytes);
}

void pack_to_host_in_chunks(const void* in, std::int64_t count, const Datatype& type, void* out,
                            Memory kind, std::int64_t chunk,
                            const std::function<void(std::int64_t, std::int64_t)>& ready,
                            const std::function<void()>& meanwhile) {
  const std::int64_t bytes = count * type.size();
  char* host = static_cast<char*>(out);
#if HALOX_HAS_CUDA
  if (kind == Memory::device) {
    // Every chunk queued on the staging stream, each followed by its event; then each chunk
    // handed on as its event completes.
    thread_local std::vector<cudaEvent_t> events;
    std::size_t k = 0;
    for (std::int64_t lo = 0; lo < bytes; lo += chunk, ++k) {
      pack_range_to_host_async(in, count, type, host + lo, lo, std::min(chunk, bytes - lo));
      if (events.size() == k) {
        cudaEvent_t e = nullptr;
        HALOX_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        events.push_back(e);
      }
      HALOX_CUDA_CHECK(cudaEventRecord(events[k], staging_stream()));
    }
    k = 0;
    for (std::int64_t lo = 0; lo < bytes; lo += chunk, ++k) {
      wait_for_gpu(
          [&, e = events[k]] {
            const cudaError_t rc = cudaEventQuery(e);
            if (rc == cudaErrorNotReady) meanwhile();
            return rc;
          },
          "the GPU's copy of a message's chunk to the host", "");
      ready(lo, std::min(chunk, bytes - lo));
    }
    return;
  }
#endif
  std::ptrdiff_t delta = 0;
  if (kind == Memory::pretend) pretend_delta(address(in, type.true_lb()), &delta);
  const void* from = kind == Memory::pretend ? readable(in, delta) : in;
  for (std::int64_t lo = 0; lo < bytes; lo += chunk) {
    const std::int64_t n = std::min(chunk, bytes - lo);
    pack(from, count, type, host + lo, lo, n);
    ready(lo, n);
    meanwhile();  // as between the GPU's chunks
  }
}

void unpack_from_host_in_chunks(const void* in, std::int64_t bytes, void* out, std::int64_t count,
                                const Datatype& type, Memory kind, std::int64_t chunk,
                                const std::function<void(std::int64_t, std::int64_t)>& arrived) {
  const char* host = static_cast<const char*>(in);
#if HALOX_HAS_CUDA
  if (kind == Memory::device) {
    for (std::int64_t lo = 0; lo < bytes; lo += chunk) {
      const std::int64_t n = std::min(chunk, bytes - lo);
      arrived(lo, n);
      unpack_on_device(host + lo, lo, n, out, count, type, false);
    }
    wait_staging();
    return;
  }
#endif
  std::ptrdiff_t delta = 0;
  if (kind == Memory::pretend) pretend_delta(address(out, type.true_lb()), &delta);
  void* to = kind == Memory::pretend ? readable(out, delta) : out;
  for (std::int64_t lo = 0; lo < bytes; lo += chunk) {
    const std::int64_t n = std::min(chunk, bytes - lo);
    arrived(lo, n);
    unpack(host + lo, to, count, type, lo, n);
  }
}

void copy_to_host(void* host, const void* from, std::size_t bytes, Memory kind) {
  if (bytes == 0) return;
  if (kind == Memory::pretend) {
    std::ptrdiff_t delta = 0;
    pretend_delta(from, &delta);
    std::memcpy(host, readable(from, delta), bytes);
    return;
  }
#if HALOX_HAS_CUDA
  if (kind == Memory::device) {
    HALOX_CUDA_CHECK(cudaMemcpyAsync(host, from, bytes, cudaMemcpyDeviceToHost, staging_stream()));
    wait_staging();
    return;
  }
#endif
  std::memcpy(host, from, bytes);
}

void copy_from_host(void* to, const void* host, std::size_t bytes, Memory kind) {
  if (bytes == 0) return;
  if (kind == Memory::pretend) {
    std::ptrdiff_t delta = 0;
    pretend_delta(to, &delta);
    std::memcpy(readable(to, delta), host, bytes);
    return;
  }
#if HALOX_HAS_CUDA
  if (kind == Memory::device) {
    HALOX_CUDA_CHECK(cudaMemcpyAsync(to, host, bytes, cudaMemcpyHostToDevice, staging_stream()));
    HALOX_CUDA_CHECK(cudaStreamSynchronize(staging_stream()));
    return;
  }
#endif
  std::memcpy(to, host, bytes);
}

namespace {

// Freed staging buffers by size class (a power of two from 4 KiB), kept for the next message.
std::mutex& pool_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::size_t, std::vector<char*>>& pool() {
  static std::map<std::size_t, std::vector<char*>> free_lists;
  return free_lists;
}

char* allocate(std::size_t bytes) {
#if HALOX_HAS_CUDA
  if (cuda_in_use()) {
    void* p = nullptr;
    if (cudaMallocHost(&p, bytes) == cudaSuccess) return static_cast<char*>(p);
    cudaGetLastError();  // fall back to pageable memory
  }
#endif
  void* p = std::malloc(bytes);
  if (p == nullptr)
    throw Error("halox_mpi: no host memory for " + std::to_string(bytes) + " bytes of staging");
  return static_cast<char*>(p);
}

}  // namespace

Staging::Staging(std::size_t bytes) : m_size(bytes) {
  m_capacity = 4096;
  while (m_capacity < bytes) m_capacity *= 2;
  {
    std::lock_guard<std::mutex> lock(pool_mutex());
    auto& list = pool()[m_capacity];
    if (!list.empty()) {
      m_data = list.back();
      list.pop_back();
      return;
    }
  }
  m_data = allocate(m_capacity);
}

Staging::~Staging() {
  if (m_data == nullptr) return;
  std::lock_guard<std::mutex> lock(pool_mutex());
  pool()[m_capacity].push_back(m_data);  // kept for the process's life, as MPI keeps its own
}

Staging::Staging(Staging&& other) noexcept
    : m_data(std::exchange(other.m_data, nullptr)),
      m_size(std::exchange(other.m_size, 0)),
      m_capacity(std::exchange(other.m_capacity, 0)) {}

Staging& Staging::operator=(Staging&& other) noexcept {
  if (this != &other) {
    Staging old(std::move(*this));
    m_data = std::exchange(other.m_data, nullptr);
    m_size = std::exchange(other.m_size, 0);
    m_capacity = std::exchange(other.m_capacity, 0);
  }
  return *this;
}

// ---- Memory a peer on this node reads itself (the IPC path) ----

namespace {

constexpr std::size_t kMappingsKept = 256;  // a peer's freed allocations are unmapped by age

struct Mapping {
  const char* base = nullptr;
  Memory kind = Memory::host;
  std::size_t length = 0;
};
std::mutex& mappings_mutex() {
  static std::mutex m;
  return m;
}
// Keyed by (peer, allocation id), in the order they were opened.
std::map<std::pair<int, std::uint64_t>, Mapping>& mappings() {
  static std::map<std::pair<int, std::uint64_t>, Mapping> opened;
  return opened;
}
std::vector<std::pair<int, std::uint64_t>>& mapping_age() {
  static std::vector<std::pair<int, std::uint64_t>> order;
  return order;
}

void unmap(const Mapping& m) {
  if (m.kind == Memory::pretend) {
    munmap(const_cast<char*>(m.base), m.length);
    return;
  }
#if HALOX_HAS_CUDA
  wait_for_unpacks();  // an unpack queued from this mapping must finish before it goes
  cudaIpcCloseMemHandle(const_cast<char*>(m.base));
#endif
}

#if HALOX_HAS_CUDA
void forget_peer(int peer) {  // under mappings_mutex
  auto& age = mapping_age();
  for (auto it = age.begin(); it != age.end();) {
    if (it->first != peer) {
      ++it;
      continue;
    }
    auto opened = mappings().find(*it);
    unmap(opened->second);
    mappings().erase(opened);
    it = age.erase(it);
  }
}
#endif

Mapping map_peer(int peer, const Exported& e, Memory kind) {
  Mapping m;
  m.kind = kind;
  m.length = static_cast<std::size_t>(e.length);
  if (kind == Memory::pretend) {
    const std::string path = "/proc/" + std::to_string(e.pid) + "/fd/" + std::to_string(e.fd);
    const int fd = open(path.c_str(), O_RDONLY);
    void* p = fd < 0 ? MAP_FAILED : mmap(nullptr, m.length, PROT_READ, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    if (p == MAP_FAILED)
      throw Error("halox_mpi: rank " + std::to_string(peer) + "'s memory (" + path +
                  ") cannot be mapped here");
    m.base = static_cast<const char*>(p);
    return m;
  }
#if HALOX_HAS_CUDA
  cudaIpcMemHandle_t handle;
  static_assert(sizeof(handle) == sizeof(e.handle));
  std::memcpy(&handle, e.handle, sizeof(handle));
  void* p = nullptr;
  cudaError_t rc = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess);
  if (rc == cudaErrorAlreadyMapped) {
    // A handle opens once per process, and small allocations share the driver's block: a
    // freed allocation's mapping, or another live one's, holds it. Close this peer's
    // mappings (reopened when next read) and try once more.
    cudaGetLastError();
    tally(Path::ipc_remapped, e.length);
    forget_peer(peer);
    rc = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess);
  }
  if (rc != cudaSuccess) {
    cudaGetLastError();
    throw Error("halox_mpi: cudaIpcOpenMemHandle of rank " + std::to_string(peer) +
                "'s device memory failed (" + cudaGetErrorString(rc) +
                "); HALOX_MPI_IPC=0 moves every device message through host memory instead");
  }
  m.base = static_cast<const char*>(p);
  return m;
#else
  throw Error("halox_mpi: device memory of rank " + std::to_string(peer) +
              " cannot be mapped in a build without CUDA");
#endif
}

// Exported device allocations of this process: base -> (buffer id, IPC handle).
#if HALOX_HAS_CUDA
std::mutex& exports_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::uintptr_t, std::pair<std::uint64_t, cudaIpcMemHandle_t>>& exports() {
  static std::map<std::uintptr_t, std::pair<std::uint64_t, cudaIpcMemHandle_t>> made;
  return made;
}
#endif

}  // namespace

bool export_memory(const void* p, Memory kind, Exported* out) {
  if (kind == Memory::pretend) {
    std::uintptr_t base = 0;
    Region region;
    if (!pretend_region(p, &base, &region)) return false;
    out->id = region.id;
    out->offset = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p) - base);
    out->length = static_cast<std::int64_t>(region.bytes);
    out->pid = static_cast<std::int32_t>(getpid());
    out->fd = region.fd;
    return true;
  }
#if HALOX_HAS_CUDA
  if (kind != Memory::device) return false;
  const Driver* d = driver();
  if (d == nullptr) return false;
  CUdeviceptr base = 0;
  std::size_t length = 0;
  unsigned long long id = 0;
  const auto at = reinterpret_cast<CUdeviceptr>(p);
  if (d->address_range(&base, &length, at) != CUDA_SUCCESS ||
      d->pointer_attribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, at) != CUDA_SUCCESS)
    return false;
  std::lock_guard<std::mutex> lock(exports_mutex());
  auto& slot = exports()[static_cast<std::uintptr_t>(base)];
  if (slot.first != id) {  // new, or the allocation was freed and another made at its address
    if (cudaIpcGetMemHandle(&slot.second, reinterpret_cast<void*>(base)) != cudaSuccess) {
      cudaGetLastError();  // memory IPC cannot export (a pool, VMM): the message is staged
      exports().erase(static_cast<std::uintptr_t>(base));
      return false;
    }
    slot.first = id;
  }
  out->id = id;
  out->offset = static_cast<std::int64_t>(at - base);
  out->length = static_cast<std::int64_t>(length);
  std::memcpy(out->handle, &slot.second, sizeof(slot.second));
  return true;
#else
  return false;
#endif
}

namespace {

const void* import_memory(int peer, const Exported& e, Memory kind) {  // under mappings_mutex
  const std::pair<int, std::uint64_t> key{peer, e.id};
  auto& opened = mappings();
  auto it = opened.find(key);
  if (it == opened.end()) {
    if (mapping_age().size() >= kMappingsKept) {
      auto oldest = opened.find(mapping_age().front());
      unmap(oldest->second);
      opened.erase(oldest);
      mapping_age().erase(mapping_age().begin());
    }
    it = opened.emplace(key, map_peer(peer, e, kind)).first;
    tally(Path::ipc_mapped, e.length);
    mapping_age().push_back(key);
  }
  return it->second.base + e.offset;
}

void unpack_from_mapped(int peer, const void* from, Memory from_kind, std::int64_t bytes, void* out,
                        std::int64_t count, const Datatype& type, Memory out_kind, bool wait,
                        const unsigned char* ready) {
  if (bytes <= 0 || count <= 0) return;
#if HALOX_HAS_CUDA
  if (from_kind == Memory::device) {
    // The copies below run on the staging stream, after the sender's pack.
    if (ready)
      HALOX_CUDA_CHECK(cudaStreamWaitEvent(staging_stream(), opened_event(peer, ready), 0));
    if (out_kind == Memory::device) {
      unpack_on_device(from, 0, bytes, out, count, type, wait);
      return;
    }
    Staging host(static_cast<std::size_t>(bytes));
    copy_to_host(host.data(), from, static_cast<std::size_t>(bytes), Memory::device);
    unpack_from_host(host.data(), bytes, out, count, type, out_kind);
    return;
  }
#endif
  (void)from_kind;  // pretend memory is mapped readable here: plain host bytes
  (void)wait;       // (host copies are done when they return; pretend packs are done when
  (void)peer;       // their send returns, with no ReadyEvent)
  (void)ready;
  unpack_from_host(from, bytes, out, count, type, out_kind);
}

}  // namespace

void unpack_from_peer(int peer, const Exported& e, Memory kind, std::int64_t bytes, void* out,
                      std::int64_t count, const Datatype& type, Memory out_kind, bool wait,
                      const unsigned char* ready) {
  // The lock is held while the bytes are read: another thread's import may close mappings
  // (each close first waits for the unpacks queued without a wait).
  std::lock_guard<std::mutex> lock(mappings_mutex());
  unpack_from_mapped(peer, import_memory(peer, e, kind), kind, bytes, out, count, type, out_kind,
                     wait, ready);
}

void wait_for_unpacks() {
#if HALOX_HAS_CUDA
  if (cuda_in_use()) wait_staging();
#endif
}

void on_staging_stream(const std::function<void(GpuStream)>& queue, const char* what) {
#if HALOX_HAS_CUDA
  const cudaStream_t stream = staging_stream();
  queue(stream);
  wait_for_gpu([stream] { return cudaStreamQuery(stream); }, what, "", 3);
#else
  (void)queue;
  throw Error(std::string(what) + ": device memory in a build without CUDA");
#endif
}

void settle(Memory kind) {
#if HALOX_HAS_CUDA
  if (kind == Memory::device) HALOX_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
#else
  (void)kind;
#endif
}

namespace {

std::map<std::pair<Memory, std::size_t>, std::vector<char*>>& peer_pool() {  // under pool_mutex
  static std::map<std::pair<Memory, std::size_t>, std::vector<char*>> free_lists;
  return free_lists;
}

}  // namespace

PeerStaging::PeerStaging(std::size_t bytes, Memory kind) : m_kind(kind) {
  m_capacity = 65536;
  while (m_capacity < bytes) m_capacity *= 2;
  {
    std::lock_guard<std::mutex> lock(pool_mutex());
    auto& list = peer_pool()[{kind, m_capacity}];
    if (!list.empty()) {
      m_data = list.back();
      list.pop_back();
      return;
    }
  }
  void* p = nullptr;
  if (kind == Memory::pretend) {
    p = halox_mpi_pretend_alloc(m_capacity);
  }
#if HALOX_HAS_CUDA
  if (kind == Memory::device && cudaMalloc(&p, m_capacity) != cudaSuccess) {
    cudaGetLastError();
    p = nullptr;
  }
#endif
  if (p == nullptr)
    throw Error("halox_mpi: no device memory for " + std::to_string(m_capacity) +
                " bytes of staging");
  m_data = static_cast<char*>(p);
}

PeerStaging::~PeerStaging() {
  if (m_data == nullptr) return;
  std::lock_guard<std::mutex> lock(pool_mutex());
  peer_pool()[{m_kind, m_capacity}].push_back(m_data);  // kept: peers keep it mapped
}

PeerStaging::PeerStaging(PeerStaging&& other) noexcept
    : m_data(std::exchange(other.m_data, nullptr)),
      m_capacity(std::exchange(other.m_capacity, 0)),
      m_kind(other.m_kind) {}

PeerStaging& PeerStaging::operator=(PeerStaging&& other) noexcept {
  if (this != &other) {
    PeerStaging old(std::move(*this));
    m_data = std::exchange(other.m_data, nullptr);
    m_capacity = std::exchange(other.m_capacity, 0);
    m_kind = other.m_kind;
  }
  return *this;
}

namespace {

struct PooledEvent {
  void* event;
  unsigned char handle[ReadyEvent::kHandleBytes];
};
std::vector<PooledEvent>& event_pool() {  // under pool_mutex
  static std::vector<PooledEvent> events;
  return events;
}

}  // namespace

ReadyEvent::ReadyEvent(Memory kind) {
#if HALOX_HAS_CUDA
  static std::atomic<bool> unsupported{false};
  if (kind != Memory::device || unsupported) return;
  {
    std::lock_guard<std::mutex> lock(pool_mutex());
    auto& pool = event_pool();
    if (!pool.empty()) {
      m_event = pool.back().event;
      std::memcpy(m_handle, pool.back().handle, kHandleBytes);
      pool.pop_back();
      return;
    }
  }
  cudaEvent_t event = nullptr;
  cudaIpcEventHandle_t handle;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventInterprocess) !=
          cudaSuccess ||
      cudaIpcGetEventHandle(&handle, event) != cudaSuccess) {
    cudaGetLastError();
    if (event) cudaEventDestroy(event);
    unsupported = true;  // the packs are waited for, as before events
    return;
  }
  static_assert(sizeof(handle) == kHandleBytes);
  m_event = event;
  std::memcpy(m_handle, &handle, kHandleBytes);
#else
  (void)kind;
#endif
}

ReadyEvent::~ReadyEvent() {
  if (m_event == nullptr) return;
  std::lock_guard<std::mutex> lock(pool_mutex());
  PooledEvent& back = event_pool().emplace_back();  // kept: peers keep it opened
  back.event = m_event;
  std::memcpy(back.handle, m_handle, kHandleBytes);
}

ReadyEvent::ReadyEvent(ReadyEvent&& other) noexcept
    : m_event(std::exchange(other.m_event, nullptr)) {
  std::memcpy(m_handle, other.m_handle, kHandleBytes);
}

ReadyEvent& ReadyEvent::operator=(ReadyEvent&& other) noexcept {
  if (this != &other) {
    ReadyEvent old(std::move(*this));
    m_event = std::exchange(other.m_event, nullptr);
    std::memcpy(m_handle, other.m_handle, kHandleBytes);
  }
  return *this;
}

void pack_to_peer_staging(const void* in, std::int64_t count, const Datatype& type, void* out,
                          Memory kind, const ReadyEvent& ready) {
  if (count <= 0 || type.size() == 0) return;
  if (kind == Memory::pretend) {
    std::ptrdiff_t in_delta = 0, out_delta = 0;
    pretend_delta(address(in, type.true_lb()), &in_delta);
    pretend_delta(out, &out_delta);
    pack(readable(in, in_delta), count, type, readable(out, out_delta));
    return;
  }
#if HALOX_HAS_CUDA
  const cudaStream_t stream = staging_stream();
  if (contiguous_layout(count, type)) {
    HALOX_CUDA_CHECK(cudaMemcpyAsync(out, address(in, type.true_lb()),
                                     static_cast<std::size_t>(count * type.size()),
                                     cudaMemcpyDeviceToDevice, stream));
  } else {
    pack_async(in, count, type, out, stream);
  }
  if (ready.empty()) {
    HALOX_CUDA_CHECK(cudaStreamSynchronize(stream));
  } else {
    HALOX_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ready.event()), stream));
  }
#else
  (void)ready;
#endif
}

}  // namespace halox::mpi

extern "C" {

void* halox_mpi_pretend_alloc(std::size_t bytes) {
  using namespace halox::mpi;
  if (!pretend_enabled() || bytes == 0) return nullptr;
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t length = (bytes + page - 1) / page * page;
  const int fd = memfd_create("halox-pretend-device", 0);
  if (fd < 0) return nullptr;
  if (ftruncate(fd, static_cast<off_t>(length)) != 0) {
    close(fd);
    return nullptr;
  }
  void* closed = mmap(nullptr, length, PROT_NONE, MAP_SHARED, fd, 0);
  void* open = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (closed == MAP_FAILED || open == MAP_FAILED) {
    close(fd);
    return nullptr;
  }
  static std::atomic<std::uint64_t> serial{0};
  std::lock_guard<std::mutex> lock(pretend_mutex());
  pretend_regions()[reinterpret_cast<std::uintptr_t>(closed)] = {length, static_cast<char*>(open),
                                                                 fd, ++serial};
  return closed;
}

void halox_mpi_pretend_free(void* p) {
  using namespace halox::mpi;
  std::lock_guard<std::mutex> lock(pretend_mutex());
  auto& regions = pretend_regions();
  auto it = regions.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == regions.end()) return;
  munmap(it->second.open, it->second.bytes);
  munmap(p, it->second.bytes);
  close(it->second.fd);
  regions.erase(it);
}

int halox_mpi_pretend_copy(void* to, const void* from, std::size_t bytes) {
  using namespace halox::mpi;
  std::ptrdiff_t to_delta = 0, from_delta = 0;
  const bool to_pretend = pretend_delta(to, &to_delta);
  const bool from_pretend = pretend_delta(from, &from_delta);
  if (!to_pretend && !from_pretend) return 1;
  std::memcpy(to_pretend ? readable(to, to_delta) : to,
              from_pretend ? readable(from, from_delta) : from, bytes);
  return 0;
}

int halox_mpi_active() {
  return 1;
}
}
