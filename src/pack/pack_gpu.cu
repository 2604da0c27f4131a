// GPU pack and unpack driven by the canonical form.
//
// One kernel family handles every shape: the packed stream is cut into words of W bytes
// (16 when every offset, stride, block length and both pointers allow it, narrower
// otherwise); thread g moves word g, so the writes to the packed side are fully coalesced
// and the reads are as coalesced as the type allows. A type that is one strided block (the
// common case: faces, vectors, subarrays) passes its descriptor as a kernel argument; other
// types read a small table of pieces and find theirs by binary search. Index math is 32-bit
// whenever the sizes allow, because 64-bit division costs more than the memory access.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../common/cuda_check.hpp"
#include "../datatype/node.hpp"
#include "../datatype/runs.hpp"
#include "../runtime/env.hpp"
#include "pack_device.cuh"
#include "halox/pack.hpp"
#include "halox/pack_gpu.hpp"

namespace halox {

namespace {

using detail::DeviceDesc;
using detail::DevicePackView;
using detail::divide;
using detail::move_at;
using detail::move_face;
using detail::move_word;
using detail::PackOp;
using detail::piece_holding;
using detail::WordOf;

// Magic numbers for n / d with n < 2^31 (Granlund-Montgomery, as CUTLASS's FastDivmod).
void fast_divisor(std::int64_t d, unsigned& mul, unsigned& shr) {
  if (d <= 1) {
    mul = 0;
    shr = 0;
    return;
  }
  unsigned log2 = 0;
  while ((std::int64_t{1} << log2) < d) ++log2;  // ceil(log2(d))
  const unsigned p = 31 + log2;
  mul = static_cast<unsigned>(((std::uint64_t{1} << p) + static_cast<std::uint64_t>(d) - 1) /
                              static_cast<std::uint64_t>(d));
  shr = p - 32;
}

// Everything about a (type, count) pair that does not depend on the pointers.
struct Plan {
  std::vector<DeviceDesc> host_descs;  // word fields in bytes (scaled at launch)
  std::int64_t bytes = 0;
  // gcd of 16, the strides, block lengths, packed offsets and the differences between memory
  // offsets: with a base address such that base + first_offset is a multiple of a word
  // (below), every run starts on one. So a face of rows that start 4 bytes into an aligned
  // array (a padded lattice's x = 1) still moves in 16-byte words when its rows are aligned.
  std::int64_t relative_align = 16;
  std::int64_t first_offset = 0;  // the first run's memory offset
  bool contiguous = false;
  std::int64_t contiguous_offset = 0;
  bool fits_32bit = true;
  std::vector<std::shared_ptr<void>> device_index;  // owned index arrays
  struct Launch {
    std::vector<DeviceDesc> descs;  // word fields filled for this word size
    std::int64_t words = 0;
    bool run_per_thread = false;  // index_runs_kernel: one index piece of short runs
    std::shared_ptr<void> table;  // device copy of descs when there are several
  };
  std::map<int, Launch> launches;  // per word size
  std::mutex mutex;
};

std::int64_t gcd_align(std::int64_t a, std::int64_t v) {
  return std::gcd(a, v < 0 ? -v : v);
}

// A type's first pack may come while the caller's stream is being captured into a CUDA graph
// (a step captured whole): its plan's tables are then made outside the capture. In relaxed
// mode, which lets this thread allocate, and on a stream of their own, for the default stream
// may not be used while a blocking stream is captured (cudaErrorStreamCaptureImplicit). Not
// detail::copy_to_device_now, whose copies on the default stream the other set-up paths keep:
// there a copy also waits for the work of the blocking streams before it.
class OutsideCapture {
 public:
  OutsideCapture() { HALOX_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&m_mode)); }
  ~OutsideCapture() { cudaThreadExchangeStreamCaptureMode(&m_mode); }
  OutsideCapture(const OutsideCapture&) = delete;
  OutsideCapture& operator=(const OutsideCapture&) = delete;

 private:
  cudaStreamCaptureMode m_mode = cudaStreamCaptureModeRelaxed;
};

