# One component = one folder = one library, whose headers only the targets that link it can see.
#
# There is no global include directory. A component's folder is reachable as "a/b/x.h" through
# an include root of its own, ${CMAKE_BINARY_DIR}/include/<target>/a/b -> the source folder (a
# symbolic link), which is a PUBLIC (INTERFACE for header-only) include directory of its
# target. So `#include "launcher/agent/agent.h"` compiles only in a target that links
# ddprun_launcher_agent, directly or through a dependency: the link graph in the CMakeLists is
# the dependency graph, and an include of a component a target does not link fails to build.
#
#   ddprun_component(NAME ddprun_launcher_agent SOURCES agent.cc ... DEPS ddprun_launcher_workers
#                    [PRIVATE_DEPS ...])       a static library
#   ddprun_component(NAME ddprun_rendezvous_api HEADER_ONLY DEPS ddprun_common)
#   ddprun_executable(NAME ddprun SOURCES main.cc DEPS ...)
#   ddprun_expose_folder(<target> [FOLDER])   any other target (a MODULE, a test helper); FOLDER
#                                             relative to the source root, default this one

function(ddprun_expose_folder target)
  set(folder ${CMAKE_CURRENT_SOURCE_DIR})
  if(ARGC GREATER 1)
    set(folder ${CMAKE_SOURCE_DIR}/${ARGV1})
  endif()
  file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${folder})
  set(root ${CMAKE_BINARY_DIR}/include/${target})
  get_filename_component(parent ${root}/${rel} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  if(NOT IS_SYMLINK ${root}/${rel})
    file(CREATE_LINK ${folder} ${root}/${rel} SYMBOLIC)
  endif()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    target_include_directories(${target} INTERFACE ${root})
  elseif(type MATCHES "EXECUTABLE|MODULE_LIBRARY")
    target_include_directories(${target} PRIVATE ${root})
  else()
    target_include_directories(${target} PUBLIC ${root})
  endif()
endfunction()

function(ddprun_component)
  cmake_parse_arguments(C "HEADER_ONLY" "NAME" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  if(C_HEADER_ONLY)
    add_library(${C_NAME} INTERFACE)
    target_link_libraries(${C_NAME} INTERFACE ${C_DEPS})
  else()
    add_library(${C_NAME} STATIC ${C_SOURCES})
    target_link_libraries(${C_NAME} PUBLIC ${C_DEPS} PRIVATE ${C_PRIVATE_DEPS})
  endif()
  ddprun_expose_folder(${C_NAME})
endfunction()

function(ddprun_executable)
  cmake_parse_arguments(E "" "NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${E_NAME} ${E_SOURCES})
  target_link_libraries(${E_NAME} PRIVATE ${E_DEPS})
  ddprun_expose_folder(${E_NAME})
endfunction()
