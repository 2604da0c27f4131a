# Finds NVSHMEM: NVSHMEM_HOME (variable or environment), else the nvidia-nvshmem-cu13 Python
# package (pinned 3.4.5, the version on the GPU machine), whose lib/ has libnvshmem_host.so.3
# without an unversioned link. Defines NVSHMEM::host and NVSHMEM::device.
set(_nvshmem_hints ${NVSHMEM_HOME} $ENV{NVSHMEM_HOME})
if(NOT _nvshmem_hints)
  find_package(Python3 QUIET COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c "import nvidia.nvshmem as m; print(list(m.__path__)[0])"
      OUTPUT_VARIABLE _nvshmem_py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0)
      set(_nvshmem_hints "${_nvshmem_py}")
    endif()
  endif()
endif()
find_path(NVSHMEM_INCLUDE_DIR nvshmem.h HINTS ${_nvshmem_hints} PATH_SUFFIXES include)
find_library(NVSHMEM_HOST_LIBRARY NAMES nvshmem_host libnvshmem_host.so.3
             HINTS ${_nvshmem_hints} PATH_SUFFIXES lib lib64)
find_library(NVSHMEM_DEVICE_LIBRARY NAMES nvshmem_device HINTS ${_nvshmem_hints}
             PATH_SUFFIXES lib lib64)
if(NVSHMEM_INCLUDE_DIR AND EXISTS "${NVSHMEM_INCLUDE_DIR}/non_abi/nvshmem_version.h")
  file(STRINGS "${NVSHMEM_INCLUDE_DIR}/non_abi/nvshmem_version.h" _v
       REGEX "#define NVSHMEM_VENDOR_(MAJOR|MINOR|PATCH)_VERSION ")
  string(REGEX REPLACE ".*MAJOR_VERSION ([0-9]+).*" "\\1" _major "${_v}")
  string(REGEX REPLACE ".*MINOR_VERSION ([0-9]+).*" "\\1" _minor "${_v}")
  string(REGEX REPLACE ".*PATCH_VERSION ([0-9]+).*" "\\1" _patch "${_v}")
  set(NVSHMEM_VERSION "${_major}.${_minor}.${_patch}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NVSHMEM
  REQUIRED_VARS NVSHMEM_HOST_LIBRARY NVSHMEM_DEVICE_LIBRARY NVSHMEM_INCLUDE_DIR
  VERSION_VAR NVSHMEM_VERSION)
if(NVSHMEM_FOUND AND NOT TARGET NVSHMEM::host)
  get_filename_component(NVSHMEM_LIBRARY_DIR "${NVSHMEM_HOST_LIBRARY}" DIRECTORY)
  add_library(NVSHMEM::host SHARED IMPORTED)
  set_target_properties(NVSHMEM::host PROPERTIES IMPORTED_LOCATION "${NVSHMEM_HOST_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${NVSHMEM_INCLUDE_DIR}")
  add_library(NVSHMEM::device STATIC IMPORTED)
  # The device library's host part (nvshmemi_init_thread) calls into the host library: it
  # must come first on the link line.
  set_target_properties(NVSHMEM::device PROPERTIES IMPORTED_LOCATION "${NVSHMEM_DEVICE_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${NVSHMEM_INCLUDE_DIR}"
                        INTERFACE_LINK_LIBRARIES NVSHMEM::host)
endif()
