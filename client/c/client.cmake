# The packd C client library (included by client/c/CMakeLists.txt).
#
#   packd_client  static library: pk_client.h (channel, Plan, GetRankPlan,
#                 Health/Check on the gRPC C core). packctl links it for its
#                 remote mode (packctl_remote.c).
add_library(packd_client STATIC ${CMAKE_CURRENT_SOURCE_DIR}/pk_client.c)
target_include_directories(packd_client PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
# server/codec/grpc_status_names.h: the gRPC status names the server uses too.
target_include_directories(packd_client PRIVATE ${PROJECT_SOURCE_DIR}/server/codec)
target_link_libraries(packd_client PUBLIC packd_proto packd_health_proto packd_planner
                                          PkgConfig::GRPC Threads::Threads)

# packctl's remote mode: plan --server, rank-plan, health (packctl_remote.c)
# and load (packctl_load.c). packctl.cmake compiles these into packctl and
# links packd_client.
set(PK_PACKCTL_REMOTE_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_remote.c
  ${CMAKE_CURRENT_SOURCE_DIR}/packctl_load.c)
