// halox: the GPUs this process sees, and the stream type of every stream-ordered call.
#pragma once

struct CUstream_st;

namespace halox {

/// The CUDA stream type, without including CUDA headers (same as cudaStream_t).
using GpuStream = CUstream_st*;

/// GPUs visible to this process: 0 when halox was built without CUDA or none is visible (the
/// CUDA error that reports it is cleared, so later CUDA calls do not see it).
int visible_gpus();

}  // namespace halox