std::shared_ptr<void> device_copy(const void* data, std::size_t bytes) {
  OutsideCapture outside;
  void* p = nullptr;
  HALOX_CUDA_CHECK(cudaMalloc(&p, bytes));
  std::shared_ptr<void> copy(p, [](void* q) { cudaFree(q); });
  cudaStream_t upload = nullptr;
  HALOX_CUDA_CHECK(cudaStreamCreateWithFlags(&upload, cudaStreamNonBlocking));
  const cudaError_t copied = cudaMemcpyAsync(p, data, bytes, cudaMemcpyHostToDevice, upload);
  const cudaError_t landed = copied == cudaSuccess ? cudaStreamSynchronize(upload) : copied;
  cudaStreamDestroy(upload);
  detail::check_cuda(landed, "cudaMemcpyAsync + cudaStreamSynchronize of a pack plan's table");
  return copy;
}

// An index of equal runs whose first runs the canonical form merged into one longer run
// (a sorted gather whose first two entries touch: one 24-byte run, then 12-byte ones) as one
// index of the equal runs, so that it takes the kernel of one thread per run instead of a
// search of a table of pieces, which made such a 1M-entry gather slower than a naive one.
// Only pieces that add few entries: single runs of whole multiples of the index's run.
std::optional<CanonicalPiece> as_one_index(const CanonicalForm& form) {
  if (form.pieces.size() < 2) return std::nullopt;
  const CanonicalPiece* index = nullptr;
  for (const auto& piece : form.pieces) {
    if (piece.is_index) index = &piece;
  }
  if (index == nullptr) return std::nullopt;
  const std::int64_t run = index->index.block_bytes;
  CanonicalPiece one = *index;
  one.packed_offset = form.pieces.front().packed_offset;
  one.index.offsets.clear();
  std::int64_t packed = one.packed_offset;
  for (const auto& piece : form.pieces) {
    if (piece.packed_offset != packed) return std::nullopt;
    if (piece.is_index) {
      if (piece.index.block_bytes != run) return std::nullopt;
      one.index.offsets.insert(one.index.offsets.end(), piece.index.offsets.begin(),
                               piece.index.offsets.end());
      packed += run * static_cast<std::int64_t>(piece.index.offsets.size());
    } else {
      const StridedBlock& b = piece.strided;
      if (b.ndims != 0 || b.block_bytes % run != 0 || b.block_bytes / run > 64) return std::nullopt;
      for (std::int64_t at = 0; at < b.block_bytes; at += run)
        one.index.offsets.push_back(b.offset + at);
      packed += b.block_bytes;
    }
  }
  if (one.index.offsets.size() > 2 * index->index.offsets.size() + 64) return std::nullopt;
  return one;
}

std::unique_ptr<Plan> make_plan(const Datatype& type, std::int64_t count) {
  auto plan = std::make_unique<Plan>();
  const CanonicalForm form = repeat_canonical(type.canonical(), count, type.extent());
  plan->bytes = form.size;
  if (form.is_contiguous()) {
    // pack/unpack become one cudaMemcpyAsync; accumulate still uses the kernel below.
    plan->contiguous = true;
    plan->contiguous_offset = form.pieces[0].strided.offset;
  }
  std::int64_t align = 16;
  bool have_first = false;
  auto offset_align = [&](std::int64_t offset) {
    if (!have_first) {
      plan->first_offset = offset;
      have_first = true;
    }
    align = gcd_align(align, offset - plan->first_offset);
  };
  const std::optional<CanonicalPiece> gather = as_one_index(form);
  for (const auto& piece : gather ? std::span<const CanonicalPiece>(&*gather, 1)
                                  : std::span<const CanonicalPiece>(form.pieces)) {
    DeviceDesc d;
    d.packed_offset = piece.packed_offset;
    align = gcd_align(align, piece.packed_offset);
    if (piece.is_index) {
      d.block_bytes = piece.index.block_bytes;
      d.ndims = 1;
      d.count[0] = static_cast<std::int64_t>(piece.index.offsets.size());
      for (std::int64_t o : piece.index.offsets) offset_align(o);
      auto dev = device_copy(piece.index.offsets.data(),
                             piece.index.offsets.size() * sizeof(std::int64_t));
      d.index = static_cast<const std::int64_t*>(dev.get());
      plan->device_index.push_back(dev);
    } else {
      const StridedBlock& s = piece.strided;
      d.offset = s.offset;
      d.block_bytes = s.block_bytes;
      d.ndims = s.ndims;
      offset_align(s.offset);
      for (int k = 0; k < s.ndims; ++k) {
        d.count[k] = s.count[k];
        d.stride[k] = s.stride[k];
        align = gcd_align(align, s.stride[k]);
      }
    }
    align = gcd_align(align, d.block_bytes);
    plan->host_descs.push_back(d);
  }
  plan->relative_align = align;
  plan->fits_32bit = form.size < (std::int64_t{1} << 31);
  return plan;
}

