# cmake -DSMAX=<exe> -DOP=<name> -P every_op.cmake
# One op of smax/op_list.inc (tools/smax/CMakeLists.txt adds one test per op
# of the list, whatever its cli column): `smax info --ops --format json` must
# list it with its example_args, and `smax run --op OP <example_args> --check
# --format json --repeat 1` must exit 0 within its documented bound. An op
# the CLI cannot run, or one without a float64 oracle where the list says
# it has one, fails here. Ops the list marks RUN_UNCHECKED (no oracle,
# "check": false) run without --check and must report "within_bounds": null.
execute_process(COMMAND ${SMAX} info --ops --format json
  RESULT_VARIABLE rc OUTPUT_VARIABLE json ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "smax info --ops --format json failed (${rc}): ${err}")
endif()
string(JSON count LENGTH "${json}" ops)
math(EXPR last "${count} - 1")
set(index -1)
foreach(i RANGE ${last})
  string(JSON name GET "${json}" ops ${i} name)
  if(name STREQUAL "${OP}")
    set(index ${i})
  endif()
endforeach()
if(index EQUAL -1)
  message(FATAL_ERROR "op ${OP} of smax/op_list.inc is not in `smax info --ops`: "
                      "`smax run --op ${OP}` cannot run it (add it to testing/table_*.cc "
                      "or tools/smax/run_inputs_*.cc)")
endif()
string(JSON check GET "${json}" ops ${index} check)
string(JSON nargs ERROR_VARIABLE no_example LENGTH "${json}" ops ${index} example_args)
if(no_example)
  message(FATAL_ERROR "op ${OP}: `smax info --ops` gives no example_args")
endif()
set(args run --op ${OP})
math(EXPR alast "${nargs} - 1")
foreach(j RANGE ${alast})
  string(JSON a GET "${json}" ops ${index} example_args ${j})
  list(APPEND args "${a}")
endforeach()
if(check)
  list(APPEND args --check)
  set(want "\"within_bounds\": true")
else()
  set(want "\"within_bounds\": null")
endif()
list(APPEND args --format json --repeat 1)
execute_process(COMMAND ${SMAX} ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REPLACE ";" " " shown "${args}")
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "smax ${shown}: exit status ${rc}\n${out}${err}")
endif()
if(NOT out MATCHES "${want}")
  message(FATAL_ERROR "smax ${shown}: no ${want} in\n${out}")
endif()
string(JSON reported ERROR_VARIABLE bad GET "${out}" op)
if(bad OR NOT reported STREQUAL "${OP}")
  message(FATAL_ERROR "smax ${shown}: not one JSON object for op ${OP}:\n${out}")
endif()
message(STATUS "smax ${shown}: ok")
