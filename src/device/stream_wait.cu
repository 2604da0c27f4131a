#include "stream_wait.hpp"

#include "signals.cuh"

namespace halox::detail {

namespace {

__global__ void bounded_wait_kernel(const u64* signal, u64 target, u64 timeout_ns, ErrorSink sink,
                                    int rank, int peer, int pulse, int kind) {
  // After a time-out every later wait gives up at once (wait_for).
  wait_for(signal, target, timeout_ns, sink, rank, peer, pulse, kind, /*sys=*/true);
}

}  // namespace

struct StreamWaits::Impl {
  ErrorChannel errors;
};

StreamWaits::StreamWaits() : m_impl(std::make_unique<Impl>()) {}
StreamWaits::~StreamWaits() = default;

void StreamWaits::wait_async(const std::uint64_t* signal, std::uint64_t target,
                             double timeout_seconds, int rank, int peer, int pulse, int kind,
                             GpuStream stream) {
  bounded_wait_kernel<<<1, 1, 0, stream>>>(reinterpret_cast<const u64*>(signal), target,
                                           static_cast<u64>(timeout_seconds * 1e9),
                                           m_impl->errors.sink(), rank, peer, pulse, kind);
  HALOX_CUDA_CHECK(cudaGetLastError());
}

std::optional<StreamWaits::Failure> StreamWaits::failure() const {
  const volatile ErrorRecord& e = m_impl->errors.record();
  if (e.flag == 0) return std::nullopt;
  return Failure{e.rank, e.peer, e.pulse, e.kind, e.seen, e.expected};
}

}  // namespace halox::detail
