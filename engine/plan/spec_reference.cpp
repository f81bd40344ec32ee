#include "spec_reference.h"

#include "spec_schema.h"
#include "spec_text.h"
#include "units.h"

#include <cmath>
#include <cstdio>

namespace meshbench::plan {

namespace {

std::string code(std::string_view text) { return "`" + std::string(text) + "`"; }

// 1000000 as "1,000,000", 0.95 as "0.95", 1e-8 as "1e-08".
std::string figure(double value)
{
    if (std::floor(value) == value && std::fabs(value) < 1e15)
        return withThousands(std::int64_t(value));
    char text[32];
    std::snprintf(text, sizeof text, "%g", value);
    return text;
}

// The key's name relative to the section its table is for: "moe.experts" in model's.
std::string_view relativeName(const SpecKey& key, std::string_view table)
{
    return table.empty() ? key.path : key.path.substr(table.size() + 1);
}

std::string values(const SpecKey& key)
{
    std::string out;
    switch (key.type) {
    case SpecType::Section:
        return "object";
    case SpecType::Integer:
        out = "integer, " + withThousands(std::int64_t(key.min)) + " to " +
              (key.maxFrom.empty() ? withThousands(std::int64_t(key.max)) : code(key.maxFrom));
        break;
    case SpecType::Number:
        out = "number" + (key.unit ? " in " + std::string(key.unit->name) : std::string()) + ", " +
              (key.minExclusive ? "above " + figure(key.min) + " up to " : figure(key.min) + " to ") + figure(key.max);
        break;
    case SpecType::Flag:
        out = "`true` or `false`";
        break;
    case SpecType::Choice:
    case SpecType::Preset: {
        std::vector<std::string> names;
        for (const std::string& name : key.choices)
            names.push_back(code(name));
        out = joinOr(names);
        break;
    }
    case SpecType::Text:
        out = "string";
        break;
    case SpecType::TextList:
        out = "non-empty list of strings, e.g. " + code(key.placeholder);
        break;
    case SpecType::TextMap:
        out = "object of strings, e.g. " + code(key.placeholder);
        break;
    }
    if (!key.onlyWhenKey.empty())
        out += "; only with " + code(key.onlyWhenKey) + " " + code(key.onlyWhenValue);
    return out;
}

std::string defaultOf(const SpecKey& key)
{
    if (!key.defaultText.empty())
        return std::string(key.defaultText);
    if (key.required)
        return "required";
    if (!key.requiredUnless.empty())
        return "required without " + code(specKey(key.requiredUnless)->name());
    if (key.type == SpecType::Section)
        return "its keys' defaults";
    const nlohmann::json value = key.value(JobSpec{});
    if (value.is_string() || value.is_boolean())
        return code(value.is_string() ? value.get<std::string>() : value.dump());
    return value.is_number_float() ? figure(value.get<double>()) : value.dump();
}

// Markdown table cells hold no line breaks or bars.
std::string cell(std::string text)
{
    for (char& c : text)
        if (c == '\n' || c == '|')
            c = ' ';
    return text;
}

// One table: the keys of `section` and of the sections inside it, the nested ones by their
// relative path.
// The top level's table names its sections, each with a table of its own below.
void addRows(std::string& out, std::string_view section, std::string_view table)
{
    for (const SpecKey* key : specKeysIn(section)) {
        const bool ownTable = key->type == SpecType::Section && table.empty();
        const std::string meaning =
            ownTable ? std::string(key->label) + ": see [" + code(key->path) + "](#" + std::string(key->path) + ")"
                     : std::string(key->help);
        out += "| " + code(relativeName(*key, table)) + " | " + cell(meaning) + " | " + cell(values(*key)) + " | " +
               cell(defaultOf(*key)) + " |\n";
        if (key->type == SpecType::Section && !ownTable)
            addRows(out, key->path, table);
    }
}

constexpr std::string_view kHeader = "| key | meaning | values | default |\n|---|---|---|---|\n";

}  // namespace

std::string specReference()
{
    std::string out = "## Top level\n\n";
    out += kHeader;
    addRows(out, "", "");
    for (const SpecKey* section : specKeysIn("")) {
        if (section->type != SpecType::Section)
            continue;
        out += "\n## " + code(section->path) + "\n\n" + std::string(section->help) + "\n\n" + std::string(kHeader);
        addRows(out, section->path, section->path);
    }
    return out;
}

std::optional<std::string> specReferenceIn(std::string_view document)
{
    const std::size_t begin = document.find(kSpecReferenceBegin);
    if (begin == std::string_view::npos)
        return std::nullopt;
    const std::size_t from = begin + kSpecReferenceBegin.size();
    const std::size_t end = document.find(kSpecReferenceEnd, from);
    if (end == std::string_view::npos)
        return std::nullopt;
    std::string_view part = document.substr(from, end - from);
    // The markers stand on lines of their own, a blank line on each side of the reference.
    while (!part.empty() && part.front() == '\n')
        part.remove_prefix(1);
    while (!part.empty() && part.back() == '\n')
        part.remove_suffix(1);
    return std::string(part) + "\n";
}

std::optional<std::string> withSpecReference(std::string_view document)
{
    if (!specReferenceIn(document))
        return std::nullopt;
    const std::size_t from = document.find(kSpecReferenceBegin) + kSpecReferenceBegin.size();
    const std::size_t end = document.find(kSpecReferenceEnd, from);
    return std::string(document.substr(0, from)) + "\n\n" + specReference() + "\n" + std::string(document.substr(end));
}

}  // namespace meshbench::plan
