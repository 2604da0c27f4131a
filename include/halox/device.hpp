// halox: the GPUs this process sees.
#pragma once

namespace halox {

/// GPUs visible to this process: 0 when halox was built without CUDA or none is visible (the
/// CUDA error that reports it is cleared, so later CUDA calls do not see it).
int visible_gpus();

}  // namespace halox
