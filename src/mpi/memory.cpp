#include "memory.hpp"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <type_traits>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "halox/config.hpp"
#include "halox/error.hpp"
#include "halox/pack.hpp"
#include "../runtime/env.hpp"
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
};

std::mutex& pretend_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::uintptr_t, Region>& pretend_regions() {  // keyed by the program's view
  static std::map<std::uintptr_t, Region> regions;
  return regions;
}

// The readable view's offset from the program's for the region holding `p`; found false
// when `p` is in none.
bool pretend_delta(const void* p, std::ptrdiff_t* delta) {
  std::lock_guard<std::mutex> lock(pretend_mutex());
  auto& regions = pretend_regions();
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = regions.upper_bound(at);
  if (it == regions.begin()) return false;
  --it;
  if (at >= it->first + it->second.bytes) return false;
  *delta = it->second.open - reinterpret_cast<char*>(it->first);
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
// toolkit this was built with): no link dependency, and no CUDA context is created for a
// program that never made one.
struct Driver {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*current)(CUcontext*) = nullptr;
  CUresult (*device_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_state)(CUdevice, unsigned*, int*) = nullptr;
  CUresult (*pointer_attribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
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
    const bool all = find(d.init, "cuInit") && find(d.current, "cuCtxGetCurrent") &&
                     find(d.device_count, "cuDeviceGetCount") &&
                     find(d.device_get, "cuDeviceGet") &&
                     find(d.primary_state, "cuDevicePrimaryCtxGetState") &&
                     find(d.pointer_attribute, "cuPointerGetAttribute");
    if (!all || d.init(0) != CUDA_SUCCESS) return nullptr;
    return &d;
  }();
  return loaded;
}

// Until some device's primary context is active (or a context is current), no pointer can
// be device memory.
bool cuda_in_use() {
  static std::atomic<bool> seen{false};
  if (seen.load(std::memory_order_relaxed)) return true;
  const Driver* d = driver();
  if (d == nullptr) return false;
  CUcontext current = nullptr;
  if (d->current(&current) == CUDA_SUCCESS && current != nullptr) return seen = true;
  int devices = 0;
  if (d->device_count(&devices) != CUDA_SUCCESS) return false;
  for (int i = 0; i < devices; ++i) {
    CUdevice device;
    unsigned flags = 0;
    int active = 0;
    if (d->device_get(&device, i) == CUDA_SUCCESS &&
        d->primary_state(device, &flags, &active) == CUDA_SUCCESS && active)
      return seen = true;
  }
  return false;
}

// One stream that waits for the legacy default stream, as cudaMemcpy does: a program that
// launched its kernel there and calls MPI_Send finds its data written.
cudaStream_t staging_stream() {
  static cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    HALOX_CUDA_CHECK(cudaStreamCreate(&s));
    return s;
  }();
  return stream;
}

bool contiguous(std::int64_t count, const Datatype& type) {
  return type.canonical().is_contiguous() && (count == 1 || type.extent() == type.size());
}
#endif

}  // namespace

const Knobs& knobs() {
  static const Knobs read = [] {
    Knobs k;
    try {
      k.report = detail::env_mpi_report();
      k.pretend = detail::env_mpi_pretend_device();
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
  CUmemorytype type{};
  if (d->pointer_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                           reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) {
    return Memory::host;  // not known to CUDA: plain host memory
  }
  if (type != CU_MEMORYTYPE_DEVICE) return Memory::host;
  int managed = 0;
  d->pointer_attribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, reinterpret_cast<CUdeviceptr>(p));
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
    const cudaStream_t stream = staging_stream();
    if (contiguous(count, type)) {
      HALOX_CUDA_CHECK(cudaMemcpyAsync(out, address(in, type.true_lb()),
                                       static_cast<std::size_t>(count * type.size()),
                                       cudaMemcpyDeviceToHost, stream));
    } else {
      pack_async(in, count, type, out, stream);  // the kernel stores into pinned memory
    }
    HALOX_CUDA_CHECK(cudaStreamSynchronize(stream));
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
    const cudaStream_t stream = staging_stream();
    if (contiguous(count, type)) {
      HALOX_CUDA_CHECK(cudaMemcpyAsync(address(out, type.true_lb()), in,
                                       static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice,
                                       stream));
    } else {
      unpack_range_async(in, out, count, type, 0, bytes, stream);
    }
    HALOX_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
#endif
  unpack(in, out, count, type, 0, bytes);
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
    HALOX_CUDA_CHECK(cudaStreamSynchronize(staging_stream()));
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
  close(fd);
  if (closed == MAP_FAILED || open == MAP_FAILED) return nullptr;
  std::lock_guard<std::mutex> lock(pretend_mutex());
  pretend_regions()[reinterpret_cast<std::uintptr_t>(closed)] = {length, static_cast<char*>(open)};
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
