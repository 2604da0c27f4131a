#!/usr/bin/env bash
# Installs what halox needs on a fresh Debian 12 machine (as root); a no-op for what is
# already there. Used by scripts/test.sh and scripts/demo.sh.
set -euo pipefail

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }
have cmake || need_apt+=(cmake)
have ninja || need_apt+=(ninja-build)
have g++ || need_apt+=(g++)
have mpicxx || need_apt+=(libopenmpi-dev)
have mpirun || need_apt+=(openmpi-bin)
have clang++ || need_apt+=(clang)
have clang-format || need_apt+=(clang-format)
have pkg-config || need_apt+=(pkg-config)
[ -f /usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake ] || need_apt+=(libgtest-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need_apt+=(nlohmann-json3-dev)
[ -f /usr/include/CLI/CLI.hpp ] || need_apt+=(libcli11-dev)
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
  need_apt+=(libclang-rt-14-dev)
have python3 || need_apt+=(python3 python3-pip)

if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# matplotlib for scripts/plot (PyPI; Debian's package when pip may not install).
if ! python3 -c 'import matplotlib' >/dev/null 2>&1; then
  echo "setup: installing matplotlib"
  python3 -m pip install -q matplotlib >/dev/null 2>&1 || {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-matplotlib >/dev/null
  }
fi

# The Python module: its build needs Python's headers; its tests NumPy, mpi4py (built against
# this Open MPI) and pytest. PIP_BREAK_SYSTEM_PACKAGES: Debian's own python3 refuses pip
# installs otherwise (PEP 668); Debian's packages are the fallback.
export PIP_BREAK_SYSTEM_PACKAGES=1
if ! python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))'; then
  echo "setup: installing python3-dev"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-dev >/dev/null
fi
if ! python3 -c 'import numpy, mpi4py, pytest' >/dev/null 2>&1; then
  echo "setup: installing numpy, mpi4py and pytest"
  python3 -m pip install -q numpy mpi4py pytest || {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-numpy \
      python3-mpi4py python3-pytest >/dev/null
  }
fi
# halox.jax (the exchange inside jax.jit) is built where the build sees JAX's headers:
# jax (CPU), and the build tools, for `pip install --no-build-isolation .` (scripts/test.sh).
if ! python3 -c 'import jax, nanobind, scikit_build_core' >/dev/null 2>&1; then
  echo "setup: installing jax (CPU), nanobind and scikit-build-core"
  python3 -m pip install -q "jax[cpu]" nanobind scikit-build-core ||
    echo "setup: no jax from PyPI: halox.jax is not built, its tests skip"
fi

# NVSHMEM headers and libraries come from PyPI, pinned to the GPU machine's version.
if have nvcc && [ -z "${NVSHMEM_HOME:-}" ] &&
   ! python3 -c 'import nvidia.nvshmem' >/dev/null 2>&1; then
  echo "setup: installing nvidia-nvshmem-cu13==3.4.5 from PyPI"
  python3 -m pip install -q nvidia-nvshmem-cu13==3.4.5 ||
    echo "setup: NVSHMEM could not be installed; the NVSHMEM transports will be left out"
fi
