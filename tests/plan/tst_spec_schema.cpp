// The job-spec schema walked key by key: each reads within its range and no further, names its
// choices and its section's keys in the reader's messages, is written by toJson and read back to
// the same value; each is a field of the Designer's form or says why not; and docs/job-spec.md
// carries the reference the schema makes.
#include "plan/job_spec.h"
#include "plan/spec_reference.h"
#include "plan/spec_schema.h"

#ifdef MESHBENCH_WITH_DESIGNER
#include "designer/job_document.h"
#include "designer/job_form.h"

#include <QComboBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#endif

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

using namespace meshbench::plan;
using nlohmann::json;

namespace {

QString text(std::string_view s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }

// An MoE model on one node of 8 H100s, dp 2 x pp 2 x tp 2 with ep 2: every section but the
// calibration present, and every key at the value the reader gives it.
JobSpec baseSpec()
{
    const LoadResult loaded = loadJobSpec(json::parse(R"({
        "name": "schema walk",
        "model": {"layers": 4, "hidden": 128, "heads": 4, "vocab": 256, "seq_len": 64,
                  "moe": {"experts": 4, "top_k": 2}},
        "parallel": {"dp": 2, "pp": 2, "tp": 2, "ep": 2, "microbatches": 4},
        "cluster": {"nodes": 1, "devices_per_node": 8, "device": "h100-sxm"}
    })"));
    if (!loaded.valid())
        qFatal("the base spec is invalid: %s", loaded.errors.front().message.c_str());
    return *loaded.spec;
}

// Fills in the text a section requires (a calibration's source, a token file's path, a launch
// command), so that it is written and read back.
void fillRequired(JobSpec& spec, const SpecKey& key)
{
    for (const SpecKey* sibling : specKeysIn(key.section())) {
        if (!sibling->required || !sibling->applies(spec))
            continue;
        if (sibling->type == SpecType::Text && sibling->value(spec).get<std::string>().empty())
            sibling->assign(spec, "filled in");
        if (sibling->type == SpecType::TextList && sibling->value(spec).empty())
            sibling->assign(spec, json{"filled", "in"});
    }
}

// The base spec in the variant of its section that the key belongs to (train.data's file keys
// with a file source), its section filled in.
JobSpec specFor(const SpecKey& key)
{
    JobSpec spec = baseSpec();
    if (!key.onlyWhenKey.empty())
        specKey(std::string(key.section()) + "." + std::string(key.onlyWhenKey))->assign(spec, key.onlyWhenValue);
    fillRequired(spec, key);
    return spec;
}

// Equal, numbers to 12 digits: a figure in GB/s or us comes back through its unit's two
// conversions.
bool same(const json& a, const json& b)
{
    if (a.is_number_float() || b.is_number_float())
        return a.is_number() && b.is_number() &&
               std::fabs(a.get<double>() - b.get<double>()) <= 1e-12 * std::max(1.0, std::fabs(a.get<double>()));
    if (a.is_object() && b.is_object()) {
        if (a.size() != b.size())
            return false;
        for (auto it = a.begin(); it != a.end(); ++it)
            if (!b.contains(it.key()) || !same(*it, b[it.key()]))
                return false;
        return true;
    }
    return a == b;
}

json::json_pointer pointerTo(std::string_view path)
{
    std::string pointer = path.empty() ? "" : "/" + std::string(path);
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    return json::json_pointer(pointer);
}

std::vector<const SpecKey*> leafKeys()
{
    std::vector<const SpecKey*> keys;
    for (const SpecKey& key : specSchema())
        if (key.type != SpecType::Section)
            keys.push_back(&key);
    return keys;
}

// Values of the key's type other than `current`, within its range, the likeliest to pass the
// rules between keys first.
std::vector<json> otherValues(const SpecKey& key, const json& current)
{
    std::vector<json> candidates;
    switch (key.type) {
    case SpecType::Integer:
        for (std::int64_t v : {2, 4, 8, 1, 3, 16, 0, 64})
            candidates.emplace_back(v);
        break;
    case SpecType::Number:
        for (double v : {0.5, 2.0, 0.25, 1e-3, 10.0})
            candidates.emplace_back(v);
        break;
    case SpecType::Flag:
        candidates.emplace_back(!current.get<bool>());
        break;
    case SpecType::Choice:
    case SpecType::Preset:
        for (const std::string& name : key.choices)
            candidates.emplace_back(name);
        break;
    case SpecType::Text:
        candidates.emplace_back("another text");
        break;
    case SpecType::TextList:
        candidates.push_back(json{"another", "list"});
        break;
    case SpecType::TextMap:
        candidates.push_back(json{{"ANOTHER", "map"}});
        break;
    case SpecType::Section:
        break;
    }
    std::vector<json> out;
    for (const json& v : candidates) {
        const bool inRange =
            !v.is_number() ||
            (v.get<double>() <= key.max && (key.minExclusive ? v.get<double>() > key.min : v.get<double>() >= key.min));
        if (inRange && v != current)
            out.push_back(v);
    }
    return out;
}

// The errors at one path.
QStringList errorsAt(const LoadResult& result, std::string_view path)
{
    QStringList out;
    for (const SpecError& e : result.errors)
        if (e.path == path)
            out << text(e.message);
    return out;
}

// The document of a spec with one key's JSON value replaced.
json withValue(const JobSpec& spec, const SpecKey& key, const json& value)
{
    json document = toJson(spec);
    document[pointerTo(key.path)] = value;
    return document;
}

}  // namespace

