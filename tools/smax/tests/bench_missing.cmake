# cmake -DSMAX=<exe> -DPYTHON=<interpreter finding no modules> -DOUT=<dir> -P bench_missing.cmake
# `smax bench --peers --libs torch,onnxruntime` with an interpreter that finds
# none of numpy, torch, onnx, onnxruntime: exit status 3, one stderr line per
# missing peer naming the modules and the pip command that installs them,
# then "nothing ran"; nothing on stdout and no output directory.
file(REMOVE_RECURSE "${OUT}")
execute_process(COMMAND ${SMAX} bench --peers --libs torch,onnxruntime --python ${PYTHON} --out ${OUT}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "3")
  message(FATAL_ERROR "expected exit status 3, got ${rc}\nstdout: ${out}\nstderr: ${err}")
endif()
string(REGEX REPLACE "([][.+*?^$()|\\\\])" "\\\\\\1" py_re "${PYTHON}")
set(want
  "^smax: missing peer torch: python module\\(s\\) numpy torch not found by ${py_re} \\(install: ${py_re} -m pip install numpy torch\\)\n"
  "smax: missing peer onnxruntime: python module\\(s\\) numpy onnx onnxruntime not found by ${py_re} \\(install: ${py_re} -m pip install numpy onnx onnxruntime\\)\n"
  "smax: bench --peers: none of the asked-for peers is available. nothing ran\n$")
string(JOIN "" want ${want})
if(NOT err MATCHES "${want}")
  message(FATAL_ERROR "stderr does not match\n${want}\ngot:\n${err}")
endif()
if(NOT out STREQUAL "")
  message(FATAL_ERROR "expected nothing on stdout, got:\n${out}")
endif()
if(EXISTS "${OUT}")
  message(FATAL_ERROR "${OUT} was created although nothing ran")
endif()
