// A build without CUDA: the GPU back end is absent and says so.
#include "backend.hpp"
#include "halox/error.hpp"

namespace halox::md {

bool gpu_present() {
  return false;
}

std::unique_ptr<Backend> make_gpu_backend(bool, GpuStream) {
  throw Error("halox-md: --device gpu, but halox was built without CUDA");
}

}  // namespace halox::md