class TestSpecSchema : public QObject {
    Q_OBJECT
private slots:
    void everyKeyIsDescribed()
    {
        for (const SpecKey& key : specSchema()) {
            const QString path = text(key.path);
            QVERIFY2(!key.label.empty() && !key.help.empty(), qPrintable(path + " lacks a label or help"));
            QVERIFY2(specKey(key.path) == &key, qPrintable(path + " is in the schema twice"));
            QVERIFY2(key.section().empty() || specKey(key.section())->type == SpecType::Section,
                     qPrintable(path + " is in no section of the schema"));
            if (key.type == SpecType::Section)
                continue;
            QVERIFY2(key.getStored && key.setStored, qPrintable(path));
            if (key.type == SpecType::Integer || key.type == SpecType::Number)
                QVERIFY2(key.min < key.max, qPrintable(path));
            if (key.type == SpecType::Choice || key.type == SpecType::Preset)
                QVERIFY2(key.choices.size() >= 2, qPrintable(path));
        }
    }

    // Every key, set to another value within its range, is written by toJson and read back to
    // that value; the whole document reads back to the same document.
    void everyKeyRoundTrips()
    {
        for (const SpecKey* key : leafKeys()) {
            const QString path = text(key->path);
            JobSpec spec = specFor(*key);
            const std::vector<json> others = otherValues(*key, key->value(spec));
            QVERIFY2(!others.empty(), qPrintable(path + " has no other value to take"));
            bool roundTripped = false;
            QStringList refused;
            for (const json& value : others) {
                JobSpec changed = spec;
                QVERIFY2(key->assign(changed, value), qPrintable(path + " refuses " + text(value.dump())));
                QVERIFY2(same(key->value(changed), value), qPrintable(path + " holds " + text(value.dump())));
                fillRequired(changed, *key);
                const json written = toJson(changed);
                const LoadResult read = loadJobSpec(written);
                if (!read.spec) {
                    // A value the rules between keys refuse (kv_heads over heads): try the next.
                    refused << text(value.dump()) + ": " + text(read.errors.front().path) + " " +
                                   text(read.errors.front().message);
                    continue;
                }
                QVERIFY2(same(key->value(*read.spec), value),
                         qPrintable(path + " read back as " + text(key->value(*read.spec).dump()) + ", written as " +
                                    text(value.dump())));
                QVERIFY2(same(toJson(*read.spec), written), qPrintable(path + ": " + text(toJson(*read.spec).dump()) +
                                                                       "\n  was written as " + text(written.dump())));
                roundTripped = true;
                break;
            }
            QVERIFY2(roundTripped, qPrintable(path + " never read back:\n" + refused.join('\n')));
        }
    }

