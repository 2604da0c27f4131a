// halox for Python (nanobind): datatypes, packs of host and GPU arrays, topologies and plans
// from mpi4py communicators, and the grid and particle exchanges of host and GPU arrays, with
// halox's errors as Python exceptions. Communicators and datatypes come in as their Fortran
// handles (mpi4py's py2f()), so the module needs no mpi4py headers.
#include <dlfcn.h>
#include <mpi.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "halox/halox.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>

#include "halox/pack_gpu.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using halox::BasicKind;
using halox::Datatype;
using Array = nb::ndarray<nb::device::cpu>;
// An array on the CPU or a GPU (any DLPack producer: NumPy, CuPy, PyTorch), for the exchanges.
using AnyArray = nb::ndarray<>;

// The NumPy dtype code of a basic kind and back: (kind letter, bits).
struct DtypeKind {
  nb::dlpack::dtype dtype;
  BasicKind kind;
};
const DtypeKind kDtypes[] = {
    {nb::dtype<float>(), BasicKind::float32},
    {nb::dtype<double>(), BasicKind::float64},
    {nb::dtype<std::int8_t>(), BasicKind::int8},
    {nb::dtype<std::int16_t>(), BasicKind::int16},
    {nb::dtype<std::int32_t>(), BasicKind::int32},
    {nb::dtype<std::int64_t>(), BasicKind::int64},
    {nb::dtype<std::uint8_t>(), BasicKind::uint8},
    {nb::dtype<std::uint16_t>(), BasicKind::uint16},
    {nb::dtype<std::uint32_t>(), BasicKind::uint32},
    {nb::dtype<std::uint64_t>(), BasicKind::uint64},
};

BasicKind kind_of(nb::dlpack::dtype dtype) {
  for (const DtypeKind& d : kDtypes) {
    if (d.dtype == dtype) return d.kind;
  }
  throw halox::Error(
      "halox: arrays of this dtype have no halox basic type (float32/64, "
      "int8..64 and uint8..64 do)");
}

// A basic kind's numeric class, so that int32 and MPI_INT (int_) compare equal.
bool same_numbers(BasicKind a, BasicKind b) {
  if (a == b) return true;
  auto normal = [](BasicKind k) {
    switch (k) {
      case BasicKind::int_: return BasicKind::int32;
      case BasicKind::unsigned_: return BasicKind::uint32;
      case BasicKind::long_:
      case BasicKind::long_long: return BasicKind::int64;
      case BasicKind::unsigned_long:
      case BasicKind::unsigned_long_long: return BasicKind::uint64;
      case BasicKind::short_: return BasicKind::int16;
      case BasicKind::unsigned_short: return BasicKind::uint16;
      case BasicKind::signed_char: return BasicKind::int8;
      case BasicKind::unsigned_char:
      case BasicKind::byte_:
      case BasicKind::char_: return BasicKind::uint8;
      default: return k;
    }
  };
  return normal(a) == normal(b);
}

// An argument that is a halox Datatype or a NumPy dtype (np.float64, "f8", ...).
Datatype type_of(nb::handle type) {
  if (nb::isinstance<Datatype>(type)) return nb::cast<Datatype>(type);
  nb::object numpy = nb::module_::import_("numpy");
  nb::object dtype = numpy.attr("dtype")(type);
  const std::string name = nb::cast<std::string>(dtype.attr("name"));
  static const std::pair<const char*, BasicKind> names[] = {
      {"float32", BasicKind::float32}, {"float64", BasicKind::float64},
      {"int8", BasicKind::int8},       {"int16", BasicKind::int16},
      {"int32", BasicKind::int32},     {"int64", BasicKind::int64},
      {"uint8", BasicKind::uint8},     {"uint16", BasicKind::uint16},
      {"uint32", BasicKind::uint32},   {"uint64", BasicKind::uint64}};
  for (const auto& [n, kind] : names) {
    if (name == n) return Datatype::basic(kind);
  }
  throw halox::DatatypeError("halox: the dtype " + name + " has no halox basic type");
}

// Whether an array is C-contiguous (a type addresses bytes from the array's start, as MPI's
// buffer argument does).
template <class A>
bool c_contiguous(const A& a) {
  std::int64_t expect = static_cast<std::int64_t>(a.itemsize());
  for (std::size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) > 1 && a.stride(d) * static_cast<std::int64_t>(a.itemsize()) != expect)
      return false;
    expect *= static_cast<std::int64_t>(a.shape(d));
  }
  return true;
}
// Refuses a view that is not C-contiguous; `what()` names the array (made only then).
template <class A, class Name>
void require_c_contiguous(const A& a, Name&& what) {
  if (!c_contiguous(a))
    throw halox::Error("halox: " + std::string(what()) + " must be C-contiguous");
}
// The bytes an array spans, refusing views that are not C-contiguous.
template <class A>
std::int64_t array_bytes(const A& a, const char* what) {
  require_c_contiguous(a, [what] { return what; });
  return static_cast<std::int64_t>(a.nbytes());
}

MPI_Comm comm_of(nb::handle comm) {
  return MPI_Comm_f2c(static_cast<MPI_Fint>(nb::cast<long long>(comm.attr("py2f")())));
}

// A grid exchange's array: its dtype and its shape against the plan it is exchanged with.
// Called at every exchange: the messages are made only when a check fails.
template <class A>
void check_field(const A& a, const halox::GridPlan& plan, std::size_t index) {
  auto which = [index] { return "halox.GridExchange: array " + std::to_string(index); };
  BasicKind planned{};
  if (!plan.element.homogeneous(&planned) || !same_numbers(planned, kind_of(a.dtype()))) {
    throw halox::Error(which() + " has another dtype than its plan's element");
  }
  const std::int64_t per_cell = plan.element.extent() / static_cast<std::int64_t>(a.itemsize());
  const std::array<std::int64_t, 3> e = plan.extent;
  const std::array<std::int64_t, 4> want = {e[2], e[1], e[0], per_cell};
  const std::size_t dims = per_cell > 1 ? 4 : 3;
  bool same = a.ndim() == dims;
  for (std::size_t d = 0; same && d < dims; ++d)
    same = static_cast<std::int64_t>(a.shape(d)) == want[d];
  if (!same) {
    std::string text = which() + " has shape (";
    for (std::size_t d = 0; d < a.ndim(); ++d) text += (d ? ", " : "") + std::to_string(a.shape(d));
    text += "); its plan's array is (";
    for (std::size_t d = 0; d < dims; ++d) text += (d ? ", " : "") + std::to_string(want[d]);
    throw halox::Error(text + "): (z, y, x" + std::string(per_cell > 1 ? ", values" : "") +
                       ") with the halo");
  }
  require_c_contiguous(a, [index] { return "array " + std::to_string(index); });
}

