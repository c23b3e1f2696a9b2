# cmake -DSMAX=<exe> -DARGS=<a|b|c> -DREGEX=<re> [-DRUN_ENV=<A=1|B=2>] [-DJSON=1]
#       [-DSTDERR_REGEX=<re>] [-DSTDERR_EMPTY=1] -P expect_ok.cmake
# Passes when `smax ARGS...` (run with the environment variables RUN_ENV, if
# given) exits 0 and its stdout matches REGEX; with JSON=1 stdout must also
# be one valid JSON document (parsed by string(JSON)); with STDERR_REGEX its
# stderr must match it; with STDERR_EMPTY=1 stderr must be empty.
include(${CMAKE_CURRENT_LIST_DIR}/run_smax.cmake)
smax_run_expecting(0)
if(NOT out MATCHES "${REGEX}")
  message(FATAL_ERROR "stdout does not match '${REGEX}'")
endif()
if(JSON)
  string(JSON _type ERROR_VARIABLE _json_error TYPE "${out}")
  if(_json_error)
    message(FATAL_ERROR "stdout is not valid JSON: ${_json_error}")
  endif()
  if(NOT _type STREQUAL "OBJECT")
    message(FATAL_ERROR "stdout is JSON of type ${_type}, expected an object")
  endif()
endif()
if(DEFINED STDERR_REGEX AND NOT STDERR_REGEX STREQUAL "" AND NOT err MATCHES "${STDERR_REGEX}")
  message(FATAL_ERROR "stderr does not match '${STDERR_REGEX}'")
endif()
if(STDERR_EMPTY AND NOT err STREQUAL "")
  message(FATAL_ERROR "stderr is not empty")
endif()
