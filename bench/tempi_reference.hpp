// TEMPI's pack of GPU faces (its MPI_Pack of strided subarrays), the figures recorded on
// this project's H200 (issue 29): 25 us for a 0.75 MiB face up to 95 us for a 3 MiB face.
// The pack benchmark compares halox's synchronous pack of a face within that range with
// TEMPI's time at the face's size, interpolated linearly between the recorded ends (TEMPI's
// time grows with the bytes there); faces outside the range get no comparison.
#pragma once

#include <cstdint>
#include <optional>

namespace halox::bench {

struct TempiReference {
  static constexpr double low_bytes = 0.75 * (1 << 20), low_us = 25;
  static constexpr double high_bytes = 3.0 * (1 << 20), high_us = 95;
  /// Issue 29's goal: halox's synchronous pack at most this fraction of TEMPI's time.
  static constexpr double goal = 1.0 / 3.0;
};

/// TEMPI's recorded pack time for a face of `bytes`, or nothing outside the recorded range.
inline std::optional<double> tempi_pack_us(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b < TempiReference::low_bytes || b > TempiReference::high_bytes) return std::nullopt;
  const double t =
      (b - TempiReference::low_bytes) / (TempiReference::high_bytes - TempiReference::low_bytes);
  return TempiReference::low_us + t * (TempiReference::high_us - TempiReference::low_us);
}

}  // namespace halox::bench