    // The reader takes each number at the ends of its range and refuses what lies beyond them,
    // with the range in the message.
    void everyRangeIsTheReaders()
    {
        for (const SpecKey* key : leafKeys()) {
            if (key->type != SpecType::Integer && key->type != SpecType::Number)
                continue;
            const QString path = text(key->path);
            const JobSpec spec = specFor(*key);
            std::vector<json> inside, outside;
            if (key->type == SpecType::Integer) {
                const auto min = std::int64_t(key->min);
                const auto max = key->maxFrom.empty() ? std::int64_t(key->max)
                                                      : specKey(key->maxFrom)->value(spec).get<std::int64_t>();
                inside = {min, max};
                outside = {min - 1, max + 1};
            } else {
                inside = {key->minExclusive ? (key->min + key->max) / 2 : key->min, key->max};
                outside = {key->minExclusive ? key->min : key->min - 1, key->max * 2};
            }
            for (const json& value : inside) {
                const QStringList errors = errorsAt(loadJobSpec(withValue(spec, *key, value)), key->path);
                QVERIFY2(errors.filter("out of range").isEmpty(), qPrintable(path + ": " + errors.join('\n')));
            }
            for (const json& value : outside) {
                const QStringList errors = errorsAt(loadJobSpec(withValue(spec, *key, value)), key->path);
                QVERIFY2(!errors.filter("is out of range; use").isEmpty(),
                         qPrintable(path + " takes " + text(value.dump())));
            }
        }
    }

    // An unknown name is refused with the schema's list of names; a missing required key is named.
    void everyChoiceAndRequirementIsTheReaders()
    {
        for (const SpecKey* key : leafKeys()) {
            const QString path = text(key->path);
            const JobSpec spec = specFor(*key);
            if (key->type == SpecType::Choice || key->type == SpecType::Preset) {
                std::vector<std::string> names = key->choices;
                QString list = text(names.back());
                if (names.size() > 1)
                    list = text(names[names.size() - 2]) + " or " + list;
                const QStringList errors = errorsAt(loadJobSpec(withValue(spec, *key, "no-such-name")), key->path);
                QVERIFY2(errors.size() == 1 && errors[0].contains("'no-such-name'") && errors[0].contains(list),
                         qPrintable(path + ": " + errors.join('\n')));
            }
            // The base cluster is described by hand: what a preset would fill is required.
            if (key->required || !key->requiredUnless.empty()) {
                json document = toJson(spec);
                document.at(pointerTo(key->path).parent_pointer()).erase(std::string(key->name()));
                const QStringList errors = errorsAt(loadJobSpec(document), key->path);
                QVERIFY2(!errors.filter("is required").isEmpty(), qPrintable(path + ": " + errors.join('\n')));
            }
        }
    }

    // A misspelt key is answered with the valid keys of its section: the schema's, in its order.
    void everySectionListsTheSchemasKeys()
    {
        const std::string misspelt = "zzzzzzzzzzzzzzzzzzzz";  // far from every key: no suggestion
        std::vector<std::string_view> sections{""};
        for (const SpecKey& key : specSchema())
            if (key.type == SpecType::Section)
                sections.push_back(key.path);
        for (std::string_view section : sections) {
            const JobSpec spec = specFor(*specKeysIn(section).front());
            std::vector<std::string> names;
            for (const SpecKey* key : specKeysIn(section))
                if (key->applies(spec))
                    names.emplace_back(key->name());
            json document = toJson(spec);
            document[pointerTo(section)][misspelt] = 1;
            QString list = text(names.back());
            for (std::size_t i = names.size() - 1; i-- > 0;)
                list = text(names[i]) + (i + 2 == names.size() ? " or " : ", ") + list;
            const std::string path = section.empty() ? misspelt : std::string(section) + "." + misspelt;
            QCOMPARE(errorsAt(loadJobSpec(document), path), QStringList{"unknown key; valid keys here: " + list});
        }
    }

