#include "backend.hpp"
#include "halox/error.hpp"

namespace halox::lbm {
std::unique_ptr<Backend> make_gpu_backend(bool) {
  throw Error("halox-lbm: --device gpu, but halox was built without CUDA");
}
}  // namespace halox::lbm