// Plans are cached per (type node, count) for the life of the process; the key's shared
// pointer keeps its node alive.
Plan& plan_for(const Datatype& type, std::int64_t count) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, std::int64_t>,
                  std::pair<std::shared_ptr<const Datatype::Node>, std::unique_ptr<Plan>>>
      cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(static_cast<const void*>(type.node().get()), count);
  auto it = cache.find(key);
  if (it == cache.end()) {
    it = cache.emplace(key, std::make_pair(type.node(), make_plan(type, count))).first;
  }
  return *it->second.second;
}

// One strided or index piece, its descriptor in the kernel's parameters.
template <int W, PackOp OP, class I, int DEPTH>
__global__ void __launch_bounds__(256)
    single_piece_kernel(DeviceDesc d, I first, I end, const char* src, char* dst) {
  for (I g = first + static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; g < end;
       g += static_cast<I>(gridDim.x) * blockDim.x) {
    move_word<W, OP, I, DEPTH>(d, g, src, dst);
  }
}

// An index of short runs (a particle gather: 3 words of 4 bytes per entry): one thread per
// run, its offset read once and its words read before any is written, as a hand-written
// gather does. One thread per word reads the offset and divides for every word: it lost to
// one thread per entry by 10% on 22M sorted float3 entries, and by 5% on random ones
// (docs/PERFORMANCE.md).
constexpr int kMaxWordsPerThreadRun = 4;
// What the kernel reads of a DeviceDesc, 40 bytes instead of its 208: a launch's host time
// grows with its parameters (0.10-0.13 us for 192 bytes on the H200's host, gather_probe),
// and a halo-sized gather is as short as its launch.
struct IndexRuns {
  const std::int64_t* index = nullptr;
  std::int64_t packed_offset = 0, block_bytes = 0, words_per_run = 0;
  unsigned div_mul = 0, div_shr = 0;
};
template <int W, PackOp OP, class I>
__global__ void __launch_bounds__(256)
    index_runs_kernel(IndexRuns d, I first, I end, const char* src, char* dst) {
  using Word = typename WordOf<W>::type;
  const I wpr = static_cast<I>(d.words_per_run);
  const I first_run = divide<I>(first, d.words_per_run, d.div_mul, d.div_shr);
  const I end_run = divide<I>(end + wpr - 1, d.words_per_run, d.div_mul, d.div_shr);
  for (I run = first_run + static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; run < end_run;
       run += static_cast<I>(gridDim.x) * blockDim.x) {
    const std::int64_t mem = __ldg(d.index + run);
    const std::int64_t packed = d.packed_offset + static_cast<std::int64_t>(run) * d.block_bytes;
    const I g0 = run * wpr;  // the run's first word; a range may cut the first and last run
    if constexpr (OP == PackOp::pack || OP == PackOp::unpack) {
      const std::int64_t from = OP == PackOp::pack ? mem : packed;
      const std::int64_t to = OP == PackOp::pack ? packed : mem;
      Word word[kMaxWordsPerThreadRun];
#pragma unroll
      for (int w = 0; w < kMaxWordsPerThreadRun; ++w) {
        if (w < static_cast<int>(wpr) && g0 + w >= first && g0 + w < end)
          word[w] = *reinterpret_cast<const Word*>(src + from + w * W);
      }
#pragma unroll
      for (int w = 0; w < kMaxWordsPerThreadRun; ++w) {
        if (w < static_cast<int>(wpr) && g0 + w >= first && g0 + w < end)
          *reinterpret_cast<Word*>(dst + to + w * W) = word[w];
      }
    } else {
      for (int w = 0; w < static_cast<int>(wpr); ++w) {
        if (g0 + w >= first && g0 + w < end) move_at<W, OP>(mem + w * W, packed + w * W, src, dst);
      }
    }
  }
}