halox::TransportKind transport_of(const std::string& name) {
  return halox::parse_transport(name);
}

// Where an array lives (DLPack device types): false in host memory, true on a CUDA GPU;
// anything else, or a GPU array in a halox without CUDA, is an error naming the array
// (`which()`, made only then: exchanges call this for every array of every call).
template <class Name>
bool on_gpu(const AnyArray& a, Name&& which) {
  const int here = a.device_type();
  if (here == nb::device::cpu::value) return false;
  if (here != nb::device::cuda::value) {
    throw halox::Error(std::string(which()) + " is neither in host memory nor on a CUDA GPU");
  }
  if (!HALOX_HAS_CUDA) {
    throw halox::Error(std::string(which()) +
                       " is on a GPU, and this halox was built without CUDA");
  }
  return true;
}

std::string mixed_places(const char* who) {
  return std::string(who) +
         ": arrays on the host and on the GPU in one call; give all of them in one place";
}

// The arrays of an exchange call: all in host memory or all on a CUDA GPU, each checked
// against its plan by `check(array, index)`.
template <class Check>
std::vector<void*> exchange_arrays(const nb::args& fields, const char* who, Check&& check) {
  std::vector<void*> arrays;
  int gpu = -1;  // the arrays' place, one for all
  for (std::size_t i = 0; i < fields.size(); ++i) {
    AnyArray a = nb::cast<AnyArray>(fields[i]);
    const int here =
        on_gpu(a, [who, i] { return std::string(who) + ": array " + std::to_string(i); }) ? 1 : 0;
    if (gpu >= 0 && here != gpu) throw halox::Error(mixed_places(who));
    gpu = here;
    check(a, i);
    arrays.push_back(a.data());
  }
  return arrays;
}

// A CUDA stream given from Python: None (the legacy default stream), an int handle, or an
// object that carries one: __cuda_stream__ (the CUDA stream protocol), .cuda_stream
// (PyTorch), .ptr (CuPy).
halox::GpuStream stream_of(nb::handle stream) {
  std::uintptr_t handle = 0;
  if (stream.is_none()) {
    handle = 0;
  } else if (nb::isinstance<nb::int_>(stream)) {
    handle = nb::cast<std::uintptr_t>(stream);
  } else if (nb::hasattr(stream, "__cuda_stream__")) {
    handle = nb::cast<std::uintptr_t>(stream.attr("__cuda_stream__")()[1]);
  } else if (nb::hasattr(stream, "cuda_stream")) {
    handle = nb::cast<std::uintptr_t>(stream.attr("cuda_stream"));
  } else if (nb::hasattr(stream, "ptr")) {
    handle = nb::cast<std::uintptr_t>(stream.attr("ptr"));
  } else {
    throw halox::Error(
        "halox: stream must be None, an int handle, or a CUDA stream object (__cuda_stream__, "
        ".cuda_stream or .ptr)");
  }
  return reinterpret_cast<halox::GpuStream>(handle);
}

// The packs on host or GPU arrays: on the host halox's range-checked calls; on a GPU the
// pack kernels (pack_gpu.hpp), which take bare device pointers, after the same checks here.
enum class PackCall { pack, unpack, unpack_accumulate };

const char* name_of(PackCall call) {
  switch (call) {
    case PackCall::pack: return "halox.pack";
    case PackCall::unpack: return "halox.unpack";
    default: return "halox.unpack_accumulate";
  }
}

// The bytes `count` instances of `type` touch from the array's start (MPI's footprint: the
// true bounds, count - 1 extents apart) must lie inside the array.
void check_typed_fits(const AnyArray& a, std::int64_t count, const Datatype& type,
                      const std::string& who) {
  const std::int64_t size = array_bytes(a, (who + "'s array").c_str());
  if (count == 0 || type.size() == 0) return;
  const std::int64_t step = (count - 1) * type.extent();
  const std::int64_t lo = type.true_lb() + std::min<std::int64_t>(0, step);
  const std::int64_t hi = type.true_lb() + type.true_extent() + std::max<std::int64_t>(0, step);
  if (lo < 0 || hi > size) {
    throw halox::DatatypeError(who + ": " + std::to_string(count) + " instances of the " +
                               type.combiner_name() + " type touch bytes [" + std::to_string(lo) +
                               ", " + std::to_string(hi) + ") of the array, which holds " +
                               std::to_string(size) + " bytes");
  }
}

#if HALOX_HAS_CUDA
// The arrays of packs queued on a stream (a `stream` given): referenced until the pack has
// run, so that an array the caller drops meanwhile is not freed under the kernel. Each call
// lets go of those whose event has passed.
class InFlight {
 public:
  static InFlight& get() {
    static InFlight* in_flight = new InFlight;  // never destroyed: Python objects at exit
    return *in_flight;
  }
  void keep(nb::object arrays, halox::GpuStream stream) {
    retire();
    cudaEvent_t done = nullptr;
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(done, stream), "cudaEventRecord");
    m_pending.push_back({done, std::move(arrays)});
  }
  void retire() {
    std::erase_if(m_pending, [](Pending& p) {
      if (cudaEventQuery(p.done) == cudaErrorNotReady) return false;
      cudaGetLastError();  // a failed launch was reported by its own call
      cudaEventDestroy(p.done);
      return true;
    });
  }
  static void check(cudaError_t rc, const char* call) {
    if (rc != cudaSuccess) {
      throw halox::BackendError(std::string("halox: ") + call + ": " + cudaGetErrorString(rc));
    }
  }
  std::size_t pending() const { return m_pending.size(); }

 private:
  struct Pending {
    cudaEvent_t done;
    nb::object arrays;
  };
  std::vector<Pending> m_pending;
};

void pack_on_gpu(PackCall call, const AnyArray& packed, const AnyArray& typed, std::int64_t count,
                 const Datatype& type, const nb::handle& stream, nb::object keep) {
  const std::string who = name_of(call);
  int device = 0;
  InFlight::check(cudaGetDevice(&device), "cudaGetDevice");
  if (typed.device_id() != device || packed.device_id() != device) {
    throw halox::Error(who + ": the arrays are on GPU " + std::to_string(typed.device_id()) +
                       " and " + std::to_string(packed.device_id()) + ", the current device is " +
                       std::to_string(device));
  }
  const halox::GpuStream s = stream_of(stream);
  switch (call) {
    case PackCall::pack: halox::pack_async(typed.data(), count, type, packed.data(), s); break;
    case PackCall::unpack: halox::unpack_async(packed.data(), typed.data(), count, type, s); break;
    case PackCall::unpack_accumulate:
      halox::unpack_accumulate_async(packed.data(), typed.data(), count, type, s);
      break;
  }
  if (stream.is_none()) {
    nb::gil_scoped_release release;
    InFlight::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  } else {
    InFlight::get().keep(std::move(keep), s);
  }
}
#endif

