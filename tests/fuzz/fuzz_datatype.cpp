// Fuzz target: bytes -> a program of datatype constructor calls on a small stack, then
// commit, pack and unpack. Bad input must end in halox::DatatypeError, never in a crash,
// a sanitizer report or undefined behaviour; pack(unpack(pack(x))) must equal pack(x).
#include <cstdint>
#include <cstring>
#include <vector>

#include "halox/pack.hpp"

namespace {

class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size) : m_data(data), m_size(size) {}
  bool done() const { return m_pos >= m_size; }
  std::uint8_t byte() { return m_pos < m_size ? m_data[m_pos++] : 0; }
  // Small signed numbers, sometimes huge ones (to reach the overflow checks).
  std::int64_t number() {
    const std::uint8_t b = byte();
    if (b == 0xFF) return std::int64_t{1} << (byte() % 62);
    if (b == 0xFE) return -(std::int64_t{1} << (byte() % 62));
    return static_cast<std::int8_t>(b);
  }

 private:
  const std::uint8_t* m_data;
  std::size_t m_size, m_pos = 0;
};

void run(const std::uint8_t* data, std::size_t size) {
  using halox::Datatype;
  Reader in(data, size);
  std::vector<Datatype> stack{Datatype::of<double>()};
  for (int step = 0; step < 64 && !in.done(); ++step) {
    const Datatype top = stack.back();
    const int op = in.byte() % 13;
    std::vector<std::int64_t> a, b;
    const int n = in.byte() % 4;
    for (int i = 0; i < n; ++i) a.push_back(in.number());
    for (int i = 0; i < n; ++i) b.push_back(in.number());
    switch (op) {
      case 0:
        stack.push_back(Datatype::basic(static_cast<halox::BasicKind>(in.byte() % 28)));
        break;
      case 1: stack.push_back(Datatype::contiguous(in.number(), top)); break;
      case 2: stack.push_back(Datatype::vector(in.number(), in.number(), in.number(), top)); break;
      case 3: stack.push_back(Datatype::hvector(in.number(), in.number(), in.number(), top)); break;
      case 4: stack.push_back(Datatype::indexed(a, b, top)); break;
      case 5: stack.push_back(Datatype::hindexed(a, b, top)); break;
      case 6: stack.push_back(Datatype::indexed_block(in.number(), b, top)); break;
      case 7: {
        std::vector<Datatype> types(a.size(), top);
        if (!types.empty() && stack.size() > 1) types[0] = stack[stack.size() - 2];
        stack.push_back(Datatype::struct_(a, b, types));
        break;
      }
      case 8: {
        std::vector<std::int64_t> c;
        for (int i = 0; i < n; ++i) c.push_back(in.number());
        stack.push_back(Datatype::subarray(
            a, b, c, in.byte() % 2 ? halox::Order::c : halox::Order::fortran, top));
        break;
      }
      case 9: {
        std::vector<halox::Distribution> dist;
        std::vector<std::int64_t> dargs, psizes;
        for (int i = 0; i < n; ++i) {
          dist.push_back(static_cast<halox::Distribution>(in.byte() % 3));
          dargs.push_back(in.number());
          psizes.push_back(in.number());
        }
        stack.push_back(Datatype::darray(static_cast<int>(in.number()),
                                         static_cast<int>(in.number()), a, dist, dargs, psizes,
                                         halox::Order::c, top));
        break;
      }
      case 10: stack.push_back(Datatype::resized(top, in.number(), in.number())); break;
      case 11: {  // a deep nest: past kMaxDatatypeDepth it must be refused, not overflow
        Datatype t = top;
        const int levels = 16 * in.byte();
        for (int i = 0; i < levels; ++i) t = Datatype::contiguous(1, t);
        stack.push_back(t);
        break;
      }
      default: stack.push_back(top.dup()); break;
    }
  }
  Datatype type = stack.back();
  type.commit();
  // Sometimes a huge count: pack and unpack must refuse what 64-bit offsets cannot address.
  const std::uint8_t c = in.byte();
  const std::int64_t count = c == 0xFF ? std::int64_t{1} << (in.byte() % 63) : 1 + c % 3;
  // Keep the buffers small enough for a fuzzer's iteration budget (the span computed without
  // overflow: extents of 2^62 with count 3 do not fit in 64 bits).
  const std::int64_t extent = type.extent() < 0 ? -type.extent() : type.extent();
  std::int64_t repeats = 0, span = 0, bytes_total = 0;
  if (__builtin_mul_overflow(count - 1, extent, &repeats) ||
      __builtin_add_overflow(type.true_extent(), repeats, &span) ||
      __builtin_mul_overflow(count, type.size(), &bytes_total)) {
    unsigned char small[64] = {};
    try {
      halox::pack(small, count, type, small);
    } catch (const halox::DatatypeError&) {
      return;  // refused, as it must be
    }
    __builtin_trap();  // packed what no 64-bit offset addresses
  }
  if (type.size() > (1 << 16) || span > (1 << 20) || type.canonical().runs() > (1 << 16)) return;
  const std::int64_t lo = type.true_lb() + std::min<std::int64_t>(0, (count - 1) * type.extent());
  std::vector<unsigned char> buffer(static_cast<std::size_t>(span + 1));
  for (std::size_t i = 0; i < buffer.size(); ++i)
    buffer[i] = static_cast<unsigned char>(i * 31 + 7);
  unsigned char* base = buffer.data() - lo;
  const std::int64_t bytes = halox::packed_size(type, count);
  std::vector<unsigned char> packed(static_cast<std::size_t>(bytes)), again(packed.size());
  halox::pack(base, count, type, packed.data());
  if (type.overlaps(count)) return;
  halox::unpack(packed.data(), base, count, type);
  halox::pack(base, count, type, again.data());
  if (packed != again) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    run(data, size);
  } catch (const halox::DatatypeError&) {
    // expected for bad input
  }
  return 0;
}