// Many pieces: each thread finds its piece by binary search over first_word.
template <int W, PackOp OP, class I>
__global__ void __launch_bounds__(256)
    multi_piece_kernel(const DeviceDesc* descs, int n, I first, I end, const char* src, char* dst) {
  for (I g = first + static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; g < end;
       g += static_cast<I>(gridDim.x) * blockDim.x) {
    const DeviceDesc& d = piece_holding(descs, n, g);
    move_word<W, OP, I, -1>(d, g - static_cast<I>(d.first_word), src, dst);
  }
}

// Typed memory to typed memory: word g of the source type's packed stream is word g of the
// destination type's, so it moves straight from one layout to the other, with no packed
// copy in between (a message to oneself, e.g. a periodic axis with one rank).
template <int W, class I>
__global__ void __launch_bounds__(256)
    copy_kernel(DevicePackView from, DevicePackView to, I words, const char* src, char* dst) {
  move_face<W, detail::Move::copy, I>(
      from, to, static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x,
      static_cast<long long>(words), static_cast<long long>(gridDim.x) * blockDim.x, src, dst);
}

// One thread per item (word or run) up to HALOX_PACK_WAVES waves of resident blocks.
int grid_for(std::int64_t items) {
  static const int max_blocks = [] {
    int device = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device);
    return std::max(1, sms * per_sm / 256) * detail::env_pack_waves();
  }();
  return static_cast<int>(std::min<std::int64_t>((items + 255) / 256, max_blocks));
}

// The descriptors for one word size, computed once per plan: words per run, first word
// and the division magic numbers do not change between calls, so no call repeats them.
const Plan::Launch& launch_for(Plan& plan, int word) {
  std::lock_guard<std::mutex> lock(plan.mutex);
  auto found = plan.launches.find(word);
  if (found != plan.launches.end()) return found->second;
  Plan::Launch launch;
  launch.descs = plan.host_descs;
  for (auto& d : launch.descs) {
    d.words_per_run = d.block_bytes / word;
    d.first_word = launch.words;
    fast_divisor(d.words_per_run, d.div_mul[0], d.div_shr[0]);
    for (int k = 0; k < d.ndims; ++k) fast_divisor(d.count[k], d.div_mul[k + 1], d.div_shr[k + 1]);
    std::int64_t runs = 1;
    for (int k = 0; k < d.ndims; ++k) runs *= d.count[k];
    launch.words += runs * d.words_per_run;
  }
  if (launch.descs.size() > 1) {
    launch.table = device_copy(launch.descs.data(), launch.descs.size() * sizeof(DeviceDesc));
  }
  launch.run_per_thread = launch.descs.size() == 1 && launch.descs[0].index != nullptr &&
                          launch.descs[0].words_per_run <= kMaxWordsPerThreadRun;
  return plan.launches.emplace(word, std::move(launch)).first->second;
}

// Packed bytes [begin, end) of the stream; both are multiples of the word size.
struct Range {
  std::int64_t begin = 0, end = 0;
};

// The driver's cuLaunchKernel, found through the runtime (libhalox links no libcuda), or null
// where the driver does not give it.
PFN_cuLaunchKernel_v4000 driver_launch() {
  static const PFN_cuLaunchKernel_v4000 launch = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    const cudaError_t rc = cudaGetDriverEntryPointByVersion("cuLaunchKernel", &entry, 12000,
                                                            cudaEnableDefault, &found);
#else
    const cudaError_t rc =
        cudaGetDriverEntryPoint("cuLaunchKernel", &entry, cudaEnableDefault, &found);
#endif
    if (rc != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return PFN_cuLaunchKernel_v4000{};
    }
    return reinterpret_cast<PFN_cuLaunchKernel_v4000>(entry);
  }();
  return launch;
}

