# Writes OUTPUT (PROGRAM.1.gz) from the program's own --help, through help2man, so the page follows
# the command line as it is; a program with subcommands (CLI11's "Subcommands:" list) gets a COMMANDS
# section with each one's --help. Run as: cmake -DHELP2MAN=... -DPROGRAM=/path/to/program
# -DSUMMARY="..." -DVERSION=... -DOUTPUT=... -P man_page.cmake
cmake_minimum_required(VERSION 3.25)

get_filename_component(directory "${PROGRAM}" DIRECTORY)
get_filename_component(name "${PROGRAM}" NAME)
# Called by its bare name, so the usage lines say "meshbench ...", not the build folder's path; the
# workbench needs no display to print its help.
set(ENV{PATH} "${directory}:$ENV{PATH}")
set(ENV{QT_QPA_PLATFORM} offscreen)
get_filename_component(page "${OUTPUT}" NAME_WLE)
get_filename_component(output_directory "${OUTPUT}" DIRECTORY)
file(MAKE_DIRECTORY "${output_directory}")

execute_process(COMMAND "${PROGRAM}" --help OUTPUT_VARIABLE help ERROR_VARIABLE errors RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${name} --help failed (status ${status}): ${errors}")
endif()
set(include "")
if(help MATCHES "\nSubcommands:\n(( +[^\n]*\n)+)")
  string(REGEX MATCHALL "(^|\n)  [a-z][a-z0-9-]*" commands "${CMAKE_MATCH_1}")
  set(include_file "${output_directory}/${page}.include")
  set(include "--include=${include_file}")
  file(WRITE "${include_file}" "[COMMANDS]\n")
  foreach(command IN LISTS commands)
    string(STRIP "${command}" command)
    execute_process(COMMAND "${PROGRAM}" ${command} --help OUTPUT_VARIABLE text ERROR_VARIABLE errors
                    RESULT_VARIABLE status)
    if(NOT status EQUAL 0)
      message(FATAL_ERROR "${name} ${command} --help failed (status ${status}): ${errors}")
    endif()
    # Verbatim, escaped for roff: backslashes, minus signs, and a leading dot or quote.
    string(REPLACE "\\" "\\e" text "${text}")
    string(REPLACE "-" "\\-" text "${text}")
    string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
    file(APPEND "${include_file}" ".SS \"${name} ${command}\"\n.nf\n${text}.fi\n")
  endforeach()
endif()

execute_process(COMMAND "${HELP2MAN}" --no-info --section=1 "--name=${SUMMARY}" "--version-string=${VERSION}"
                        "--source=meshbench ${VERSION}" ${include}
                        "--output=${output_directory}/${page}" "${name}"
                RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "help2man could not make the man page of ${name} from its --help (status ${status})")
endif()
# gzip -9n: the best compression and no time stamp, as Debian's policy asks of man pages.
execute_process(COMMAND gzip -9nf "${output_directory}/${page}" RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "gzip ${output_directory}/${page} failed (status ${status})")
endif()