// pack, unpack and unpack_accumulate of `count` instances of `type` between `typed` and the
// packed bytes `packed`: both in host memory (done on return), or both on the current GPU:
// on `stream` (None: the legacy default stream, done on return).
void pack_arrays(PackCall call, nb::handle packed_object, nb::handle typed_object,
                 std::int64_t count, const Datatype& type, nb::handle stream) {
  const std::string who = name_of(call);
  const AnyArray typed = nb::cast<AnyArray>(typed_object);
  const AnyArray packed = nb::cast<AnyArray>(packed_object);
  const bool gpu = on_gpu(typed, [&] { return who + ": the array"; });
  if (on_gpu(packed, [&] { return who + ": the packed bytes"; }) != gpu)
    throw halox::Error(mixed_places(who.c_str()));
  if (count < 0)
    throw halox::DatatypeError(who + ": count = " + std::to_string(count) + " must be >= 0");
  const std::int64_t bytes = halox::packed_size(type, count);  // throws when not committed
  const std::int64_t packed_bytes = array_bytes(packed, (who + "'s packed bytes").c_str());
  if (packed_bytes < bytes) {
    throw halox::DatatypeError(who + ": the packed bytes hold " + std::to_string(packed_bytes) +
                               " bytes; " + std::to_string(count) + " instances of the " +
                               type.combiner_name() + " type pack into " + std::to_string(bytes));
  }
  if (!gpu) {  // halox's CPU calls check the typed array's bounds themselves
    const std::int64_t typed_bytes = array_bytes(typed, (who + "'s array").c_str());
    halox::MutableBytes to(call == PackCall::pack ? packed.data() : typed.data());
    to.size = call == PackCall::pack ? packed_bytes : typed_bytes;
    halox::ConstBytes from(call == PackCall::pack ? typed.data() : packed.data());
    from.size = call == PackCall::pack ? typed_bytes : packed_bytes;
    if (call == PackCall::pack)
      halox::pack(from, count, type, to);
    else if (call == PackCall::unpack)
      halox::unpack(from, to, count, type);
    else
      halox::unpack_accumulate(from, to, count, type);
    return;
  }
#if HALOX_HAS_CUDA
  check_typed_fits(typed, count, type, who);  // the kernels take bare device pointers
  pack_on_gpu(call, packed, typed, count, type, stream,
              nb::make_tuple(packed_object, typed_object));
#endif
}

// A particle array: (total_count, 3) of the exchange's dtype, C-contiguous.
void check_particles(const AnyArray& a, const halox::ParticlePlan& plan, BasicKind real,
                     std::size_t index, const char* what) {
  // Called at every exchange: the messages are made only when a check fails.
  auto which = [index] { return "halox.ParticleExchange: array " + std::to_string(index); };
  if (!same_numbers(real, kind_of(a.dtype()))) {
    throw halox::Error(which() + " has another dtype than the exchange's");
  }
  if (a.ndim() != 2 || static_cast<std::int64_t>(a.shape(0)) != plan.total_count ||
      a.shape(1) != 3) {
    throw halox::Error(which() + " must have shape (" + std::to_string(plan.total_count) +
                       ", 3): the plan's home and halo items, " + what);
  }
  require_c_contiguous(a, [index] { return "array " + std::to_string(index); });
}

// Home coordinates (n, 3) float64 in, the same extended by the halo out (as the builders
// extend theirs).
std::vector<double> coordinates_of(const Array& home, const char* who) {
  if (home.ndim() != 2 || home.shape(1) != 3 || home.dtype() != nb::dtype<double>()) {
    throw halox::Error(std::string(who) + ": home coordinates must be a float64 array (n, 3)");
  }
  array_bytes(home, "the home coordinates");
  const auto* p = static_cast<const double*>(home.data());
  return std::vector<double>(p, p + 3 * home.shape(0));
}

// Atoms as rows of doubles, (n, columns) float64, positions first; every set the same width.
std::vector<std::vector<double>> atom_rows_of(const std::vector<Array>& sets, std::size_t& columns,
                                              const char* who) {
  std::vector<std::vector<double>> rows;
  for (std::size_t i = 0; i < sets.size(); ++i) {
    const Array& a = sets[i];
    if (a.ndim() != 2 || a.shape(1) < 3 || a.dtype() != nb::dtype<double>() ||
        (i > 0 && a.shape(1) != columns)) {
      throw halox::Error(std::string(who) + ": atom set " + std::to_string(i) +
                         " must be a float64 array (n, k), k >= 3 the same for every set, "
                         "positions in the first three columns");
    }
    columns = a.shape(1);
    array_bytes(a, "the atoms");
    const auto* p = static_cast<const double*>(a.data());
    rows.emplace_back(p, p + columns * a.shape(0));
  }
  return rows;
}

// The exchange with what its calls check arrays against (the C++ class keeps the kind).
struct ParticleExchange : halox::ParticleExchange {
  ParticleExchange(const halox::Ranks& ranks, std::vector<halox::ParticlePlan> plans,
                   BasicKind kind, const halox::ExchangeOptions& options)
      : halox::ParticleExchange(ranks, std::move(plans), kind, options), real(kind) {}
  // Coordinates forward or forces back, the arrays checked first; done on return, or
  // queued on `stream` (async: the arrays kept referenced until the exchange's next call).
  void run(const nb::args& arrays, bool forward, nb::handle stream = nb::handle(),
           bool async = false) {
    const std::vector<void*> p =
        exchange_arrays(arrays, "halox.ParticleExchange", [&](const AnyArray& a, std::size_t i) {
          if (i < plans().size())
            check_particles(a, plans()[i], real, i, forward ? "coordinates" : "forces");
        });
    const std::span<void* const> fields(p);
    if (async) {
      const halox::GpuStream s = stream_of(stream);
      nb::setattr(nb::find(this), "_in_flight", arrays);
      nb::gil_scoped_release release;
      forward ? forward_async(fields, s) : reverse_async(fields, s);
      return;
    }
    nb::gil_scoped_release release;
    forward ? halox::ParticleExchange::forward(fields) : halox::ParticleExchange::reverse(fields);
  }
  BasicKind real;
};

