#pragma once
// The job spec's schema: one row for every key of the JSON document, in the order the reader asks
// for them. The reader (job_spec_read.cpp), toJson (job_spec_json.cpp), the search JSON, the
// Designer's form and the reference in docs/job-spec.md (spec_reference.h) are all made from it,
// as torchtitan makes its command line and TOML reader from one set of dataclass fields.

#include "job_spec.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace meshbench::plan {

// The largest parallel degree, node count and device count a spec may give.
constexpr std::int64_t kMaxSpecDegree = 1 << 20;

enum class SpecType {
    Section,  // an object holding further keys
    Integer,
    Number,
    Flag,      // true or false
    Choice,    // one of a list of names
    Preset,    // a name that fills its whole section; the section's other keys then override it
    Text,      // any string
    TextList,  // a non-empty list of strings
    TextMap,   // an object of strings, by name
};

// A unit a figure is written in; the spec holds SI values (bytes/s, seconds).
struct SpecUnit {
    std::string_view name;  // as the reference prints it: "GB/s", "us", "MiB"
    double (*toStored)(double written);
    double (*toWritten)(double stored);
};

struct SpecKey {
    std::string_view path;  // "parallel.dp"; a section's row comes before the rows of its keys
    SpecType type = SpecType::Text;
    std::string_view label;        // the Designer's label ("Data parallel (dp)")
    std::string_view help;         // what it means, for the reference (Markdown)
    std::string_view notShown;     // why the Designer's form has no field for it; empty: the form has one
    std::string_view placeholder;  // the Designer's hint in the empty field; a TextList's or TextMap's example
    // Integer and Number: the range, in the unit the document is written in.
    double min = 0;
    double max = 0;
    bool minExclusive = false;  // Number: min itself is out of range
    // Integer: a key whose value bounds it instead of max, once that value reaches min
    // (train.data.order up to model.seq_len).
    std::string_view maxFrom;
    const SpecUnit* unit = nullptr;  // Number: null when written as stored
    bool required = false;
    std::string_view requiredUnless;  // required unless this key was given ("cluster.preset")
    std::string_view requiredText;    // the message when it is missing, if not the reader's own
    // The reference's default when it is not the value of a default-constructed JobSpec.
    std::string_view defaultText;
    // Sets the default from keys read before it (kv_heads from heads); run before the key is read.
    std::function<void(JobSpec&)> deriveDefault;
    // Choice and Preset: the valid names, from the one table that maps them; an unknown name is
    // reported as "unknown <noun> 'x'" when a noun is given, else as "'x' is not allowed".
    std::vector<std::string> choices;
    std::string_view noun;
    std::string_view otherwise;  // added to the unknown-name message's list of names
    // A key of one variant of its section: read and written only while the section's key
    // `onlyWhenKey` has the value `onlyWhenValue` (train.data's file keys).
    std::string_view onlyWhenKey;
    std::string_view onlyWhenValue;
    // A choice the search makes: the search JSON and the Designer's layout patches carry it.
    bool layout = false;
    // Whether the spec holds a value for it, so that toJson writes it; empty: always.
    std::function<bool(const JobSpec&)> isSet;
    // The member, as stored: integers as int64 (uint64 for the seed), numbers in SI units, flags,
    // names. Empty for a section.
    std::function<nlohmann::json(const JobSpec&)> getStored;
    std::function<bool(JobSpec&, const nlohmann::json&)> setStored;  // false: not a valid name

    std::string_view name() const;     // the last part of the path: "dp"
    std::string_view section() const;  // the path of the section it is in: "parallel"; "" at the top
    // The value as the document writes it (in the key's unit), and setting it from one: the value
    // must be of the key's type and within its range, as the reader checks; false for an unknown
    // name.
    nlohmann::json value(const JobSpec& spec) const;
    bool assign(JobSpec& spec, const nlohmann::json& written) const;
    // Whether it applies to this spec (its variant is the section's), and whether toJson writes it.
    bool applies(const JobSpec& spec) const;
    bool written(const JobSpec& spec) const;
};

// Every key, sections first, each section's keys in the order the reader asks for them.
const std::vector<SpecKey>& specSchema();
// The row of a path; null for a path the schema does not know.
const SpecKey* specKey(std::string_view path);
// The rows directly inside a section ("" for the document's top level), in order.
std::vector<const SpecKey*> specKeysIn(std::string_view section);

// The search's choices of one layout: the "parallel" object of the search JSON's candidates and of
// the Designer's layout patches.
nlohmann::json layoutToJson(const ParallelSpec& parallel);

}  // namespace meshbench::plan