// The kernel's function on the current device, kept per thread for its last few kernels:
// the handle is the current context's. Null where the runtime gives none (the launch through
// the runtime then names why).
CUfunction function_on_current_device(const void* kernel) {
  struct Known {
    const void* kernel = nullptr;
    int device = -1;
    CUfunction function = nullptr;
  };
  thread_local std::array<Known, 16> known;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return nullptr;
  Known& slot = known[(reinterpret_cast<std::uintptr_t>(kernel) >> 4) % known.size()];
  if (slot.kernel != kernel || slot.device != device) {
    cudaFunction_t function = nullptr;
    if (cudaGetFuncBySymbol(&function, kernel) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    slot = {kernel, device, reinterpret_cast<CUfunction>(function)};
  }
  return slot.function;
}

// A launch of 256-thread blocks through the driver's cuLaunchKernel, which skips the
// runtime's own lookup of the kernel: 0.14-0.27 us less host time than cudaLaunchKernel on
// the H200's host (gather_probe), where a halo-sized pack's whole call takes some 4 us. A launch
// the driver refuses is made again through the runtime, which names the error.
template <class... Params>
void launch_256(void (*kernel)(Params...), std::int64_t grid, cudaStream_t stream,
                std::type_identity_t<Params>... params) {
  void* args[] = {&params...};
  const void* stub = reinterpret_cast<const void*>(kernel);
  const PFN_cuLaunchKernel_v4000 launch = driver_launch();
  if (const CUfunction function = launch ? function_on_current_device(stub) : nullptr) {
    if (launch(function, static_cast<unsigned>(grid), 1, 1, 256, 1, 1, 0,
               reinterpret_cast<CUstream>(stream), args, nullptr) == CUDA_SUCCESS) {
      return;
    }
  }
  HALOX_CUDA_CHECK(
      cudaLaunchKernel(stub, dim3(static_cast<unsigned>(grid)), dim3(256), args, 0, stream));
}

template <int W, PackOp OP, class I>
void launch_kernel(const Plan::Launch& launch, Range range, const char* src, char* dst,
                   cudaStream_t stream) {
  const std::int64_t first = range.begin / W, end = range.end / W;
  if (end <= first) return;
  const I f = static_cast<I>(first), e = static_cast<I>(end);
  if (launch.run_per_thread) {
    const DeviceDesc& d = launch.descs[0];
    // One thread per run, not capped to waves: the resident blocks' loop cost the 22M-entry
    // gathers 4-5% against one thread per entry.
    const std::int64_t runs = (end - first) / d.words_per_run + 2;
    const IndexRuns index{d.index,         d.packed_offset, d.block_bytes,
                          d.words_per_run, d.div_mul[0],    d.div_shr[0]};
    launch_256(index_runs_kernel<W, OP, I>, std::min<std::int64_t>((runs + 255) / 256, INT32_MAX),
               stream, index, f, e, src, dst);
    return;
  }
  const int grid = grid_for(end - first);
  if (launch.descs.size() == 1) {
    const DeviceDesc& d = launch.descs[0];
    // Depth-specialised kernels for the common strided shapes (vectors, 2D and 3D faces).
    switch (d.index != nullptr ? -1 : d.ndims) {
      case 1: launch_256(single_piece_kernel<W, OP, I, 1>, grid, stream, d, f, e, src, dst); break;
      case 2: launch_256(single_piece_kernel<W, OP, I, 2>, grid, stream, d, f, e, src, dst); break;
      case 3: launch_256(single_piece_kernel<W, OP, I, 3>, grid, stream, d, f, e, src, dst); break;
      default: launch_256(single_piece_kernel<W, OP, I, -1>, grid, stream, d, f, e, src, dst);
    }
    return;
  }
  launch_256(multi_piece_kernel<W, OP, I>, grid, stream,
             static_cast<const DeviceDesc*>(launch.table.get()),
             static_cast<int>(launch.descs.size()), f, e, src, dst);
}

template <int W, PackOp OP>
void launch_word(Plan& plan, Range range, const char* src, char* dst, cudaStream_t stream) {
  const Plan::Launch& launch = launch_for(plan, W);
  if (plan.fits_32bit) {
    launch_kernel<W, OP, unsigned>(launch, range, src, dst, stream);
  } else {
    launch_kernel<W, OP, std::int64_t>(launch, range, src, dst, stream);
  }
}

template <PackOp OP>
void dispatch(Plan& plan, Range range, const char* src, char* dst, int word, cudaStream_t stream) {
  switch (word) {
    case 16: launch_word<16, OP>(plan, range, src, dst, stream); break;
    case 8: launch_word<8, OP>(plan, range, src, dst, stream); break;
    case 4: launch_word<4, OP>(plan, range, src, dst, stream); break;
    case 2: launch_word<2, OP>(plan, range, src, dst, stream); break;
    default: launch_word<1, OP>(plan, range, src, dst, stream); break;
  }
}

// The widest word for the typed memory at `typed` and the packed stream at `packed`.
int word_size(const Plan& plan, const void* typed, const void* packed, int min_word,
              Range range = {}) {
  std::int64_t align = plan.relative_align;
  align = gcd_align(align, range.begin);
  align = gcd_align(align, range.end);
  align = gcd_align(align, static_cast<std::int64_t>(
                               (reinterpret_cast<std::uintptr_t>(typed) + plan.first_offset) & 15));
  align =
      gcd_align(align, static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(packed) & 15));
  int word = 16;
  while (word > 1 && align % word != 0) word /= 2;
  return word >= min_word ? word : 0;
}

