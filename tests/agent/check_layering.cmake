# The agent's layering, checked on its sources (run by CTest as agent_layering), where the include
# roots cannot see it (those are tests/layering's: agent/model cannot include agent/distributed):
# - MPI is one implementation of the communicator: no MPI_ name in code outside agent/runtime;
# - the model talks to other ranks only through the layer below it, agent/parallel (tensor-parallel
#   layers, the expert dispatcher): no communicator call (through a Communicator pointer) in
#   agent/model.
file(GLOB_RECURSE sources "${SOURCE_DIR}/agent/*.h" "${SOURCE_DIR}/agent/*.cpp")
set(problems "")
foreach(source ${sources})
  file(RELATIVE_PATH name "${SOURCE_DIR}" "${source}")
  file(STRINGS "${source}" lines)
  set(number 0)
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    string(REGEX REPLACE "//.*" "" line "${line}")   # code, not comments about it
    if(NOT name MATCHES "^agent/runtime/" AND line MATCHES "(^|[^A-Za-z0-9_])MPI_[A-Za-z]")
      string(APPEND problems "${name}:${number}: MPI outside agent/runtime: ${line}\n")
    endif()
    if(name MATCHES "^agent/model/" AND line MATCHES
       "->(allReduceSum|allReduceMax|reduceScatterSum|allGather|broadcast|allToAll|send|recv|waitSends|exchangeCounts|progress|start[A-Z][A-Za-z]*)\\(")
      string(APPEND problems "${name}:${number}: a communicator call in the model, not through agent/parallel: ${line}\n")
    endif()
  endforeach()
endforeach()
list(LENGTH sources count)
if(count LESS 20)
  message(FATAL_ERROR "found only ${count} agent sources under ${SOURCE_DIR}/agent: wrong SOURCE_DIR?")
endif()
if(problems)
  message(FATAL_ERROR "the agent's layering is broken:\n${problems}")
endif()
message(STATUS "${count} agent sources: MPI only in agent/runtime, no communicator call in agent/model")
