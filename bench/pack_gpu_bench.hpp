// halox-bench pack --device gpu (compiled when halox has CUDA).
#pragma once

#include <string>

namespace halox::bench {
int pack_gpu(int reps, bool quick, const std::string& json);
}  // namespace halox::bench
