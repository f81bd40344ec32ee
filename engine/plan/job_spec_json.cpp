// Writing a job spec back to JSON, every key the spec holds a value for, as the schema
// (spec_schema.h) lists them.

#include "job_spec.h"

#include "spec_schema.h"

namespace meshbench::plan {

using nlohmann::json;

namespace {

json sectionToJson(const JobSpec& spec, std::string_view section)
{
    json out = json::object();
    for (const SpecKey* key : specKeysIn(section))
        if (key->written(spec))
            out[std::string(key->name())] =
                key->type == SpecType::Section ? sectionToJson(spec, key->path) : key->value(spec);
    return out;
}

}  // namespace

json toJson(const JobSpec& spec) { return sectionToJson(spec, ""); }

json toJson(const CalibrationSpec& calibration)
{
    JobSpec spec;
    spec.cluster.calibration = calibration;
    return sectionToJson(spec, "cluster.calibration");
}

}  // namespace meshbench::plan
