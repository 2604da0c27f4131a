# What a user does with halox's install tree and its examples, in CI:
#  1. installs the build tree into a scratch prefix; every installed program starts
#     (--help exits 0: the libraries it needs are found from the install);
#  2. builds examples/ against it with find_package(halox), and runs each example (each
#     checks its own result; heat3d_gpu only where there is a GPU);
#  3. builds an example with halox taken in by FetchContent (the README's snippet);
#  4. builds an example with pkg-config and the compiler alone (no CMake on the user's side).
set(work "${BUILD_DIR}/examples-test")
set(prefix "${work}/prefix")
file(REMOVE_RECURSE "${work}")
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  string(REGEX REPLACE "\n$" "" out "${out}")
  message(STATUS "${what}: ok ${out}")
endfunction()

run("install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
file(GLOB programs "${prefix}/bin/halox-*")
if(NOT programs)
  message(FATAL_ERROR "no programs installed in ${prefix}/bin")
endif()
foreach(program ${programs})
  get_filename_component(name "${program}" NAME)
  if(name STREQUAL "halox-bench")
    run("installed ${name} --help" "${program}" pack --help)
  else()
    run("installed ${name} --help" "${program}" --help)
  endif()
endforeach()

set(mpi "${MPIEXEC}" --oversubscribe)
run("configure examples" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/examples" -B "${work}/examples"
    "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_BUILD_TYPE=Release)
run("build examples" "${CMAKE_COMMAND}" --build "${work}/examples")
run("heat3d on 4 MPI ranks" ${mpi} -n 4 "${work}/examples/heat3d")
run("heat3d on 3 MPI ranks (3x1x1)" ${mpi} -n 3 "${work}/examples/heat3d")
run("heat3d, 2x2x2 ranks in one process" "${work}/examples/heat3d" --local 2x2x2)
run("heat3d, 3x1x2 ranks in one process" "${work}/examples/heat3d" --local 3x1x2)
# Uneven splits (halox::subdomain_of): 24 cells over 5 ranks are 5, 5, 5, 5 and 4.
run("heat3d on 5 MPI ranks (5x1x1, uneven)" ${mpi} -n 5 "${work}/examples/heat3d")
run("heat3d, 5x1x2 ranks in one process (uneven)" "${work}/examples/heat3d" --local 5x1x2)
run("heat3d, 2x1x1 ranks in each of 2 MPI processes" ${mpi} -n 2 "${work}/examples/heat3d" --blocks 2x1x1)
run("heat3d, 1x2x2 ranks in each of 3 MPI processes (uneven)" ${mpi} -n 3 "${work}/examples/heat3d" --blocks 1x2x2)
run("particles on 1 rank" ${mpi} -n 1 "${work}/examples/particles")
run("particles on 4 MPI ranks" ${mpi} -n 4 "${work}/examples/particles")
# The GPU example: built wherever halox has CUDA, run where there is a GPU (the GPU machine;
# two processes share its one GPU under MPS there).
if(EXISTS "${work}/examples/heat3d_gpu")
  execute_process(COMMAND nvidia-smi -L RESULT_VARIABLE no_gpu OUTPUT_QUIET ERROR_QUIET)
  if(no_gpu)
    message(STATUS "heat3d_gpu: built; not run (no GPU here)")
  else()
    run("heat3d_gpu, 2x2x2 ranks in one process" "${work}/examples/heat3d_gpu" --local 2x2x2)
    run("heat3d_gpu, 3x1x2 ranks in one process" "${work}/examples/heat3d_gpu" --local 3x1x2)
    run("heat3d_gpu, 5x1x1 ranks in one process (uneven)" "${work}/examples/heat3d_gpu" --local 5x1x1)
    run("heat3d_gpu on 1 MPI rank" ${mpi} -n 1 "${work}/examples/heat3d_gpu")
    run("heat3d_gpu on 2 MPI ranks" ${mpi} -n 2 "${work}/examples/heat3d_gpu")
    run("heat3d_gpu, 2x1x1 ranks in each of 2 MPI processes" ${mpi} -n 2 "${work}/examples/heat3d_gpu" --blocks 2x1x1)
  endif()
endif()

run("configure the FetchContent project" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/consumer/fetch"
    -B "${work}/fetch" -G Ninja "-DFETCHCONTENT_SOURCE_DIR_HALOX=${SOURCE_DIR}"
    "-DHALOX_EXAMPLES=${SOURCE_DIR}/examples" -DHALOX_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=Release)
run("build the FetchContent project" "${CMAKE_COMMAND}" --build "${work}/fetch")
run("heat3d through FetchContent" ${mpi} -n 2 "${work}/fetch/heat3d")

# pkg-config: the installed halox.pc gives what a plain compiler line needs.
file(GLOB_RECURSE pc_files "${prefix}/halox.pc")
if(NOT pc_files)
  message(FATAL_ERROR "no halox.pc installed under ${prefix}")
endif()
list(GET pc_files 0 pc_file)
get_filename_component(pc_dir "${pc_file}" DIRECTORY)
set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
execute_process(COMMAND pkg-config --cflags --libs halox RESULT_VARIABLE rc OUTPUT_VARIABLE flags
                ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(rc)
  message(FATAL_ERROR "pkg-config --cflags --libs halox failed (${rc}): ${err}")
endif()
message(STATUS "pkg-config --cflags --libs halox: ${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")
file(MAKE_DIRECTORY "${work}/pkgconfig")
run("build heat3d with pkg-config" "${CXX}" -std=c++20 -O2 "${SOURCE_DIR}/examples/heat3d/heat3d.cpp"
    ${flags} -o "${work}/pkgconfig/heat3d")
run("heat3d built with pkg-config, 3 MPI ranks" ${mpi} -n 3 "${work}/pkgconfig/heat3d")

# A shared libhalox: the program links libhalox.so and MPI, never the GPU libraries (those
# are libhalox's own).
file(GLOB shared_halox "${prefix}/lib*/libhalox.so")
if(shared_halox)
  execute_process(COMMAND readelf -d "${work}/pkgconfig/heat3d" OUTPUT_VARIABLE needed)
  if(NOT needed MATCHES "libhalox\\.so" OR needed MATCHES "libcudart|libnccl|libnvshmem")
    message(FATAL_ERROR "heat3d against the shared libhalox needs:\n${needed}")
  endif()
  file(SIZE "${work}/pkgconfig/heat3d" bytes)
  message(STATUS "heat3d against the shared libhalox: ${bytes} bytes, no GPU library linked")
endif()
