# pac_find_usable_dnnl(<result-var>): finds oneDNN through its CMake config only when that config
# loads. Debian's libdnnl-dev config calls find_package(OpenCL REQUIRED), which fails the whole
# configure (even under QUIET) on a machine without ocl-icd-opencl-dev, a package libdnnl-dev only
# recommends. So the config is first loaded in a throw-away child configure; if that fails, the
# caller gets FALSE and the first error line in PAC_DNNL_PROBE_ERROR, and find_package is never
# called here.
function(pac_find_usable_dnnl result)
  set(${result} FALSE PARENT_SCOPE)
  set(PAC_DNNL_PROBE_ERROR "" PARENT_SCOPE)
  set(probe_build "${CMAKE_BINARY_DIR}/probe-dnnl")
  file(REMOVE_RECURSE "${probe_build}")
  set(forward -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER})
  foreach(var dnnl_DIR CMAKE_PREFIX_PATH CMAKE_FIND_ROOT_PATH)
    if(DEFINED ${var})
      list(JOIN ${var} "\\;" value)
      list(APPEND forward "-D${var}=${value}")
    endif()
  endforeach()
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S "${PROJECT_SOURCE_DIR}/cmake/probe-dnnl" -B "${probe_build}"
            -G "${CMAKE_GENERATOR}" ${forward}
    RESULT_VARIABLE status OUTPUT_QUIET ERROR_VARIABLE errors)
  if(NOT status EQUAL 0)
    # The useful line is the first one that names what is missing ("Could NOT find OpenCL ...").
    string(REGEX MATCH "Could NOT find[^\n]*|Could not find[^\n]*" reason "${errors}")
    if(NOT reason)
      string(REGEX REPLACE "\n.*" "" reason "${errors}")
    endif()
    string(STRIP "${reason}" reason)
    set(PAC_DNNL_PROBE_ERROR "${reason}" PARENT_SCOPE)
    return()
  endif()
  find_package(dnnl CONFIG QUIET)
  if(dnnl_FOUND)
    set(${result} TRUE PARENT_SCOPE)
  endif()
endfunction()
