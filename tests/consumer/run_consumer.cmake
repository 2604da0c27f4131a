# Installs the build tree into a scratch prefix, then configures, builds and runs the
# consumer project against it with find_package(halox).
set(prefix "${BUILD_DIR}/consumer-test/prefix")
set(consumer_build "${BUILD_DIR}/consumer-test/build")
file(REMOVE_RECURSE "${BUILD_DIR}/consumer-test")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}"
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${consumer_build}"
                        "-DCMAKE_PREFIX_PATH=${prefix}" RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${consumer_build}" RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
execute_process(COMMAND "${consumer_build}/consumer" RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer failed: ${rc}")
endif()
