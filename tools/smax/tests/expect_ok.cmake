# cmake -DSMAX=<exe> -DARGS=<a|b|c> -DREGEX=<re> -P expect_ok.cmake
# Passes when `smax ARGS...` exits 0 and its stdout matches REGEX.
string(REPLACE "|" ";" _args "${ARGS}")
execute_process(COMMAND ${SMAX} ${_args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("$ smax ${_args}\n${out}${err}")
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "expected exit status 0, got '${rc}'")
endif()
if(NOT out MATCHES "${REGEX}")
  message(FATAL_ERROR "stdout does not match '${REGEX}'")
endif()
