# cmake/op_list.cmake: smax_read_op_list() reads include/smax/op_list.inc
# (the one list of ops) into CMake lists, so that CMake's lists of op names
# (the CLI's per-op tests, the fuzz replay targets) are generated from it.
#
# After smax_read_op_list():
#   SMAX_OPS                every op, in the list's order
#   SMAX_OPS_GROUP_<GROUP>  the ops of a group (SOFTMAX, NORMALIZERS, LOSSES,
#                           SAMPLING, ATTENTION, QUANTIZED)
#   SMAX_OPS_CLI_<CLI>      the ops by CLI reach (RUN, RUN_UNCHECKED, RUN_INPUTS,
#                           ATTENTION, NONE)
# A line that does not parse is a configure error. Editing the list
# re-runs the configure step.
function(smax_read_op_list)
  set(_file ${PROJECT_SOURCE_DIR}/include/smax/op_list.inc)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_file})
  file(STRINGS ${_file} _lines REGEX "^SMAX_OP\\(")
  set(_all)
  foreach(_g SOFTMAX NORMALIZERS LOSSES SAMPLING ATTENTION QUANTIZED)
    set(_group_${_g})
  endforeach()
  foreach(_c RUN RUN_UNCHECKED RUN_INPUTS ATTENTION NONE)
    set(_cli_${_c})
  endforeach()
  foreach(_line IN LISTS _lines)
    if(NOT _line MATCHES "^SMAX_OP\\(([a-z0-9_]+), *([A-Z]+), *([A-Z]+), *([A-Z_]+)\\)$")
      message(FATAL_ERROR "include/smax/op_list.inc: cannot parse '${_line}'")
    endif()
    list(APPEND _all ${CMAKE_MATCH_1})
    list(APPEND _group_${CMAKE_MATCH_2} ${CMAKE_MATCH_1})
    list(APPEND _cli_${CMAKE_MATCH_4} ${CMAKE_MATCH_1})
  endforeach()
  set(SMAX_OPS ${_all} PARENT_SCOPE)
  foreach(_g SOFTMAX NORMALIZERS LOSSES SAMPLING ATTENTION QUANTIZED)
    set(SMAX_OPS_GROUP_${_g} ${_group_${_g}} PARENT_SCOPE)
  endforeach()
  foreach(_c RUN RUN_UNCHECKED RUN_INPUTS ATTENTION NONE)
    set(SMAX_OPS_CLI_${_c} ${_cli_${_c}} PARENT_SCOPE)
  endforeach()
endfunction()
