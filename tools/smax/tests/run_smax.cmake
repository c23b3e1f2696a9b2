# include()d by expect_ok.cmake and expect_error.cmake:
# smax_run_expecting(<status>) runs `smax ARGS...` (SMAX the executable, ARGS
# "|"-separated, with the environment variables RUN_ENV "A=1|B=2" if given),
# prints the command and what it wrote, sets `out` and `err` (stdout, stderr)
# in the caller and fails unless the exit status is <status>.
function(smax_run_expecting status)
  string(REPLACE "|" ";" _args "${ARGS}")
  set(_cmd ${SMAX} ${_args})
  if(NOT "${RUN_ENV}" STREQUAL "")
    string(REPLACE "|" ";" _env "${RUN_ENV}")
    set(_cmd ${CMAKE_COMMAND} -E env ${_env} ${SMAX} ${_args})
  endif()
  execute_process(COMMAND ${_cmd}
    RESULT_VARIABLE rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  message("$ ${RUN_ENV} smax ${_args}\nexit status: ${rc}\nstdout: ${_out}\nstderr: ${_err}")
  if(NOT rc STREQUAL "${status}")
    message(FATAL_ERROR "expected exit status ${status}, got '${rc}'")
  endif()
  set(out "${_out}" PARENT_SCOPE)
  set(err "${_err}" PARENT_SCOPE)
endfunction()