// Rows of `columns` doubles as a NumPy array (n, columns) owning them.
nb::ndarray<nb::numpy, double, nb::ndim<2>> numpy_of(std::vector<double> rows,
                                                     std::size_t columns = 3) {
  auto* v = new std::vector<double>(std::move(rows));
  nb::capsule owner(v, [](void* q) noexcept { delete static_cast<std::vector<double>*>(q); });
  return nb::ndarray<nb::numpy, double, nb::ndim<2>>(v->data(), {v->size() / columns, columns},
                                                     owner);
}

// halox.Error and its kinds, raised for the C++ errors of the same names.
void bind_errors(nb::module_& m) {
  static nb::object error = nb::exception<halox::Error>(m, "Error");
  static nb::object datatype_error = nb::exception<halox::DatatypeError>(m, "DatatypeError", error);
  static nb::object timeout_error =
      nb::exception<halox::HaloTimeoutError>(m, "HaloTimeoutError", error);
  static nb::object backend_error = nb::exception<halox::BackendError>(m, "BackendError", error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const halox::DatatypeError& e) {
      PyErr_SetString(datatype_error.ptr(), e.what());
    } catch (const halox::HaloTimeoutError& e) {
      // rank, peer and pulse as attributes (None where the wait had none)
      nb::object raised = timeout_error(e.what());
      raised.attr("rank") = e.rank() >= 0 ? nb::cast(e.rank()) : nb::none();
      raised.attr("peer") = e.peer() >= 0 ? nb::cast(e.peer()) : nb::none();
      raised.attr("pulse") = e.pulse().empty() ? nb::none() : nb::cast(e.pulse());
      PyErr_SetObject(timeout_error.ptr(), raised.ptr());
    } catch (const halox::BackendError& e) {
      PyErr_SetString(backend_error.ptr(), e.what());
    } catch (const halox::Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });
}

// Datatypes and from_mpi.
void bind_datatypes(nb::module_& m) {
  nb::class_<Datatype>(m, "Datatype",
                       "An MPI-style derived datatype (the MPI constructors; commit() before use)")
      .def_static("of", &type_of, "dtype"_a,
                  "The basic type of a NumPy dtype (np.float64, 'i4', ...)")
      .def_static(
          "contiguous",
          [](std::int64_t count, nb::handle old) {
            return Datatype::contiguous(count, type_of(old));
          },
          "count"_a, "old"_a)
      .def_static(
          "vector",
          [](std::int64_t count, std::int64_t block, std::int64_t stride, nb::handle old) {
            return Datatype::vector(count, block, stride, type_of(old));
          },
          "count"_a, "blocklength"_a, "stride"_a, "old"_a, "MPI_Type_vector (stride in extents)")
      .def_static(
          "hvector",
          [](std::int64_t count, std::int64_t block, std::int64_t stride, nb::handle old) {
            return Datatype::hvector(count, block, stride, type_of(old));
          },
          "count"_a, "blocklength"_a, "stride_bytes"_a, "old"_a)
      .def_static(
          "indexed",
          [](const std::vector<std::int64_t>& lengths, const std::vector<std::int64_t>& disps,
             nb::handle old) { return Datatype::indexed(lengths, disps, type_of(old)); },
          "blocklengths"_a, "displacements"_a, "old"_a)
      .def_static(
          "hindexed",
          [](const std::vector<std::int64_t>& lengths, const std::vector<std::int64_t>& disps,
             nb::handle old) { return Datatype::hindexed(lengths, disps, type_of(old)); },
          "blocklengths"_a, "displacements_bytes"_a, "old"_a)
      .def_static(
          "struct",
          [](const std::vector<std::int64_t>& lengths, const std::vector<std::int64_t>& disps,
             const std::vector<nb::handle>& olds) {
            std::vector<Datatype> types;
            for (nb::handle t : olds) types.push_back(type_of(t));
            return Datatype::struct_(lengths, disps, types);
          },
          "blocklengths"_a, "displacements_bytes"_a, "types"_a)
      .def_static(
          "subarray",
          [](const std::vector<std::int64_t>& sizes, const std::vector<std::int64_t>& subsizes,
             const std::vector<std::int64_t>& starts, nb::handle old, const std::string& order) {
            if (order != "C" && order != "F")
              throw halox::DatatypeError("halox.Datatype.subarray: order must be 'C' or 'F'");
            return Datatype::subarray(sizes, subsizes, starts,
                                      order == "C" ? halox::Order::c : halox::Order::fortran,
                                      type_of(old));
          },
          "sizes"_a, "subsizes"_a, "starts"_a, "old"_a, "order"_a = "C")
      .def_static(
          "resized",
          [](nb::handle old, std::int64_t lb, std::int64_t extent) {
            return Datatype::resized(type_of(old), lb, extent);
          },
          "old"_a, "lb"_a, "extent"_a)
      .def(
          "commit", [](Datatype& t) -> Datatype& { return t.commit(); }, nb::rv_policy::reference)
      .def_prop_ro("committed", &Datatype::committed)
      .def_prop_ro("size", &Datatype::size)
      .def_prop_ro("lb", &Datatype::lb)
      .def_prop_ro("extent", &Datatype::extent)
      .def_prop_ro("true_lb", &Datatype::true_lb)
      .def_prop_ro("true_extent", &Datatype::true_extent)
      .def(
          "describe", [](const Datatype& t) { return t.canonical().describe(); },
          "The canonical form halox packs by")
      .def("__repr__", [](const Datatype& t) {
        return "<halox.Datatype " + t.combiner_name() + ", " + std::to_string(t.size()) + " bytes>";
      });

  m.def(
      "from_mpi",
      [](nb::handle mpi_type) {
        const MPI_Fint handle = static_cast<MPI_Fint>(nb::cast<long long>(mpi_type.attr("py2f")()));
        return halox::from_mpi(MPI_Type_f2c(handle));
      },
      "datatype"_a, "The halox type of an mpi4py MPI.Datatype (committed), as MPI_Pack packs it");
}

