// halox's environment knobs, each read through one of these: parsed strictly, so a typo is an
// error that names the variable and what it accepts, never a silent other meaning
// (HALOX_TRACE=off once switched tracing on).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "halox/error.hpp"

namespace halox::detail {

/// A switch: unset or empty gives `otherwise`; 1/on/true/yes and 0/off/false/no (any case)
/// give true and false; anything else throws halox::Error.
inline bool env_flag(const char* name, bool otherwise) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return otherwise;
  std::string v(raw);
  for (char& c : v) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (v == "1" || v == "on" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "off" || v == "false" || v == "no") return false;
  throw Error(std::string("halox: ") + name + "='" + raw +
              "' is not a switch (1, on, true, yes or 0, off, false, no)");
}

/// A whole number in [lo, hi]: unset or empty gives `otherwise`; anything else throws.
inline std::int64_t env_int(const char* name, std::int64_t lo, std::int64_t hi,
                            std::int64_t otherwise) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return otherwise;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(raw, &end, 10);
  if (*end != '\0' || errno != 0 || v < lo || v > hi) {
    throw Error(std::string("halox: ") + name + "='" + raw + "' is not a whole number in [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

// Every knob halox reads, declared here with its parsing and range; the code calls these.

/// HALOX_TRACE: switch the event log on at start-up (default off).
inline bool env_trace() {
  return env_flag("HALOX_TRACE", false);
}
/// HALOX_PDL: launch the fused kernels as programmatic dependents (default on, sm_90+).
inline bool env_dependent_launch() {
  return env_flag("HALOX_PDL", true);
}
/// HALOX_NVSHMEM_PUTS: reach every peer by put-with-signal, even mapped ones (default off).
inline bool env_nvshmem_puts() {
  return env_flag("HALOX_NVSHMEM_PUTS", false);
}
/// HALOX_HOST_PROXY: the fused grid kernel reaches every neighbour in another process through
/// the host proxy, even mapped ones (default off).
inline bool env_host_proxy() {
  return env_flag("HALOX_HOST_PROXY", false);
}
/// HALOX_GRID_BLOCKS (diagnostics): blocks of the grid kernel's launch, 1 to `fit` (default:
/// `fit`, what the GPU holds at once, or this process's share of it where other processes use
/// the GPU). Its blocks wait only for tickets below their own, so any count is safe; fewer
/// leave SMs to an update that runs beside the exchange.
inline int env_grid_blocks(int fit) {
  return static_cast<int>(env_int("HALOX_GRID_BLOCKS", 1, fit, fit));
}
/// HALOX_PACK_WAVES (measurements): the GPU pack kernels' largest grid, in waves of the
/// blocks the GPU holds at once, 1 to 64 (default 4); beyond it their threads loop.
inline int env_pack_waves() {
  return static_cast<int>(env_int("HALOX_PACK_WAVES", 1, 64, 4));
}
/// HALOX_DEVICE: the GPU select_device picks, 0 to count - 1 (default: node-local rank).
inline int env_device(int count, int otherwise) {
  return static_cast<int>(env_int("HALOX_DEVICE", 0, count - 1, otherwise));
}
/// HALOX_GRID_TILE_WORDS (measurements): the grid kernel's tile, a positive multiple
/// of `granule` words.
inline long long env_grid_tile_words(long long granule, long long otherwise) {
  const long long words =
      env_int("HALOX_GRID_TILE_WORDS", granule, std::int64_t{1} << 40, otherwise);
  if (words % granule != 0) {
    throw Error("halox: HALOX_GRID_TILE_WORDS must be a positive multiple of " +
                std::to_string(granule) + ", not " + std::to_string(words));
  }
  return words;
}
/// HALOX_TUNING_FILE: the tuning file's path (else the XDG default, tuning.hpp); null when
/// unset or empty.
inline const char* env_tuning_file() {
  const char* raw = std::getenv("HALOX_TUNING_FILE");
  return raw && *raw ? raw : nullptr;
}

/// HALOX_MPI_REPORT: the MPI interposer (libhalox_mpi) prints its messages, bytes and time
/// per path at MPI_Finalize (default off).
inline bool env_mpi_report() {
  return env_flag("HALOX_MPI_REPORT", false);
}
/// HALOX_MPI_PRETEND_DEVICE: a test-only switch: the interposer's halox_mpi_pretend_alloc()
/// hands out host memory that it treats as device memory (default off).
inline bool env_mpi_pretend_device() {
  return env_flag("HALOX_MPI_PRETEND_DEVICE", false);
}
/// HALOX_MPI_IPC: the interposer lets a peer on the same node read a device message from the
/// sender's memory itself (CUDA IPC; default on). Off, every device message goes through host
/// memory as between nodes (staged, or chunked from 1 MiB). Every rank must say the same
/// (checked in MPI_Init).
inline bool env_mpi_ipc() {
  return env_flag("HALOX_MPI_IPC", true);
}
/// HALOX_MPI_TIMEOUT: seconds the interposer waits for what a peer's note promised (the bytes
/// of a 229-byte message, which follow the note at once) before it reports that peer as
/// stalled or dead (default 60).
inline std::int64_t env_mpi_timeout() {
  return env_int("HALOX_MPI_TIMEOUT", 1, 86400, 60);
}

// Variables of others that halox reads, with the same strictness.

/// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: this process's MPS share of the SMs, a number in
/// (0, 100]; 0 when unset or empty.
inline double env_mps_thread_percentage() {
  const char* name = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(raw, &end);
  if (*end != '\0' || errno != 0 || !(v > 0 && v <= 100)) {
    throw Error(std::string("halox: ") + name + "='" + raw + "' is not a percentage in (0, 100]");
  }
  return v;
}
/// The folder of per-user configuration: $XDG_CONFIG_HOME, else $HOME/.config, else ./.config.
inline std::string env_config_home() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  if (xdg && *xdg) return xdg;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.config";
}

}  // namespace halox::detail