    void layoutsCarryTheSearchedKeys()
    {
        ParallelSpec p;
        p.dp = 4;
        p.schedule = ScheduleKind::ZeroBubbleV;
        const json layout = layoutToJson(p);
        for (const SpecKey* key : specKeysIn("parallel"))
            QCOMPARE(layout.contains(std::string(key->name())), key->layout);
        QCOMPARE(layout["dp"].get<int>(), 4);
        QCOMPARE(layout["schedule"].get<std::string>(), std::string("zb-v"));
        QVERIFY(!layout.contains("order") && !layout.contains("grad_bucket_mb"));
    }

    // Every key is a field of the Designer's form, with the schema's label, choices and hint, or
    // says why it is not.
    void everyKeyIsADesignerFieldOrSaysWhyNot()
    {
#ifndef MESHBENCH_WITH_DESIGNER
        QSKIP("built without the workbench");
#else
        meshbench::app::JobDocument document;
        meshbench::app::JobForm form(&document);
        const QStringList fields = form.paths();
        QCOMPARE(QSet<QString>(fields.begin(), fields.end()).size(), fields.size());
        for (const SpecKey* key : leafKeys()) {
            const QString path = text(key->path);
            QWidget* editor = form.editor(path);
            QVERIFY2(fields.contains(path) == key->notShown.empty(),
                     qPrintable(path + (key->notShown.empty() ? " is no field of the form" : " is on the form")));
            if (!editor) {
                QVERIFY2(!key->notShown.empty(), qPrintable(path));
                continue;
            }
            QWidget* cell = editor->parentWidget();
            auto* rows = qobject_cast<QFormLayout*>(cell->parentWidget()->layout());
            QVERIFY2(rows, qPrintable(path));
            auto* label = qobject_cast<QLabel*>(rows->labelForField(cell));
            QVERIFY2(label && label->text() == text(key->label), qPrintable(path));
            if (auto* combo = qobject_cast<QComboBox*>(editor)) {
                QStringList items;
                for (int i = 0; i < combo->count(); ++i)
                    items << combo->itemText(i);
                QStringList choices;
                if (key->type == SpecType::Preset)
                    choices << "custom";
                for (const std::string& name : key->choices)
                    choices << text(name);
                QCOMPARE(items, choices);
            } else if (auto* line = qobject_cast<QLineEdit*>(editor)) {
                QVERIFY2(key->type == SpecType::Integer || key->type == SpecType::Number, qPrintable(path));
                QCOMPARE(line->placeholderText(), text(key->placeholder));
            } else {
                QVERIFY2(key->type == SpecType::Flag, qPrintable(path));
            }
        }
        for (const QString& path : fields)
            QVERIFY2(specKey(path.toStdString()), qPrintable(path + " is a field for no key of the schema"));
#endif
    }

    void theDocsCarryTheReference()
    {
        const std::string path = MESHBENCH_SOURCE_DIR "/docs/job-spec.md";
        std::ifstream in(path, std::ios::binary);
        QVERIFY2(in, path.c_str());
        std::ostringstream document;
        document << in.rdbuf();
        const std::optional<std::string> part = specReferenceIn(document.str());
        QVERIFY2(part, "docs/job-spec.md lacks the spec reference's markers");
        QVERIFY2(*part == specReference(), "docs/job-spec.md's spec reference differs from the schema's: run "
                                           "`cmake --build build --target spec-reference` and commit docs/job-spec.md");
    }
};

QTEST_MAIN(TestSpecSchema)
#include "tst_spec_schema.moc"
