# packctl, the command-line tool (included by client/c/CMakeLists.txt).
#
# Remote mode lives in PK_PACKCTL_REMOTE_SOURCES (default packctl_remote.c);
# client.cmake sets the variable (packctl_remote.c + packctl_load.c) and
# defines the `packd_client` library target that packctl then links.
if(NOT DEFINED PK_PACKCTL_REMOTE_SOURCES)
  set(PK_PACKCTL_REMOTE_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/packctl_remote.c)
endif()

add_executable(packctl
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_main.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_args.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_fields.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_plan.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_request.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_input.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_output.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_json.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_number.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_svg.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_dcp.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_calibrate.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_fit.c
  ${PK_PACKCTL_REMOTE_SOURCES})
target_include_directories(packctl PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_definitions(packctl PRIVATE PK_VERSION="${PK_VERSION}")
target_link_libraries(packctl PRIVATE packd_codec PkgConfig::JANSSON m)
if(TARGET packd_client)
  target_link_libraries(packctl PRIVATE packd_client)
endif()
