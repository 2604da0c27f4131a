#include <cstdio>
#include <vector>

#include "halox/config.hpp"
#include "halox/pack.hpp"

int main() {
  halox::Datatype column = halox::Datatype::vector(4, 1, 4, halox::Datatype::of<float>());
  column.commit();
  std::vector<float> grid(16), packed(4, -1.0f);
  for (int i = 0; i < 16; ++i) grid[static_cast<std::size_t>(i)] = static_cast<float>(i);
  halox::pack(grid.data() + 1, 1, column, packed.data());
  const bool ok = packed[0] == 1 && packed[1] == 5 && packed[2] == 9 && packed[3] == 13;
  std::printf("halox %s consumer: %s\n", HALOX_VERSION, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
