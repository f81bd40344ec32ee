# Installation and the Debian package. `cmake --install BUILD` lays out the three programs, the
# desktop entry, the icon, the AppStream metadata, man pages made from each program's --help, the
# example job specs, and the copyright and changelog files; `cpack -G DEB` (packaging/build_deb.sh)
# packs the same tree under /usr as meshbench_VERSION_amd64.deb, from the binaries already built.
include(GNUInstallDirs)

set(programs meshbench-engine meshbench-agent)
set(summaries "plan layouts, run and replay training jobs (the headless engine)"
              "run one rank of a Meshbench training job (started by mpirun)")
if(TARGET meshbench)
  list(APPEND programs meshbench)
  list(APPEND summaries "design, launch, watch and replay parallel training runs")
endif()
install(TARGETS ${programs} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

if(TARGET meshbench)
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/meshbench.desktop DESTINATION ${CMAKE_INSTALL_DATADIR}/applications)
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/meshbench.svg
          DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps)
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/io.github.meshbench.meshbench.metainfo.xml
          DESTINATION ${CMAKE_INSTALL_DATADIR}/metainfo)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/resources/jobs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshbench/jobs
        FILES_MATCHING PATTERN "*.json")
# The Python client for other programs (pure Python over python3-zmq), where Debian's python3 finds
# modules that belong to no particular Python version.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/agent/python/meshbench DESTINATION lib/python3/dist-packages
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)

# The man pages and the changelog, compressed as Debian's policy asks (gzip -9n), built with the
# programs. Without help2man there are no man pages (packaging/install_deps.sh installs it).
set(changelog ${PROJECT_BINARY_DIR}/packaging/changelog.gz)
add_custom_command(OUTPUT ${changelog}
                   COMMAND ${CMAKE_COMMAND} -E copy ${PROJECT_SOURCE_DIR}/packaging/changelog
                           ${PROJECT_BINARY_DIR}/packaging/changelog
                   COMMAND gzip -9nf ${PROJECT_BINARY_DIR}/packaging/changelog
                   DEPENDS ${PROJECT_SOURCE_DIR}/packaging/changelog
                   COMMENT "Compressing the changelog" VERBATIM)
file(STRINGS ${PROJECT_SOURCE_DIR}/packaging/changelog changelog_top LIMIT_COUNT 1)
if(NOT changelog_top MATCHES "^meshbench \\(${PROJECT_VERSION}\\) ")
  message(WARNING "packaging/changelog starts with '${changelog_top}': add an entry for ${PROJECT_VERSION}")
endif()
find_program(MESHBENCH_HELP2MAN help2man)
set(man_pages "")
if(MESHBENCH_HELP2MAN)
  foreach(program summary IN ZIP_LISTS programs summaries)
    set(page ${PROJECT_BINARY_DIR}/packaging/man/${program}.1.gz)
    add_custom_command(OUTPUT ${page}
                       COMMAND ${CMAKE_COMMAND} -DHELP2MAN=${MESHBENCH_HELP2MAN} -DPROGRAM=$<TARGET_FILE:${program}>
                               -DSUMMARY=${summary} -DVERSION=${PROJECT_VERSION} -DOUTPUT=${page}
                               -P ${PROJECT_SOURCE_DIR}/packaging/man_page.cmake
                       DEPENDS ${program} ${PROJECT_SOURCE_DIR}/packaging/man_page.cmake
                       COMMENT "Writing the man page of ${program} from its --help" VERBATIM)
    list(APPEND man_pages ${page})
  endforeach()
  install(FILES ${man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "Man pages: off (help2man not found)")
endif()
add_custom_target(meshbench_package_docs ALL DEPENDS ${changelog} ${man_pages})
install(FILES ${PROJECT_SOURCE_DIR}/packaging/copyright ${changelog} DESTINATION ${CMAKE_INSTALL_DOCDIR})

# The Debian package. Its library dependencies come from dpkg-shlibdeps; Depends adds the programs
# the engine runs. CUDA's libraries (cuBLASLt, NCCL, NVML) are loaded at run time when present, so
# the package needs none of them.
set(MESHBENCH_PACKAGE_MAINTAINER "Meshbench maintainers <maintainers@users.noreply.a-seed-620e0875.example>"
    CACHE STRING "The Debian package's Maintainer field")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME meshbench)
set(CPACK_PACKAGE_VENDOR "Meshbench maintainers")
set(CPACK_PACKAGE_CONTACT ${MESHBENCH_PACKAGE_MAINTAINER})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "workbench for planning and watching parallel training")
# Debian wants the description's lines under 80 characters.
set(CPACK_PACKAGE_DESCRIPTION
    "Meshbench plans large-model training that mixes data (with ZeRO), pipeline,
tensor and expert parallelism: from one JSON job spec it tells whether the
layout divides the model, the memory each GPU needs, the pipeline bubble, the
step time, and which layouts are fastest. It launches the job under Open MPI
on GPUs or on the CPU, shows every rank's pipeline timeline, expert load and
memory live, and stores each run as a session to replay, compare and export.
The package holds the Qt workbench (meshbench), the headless engine
(meshbench-engine) and the training agent (meshbench-agent). The CUDA backend
needs CUDA 13's cuBLASLt (and NCCL for GPU collectives) at run time; without
them the agent runs on the CPU.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
    WORLD_READ WORLD_EXECUTE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${MESHBENCH_PACKAGE_MAINTAINER})
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# python3 for the client's package in dist-packages (lintian's python-package-missing-depends-on-python);
# python3-zmq is what the client speaks over, wanted by whoever reports from a Python program.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "openmpi-bin, python3")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-zmq")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "slurm-client")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
