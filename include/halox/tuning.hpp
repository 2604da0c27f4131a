// halox: the tuning file. halox-tune measures the pipelined transport's chunk size on this
// machine and writes it here; the pipelined transport reads it.
#pragma once

#include <cstdint>
#include <string>

namespace halox {

/// $HALOX_TUNING_FILE, else $XDG_CONFIG_HOME/halox/tuning.json, else
/// $HOME/.config/halox/tuning.json.
std::string tuning_file_path();

/// Default chunk when no tuning file exists (the middle of the 4 KiB..1 MiB sweep).
constexpr std::int64_t kDefaultChunkBytes = 256 * 1024;

/// What a tuning file holds (defaults for absent members).
struct TuningValues {
  bool found = true;  ///< false: no file at the path (the defaults)
  std::int64_t chunk_bytes = kDefaultChunkBytes;
  std::int64_t pipelined_from_bytes = std::int64_t{1} << 20;
  std::int64_t direct_until_bytes = -1;
};

/// Reads and checks the tuning file at `path` (see tuned_chunk_bytes for what it may hold).
/// Throws halox::Error naming the file and the reason for anything else.
TuningValues read_tuning_file(const std::string& path);

/// The chunk size from the tuning file, or kDefaultChunkBytes (with a one-time notice on
/// stderr saying the machine is not tuned). The file is read once per process: a regular
/// file of at most 64 KiB holding a JSON object whose members "chunk_bytes" (16 B to 1 GiB),
/// "pipelined_from_bytes" (0 to 1 TiB) and "direct_until_bytes" (-1 to 1 TiB) are whole
/// numbers; anything else throws halox::Error naming the file and the reason.
std::int64_t tuned_chunk_bytes();

/// The message size from which pipelining beat the staged transport in halox-tune's sweep
/// (the tuning file's "pipelined_from_bytes"), or 1 MiB when the machine is not tuned.
std::int64_t tuned_pipelined_from_bytes();

/// The message size from which NVSHMEM's copy-engine puts (nvshmem-stream) beat the fused
/// kernel's direct stores (ipc-fused) between two ranks of this node in halox-tune's sweep
/// (the tuning file's "direct_until_bytes"), or -1 when it was not measured.
std::int64_t tuned_direct_until_bytes();

/// Writes `json` (a complete JSON object with a "chunk_bytes" member) to tuning_file_path(),
/// creating its folder. Throws halox::Error when it cannot.
void write_tuning_file(const std::string& json);

}  // namespace halox
