# examples/consumer_test.cmake: run by CTest as example.consumer.
#
#  1. cmake --install BUILD_DIR --prefix PREFIX (a fresh scratch prefix);
#  2. smax.pc and smaxConfig.cmake are installed;
#  3. examples/consumer configures with find_package(smax), builds and runs;
#  4. examples/c_consumer, a C-only project (project(... C): no C++ enabled),
#     does the same through find_package(smax);
#  5. when pkg-config is available, `pkg-config smax` reports VERSION and a
#     C++ program and a C99 program compiled with its flags alone link and
#     run (the C one with the C compiler driver, which adds no C++ runtime). smax.pc holds the
#     configure-time prefix, so the scratch prefix is passed with
#     --define-variable=prefix=... (what a user who relocates an install does).
cmake_minimum_required(VERSION 3.20)

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REPLACE ";" " " _cmd "${ARGN}")
  message("== ${what}\n$ ${_cmd}\n${out}${err}")
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "${what} failed (exit status '${rc}')")
  endif()
endfunction()

file(REMOVE_RECURSE "${PREFIX}" "${WORK_DIR}" "${WORK_DIR}-c")
run_step("install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${PREFIX}")

file(GLOB_RECURSE _pc "${PREFIX}/*/smax.pc")
file(GLOB_RECURSE _config "${PREFIX}/*/smaxConfig.cmake")
if(NOT _pc)
  message(FATAL_ERROR "smax.pc was not installed under ${PREFIX}")
endif()
if(NOT _config)
  message(FATAL_ERROR "smaxConfig.cmake was not installed under ${PREFIX}")
endif()
message("installed: ${_pc} ${_config}")

set(_flags "")
if(SAN_FLAGS)
  set(_flags "-DCMAKE_CXX_FLAGS=${SAN_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${SAN_FLAGS}")
endif()
run_step("configure consumer"
  ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
    "-DCMAKE_PREFIX_PATH=${PREFIX}" ${_flags})
run_step("build consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}")
run_step("run consumer" "${WORK_DIR}/consumer")

# The C-only consumers are checked in unsanitized builds: a sanitized
# libsmax needs the sanitizers' C++ runtimes, which only a C++ link brings
# (the C ABI itself runs under the sanitizers in CTest `c_api`).
if(SAN_FLAGS)
  message("sanitized build: skipping the C-only consumers (C link of a sanitized C++ library)")
  set(_c_consumers OFF)
else()
  set(_c_consumers ON)
  run_step("configure C-only consumer"
    ${CMAKE_COMMAND} -S "${C_SOURCE_DIR}" -B "${WORK_DIR}-c" -G "${GENERATOR}"
      "-DCMAKE_C_COMPILER=${CC}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
      "-DCMAKE_PREFIX_PATH=${PREFIX}")
  run_step("build C-only consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}-c")
  run_step("run C-only consumer" "${WORK_DIR}-c/c_consumer")
endif()

find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message("pkg-config not found: skipping the smax.pc link check")
  return()
endif()
get_filename_component(_pcdir "${_pc}" DIRECTORY)
set(ENV{PKG_CONFIG_PATH} "${_pcdir}")
execute_process(COMMAND ${PKG_CONFIG} --modversion smax
  RESULT_VARIABLE rc OUTPUT_VARIABLE version OUTPUT_STRIP_TRAILING_WHITESPACE
  ERROR_VARIABLE err)
if(NOT rc STREQUAL "0" OR NOT version STREQUAL "${VERSION}")
  message(FATAL_ERROR "pkg-config --modversion smax: '${version}' (expected ${VERSION}) ${err}")
endif()
execute_process(COMMAND ${PKG_CONFIG} --define-variable=prefix=${PREFIX} --cflags --libs --static smax
  RESULT_VARIABLE rc OUTPUT_VARIABLE pc_flags OUTPUT_STRIP_TRAILING_WHITESPACE
  ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "pkg-config --cflags --libs --static smax failed: ${err}")
endif()
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
separate_arguments(san UNIX_COMMAND "${SAN_FLAGS}")
run_step("build with pkg-config flags"
  ${CXX} -std=c++17 ${san} "${SOURCE_DIR}/main.cc" -o "${WORK_DIR}/consumer_pc" ${pc_flags})
get_filename_component(_libdir "${_pcdir}" DIRECTORY)
run_step("run pkg-config consumer"
  ${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${_libdir}" "${WORK_DIR}/consumer_pc")
if(_c_consumers)
  run_step("build C99 program with pkg-config flags"
    ${CC} -std=c99 "${C_SOURCE_DIR}/main.c" -o "${WORK_DIR}/c_consumer_pc" ${pc_flags})
  run_step("run C99 pkg-config consumer"
    ${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${_libdir}" "${WORK_DIR}/c_consumer_pc")
endif()
