# cmake -DSMAX=<exe> -DARGS=<a|b|c> [-DMESSAGE=<re>] -P expect_error.cmake
# Passes when `smax ARGS...` exits with status 2 (bad arguments) and prints
# exactly one line on stderr, starting with "smax: error: ", and, when
# MESSAGE is given, that line matches the regex MESSAGE.
string(REPLACE "|" ";" _args "${ARGS}")
execute_process(COMMAND ${SMAX} ${_args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("$ smax ${_args}\nexit status: ${rc}\nstdout: ${out}\nstderr: ${err}")
if(NOT rc STREQUAL "2")
  message(FATAL_ERROR "expected exit status 2, got '${rc}'")
endif()
if(NOT err MATCHES "^smax: error: [^\n]+\n$")
  message(FATAL_ERROR "stderr is not one line starting with 'smax: error: '")
endif()
if(DEFINED MESSAGE AND NOT MESSAGE STREQUAL "" AND NOT err MATCHES "${MESSAGE}")
  message(FATAL_ERROR "stderr does not match '${MESSAGE}'")
endif()