// pack, unpack, unpack_accumulate and packed_size on host or GPU arrays.
void bind_packs(nb::module_& m) {
  m.def(
      "pack",
      [](nb::handle array, std::int64_t count, const Datatype& type, nb::handle out,
         nb::handle stream) -> nb::object {
        if (!out.is_none()) {
          pack_arrays(PackCall::pack, out, array, count, type, stream);
          return nb::borrow(out);
        }
        const AnyArray a = nb::cast<AnyArray>(array);
        if (on_gpu(a, [] { return "halox.pack: the array"; })) {
          throw halox::Error(
              "halox.pack: a GPU array packs into out=, a GPU array of at least "
              "packed_size(type, count) bytes (halox.pack allocates it for CuPy and PyTorch)");
        }
        const std::int64_t bytes = halox::packed_size(type, count);
        auto* packed = new std::uint8_t[static_cast<std::size_t>(std::max<std::int64_t>(bytes, 0))];
        nb::capsule owner(packed, [](void* p) noexcept { delete[] static_cast<std::uint8_t*>(p); });
        nb::object result = nb::cast(nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(
            packed, {static_cast<std::size_t>(bytes)}, owner));
        pack_arrays(PackCall::pack, result, array, count, type, stream);
        return result;
      },
      "array"_a, "count"_a, "type"_a, "out"_a = nb::none(), "stream"_a = nb::none(),
      "The packed bytes of `count` instances of `type` laid out from the array's start: a new "
      "NumPy array, or `out`. GPU arrays (any DLPack producer) pack on the GPU into `out`, on "
      "`stream` (None: the legacy default stream, done on return; a stream: queued, the "
      "arrays kept referenced until the pack has run)");
  m.def(
      "unpack",
      [](nb::handle packed, nb::handle array, std::int64_t count, const Datatype& type,
         nb::handle stream) { pack_arrays(PackCall::unpack, packed, array, count, type, stream); },
      "packed"_a, "array"_a, "count"_a, "type"_a, "stream"_a = nb::none(),
      "Scatters packed bytes into the array (both in host memory, or both on the GPU: on "
      "`stream`, as pack)");
  m.def(
      "unpack_accumulate",
      [](nb::handle packed, nb::handle array, std::int64_t count, const Datatype& type,
         nb::handle stream) {
        pack_arrays(PackCall::unpack_accumulate, packed, array, count, type, stream);
      },
      "packed"_a, "array"_a, "count"_a, "type"_a, "stream"_a = nb::none(),
      "Adds the packed values instead of overwriting (float32 or float64 types)");
  m.def(
      "packed_size",
      [](const Datatype& type, std::int64_t count) { return halox::packed_size(type, count); },
      "type"_a, "count"_a, "Bytes that `count` instances of `type` pack into");
  m.def(
      "_packs_in_flight",
      [] {
#if HALOX_HAS_CUDA
        InFlight::get().retire();
        return InFlight::get().pending();
#else
        return std::size_t{0};
#endif
      },
      "Packs queued on a stream whose arrays are still referenced (tests)");
}

// Topologies, the split of a global lattice, Ranks.
void bind_topology(nb::module_& m) {
  nb::class_<halox::Topology>(m, "Topology", "A periodic or open grid of ranks")
      .def(nb::init<std::array<int, 3>, std::array<bool, 3>, int>(), "dims"_a, "periodic"_a,
           "rank"_a)
      .def_static(
          "from_mpi",
          [](nb::handle comm, std::array<int, 3> dims, std::array<bool, 3> periodic) {
            return halox::Topology::from_mpi(comm_of(comm), dims, periodic);
          },
          "comm"_a, "dims"_a = std::array<int, 3>{0, 0, 0},
          "periodic"_a = std::array<bool, 3>{true, true, true},
          "Collective: the grid over an mpi4py communicator (0 dims: MPI_Dims_create)")
      .def_prop_ro("rank", &halox::Topology::rank)
      .def_prop_ro("size", &halox::Topology::size)
      .def_prop_ro("dims", &halox::Topology::dims)
      .def_prop_ro("periodic", &halox::Topology::periodic)
      .def_prop_ro("coords", [](const halox::Topology& t) { return t.coords(); })
      .def("coords_of", &halox::Topology::coords_of, "rank"_a)
      .def("__repr__",
           [](const halox::Topology& t) { return "<halox.Topology " + t.describe() + ">"; });

  m.def(
      "subdomain_of",
      [](const halox::Topology& t, std::array<std::int64_t, 3> global, int rank) {
        const halox::Subdomain s = halox::subdomain_of(t, global, rank);
        return nb::make_tuple(s.offset, s.interior);
      },
      "topology"_a, "global_cells"_a, "rank"_a = -1,
      "(offset, interior) of a rank's share of a global lattice (x, y, z), balanced");

  nb::class_<halox::Ranks>(m, "Ranks")
      .def_static("mpi", &halox::Ranks::mpi, "topology"_a, "One rank per MPI process")
      .def_static(
          "local", [](const halox::Topology& grid) { return halox::Ranks::local(grid); }, "grid"_a,
          "Every rank of the grid in this process")
      .def_static("blocks", &halox::Ranks::blocks, "processes"_a, "block"_a,
                  "Several ranks per MPI process: each process of `processes` (Topology.from_mpi) "
                  "holds a block of ranks (x, y, z) of a grid of processes.dims x block ranks "
                  "(grid exchanges so far; device arrays by staged)")
      .def_prop_ro("in_blocks", &halox::Ranks::in_blocks)
      .def_prop_ro("processes", &halox::Ranks::processes, "The MPI processes' grid")
      .def("process_of", &halox::Ranks::process_of, "rank"_a,
           "The process (its rank in processes) that holds a grid rank")
      .def("index_in_process", &halox::Ranks::index_in_process, "rank"_a,
           "A grid rank's index among its process's ranks")
      .def_prop_ro("count", &halox::Ranks::count)
      .def_prop_ro("topology", &halox::Ranks::topology,
                   "The grid (seen from rank 0 for Ranks.local)")
      .def("rank", &halox::Ranks::rank, "index"_a = 0,
           "The grid rank of this process's index-th rank (the order of plans and arrays)");
}