void run(PackOp op, const void* in, void* out, std::int64_t count, const Datatype& type,
         cudaStream_t stream, const char* where, std::int64_t packed_offset = 0,
         std::int64_t max_bytes = kAllBytes) {
  if (count < 0) {
    throw DatatypeError(std::string("halox::") + where + ": count = " + std::to_string(count) +
                        " must be >= 0");
  }
  type.canonical();  // throws when not committed
  detail::check_footprint(type, count, where);
  if (op != PackOp::pack && type.overlaps(count)) {
    throw DatatypeError(std::string("halox::") + where + ": the " + type.combiner_name() +
                        " type addresses some bytes twice; unpacking into it is undefined");
  }
  int element = 1;
  if (op == PackOp::accumulate_f32 || op == PackOp::accumulate_f64) {
    element = op == PackOp::accumulate_f32 ? 4 : 8;
  }
  Plan& plan = plan_for(type, count);
  if (packed_offset < 0 || max_bytes < 0) {
    throw DatatypeError(std::string("halox::") + where + ": negative packed range");
  }
  Range range{std::min(packed_offset, plan.bytes),
              std::min(plan.bytes, packed_offset + std::min(max_bytes, plan.bytes))};
  if (range.end <= range.begin) return;
  // The packed side pointer addresses byte range.begin; the kernels index the whole stream.
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  if (op == PackOp::pack) {
    dst -= range.begin;
  } else {
    src -= range.begin;
  }
  if (plan.contiguous && (op == PackOp::pack || op == PackOp::unpack)) {
    const std::int64_t off = plan.contiguous_offset + range.begin;
    HALOX_CUDA_CHECK(cudaMemcpyAsync(op == PackOp::pack ? dst + range.begin : dst + off,
                                     op == PackOp::pack ? src + off : src + range.begin,
                                     static_cast<std::size_t>(range.end - range.begin),
                                     cudaMemcpyDefault, stream));
    return;
  }
  if (range.begin % element != 0 || range.end % element != 0) {
    throw DatatypeError(std::string("halox::") + where + ": the packed range [" +
                        std::to_string(range.begin) + ", " + std::to_string(range.end) +
                        ") splits an element");
  }
  const bool packing = op == PackOp::pack;
  const int word = word_size(plan, packing ? in : out, packing ? out : in, element, range);
  if (word == 0) {
    throw DatatypeError(std::string("halox::") + where + ": the elements are not aligned to " +
                        std::to_string(element) + " bytes");
  }
  switch (op) {
    case PackOp::pack: dispatch<PackOp::pack>(plan, range, src, dst, word, stream); break;
    case PackOp::unpack: dispatch<PackOp::unpack>(plan, range, src, dst, word, stream); break;
    case PackOp::accumulate_f32:
      dispatch<PackOp::accumulate_f32>(plan, range, src, dst, word, stream);
      break;
    case PackOp::accumulate_f64:
      dispatch<PackOp::accumulate_f64>(plan, range, src, dst, word, stream);
      break;
  }
}

}  // namespace

void pack_async(const void* in, std::int64_t count, const Datatype& type, void* out,
                GpuStream stream) {
  run(PackOp::pack, in, out, count, type, stream, "pack_async");
}

void unpack_async(const void* in, void* out, std::int64_t count, const Datatype& type,
                  GpuStream stream) {
  run(PackOp::unpack, in, out, count, type, stream, "unpack_async");
}

void pack_range_async(const void* in, std::int64_t count, const Datatype& type, void* out,
                      std::int64_t packed_offset, std::int64_t bytes, GpuStream stream) {
  run(PackOp::pack, in, out, count, type, stream, "pack_range_async", packed_offset, bytes);
}

void unpack_range_async(const void* in, void* out, std::int64_t count, const Datatype& type,
                        std::int64_t packed_offset, std::int64_t bytes, GpuStream stream) {
  run(PackOp::unpack, in, out, count, type, stream, "unpack_range_async", packed_offset, bytes);
}

