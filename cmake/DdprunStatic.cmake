# DDPRUN_STATIC: ddprun, ddprun-rdzv and ddprun-launch as fully static executables (no NEEDED
# entry, no program interpreter) that need nothing from the host but a kernel.
#
# The packages' CMake and pkg-config files name their shared libraries (.so). For a static link,
# every imported target the executables reach is pointed at the static archive that the same
# package installs beside it (libfoo.so.1.2 -> libfoo.a in the same folder); the packages' CMake
# files already list every dependency (gRPC: c-ares, re2, upb, address_sorting, OpenSSL, zlib,
# Abseil), so CMake orders the archives. libmicrohttpd is the exception (ddprun_static_microhttpd,
# below). Only link flags change: the objects
# are compiled exactly as in the dynamic build (so ccache serves both). No path names an
# architecture: the archives are found beside the .so files the toolchain's packages name.
#
#   ddprun_static_use_archives(<target>...)      the imported targets and everything they link
#   ddprun_static_microhttpd(<imported target>)  libmicrohttpd.a without HTTPS (see below)
#   ddprun_static_executable(<target>)           -static at link time

# libfoo.so or libfoo.so.1.2.3 -> libfoo.a beside it (FATAL_ERROR when the package has none).
function(_ddprun_static_archive path out)
  get_filename_component(dir "${path}" DIRECTORY)
  get_filename_component(name "${path}" NAME)
  string(REGEX REPLACE "\\.so(\\.[0-9]+)*$" ".a" archive "${name}")
  if(archive STREQUAL name)
    set(${out} "${path}" PARENT_SCOPE)
    return()
  endif()
  if(NOT EXISTS "${dir}/${archive}")
    message(FATAL_ERROR "DDPRUN_STATIC: ${path} has no static archive ${dir}/${archive}; "
                        "install the package's -dev package with its .a")
  endif()
  set(${out} "${dir}/${archive}" PARENT_SCOPE)
endfunction()

# One link item: a .so path becomes its archive, a target is walked, anything else
# (-lpthread, dl, m, rt, generator expressions) is left as it is.
function(_ddprun_static_item item out)
  if(TARGET "${item}")
    ddprun_static_use_archives("${item}")
    set(${out} "${item}" PARENT_SCOPE)
  elseif(IS_ABSOLUTE "${item}" AND item MATCHES "\\.so(\\.[0-9]+)*$")
    _ddprun_static_archive("${item}" archive)
    set(${out} "${archive}" PARENT_SCOPE)
  else()
    set(${out} "${item}" PARENT_SCOPE)
  endif()
endfunction()

function(ddprun_static_use_archives)
  foreach(target IN LISTS ARGN)
    if(NOT TARGET ${target})
      continue()
    endif()
    get_property(done GLOBAL PROPERTY DDPRUN_STATIC_DONE)
    if(target IN_LIST done)
      continue()
    endif()
    set_property(GLOBAL APPEND PROPERTY DDPRUN_STATIC_DONE ${target})
    get_target_property(aliased ${target} ALIASED_TARGET)
    if(aliased)
      ddprun_static_use_archives(${aliased})
      continue()
    endif()
    get_target_property(imported ${target} IMPORTED)
    if(imported)
      get_target_property(configs ${target} IMPORTED_CONFIGURATIONS)
      set(properties IMPORTED_LOCATION)
      if(configs)
        foreach(config IN LISTS configs)
          list(APPEND properties IMPORTED_LOCATION_${config})
        endforeach()
      endif()
      foreach(property IN LISTS properties)
        get_target_property(location ${target} ${property})
        if(location)
          _ddprun_static_archive("${location}" archive)
          set_target_properties(${target} PROPERTIES ${property} "${archive}")
        endif()
      endforeach()
    endif()
    get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
    if(links)
      set(rewritten)
      foreach(item IN LISTS links)
        _ddprun_static_item("${item}" new_item)
        list(APPEND rewritten "${new_item}")
      endforeach()
      set_target_properties(${target} PROPERTIES INTERFACE_LINK_LIBRARIES "${rewritten}")
    endif()
  endforeach()
endfunction()

# libmicrohttpd: Debian's libmicrohttpd.a is built with HTTPS, and GnuTLS then needs p11-kit,
# which Debian ships as a shared library only (no libp11-kit.a): the link fails on p11_kit_*
# symbols. ddprun serves plain HTTP, so the static build links the same Debian source package
# rebuilt without HTTPS (scripts/build-static-microhttpd.sh, cached outside the checkout), or
# DDPRUN_STATIC_MICROHTTPD when given. Its header is the installed one: the same version.
function(ddprun_static_microhttpd target)
  set(DDPRUN_STATIC_MICROHTTPD "" CACHE FILEPATH
      "libmicrohttpd.a built without HTTPS (empty: scripts/build-static-microhttpd.sh)")
  set(archive "${DDPRUN_STATIC_MICROHTTPD}")
  if(NOT archive)
    set(host_args)
    if(CMAKE_CROSSCOMPILING AND CMAKE_LIBRARY_ARCHITECTURE)
      set(host_args --host ${CMAKE_LIBRARY_ARCHITECTURE})
      if(CMAKE_SYSROOT)  # its dpkg database names the version (scripts/make-arm64-sysroot.sh)
        list(APPEND host_args --sysroot ${CMAKE_SYSROOT})
      endif()
    endif()
    execute_process(COMMAND ${CMAKE_SOURCE_DIR}/scripts/build-static-microhttpd.sh ${host_args}
                    OUTPUT_VARIABLE prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "DDPRUN_STATIC: scripts/build-static-microhttpd.sh failed (${rc})")
    endif()
    set(archive "${prefix}/lib/libmicrohttpd.a")
  endif()
  if(NOT EXISTS "${archive}")
    message(FATAL_ERROR "DDPRUN_STATIC_MICROHTTPD: ${archive} does not exist")
  endif()
  message(STATUS "DDPRUN_STATIC: libmicrohttpd without HTTPS: ${archive}")
  set_target_properties(${target} PROPERTIES INTERFACE_LINK_LIBRARIES "${archive};Threads::Threads")
endfunction()

function(ddprun_static_executable target)
  target_link_options(${target} PRIVATE -static)
endfunction()