// Grid plans and their builders.
void bind_grid_plans(nb::module_& m) {
  nb::class_<halox::GridPlan>(m, "GridPlan", "One rank's grid halo: six pulses in three stages")
      .def_ro("interior", &halox::GridPlan::interior)
      .def_ro("halo", &halox::GridPlan::halo)
      .def_ro("extent", &halox::GridPlan::extent)
      .def_prop_ro(
          "shape",
          [](const halox::GridPlan& p) {
            return nb::make_tuple(p.extent[2], p.extent[1], p.extent[0]);
          },
          "The array's shape with its halo, (z, y, x) in C order")
      .def_prop_ro(
          "dtype",
          [](const halox::GridPlan& p) -> nb::object {
            BasicKind kind{};
            if (!p.element.homogeneous(&kind)) return nb::none();
            for (const DtypeKind& d : kDtypes) {
              if (d.kind != kind) continue;
              const char* names[] = {"int", "uint", "float"};  // DLPack's codes 0, 1, 2
              return nb::str(
                  (std::string(names[d.dtype.code]) + std::to_string(d.dtype.bits)).c_str());
            }
            return nb::none();
          },
          "The NumPy dtype name of the element's values ('float64'), None for a mixed element")
      .def_prop_ro(
          "element_bytes", [](const halox::GridPlan& p) { return p.element.extent(); },
          "Bytes per cell (the element's extent)");
  m.def(
      "build_grid_plan",
      [](const halox::Topology& t, std::array<std::int64_t, 3> interior, int halo,
         nb::handle element) {
        Datatype e = type_of(element);
        e.commit();
        return halox::build_grid_plan(t, interior, halo, e);
      },
      "topology"_a, "interior"_a, "halo"_a = 1, "element"_a,
      "Collective: this rank's grid plan (interior cells x, y, z), validated with its neighbours");
  m.def(
      "build_grid_plans",
      [](const halox::Ranks& ranks, std::array<std::int64_t, 3> global, int halo,
         nb::handle element) {
        Datatype e = type_of(element);
        e.commit();
        return halox::build_grid_plans(ranks, global, halo, e);
      },
      "ranks"_a, "global_cells"_a, "halo"_a = 1, "element"_a,
      "The plans of this process's ranks for a lattice of global_cells (x, y, z) split as "
      "subdomain_of does (Ranks.mpi: collective, one plan; Ranks.local: every rank's)");
}

// The fields of one GridExchange call: host or GPU arrays, each checked against its plan.
std::vector<void*> grid_fields(const halox::GridExchange& self, const nb::args& fields) {
  return exchange_arrays(fields, "halox.GridExchange", [&](const AnyArray& a, std::size_t i) {
    if (i < self.plans().size()) check_field(a, self.plans()[i], i);
  });
}

// Whether every array is a CuPy array (of exactly CuPy's type; halox never imports CuPy).
bool all_cupy(const nb::args& arrays) {
  nb::object type;
  for (nb::handle a : arrays) {
    // A cheap test first: the other frameworks' arrays are rejected without a lookup.
    if (std::strcmp(Py_TYPE(a.ptr())->tp_name, "ndarray") != 0) return false;
    if (!type.is_valid()) {
      nb::object cupy = nb::steal(PyImport_GetModule(nb::str("cupy").ptr()));
      if (!cupy.is_valid()) return false;
      type = nb::getattr(cupy, "ndarray", nb::none());
    }
    if (!a.type().is(type)) return false;
  }
  return arrays.size() > 0;
}

// The pointers of a GridExchange's last two calls' CuPy arrays, which a call with the same
// arrays reuses instead of exporting and importing them through DLPack again (what Python adds
// to each call of a loop that exchanges the same arrays, or two arrays in turn as a
// double-buffered stencil does: bench/python_calls.py, examples/python/heat3d.py). The arrays
// themselves stay in the exchange's `_in_flight` (the last call's) and `_in_flight_before`
// (the call's before, while both are CuPy's), referenced so that one the caller drops is not
// freed under the GPU's work, and visible to Python's cycle collector; this holds no reference
// to them. A CuPy array can take another shape in place, so each array's pointer, shape,
// strides and dtype are read back and compared at every call.
class LastPointers {
 public:
  /// Which entry `fields` are (0: the last call's arrays `last`, 1: the call's before,
  /// `before`), unchanged; -1: neither.
  int find(const nb::args& fields, nb::handle last, nb::handle before) const {
    const nb::handle held[2] = {last, before};
    for (std::size_t k = 0; k < m_entries.size(); ++k) {
      if (m_entries[k].same(fields, held[k])) return static_cast<int>(k);
    }
    return -1;
  }
  const std::vector<void*>& pointers(int k) const {
    return m_entries[static_cast<std::size_t>(k)].pointers;
  }
  std::size_t size() const { return m_entries.size(); }
  /// The call before's arrays became the last call's.
  void swap() { std::swap(m_entries[0], m_entries[1]); }
  /// `fields` (CuPy arrays: all_cupy) are the last call's; the last call's the call's before.
  void push(const nb::args& fields, std::vector<void*> pointers) {
    Entry e{std::move(pointers), {}};
    for (nb::handle a : fields) e.layouts.push_back(layout_of(a));
    m_entries.insert(m_entries.begin(), std::move(e));
    if (m_entries.size() > 2) m_entries.pop_back();
  }

 private:
  struct Layout {
    nb::object data, shape, strides, dtype;
    bool equal(const Layout& o) const {
      return data.equal(o.data) && shape.equal(o.shape) && strides.equal(o.strides) &&
             dtype.equal(o.dtype);
    }
  };
  struct Entry {
    std::vector<void*> pointers;
    std::vector<Layout> layouts;
    // Whether `fields` are the arrays `held`, unchanged.
    bool same(const nb::args& fields, nb::handle held) const {
      if (!nb::isinstance<nb::tuple>(held) || fields.size() != layouts.size() ||
          nb::len(held) != fields.size())
        return false;
      for (std::size_t i = 0; i < fields.size(); ++i) {
        if (!fields[i].is(held[i]) || !layout_of(fields[i]).equal(layouts[i])) return false;
      }
      return true;
    }
  };
  static Layout layout_of(nb::handle a) {
    return {a.attr("data").attr("ptr"), a.attr("shape"), a.attr("strides"), a.attr("dtype")};
  }
  std::vector<Entry> m_entries;  // the last call's first
};

// The checked pointers of a GridExchange call's fields, which become the last call's
// (`_in_flight`); the CuPy arrays of the last two calls are not imported again (LastPointers).
std::vector<void*> remembered_grid_fields(halox::GridExchange& self, const nb::args& fields) {
  nb::handle py_self = nb::find(&self);
  nb::object memo = nb::getattr(py_self, "_in_flight_pointers", nb::none());
  LastPointers* last = memo.is_none() ? nullptr : &nb::cast<LastPointers&>(memo);
  nb::object recent = nb::getattr(py_self, "_in_flight", nb::none());
  if (last) {
    nb::object before = nb::getattr(py_self, "_in_flight_before", nb::none());
    const int k = last->find(fields, recent, before);
    if (k == 0) return last->pointers(0);
    if (k == 1) {  // the other array of a double-buffered loop: now the last call's
      nb::setattr(py_self, "_in_flight", before);
      nb::setattr(py_self, "_in_flight_before", recent);
      last->swap();
      return last->pointers(0);
    }
  }
  std::vector<void*> arrays = grid_fields(self, fields);
  if (all_cupy(fields)) {
    if (!last) {
      memo = nb::cast(LastPointers());
      nb::setattr(py_self, "_in_flight_pointers", memo);
      last = &nb::cast<LastPointers&>(memo);
    }
    // The last call's arrays stay referenced while the memo has their pointers.
    nb::setattr(py_self, "_in_flight_before", last->size() ? recent : nb::none());
    last->push(fields, arrays);
  } else if (last) {
    nb::setattr(py_self, "_in_flight_pointers", nb::none());
    nb::setattr(py_self, "_in_flight_before", nb::none());
  }
  nb::setattr(py_self, "_in_flight", fields);
  return arrays;
}

