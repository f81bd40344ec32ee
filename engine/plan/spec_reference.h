#pragma once
// The reference of every job-spec key, made from the schema (spec_schema.h): the part of
// docs/job-spec.md between its two markers. `cmake --build build --target spec-reference` writes
// it there (meshbench-spec-reference); tests/plan/tst_spec_schema fails while the file differs.

#include <optional>
#include <string>
#include <string_view>

namespace meshbench::plan {

inline constexpr std::string_view kSpecReferenceBegin =
    "<!-- spec reference: generated from engine/plan/spec_schema.cpp by "
    "`cmake --build build --target spec-reference`; edit the schema, not this part -->";
inline constexpr std::string_view kSpecReferenceEnd = "<!-- end of the generated spec reference -->";

// Markdown: the top-level keys, then a section for each of model, parallel, precision, cluster
// and train, each a table of key, meaning, values and default.
std::string specReference();

// The text between the markers of a document; nullopt when it lacks them.
std::optional<std::string> specReferenceIn(std::string_view document);
// The document with specReference() between its markers; nullopt when it lacks them.
std::optional<std::string> withSpecReference(std::string_view document);

}  // namespace meshbench::plan
