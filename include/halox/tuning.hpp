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

/// The chunk size from the tuning file, or kDefaultChunkBytes (with a one-time notice on
/// stderr saying the machine is not tuned).
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