void bind_grid_exchange(nb::module_& m) {
  nb::class_<LastPointers>(m, "_LastPointers",
                           "The pointers of an exchange's last two calls (internal)");
  nb::class_<halox::GridExchange>(m, "GridExchange",
                                  "The grid halo of NumPy arrays laid out as the plan says",
                                  nb::dynamic_attr())
      .def(
          "__init__",
          [](halox::GridExchange* self, const halox::Ranks& ranks,
             std::vector<halox::GridPlan> plans, const std::string& transport, double timeout) {
            halox::ExchangeOptions o;
            o.transport = transport_of(transport);
            if (timeout > 0) o.timeout_seconds = timeout;
            new (self) halox::GridExchange(ranks, std::move(plans), o);
          },
          "ranks"_a, "plans"_a, "transport"_a = "auto", "timeout"_a = 0.0,
          "Collective over the ranks' processes")
      .def(
          "exchange",
          [](halox::GridExchange& self, nb::args fields) {
            const std::vector<void*> arrays = remembered_grid_fields(self, fields);
            nb::gil_scoped_release release;
            self.exchange(arrays);
          },
          "Fills the halos of the arrays (one per rank of this process and field), done on "
          "return. NumPy arrays, or GPU arrays (CuPy, PyTorch: any DLPack producer; ordered "
          "after the work on the legacy default stream, done when it returns). The exchange "
          "keeps the arrays referenced until its next call")
      .def(
          "exchange_async",
          [](halox::GridExchange& self, nb::args fields, nb::handle stream) {
            const halox::GpuStream s = stream_of(stream);
            const std::vector<void*> arrays = remembered_grid_fields(self, fields);
            nb::gil_scoped_release release;
            self.exchange_async(arrays, s);
          },
          "fields"_a, "stream"_a = nb::none(),
          "exchange() ordered on `stream` (GPU arrays; None: the legacy default stream, an int "
          "handle, or a CuPy / PyTorch stream): returns once queued. Host arrays are done on "
          "return. The exchange keeps the arrays referenced until its next call")
      .def(
          "_time_calls",
          [](halox::GridExchange& self, nb::args fields, int calls, nb::handle stream,
             bool wait_each) {
            if (fields.size() == 0) throw halox::Error("halox.GridExchange: no fields given");
            const std::vector<void*> arrays = grid_fields(self, fields);
            [[maybe_unused]] const bool gpu =
                on_gpu(nb::cast<AnyArray>(fields[0]), [] { return "halox.GridExchange"; });
            const halox::GpuStream s = stream_of(stream);
            auto wait = [&] {
#if HALOX_HAS_CUDA
              if (gpu && cudaStreamSynchronize(s) != cudaSuccess)
                throw halox::BackendError("halox: cudaStreamSynchronize failed");
#endif
            };
            nb::gil_scoped_release release;
            const auto start = std::chrono::steady_clock::now();
            for (int i = 0; i < calls; ++i) {
              self.exchange_async(arrays, s);
              if (wait_each) wait();
            }
            if (!wait_each) wait();
            const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
            return took.count() / std::max(1, calls);
          },
          "fields"_a, "calls"_a, "stream"_a = nb::none(), "wait_each"_a = false,
          "Benchmarks (bench/python_calls.py): seconds per exchange_async of `calls` made in "
          "a C++ loop, with a stream wait after each or only after the last")
      .def_prop_ro("fields", &halox::GridExchange::fields)
      .def_prop_ro("plans", &halox::GridExchange::plans,
                   "The plans, one per field and rank of this process")
      .def_prop_ro("capturable", &halox::GridExchange::capturable,
                   "Whether an exchange of GPU arrays may be captured in a CUDA graph (the "
                   "GPU-initiated transports: local-*, ipc-*, nvshmem-pulse/fused)")
      .def("check", &halox::GridExchange::check,
           "Raises HaloTimeoutError where a device-side wait of an earlier exchange (or of a "
           "replayed CUDA graph) expired, naming rank, peer and pulse; without synchronising")
      .def(
          "transport_name",
          [](const halox::GridExchange& self, const AnyArray& a) {
            return self.transport_name(a.data());
          },
          "The transport that moves this field (auto resolves per memory kind)");
}

