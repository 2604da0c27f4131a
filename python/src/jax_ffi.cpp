// halox inside jax.jit: the grid exchange as an XLA FFI call (jax.ffi), on the host (XLA's
// CPU runtime) or on the stream XLA gives (CUDA). XLA aliases each output to its input
// (input_output_aliases), so the exchange fills the halos in place; a jitted step exchanges
// without leaving the compiled program. The exchange is named by its address, checked
// against the exchanges registered from Python so that a released one is refused.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "halox/halox.hpp"
#include "xla/ffi/api/ffi.h"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace {

std::mutex g_mutex;
std::set<const halox::GridExchange*> g_registered;

// The bytes of one array of `plan` (the halo included).
std::int64_t array_bytes(const halox::GridPlan& plan) {
  return plan.extent[0] * plan.extent[1] * plan.extent[2] * plan.element.extent();
}

// Checks the call against the exchange's plans, aliases each output to its input (copying
// where XLA did not), and runs `run(exchange, fields)`.
template <class Copy, class Run>
ffi::Error exchange_call(std::int64_t handle, ffi::RemainingArgs args, ffi::RemainingRets rets,
                         Copy&& copy, Run&& run) {
  auto* exchange = reinterpret_cast<halox::GridExchange*>(handle);
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    if (g_registered.count(exchange) == 0) {
      return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                        "halox.jax: the exchange of this compiled call was released "
                        "(halox.jax.release) or never registered");
    }
  }
  const std::vector<halox::GridPlan>& plans = exchange->plans();
  if (args.size() != plans.size() || rets.size() != plans.size()) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      "halox.jax: " + std::to_string(args.size()) + " arrays for " +
                          std::to_string(plans.size()) + " plans (one per field and rank)");
  }
  std::vector<void*> fields;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    ffi::ErrorOr<ffi::AnyBuffer> in = args.get<ffi::AnyBuffer>(i);
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> out = rets.get<ffi::AnyBuffer>(i);
    if (!in.has_value() || !out.has_value()) {
      return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                        "halox.jax: array " + std::to_string(i) + " is not a buffer");
    }
    const auto bytes = static_cast<std::int64_t>(in->size_bytes());
    if (bytes != array_bytes(plans[i]) || (*out)->size_bytes() != in->size_bytes()) {
      return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                        "halox.jax: array " + std::to_string(i) + " has " + std::to_string(bytes) +
                            " bytes, its plan's array " + std::to_string(array_bytes(plans[i])));
    }
    void* data = (*out)->untyped_data();
    if (data != in->untyped_data()) copy(data, in->untyped_data(), static_cast<std::size_t>(bytes));
    fields.push_back(data);
  }
  try {
    run(*exchange, fields);
  } catch (const std::exception& e) {
    return ffi::Error(ffi::ErrorCode::kInternal, e.what());
  }
  return ffi::Error::Success();
}

ffi::Error exchange_on_host(std::int64_t handle, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  return exchange_call(
      handle, args, rets,
      [](void* to, const void* from, std::size_t n) { std::memcpy(to, from, n); },
      [](halox::GridExchange& e, std::vector<void*>& fields) { e.exchange(fields); });
}

#if HALOX_HAS_CUDA
ffi::Error exchange_on_stream(cudaStream_t stream, std::int64_t handle, ffi::RemainingArgs args,
                              ffi::RemainingRets rets) {
  cudaError_t copied = cudaSuccess;
  ffi::Error done = exchange_call(
      handle, args, rets,
      [&](void* to, const void* from, std::size_t n) {
        if (copied == cudaSuccess)
          copied = cudaMemcpyAsync(to, from, n, cudaMemcpyDeviceToDevice, stream);
      },
      [&](halox::GridExchange& e, std::vector<void*>& fields) {
        if (copied != cudaSuccess)
          throw halox::Error(std::string("halox.jax: cudaMemcpyAsync: ") +
                             cudaGetErrorString(copied));
        e.exchange_async(fields, reinterpret_cast<halox::GpuStream>(stream));
      });
  return done;
}
#endif

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    halox_grid_exchange_host, exchange_on_host,
    ffi::Ffi::Bind().Attr<std::int64_t>("exchange").RemainingArgs().RemainingRets());
#if HALOX_HAS_CUDA
XLA_FFI_DEFINE_HANDLER_SYMBOL(halox_grid_exchange_cuda, exchange_on_stream,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Attr<std::int64_t>("exchange")
                                  .RemainingArgs()
                                  .RemainingRets());
#endif

// Bound in module.cpp's NB_MODULE: the handlers as capsules, and the registry.
void bind_jax(nb::module_& m) {
  m.def(
      "_jax_handlers",
      [] {
        nb::dict handlers;
        handlers["cpu"] = nb::capsule(reinterpret_cast<void*>(&halox_grid_exchange_host));
#if HALOX_HAS_CUDA
        handlers["CUDA"] = nb::capsule(reinterpret_cast<void*>(&halox_grid_exchange_cuda));
#endif
        return handlers;
      },
      "The XLA FFI handlers of halox.jax, per JAX platform");
  m.def(
      "_jax_register",
      [](const halox::GridExchange& e) {
        const std::lock_guard<std::mutex> lock(g_mutex);
        g_registered.insert(&e);
        return reinterpret_cast<std::int64_t>(&e);
      },
      nb::arg("exchange"), "Lets compiled calls name the exchange; returns its handle");
  m.def(
      "_jax_release",
      [](const halox::GridExchange& e) {
        const std::lock_guard<std::mutex> lock(g_mutex);
        g_registered.erase(&e);
      },
      nb::arg("exchange"), "Compiled calls naming the exchange are refused from now on");
}
