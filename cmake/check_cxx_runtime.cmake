# cmake -DNM=<nm> -DMODULE=<built .so> -DCXX=<compiler> -P cmake/check_cxx_runtime.cmake
#
# Fails when the module defines the C++ runtime's exception entry points itself, i.e. the toolchain
# linked libstdc++ (libsupc++) statically into it. torch throws and catches through the shared
# libstdc++; a second, private copy of the runtime inside the module breaks that: on a GPU image
# whose default g++ (/opt/gcc, 13.3) did this, every op that raised an error (bad input) segfaulted
# the process under pytest (gpu-check, 2026-11-27; our .so defined __cxa_throw and
# __gxx_personality_v0, as a local -static-libstdc++ build does). A build error names the cause.
foreach(var NM MODULE CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_cxx_runtime.cmake needs -D${var}=...")
  endif()
endforeach()
execute_process(COMMAND "${NM}" -D --defined-only "${MODULE}"
                OUTPUT_VARIABLE symbols ERROR_VARIABLE nm_error RESULT_VARIABLE nm_rc)
if(NOT nm_rc EQUAL 0)
  message(WARNING "could not list the symbols of ${MODULE} (${nm_error}); C++ runtime check skipped")
  return()
endif()
string(REGEX MATCHALL "[ \t](__cxa_throw|__gxx_personality_v0|__cxa_begin_catch)\r?\n" found "${symbols}")
if(found)
  list(TRANSFORM found STRIP)
  list(JOIN found ", " found)
  message(FATAL_ERROR
    "${MODULE} defines the C++ runtime itself (${found}): the compiler ${CXX} links libstdc++ statically, "
    "and C++ exceptions raised by fedkernels ops (bad input) would then crash the process instead of "
    "becoming Python errors. Build with a g++ that links libstdc++ dynamically, e.g. CXX=/usr/bin/g++ "
    "CUDAHOSTCXX=/usr/bin/g++ (and no -static-libstdc++ in the flags).")
endif()