// Boxes, particle plans and ParticleExchange.
void bind_particles(nb::module_& m) {
  nb::class_<halox::Box>(m, "Box", "A periodic box [0, length) per axis")
      .def(
          "__init__",
          [](halox::Box* self, std::array<double, 3> length) { new (self) halox::Box{length}; },
          "length"_a)
      .def_rw("length", &halox::Box::length);
  m.def(
      "domain_of",
      [](const halox::Topology& t, const halox::Box& box, int rank) {
        const halox::Domain d = halox::domain_of(t, box, rank);
        return nb::make_tuple(d.lo, d.hi);
      },
      "topology"_a, "box"_a, "rank"_a, "(lo, hi) of the part of the box a rank owns");
  nb::class_<halox::ParticlePlan>(m, "ParticlePlan",
                                  "One rank's particle halo: its home and halo items, its pulses")
      .def_ro("home_count", &halox::ParticlePlan::home_count)
      .def_ro("total_count", &halox::ParticlePlan::total_count)
      .def_ro("cutoff", &halox::ParticlePlan::cutoff)
      .def_prop_ro("pulses", [](const halox::ParticlePlan& p) { return p.pulses.size(); });
  m.def(
      "build_particle_plan",
      [](const halox::Topology& t, const halox::Box& box, double cutoff, const Array& home) {
        std::vector<double> xyz = coordinates_of(home, "halox.build_particle_plan");
        halox::ParticlePlan plan = halox::build_particle_plan(t, box, cutoff, xyz);
        return nb::make_tuple(plan, numpy_of(std::move(xyz)));
      },
      "topology"_a, "box"_a, "cutoff"_a, "home"_a,
      "Collective: (plan, coordinates) of this rank's home atoms (n, 3), the coordinates "
      "extended by the halo (total_count, 3)");
  m.def(
      "build_particle_plans",
      [](const halox::Ranks& ranks, const halox::Box& box, double cutoff,
         const std::vector<Array>& homes) {
        std::vector<std::vector<double>> xyz;
        for (const Array& h : homes) xyz.push_back(coordinates_of(h, "halox.build_particle_plans"));
        std::vector<halox::ParticlePlan> plans =
            halox::build_particle_plans(ranks, box, cutoff, xyz);
        nb::list out;
        for (auto& x : xyz) out.append(numpy_of(std::move(x)));
        return nb::make_tuple(plans, out);
      },
      "ranks"_a, "box"_a, "cutoff"_a, "homes"_a,
      "(plans, coordinates) of this process's ranks: homes[i] the home atoms (n, 3) of rank "
      "ranks.rank(i), the coordinates extended by the halo (Ranks.mpi, Ranks.blocks: "
      "collective)");
  m.def(
      "migrate_particles",
      [](const halox::Ranks& ranks, const halox::Box& box, const std::vector<Array>& atoms) {
        std::size_t columns = 3;
        std::vector<std::vector<double>> data =
            atom_rows_of(atoms, columns, "halox.migrate_particles");
        halox::migrate_particles(ranks, box, data, static_cast<int>(columns));
        nb::list out;
        for (auto& d : data) out.append(numpy_of(std::move(d), columns));
        return out;
      },
      "ranks"_a, "box"_a, "atoms"_a,
      "This process's ranks' atoms after each moved to the rank that owns it now: atoms[i] is "
      "rank ranks.rank(i)'s (n, k) float64 array, its position in the first three columns "
      "(velocities, ids after it travel along), wrapped across periodic edges; returns the new "
      "arrays (Ranks.mpi, Ranks.blocks: collective)");
  nb::class_<ParticleExchange>(m, "ParticleExchange",
                               "Coordinates forward to the halos, forces back to their "
                               "owners, of (total_count, 3) arrays",
                               nb::dynamic_attr())
      .def(
          "__init__",
          [](ParticleExchange* self, const halox::Ranks& ranks,
             std::vector<halox::ParticlePlan> plans, nb::handle dtype, const std::string& transport,
             double timeout) {
            halox::ExchangeOptions o;
            o.transport = transport_of(transport);
            if (timeout > 0) o.timeout_seconds = timeout;
            BasicKind real{};
            if (!type_of(dtype).homogeneous(&real)) {
              throw halox::DatatypeError("halox.ParticleExchange: dtype float32 or float64");
            }
            new (self) ParticleExchange(ranks, std::move(plans), real, o);
          },
          "ranks"_a, "plans"_a, "dtype"_a, "transport"_a = "auto", "timeout"_a = 0.0,
          "Collective over the ranks' processes; dtype float32 or float64")
      .def(
          "forward", [](ParticleExchange& self, nb::args arrays) { self.run(arrays, true); },
          "Fills the halo items of the arrays (one per rank of this process) from their owners, "
          "done on return")
      .def(
          "reverse", [](ParticleExchange& self, nb::args arrays) { self.run(arrays, false); },
          "Adds the halo items' forces to their owners' home items, done on return")
      .def(
          "forward_async",
          [](ParticleExchange& self, nb::args arrays, nb::handle stream) {
            self.run(arrays, true, stream, true);
          },
          "arrays"_a, "stream"_a = nb::none(),
          "forward() ordered on `stream` (GPU arrays; None: the legacy default stream, an int "
          "handle, or a CuPy / PyTorch stream): returns once queued; host arrays are done on "
          "return. The arrays stay referenced until the exchange's next call")
      .def(
          "reverse_async",
          [](ParticleExchange& self, nb::args arrays, nb::handle stream) {
            self.run(arrays, false, stream, true);
          },
          "arrays"_a, "stream"_a = nb::none(), "reverse() ordered on `stream`, as forward_async")
      .def("set_plans", &halox::ParticleExchange::set_plans, "plans"_a,
           "Collective: new plans after a neighbour search")
      .def("check", &halox::ParticleExchange::check,
           "Raises HaloTimeoutError where a device-side wait of an earlier call expired")
      .def_prop_ro("capturable", &halox::ParticleExchange::capturable,
                   "Whether a forward or reverse of GPU arrays may be captured in a CUDA graph");
}

}  // namespace

#if HALOX_HAS_JAX_FFI
void bind_jax(nb::module_& m);  // jax_ffi.cpp
#endif

NB_MODULE(_halox, m) {
  m.doc() = "halox: halo exchange for domain-decomposed simulations (C++ core)";
  m.attr("__version__") = HALOX_VERSION;
  bind_errors(m);
  bind_datatypes(m);
  bind_packs(m);
  bind_topology(m);
  bind_grid_plans(m);
  bind_grid_exchange(m);
  bind_particles(m);
#if HALOX_HAS_JAX_FFI
  bind_jax(m);
#endif
  m.attr("has_jax_ffi") = bool(HALOX_HAS_JAX_FFI);
  m.def(
      "_process_info",
      [] {
        const halox::ProcessInfo p = halox::process_info();
        nb::dict d;
        for (const auto& [key, value] : p.rows) d[key.c_str()] = value;
        char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
        int length = 0;
        MPI_Get_library_version(version, &length);  // allowed before MPI_Init
        std::string mpi = version;
        d["MPI"] = mpi.substr(0, mpi.find('\n'));
        d["MPI interposer"] = dlsym(RTLD_DEFAULT, "halox_mpi_active")
                                  ? "libhalox_mpi active in this process"
                                  : "not loaded in this process";
        d["gpus"] = p.gpus;
        d["peer_access"] = p.peer_access;
        d["gpu_note"] = p.gpu_note;
        return d;
      },
      "halox-info's rows for this process (halox.info())");
  m.def(
      "transports",
      [] {
        std::vector<std::string> names;
        for (const halox::TransportKind k : halox::all_transports()) {
          if (halox::transport_available(k)) names.push_back(halox::to_string(k));
        }
        return names;
      },
      "The transports this build and machine can run");
  m.attr("has_cuda") = static_cast<bool>(HALOX_HAS_CUDA);
  m.attr("has_mpi") = static_cast<bool>(HALOX_HAS_MPI);
}
