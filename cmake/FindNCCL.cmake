# Finds NCCL: NCCL_HOME, then the system library path. Defines NCCL::nccl.
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ENV NCCL_HOME ${NCCL_HOME} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ENV NCCL_HOME ${NCCL_HOME} PATH_SUFFIXES lib lib64)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*" "\\1" _major "${_nccl_version_lines}")
  string(REGEX REPLACE ".*NCCL_MINOR ([0-9]+).*" "\\1" _minor "${_nccl_version_lines}")
  string(REGEX REPLACE ".*NCCL_PATCH ([0-9]+).*" "\\1" _patch "${_nccl_version_lines}")
  set(NCCL_VERSION "${_major}.${_minor}.${_patch}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
                                  VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
