# The packd gRPC server (included by server/CMakeLists.txt).
#
# Targets:
#   packd_health_proto  grpc.health.v1 messages (protobuf-c), shared with the
#                       C client library.
#   packd_service       everything of the server but main(): config, log,
#                       plan cache, metrics, HTTP listener, handlers, gRPC.
#   packd_server        the executable, written as ${CMAKE_BINARY_DIR}/server/packd.
#
# Libraries: gRPC core (transport), protobuf-c (messages), libuv (signals,
# timers, HTTP listener), libhttp-parser (HTTP request parsing; Debian ships
# no pkg-config file for it), libxxhash (plan cache hashing, store checksums),
# libhiredis (the shared plan store, --plan-store), OpenSSL libcrypto (TLS file
# checks, token digests, keyed plan ids), zlib (compressed requests). hiredis
# is optional so that `pip install ./client/python`, which configures this
# project only to build libpackd.so, works without it; a packd built without it refuses
# --plan-store with a message that says so.

add_custom_command(
  OUTPUT ${PK_GEN_DIR}/grpc/health/v1/health.pb-c.c ${PK_GEN_DIR}/grpc/health/v1/health.pb-c.h
  COMMAND ${PROTOC_C} --c_out=${PK_GEN_DIR} -I${CMAKE_CURRENT_SOURCE_DIR}/proto
          ${CMAKE_CURRENT_SOURCE_DIR}/proto/grpc/health/v1/health.proto
  DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/proto/grpc/health/v1/health.proto
  COMMENT "protoc-c grpc/health/v1/health.proto")
add_library(packd_health_proto STATIC ${PK_GEN_DIR}/grpc/health/v1/health.pb-c.c)
target_include_directories(packd_health_proto PUBLIC ${PK_GEN_DIR})
target_link_libraries(packd_health_proto PUBLIC PkgConfig::PROTOBUF_C)
target_compile_options(packd_health_proto PRIVATE -w)

pkg_check_modules(HIREDIS IMPORTED_TARGET hiredis)
if(NOT HIREDIS_FOUND)
  message(WARNING "hiredis not found (Debian: libhiredis-dev): packd is built without --plan-store")
endif()

# OpenSSL (libssl-dev, which libgrpc-dev already needs): the checks of the
# TLS files, SHA-256 of bearer tokens and HMAC-SHA256 of keyed plan ids.
find_package(OpenSSL REQUIRED)

# zlib (zlib1g-dev, which libgrpc-dev needs too): request_body.c inflates
# compressed requests itself, under the decoded-bytes budget.
pkg_check_modules(ZLIB REQUIRED IMPORTED_TARGET zlib)

find_library(HTTP_PARSER_LIBRARY NAMES http_parser REQUIRED)
find_path(HTTP_PARSER_INCLUDE_DIR NAMES http_parser.h REQUIRED)

add_library(packd_service STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/config.c
  ${CMAKE_CURRENT_SOURCE_DIR}/log.c
  ${CMAKE_CURRENT_SOURCE_DIR}/plan_cache.c
  ${CMAKE_CURRENT_SOURCE_DIR}/store_format.c
  ${CMAKE_CURRENT_SOURCE_DIR}/plan_store.c
  ${CMAKE_CURRENT_SOURCE_DIR}/plan_store_pool.c
  ${CMAKE_CURRENT_SOURCE_DIR}/metrics.c
  ${CMAKE_CURRENT_SOURCE_DIR}/http.c
  ${CMAKE_CURRENT_SOURCE_DIR}/handlers.c
  ${CMAKE_CURRENT_SOURCE_DIR}/work_queue.c
  ${CMAKE_CURRENT_SOURCE_DIR}/call_stop.c
  ${CMAKE_CURRENT_SOURCE_DIR}/grpc_server.c
  ${CMAKE_CURRENT_SOURCE_DIR}/auth.c
  ${CMAKE_CURRENT_SOURCE_DIR}/tls.c
  ${CMAKE_CURRENT_SOURCE_DIR}/plan_id.c
  ${CMAKE_CURRENT_SOURCE_DIR}/security.c
  ${CMAKE_CURRENT_SOURCE_DIR}/decode_budget.c
  ${CMAKE_CURRENT_SOURCE_DIR}/request_body.c
  ${CMAKE_CURRENT_SOURCE_DIR}/log_limit.c)
target_include_directories(packd_service PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}
                                                ${HTTP_PARSER_INCLUDE_DIR})
target_link_libraries(packd_service PUBLIC
  packd_codec packd_planner packd_proto packd_health_proto
  PkgConfig::GRPC PkgConfig::LIBUV PkgConfig::XXHASH ${HTTP_PARSER_LIBRARY} Threads::Threads
  OpenSSL::Crypto PkgConfig::ZLIB m)
if(HIREDIS_FOUND)
  target_compile_definitions(packd_service PRIVATE PK_HAVE_HIREDIS)
  target_link_libraries(packd_service PUBLIC PkgConfig::HIREDIS)
endif()

add_executable(packd_server ${CMAKE_CURRENT_SOURCE_DIR}/main.c)
target_compile_definitions(packd_server PRIVATE PK_VERSION_STRING="${PK_VERSION}")
target_link_libraries(packd_server PRIVATE packd_service)
set_target_properties(packd_server PROPERTIES
  OUTPUT_NAME packd
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/server)