void unpack_accumulate_async(const void* in, void* out, std::int64_t count, const Datatype& type,
                             GpuStream stream) {
  BasicKind kind{};
  if (!type.homogeneous(&kind) || (kind != BasicKind::float32 && kind != BasicKind::float64)) {
    throw DatatypeError("halox::unpack_accumulate_async: the " + type.combiner_name() +
                        " type must hold only MPI_FLOAT or only MPI_DOUBLE elements");
  }
  run(kind == BasicKind::float32 ? PackOp::accumulate_f32 : PackOp::accumulate_f64, in, out, count,
      type, stream, "unpack_accumulate_async");
}

void copy_async(const void* in, const Datatype& in_type, void* out, const Datatype& out_type,
                GpuStream stream) {
  in_type.canonical();  // throw when not committed
  out_type.canonical();
  if (out_type.overlaps(1)) {
    throw DatatypeError("halox::copy_async: the destination " + out_type.combiner_name() +
                        " type addresses some bytes twice");
  }
  const Plan &from = plan_for(in_type, 1), &to = plan_for(out_type, 1);
  if (from.bytes != to.bytes) {
    throw DatatypeError("halox::copy_async: the source type holds " + std::to_string(from.bytes) +
                        " bytes, the destination type " + std::to_string(to.bytes));
  }
  if (from.bytes == 0) return;
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  // A contiguous side is a packed stream already: one pack or unpack (or a memcpy).
  if (to.contiguous) {
    pack_async(in, 1, in_type, dst + to.contiguous_offset, stream);
    return;
  }
  if (from.contiguous) {
    unpack_async(src + from.contiguous_offset, out, 1, out_type, stream);
    return;
  }
  static const void* const aligned = reinterpret_cast<const void*>(std::uintptr_t{256});
  const int word = std::min(word_size(from, in, aligned, 1), word_size(to, out, aligned, 1));
  auto launch = [&](auto w) {
    constexpr int W = decltype(w)::value;
    const DevicePackView a = detail::device_pack_view(in_type, 1, W),
                         b = detail::device_pack_view(out_type, 1, W);
    const int grid = grid_for(a.words);
    if (from.fits_32bit && to.fits_32bit) {
      launch_256(copy_kernel<W, unsigned>, grid, stream, a, b, static_cast<unsigned>(a.words), src,
                 dst);
    } else {
      launch_256(copy_kernel<W, std::int64_t>, grid, stream, a, b, a.words, src, dst);
    }
  };
  switch (word) {
    case 16: launch(std::integral_constant<int, 16>{}); break;
    case 8: launch(std::integral_constant<int, 8>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    default: launch(std::integral_constant<int, 1>{}); break;
  }
}

namespace detail {

int device_pack_word(const Datatype& type, std::int64_t count, const void* base) {
  // The packed side is a 256-byte aligned staging area: only the typed side limits the word.
  static const void* const aligned = reinterpret_cast<const void*>(std::uintptr_t{256});
  return word_size(plan_for(type, count), base, aligned, 1);
}

DevicePackView device_pack_view(const Datatype& type, std::int64_t count, int word) {
  Plan& plan = plan_for(type, count);
  const Plan::Launch& launch = launch_for(plan, word);
  DevicePackView view;
  view.pieces = static_cast<int>(launch.descs.size());
  view.words = launch.words;
  if (view.pieces == 0) return view;
  if (!launch.table) {
    // One piece: its launches pass the descriptor by value; the fused kernels need a table.
    std::lock_guard<std::mutex> lock(plan.mutex);
    auto& mutable_launch = const_cast<Plan::Launch&>(launch);
    if (!mutable_launch.table) {
      mutable_launch.table = device_copy(launch.descs.data(), sizeof(DeviceDesc));
    }
  }
  view.descs = static_cast<const DeviceDesc*>(launch.table.get());
  return view;
}

}  // namespace detail

GpuPackShape gpu_pack_shape(const void* in, std::int64_t count, const Datatype& type,
                            const void* out) {
  Plan& plan = plan_for(type, count);
  GpuPackShape shape;
  shape.memcpy_path = plan.contiguous;
  shape.pieces = static_cast<int>(plan.host_descs.size());
  shape.word_bytes = word_size(plan, in, out, 1);
  shape.words = shape.word_bytes ? plan.bytes / shape.word_bytes : 0;
  return shape;
}

}  // namespace halox
