# cmake -DSMAX=<exe> -DARGS=<a|b|c> [-DMESSAGE=<re>] -P expect_error.cmake
# Passes when `smax ARGS...` exits with status 2 (bad arguments) and prints
# exactly one line on stderr, starting with "smax: error: ", and, when
# MESSAGE is given, that line matches the regex MESSAGE.
include(${CMAKE_CURRENT_LIST_DIR}/run_smax.cmake)
smax_run_expecting(2)
if(NOT err MATCHES "^smax: error: [^\n]+\n$")
  message(FATAL_ERROR "stderr is not one line starting with 'smax: error: '")
endif()
if(DEFINED MESSAGE AND NOT MESSAGE STREQUAL "" AND NOT err MATCHES "${MESSAGE}")
  message(FATAL_ERROR "stderr does not match '${MESSAGE}'")
endif()
